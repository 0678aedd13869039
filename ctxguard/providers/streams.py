"""Transparent stream proxies: every chunk reaches the app unchanged and in order.

The proxy is a ``wrapt.ObjectProxy``, so ``isinstance(stream, openai.Stream)``,
``.response`` and every other attribute behave as before; only iteration and
closing are observed, to finish the span when the answer is complete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import wrapt

from .._isolation import guarded
from ..payload import Reply
from .base import StreamReader
from .wire import IN_FLIGHT

if TYPE_CHECKING:
    from ..guard import Call

__all__ = ["wrap_manager", "wrap_stream"]


class _Observed(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    def __init__(self, wrapped: Any, call: Call, reader: StreamReader) -> None:
        super().__init__(wrapped)
        self._self_call = call
        self._self_reader = reader
        self._self_done = False

    def _self_finish(self, exc: BaseException | None = None) -> None:
        if self._self_done:
            return
        self._self_done = True
        call = self._self_call
        if exc is not None:
            call.failed(exc)
            return
        reply = None
        with guarded("stream"):
            reply = self._self_reader.reply()
        call.answer(reply)


class _SyncStream(_Observed):
    def __iter__(self) -> _SyncStream:
        return self

    def __next__(self) -> Any:
        # A generator (google-genai) sends its request on the first chunk: until the
        # transport has seen the body, the call stays in flight.
        call = self._self_call
        token = IN_FLIGHT.set(call) if call.wire_hash is None else None
        try:
            chunk = self.__wrapped__.__next__()
        except StopIteration:
            self._self_finish()
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        finally:
            if token is not None:
                IN_FLIGHT.reset(token)
        call.stream_chunk(self._self_reader, chunk)
        return chunk

    def __enter__(self) -> _SyncStream:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(*exc)
        finally:
            self._self_finish()

    def close(self) -> Any:
        try:
            return self.__wrapped__.close()
        finally:
            self._self_finish()


class _AsyncStream(_Observed):
    def __aiter__(self) -> _AsyncStream:
        return self

    async def __anext__(self) -> Any:
        call = self._self_call
        token = IN_FLIGHT.set(call) if call.wire_hash is None else None
        try:
            chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_finish()
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        finally:
            if token is not None:
                IN_FLIGHT.reset(token)
        call.stream_chunk(self._self_reader, chunk)
        return chunk

    async def __aenter__(self) -> _AsyncStream:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc)
        finally:
            self._self_finish()

    async def close(self) -> Any:
        try:
            return await self.__wrapped__.close()
        finally:
            self._self_finish()


class _Manager(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """A stream helper's context manager (``messages.stream(...)``): the request is sent on
    enter (with the call in flight, so its body is judged); the answer is read from the
    helper's own accumulated snapshot on exit."""

    def __init__(self, wrapped: Any, call: Call, final: Callable[[Any], Reply | None]) -> None:
        super().__init__(wrapped)
        self._self_call = call
        self._self_final = final
        self._self_stream: Any = None
        self._self_done = False

    def _self_finish(self, exc: BaseException | None) -> None:
        if self._self_done:
            return
        self._self_done = True
        if exc is not None:
            self._self_call.failed(exc)
            return
        reply = None
        with guarded("stream"):
            if self._self_stream is not None:
                reply = self._self_final(self._self_stream)
        self._self_call.answer(reply)

    def __enter__(self) -> Any:
        token = IN_FLIGHT.set(self._self_call)  # the request leaves here: its body is judged
        try:
            self._self_stream = self.__wrapped__.__enter__()
        except BaseException as exc:
            self._self_finish(exc)
            raise
        finally:
            IN_FLIGHT.reset(token)
        return self._self_stream

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(*exc)
        finally:
            self._self_finish(exc[1] if len(exc) > 1 and isinstance(exc[1], BaseException) else None)

    async def __aenter__(self) -> Any:
        token = IN_FLIGHT.set(self._self_call)
        try:
            self._self_stream = await self.__wrapped__.__aenter__()
        except BaseException as exc:
            self._self_finish(exc)
            raise
        finally:
            IN_FLIGHT.reset(token)
        return self._self_stream

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc)
        finally:
            self._self_finish(exc[1] if len(exc) > 1 and isinstance(exc[1], BaseException) else None)


def wrap_manager(manager: Any, call: Call, final: Callable[[Any], Reply | None]) -> Any:
    return _Manager(manager, call, final)


def wrap_stream(stream: Any, call: Call, reader: StreamReader, *, asynchronous: bool) -> Any:
    # Some streams iterate both ways (LiteLLM's CustomStreamWrapper): the call site decides.
    cls = type(stream)
    if hasattr(cls, "__anext__") and (asynchronous or not hasattr(cls, "__next__")):
        return _AsyncStream(stream, call, reader)
    return _SyncStream(stream, call, reader)
