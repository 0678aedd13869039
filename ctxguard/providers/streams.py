"""Transparent stream proxies: every chunk reaches the app unchanged and in order.

The proxy is a ``wrapt.ObjectProxy``, so ``isinstance(stream, openai.Stream)``,
``.response`` and every other attribute behave as before; only iteration and
closing are observed, to finish the span when the answer is complete.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import wrapt

from .._isolation import guarded
from .base import StreamReader

if TYPE_CHECKING:
    from ..guard import Call

__all__ = ["wrap_stream"]


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
        try:
            chunk = self.__wrapped__.__next__()
        except StopIteration:
            self._self_finish()
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        self._self_call.stream_chunk(self._self_reader, chunk)
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
        try:
            chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_finish()
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        self._self_call.stream_chunk(self._self_reader, chunk)
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


def wrap_stream(stream: Any, call: Call, reader: StreamReader) -> Any:
    if hasattr(type(stream), "__anext__"):
        return _AsyncStream(stream, call, reader)
    return _SyncStream(stream, call, reader)
