"""lm15's transports on the wire: DSPy's default engine (DSPy 3.4 vendors lm15 as
``dspy._vendor.lm15``; lm15 also ships on its own).

lm15 speaks HTTP/1.1 itself over the standard library's ``socket`` (``transports._sync`` and
``_async``: a connection pool, its own head writer and chunked decoder), not through
``http.client``, so only its own transport sees its requests. Each request passes through one
method with the request whole and returns the response once its head is read:
``StdlibTransport.stream(request)`` and ``StdlibAsyncTransport._do_stream(request)`` (which both
``await transport.stream(...)`` and ``async with`` reach). The request's ``body`` is the bytes it
writes; the response's body is its ``_chunks`` iterator (already de-chunked), which every read
(iterating the response, ``read()``, ``iter_lines()``) iterates: it is replaced by a stand-in that
feeds each chunk as it passes, so the answer is read as the app reads it, and ends at the end of
the chunks, at an error, or when the stand-in is closed or collected before that.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .._isolation import report_internal_error
from .answers import tap_wire_answer
from .frames import transparent
from .observation import Observation
from .wire import Ours, Sending, Unguarded, leaving

__all__ = ["async_stream", "stream"]


def _leaving(unguarded: Unguarded, args: Any, kwargs: Any) -> Ours | None:
    request = args[0] if args else kwargs.get("request")
    if getattr(request, "method", None) != "POST":
        return None  # not a request lm15 sends: the transport answers for it
    try:
        target = urlsplit(request.url).path
    except Exception as exc:
        report_internal_error("response", exc)
        return None
    return leaving(unguarded, "POST", target, lambda: request.body)


@transparent
def stream(unguarded: Unguarded) -> Any:
    """The wrapper of ``StdlibTransport.stream(request)``."""

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        ours = _leaving(unguarded, args, kwargs)
        if ours is None:
            return wrapped(*args, **kwargs)
        with Sending(ours):
            response = wrapped(*args, **kwargs)
        _tap(response, ours, _Chunks)
        return response

    return wrapper


@transparent
def async_stream(unguarded: Unguarded) -> Any:
    """The wrapper of ``StdlibAsyncTransport._do_stream(request)``."""

    async def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        ours = _leaving(unguarded, args, kwargs)
        if ours is None:
            return await wrapped(*args, **kwargs)
        with Sending(ours):
            response = await wrapped(*args, **kwargs)
        _tap(response, ours, _AsyncChunks)
        return response

    return wrapper


def _tap(response: Any, ours: Ours, chunks: type[_Chunks] | type[_AsyncChunks]) -> None:
    def place(seen: Observation) -> None:
        response._chunks = chunks(response._chunks, seen)

    tap_wire_answer(*ours, response.status, response.header("content-type") or "", response.header("content-encoding"),
                    place)


class _ChunkTap:
    """What the two stand-ins for a response's chunk iterator share: each chunk fed as it passes,
    the observation ended when the iterator stops, raises, or is closed or collected before that."""

    __slots__ = ("_inner", "_seen")

    def __init__(self, inner: Any, seen: Observation) -> None:
        self._inner = inner
        self._seen = seen

    def _stopped(self, exc: BaseException) -> None:
        if isinstance(exc, (StopIteration, StopAsyncIteration)):
            self._seen.end("complete")
        else:
            self._seen.end("failed", error=exc)

    def __del__(self) -> None:
        self._seen.end("abandoned")


class _Chunks(_ChunkTap):
    """Stands in for a response's chunk iterator."""

    __slots__ = ()

    def __iter__(self) -> _Chunks:
        return self

    @transparent
    def __next__(self) -> Any:
        try:
            chunk = next(self._inner)
        except BaseException as exc:
            self._stopped(exc)
            raise
        self._seen.feed(chunk)
        return chunk

    def close(self) -> None:
        try:
            close = getattr(self._inner, "close", None)
            if close is not None:
                close()
        finally:
            self._seen.end("abandoned")


class _AsyncChunks(_ChunkTap):
    """Stands in for an async response's chunk iterator."""

    __slots__ = ()

    def __aiter__(self) -> _AsyncChunks:
        return self

    @transparent
    async def __anext__(self) -> Any:
        try:
            chunk = await self._inner.__anext__()
        except BaseException as exc:
            self._stopped(exc)
            raise
        self._seen.feed(chunk)
        return chunk

    async def aclose(self) -> None:
        try:
            aclose = getattr(self._inner, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            self._seen.end("abandoned")
