"""The carriers of an answer, each a thin adapter to one ``Observation`` (``feed`` / ``end``).

What an SDK hands the app decides the carrier; the app keeps what the SDK returned, or a
transparent stand-in for it:

- ``tap_response``: an object holding the HTTP response (the Stainless SDKs, openai and
  anthropic: a ``Stream``, a ``with_raw_response`` / ``with_streaming_response`` response) keeps
  its exact object; the response's byte stream is replaced by a subclass of httpx's own that
  feeds each chunk as it passes, whichever way the app reads the body (iterating the stream,
  ``.parse()``, ``.read()``, ``.iter_lines()``).
- ``stream_proxy``: any other stream (google-genai's generators, LiteLLM's wrapper, cohere's async
  generator) goes back through a ``wrapt.ObjectProxy``: ``isinstance`` and every attribute as
  before, iteration and closing observed.
- ``manager_proxy``: a stream helper's context manager (anthropic's ``messages.stream(...)``):
  the request leaves on enter, the answer is the helper's own snapshot on exit.
- ``observe_pending``: a result holding its answer still to be read (``Pending``: botocore's
  ``EventStream`` in the result dict, the raw body beneath its ``StreamingBody``) gets that part
  replaced by a proxy, the rest of the result the SDK's own.

Each turns its own events into the observation's two: a chunk is ``feed``; the end of the
iteration is ``end("complete")``, an exception ``end("failed", error=...)``, ``close()`` or
leaving ``with`` or being collected before the end ``end("abandoned")``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, MutableMapping
from types import ModuleType
from typing import Any

import wrapt

from ..payload import Answer
from ..providers.base import Pending, StreamReader
from .bodies import NOTHING, DocumentBody, body_reader
from .frames import transparent
from .inflight import IN_FLIGHT
from .observation import Observation, Reader, Sink
from .protocol import Observed

__all__ = ["manager_proxy", "observe_pending", "stream_proxy", "tap_response"]


# -- the bytes of an HTTP response ------------------------------------------------------------


class _Tap:
    """What both byte-stream taps share: the stream they stand in for, and the end at collection."""

    def _self_setup(self, inner: Any, seen: Observation) -> None:
        self.__dict__.update(_inner=inner, _seen=seen)

    def __getattr__(self, name: str) -> Any:  # ``elapsed`` and whatever else the client reads off its stream
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def __del__(self) -> None:
        seen = self.__dict__.get("_seen")
        if seen is not None:
            seen.end("abandoned")


@transparent
def _sync_tap(base: type) -> type:
    class SyncTap(_Tap, base):  # type: ignore[misc,valid-type]
        def __iter__(self) -> Any:
            seen = self._seen
            try:
                for chunk in self._inner:
                    seen.feed(chunk)
                    yield chunk
            except GeneratorExit:
                raise
            except BaseException as exc:
                seen.end("failed", error=exc)
                raise
            seen.end("complete")

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._seen.end("abandoned")

    return SyncTap


@transparent
def _async_tap(base: type) -> type:
    class AsyncTap(_Tap, base):  # type: ignore[misc,valid-type]
        async def __aiter__(self) -> Any:
            seen = self._seen
            try:
                async for chunk in self._inner:
                    seen.feed(chunk)
                    yield chunk
            except GeneratorExit:
                raise
            except BaseException as exc:
                seen.end("failed", error=exc)
                raise
            seen.end("complete")

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                self._seen.end("abandoned")

    return AsyncTap


@functools.cache
def _tap_for(http: ModuleType, asynchronous: bool) -> type:
    """The tap class subclassing ``http``'s (httpx's or httpx2's) byte stream, made once: httpx
    checks ``isinstance(response.stream, SyncByteStream)`` before iterating it."""
    base = getattr(http, "AsyncByteStream" if asynchronous else "SyncByteStream")
    return _async_tap(base) if asynchronous else _sync_tap(base)


def _tap_class(response: Any) -> type | None:
    http = sys.modules.get(type(response).__module__.partition(".")[0])
    stream = response.stream
    for asynchronous, base_name in ((False, "SyncByteStream"), (True, "AsyncByteStream")):
        base = getattr(http, base_name, None)
        if isinstance(base, type) and isinstance(stream, base):
            return _tap_for(http, asynchronous)
    return None


def tap_response(
    response: Any, sink: Sink, reader: StreamReader, read: Callable[[Any], Answer | None]
) -> None:
    """Read ``response``'s body for ``sink`` (the call) as it passes: server-sent events through
    ``reader``, a JSON document through ``read``; a body already read is read now."""
    body: Reader = body_reader(response.headers.get("content-type", ""), reader, read)
    if response.is_stream_consumed:
        try:
            content = response.content
        except Exception:  # consumed without being kept (iterated raw): nothing left to read
            body = NOTHING
        else:
            body.feed(content)
        Observation(sink, body).end("complete")
        return
    cls = _tap_class(response)
    if cls is None:  # a transport stream of a kind we do not know: the body is not read
        Observation(sink, NOTHING).end("complete")
        return
    tap = cls()
    tap._self_setup(response.stream, Observation(sink, body))
    response.stream = tap


# -- an SDK's stream of objects ------------------------------------------------------------


class _Observing(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """A stand-in for an SDK's stream: everything is the stream's, its end is observed."""

    def __init__(self, wrapped: Any, seen: Observation) -> None:
        super().__init__(wrapped)
        self._self_seen = seen

    def _self_exited(self, exc: tuple[Any, ...]) -> None:
        """Leaving ``with stream:``: an exception inside the block ended it in error; else the
        stream was left before its end, unless it had been read to the end."""
        error = exc[1] if len(exc) > 1 and isinstance(exc[1], BaseException) else None
        if error is not None:
            self._self_seen.end("failed", error=error)
        else:
            self._self_seen.end("abandoned")

    def _self_in_flight(self) -> Any:
        """A generator (google-genai's) sends its request on its first chunk: until the transport
        has seen the body, the call is in flight while the stream is asked for a chunk."""
        call: Observed = self._self_seen.sink  # type: ignore[assignment]  # a stream's sink is its call
        return IN_FLIGHT.set(call) if call.wire_hash is None else None

    def __del__(self) -> None:
        seen = getattr(self, "_self_seen", None)
        if seen is not None:
            seen.end("abandoned")


class _SyncStream(_Observing):
    def __iter__(self) -> _SyncStream:
        return self

    @transparent
    def __next__(self) -> Any:
        seen = self._self_seen
        token = self._self_in_flight()
        try:
            chunk = self.__wrapped__.__next__()
        except StopIteration:
            seen.end("complete")
            raise
        except BaseException as exc:
            seen.end("failed", error=exc)
            raise
        finally:
            if token is not None:
                IN_FLIGHT.reset(token)
        seen.feed(chunk)
        return chunk

    @transparent
    def __enter__(self) -> _SyncStream:
        self.__wrapped__.__enter__()
        return self

    @transparent
    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(*exc)
        finally:
            self._self_exited(exc)

    @transparent
    def close(self) -> Any:
        try:
            return self.__wrapped__.close()
        finally:
            self._self_seen.end("abandoned")


class _AsyncStream(_Observing):
    def __aiter__(self) -> _AsyncStream:
        return self

    @transparent
    async def __anext__(self) -> Any:
        seen = self._self_seen
        token = self._self_in_flight()
        try:
            chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            seen.end("complete")
            raise
        except BaseException as exc:
            seen.end("failed", error=exc)
            raise
        finally:
            if token is not None:
                IN_FLIGHT.reset(token)
        seen.feed(chunk)
        return chunk

    @transparent
    async def __aenter__(self) -> _AsyncStream:
        await self.__wrapped__.__aenter__()
        return self

    @transparent
    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc)
        finally:
            self._self_exited(exc)

    @transparent
    async def close(self) -> Any:
        try:
            return await self.__wrapped__.close()
        finally:
            self._self_seen.end("abandoned")


class _AsyncClosable(_AsyncStream):
    """A stream closed with ``aclose`` (an async generator: cohere's ``chat_stream``); only such
    streams get the method, so the proxy has it exactly when the stream has it."""

    @transparent
    async def aclose(self) -> Any:
        try:
            return await self.__wrapped__.aclose()
        finally:
            self._self_seen.end("abandoned")


def stream_proxy(stream: Any, call: Observed, reader: StreamReader, *, asynchronous: bool) -> Any:
    """``stream`` observed for ``call``, each chunk to ``reader``."""
    # Some streams iterate both ways (LiteLLM's CustomStreamWrapper): the call site decides.
    cls = type(stream)
    seen = Observation(call, reader)
    if hasattr(cls, "__anext__") and (asynchronous or not hasattr(cls, "__next__")):
        return (_AsyncClosable if hasattr(cls, "aclose") else _AsyncStream)(stream, seen)
    return _SyncStream(stream, seen)


# -- a stream helper's context manager ----------------------------------------------------


class _Snapshot:
    """The reader of a stream helper: no chunks pass ctxguard, the helper keeps its own message;
    its reply is read off the helper once, at the end."""

    def __init__(self, final: Callable[[Any], Answer | None]) -> None:
        self._final = final
        self.stream: Any = None
        self._read = False
        self._reply: Answer | None = None

    def feed(self, chunk: Any) -> None:
        pass

    def reply(self) -> Answer | None:
        if not self._read and self.stream is not None:
            self._read = True
            self._reply = self._final(self.stream)
        return self._reply


class _Manager(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """A stream helper's context manager (``messages.stream(...)``): the request is sent on
    enter (with the call in flight, so its body is judged); the answer is read from the
    helper's own snapshot on exit: complete if it says why it stopped, else abandoned."""

    def __init__(self, wrapped: Any, call: Observed, final: Callable[[Any], Answer | None]) -> None:
        super().__init__(wrapped)
        self._self_call = call
        self._self_snapshot = _Snapshot(final)
        self._self_seen = Observation(call, self._self_snapshot)

    def _self_exited(self, exc: tuple[Any, ...]) -> None:
        error = exc[1] if len(exc) > 1 and isinstance(exc[1], BaseException) else None
        if error is not None:
            self._self_seen.end("failed", error=error)
            return
        try:
            reply = self._self_snapshot.reply()
        except Exception:  # read again, and counted, by the observation's end
            reply = None
        self._self_seen.end("complete" if reply is not None and reply.finish_reasons else "abandoned")

    @transparent
    def __enter__(self) -> Any:
        token = IN_FLIGHT.set(self._self_call)  # the request leaves here: its body is judged
        try:
            self._self_snapshot.stream = self.__wrapped__.__enter__()
        except BaseException as exc:
            self._self_seen.end("failed", error=exc)
            raise
        finally:
            IN_FLIGHT.reset(token)
        return self._self_snapshot.stream

    @transparent
    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(*exc)
        finally:
            self._self_exited(exc)

    @transparent
    async def __aenter__(self) -> Any:
        token = IN_FLIGHT.set(self._self_call)
        try:
            self._self_snapshot.stream = await self.__wrapped__.__aenter__()
        except BaseException as exc:
            self._self_seen.end("failed", error=exc)
            raise
        finally:
            IN_FLIGHT.reset(token)
        return self._self_snapshot.stream

    @transparent
    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc)
        finally:
            self._self_exited(exc)


def manager_proxy(manager: Any, call: Observed, final: Callable[[Any], Answer | None]) -> Any:
    return _Manager(manager, call, final)


# -- an answer a result holds still to be read ----------------------------------------------


class _SyncEvents(_Observing):
    """An iterable of events that is not an iterator (botocore's ``EventStream``: ``__iter__``,
    no ``__next__``): each event fed as the app's loop takes it, the events the SDK's own."""

    @transparent
    def __iter__(self) -> Any:
        seen = self._self_seen
        try:
            for event in self.__wrapped__:
                seen.feed(event)
                yield event
        except GeneratorExit:  # the app's loop was left; it may iterate again, or drop the stream
            raise
        except BaseException as exc:
            seen.end("failed", error=exc)
            raise
        seen.end("complete")

    @transparent
    def close(self) -> Any:
        try:
            return self.__wrapped__.close()
        finally:
            self._self_seen.end("abandoned")


class _Body(_Observing):
    """A raw body the SDK's reader reads (beneath botocore's ``StreamingBody``, whose ``read``,
    ``readinto``, iteration and ``with`` all come down to it): what passes is fed, and the answer
    read once the body has all passed (a read of everything, an empty read, nothing left)."""

    def _self_fed(self, data: Any, *, ended: bool) -> None:
        seen = self._self_seen
        if data:
            seen.feed(bytes(data))
        if ended or getattr(self.__wrapped__, "length_remaining", None) == 0:
            seen.end("complete")

    @transparent
    def read(self, *args: Any, **kwargs: Any) -> Any:
        try:
            data = self.__wrapped__.read(*args, **kwargs)
        except BaseException as exc:
            self._self_seen.end("failed", error=exc)
            raise
        amount = args[0] if args else kwargs.get("amt")
        self._self_fed(data, ended=amount is None or not data)
        return data

    @transparent
    def readinto(self, buffer: Any) -> Any:
        try:
            count = self.__wrapped__.readinto(buffer)
        except BaseException as exc:
            self._self_seen.end("failed", error=exc)
            raise
        self._self_fed(memoryview(buffer)[:count], ended=count == 0)
        return count

    @transparent
    def close(self) -> Any:
        try:
            return self.__wrapped__.close()
        finally:
            self._self_seen.end("abandoned")


def observe_pending(pending: Pending, sink: Sink, reader: StreamReader) -> None:
    """Replace the part of a result that holds its answer (``Pending``) by a proxy that observes it."""
    holder, name = pending.holder, pending.name
    mapping = isinstance(holder, MutableMapping)
    inner = holder[name] if mapping else getattr(holder, name)
    if pending.kind == "events":
        proxy: Any = _SyncEvents(inner, Observation(sink, reader))
    else:
        proxy = _Body(inner, Observation(sink, DocumentBody(pending.read or (lambda document: None))))
    if mapping:
        holder[name] = proxy
    else:
        setattr(holder, name, proxy)
