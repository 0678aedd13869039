"""aiohttp on the wire: its client's requests (google-genai's async client when aiohttp is installed,
LiteLLM's aiohttp transport, an app's own ``ClientSession``).

**The request**: ``ClientRequest.send(conn)`` writes one HTTP request, redirects each their own,
with the body as aiohttp serialised it (``json=`` already dumped, with the session's
``json_serialize``): a ``BytesPayload`` (JSON, bytes, strings) is read in place; any other payload
(a file, an async iterable) is streamed unread and the request not judged. Above it,
``ClientSession._request`` holds the app's arguments before they are serialised.

**The answer**: ``ClientResponse.start(conn)`` reads the response's head and sets its body
reader (``response.content``, aiohttp's ``StreamReader``, fed by the connection and decoded:
de-chunked, decompressed). That reader is replaced by a transparent stand-in whose reads pass
through and feed what they return, so the answer is read as the app reads it, whichever way
(``read()``, ``json()``, ``text()``, ``async for line in response.content``, ``iter_chunked``,
``iter_any``, ``readline``...). It ends when a read leaves the reader at its end, when a read
raises, or when the stand-in is collected before that (the app released the response unread).

Between the two, the request's call waits on the response object (``ClientResponse`` has no
``__slots__``); every other request pays a method comparison.
"""

from __future__ import annotations

from typing import Any

import wrapt

from .answers import tap_wire_answer
from .frames import transparent
from .observation import Observation
from .wire import Ours, Sending, Unguarded, leaving

__all__ = ["send", "start"]

#: Where a request's call waits on its response until ``start``.
_PENDING = "_ctxguard_wire"


def _sent(request: Any) -> bytes | bytearray | None:
    """The body aiohttp is writing, if it holds it in memory (a ``BytesPayload``'s value)."""
    value = getattr(request.body, "_value", None)
    return value if isinstance(value, (bytes, bytearray)) else None


@transparent
def send(unguarded: Unguarded) -> Any:
    """The wrapper of ``ClientRequest.send(conn)``."""

    async def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if instance.method != "POST":
            return await wrapped(*args, **kwargs)
        ours = leaving(unguarded, "POST", instance.url.path, lambda: _sent(instance))
        if ours is None:
            return await wrapped(*args, **kwargs)
        with Sending(ours):
            response = await wrapped(*args, **kwargs)
        response.__dict__[_PENDING] = ours
        return response

    return wrapper


@transparent
async def start(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``ClientResponse.start(conn)``: a request guarded from the wire reads its answer."""
    ours = instance.__dict__.pop(_PENDING, None)
    if ours is None:
        return await wrapped(*args, **kwargs)
    try:
        response = await wrapped(*args, **kwargs)
    except BaseException as exc:
        ours[0].end("failed", error=exc)
        raise
    _tap(response, ours)
    return response


def _tap(response: Any, ours: Ours) -> None:
    def place(seen: Observation) -> None:
        response.content = _Content(response.content, seen)

    tap_wire_answer(*ours, response.status, response.headers.get("Content-Type", ""), None, place)


class _Content(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """A stand-in for a response's ``StreamReader``: every read is the reader's own, and what it
    returned is fed to the observation. The iterators are rebuilt on the stand-in's reads (the
    reader's own would call its methods, past the stand-in)."""

    def __init__(self, wrapped: Any, seen: Observation) -> None:
        super().__init__(wrapped)
        self._self_seen = seen

    def _self_passed(self, data: Any) -> Any:
        seen = self._self_seen
        if data:
            seen.feed(bytes(data))
        if self.__wrapped__.at_eof():
            seen.end("complete")
        return data

    def _self_failed(self, exc: BaseException) -> None:
        self._self_seen.end("failed", error=exc)

    @transparent
    async def read(self, n: int = -1) -> bytes:
        try:
            return self._self_passed(await self.__wrapped__.read(n))  # type: ignore[no-any-return]
        except BaseException as exc:
            self._self_failed(exc)
            raise

    @transparent
    async def readany(self) -> bytes:
        try:
            return self._self_passed(await self.__wrapped__.readany())  # type: ignore[no-any-return]
        except BaseException as exc:
            self._self_failed(exc)
            raise

    @transparent
    async def readexactly(self, n: int) -> bytes:
        try:
            return self._self_passed(await self.__wrapped__.readexactly(n))  # type: ignore[no-any-return]
        except BaseException as exc:
            self._self_failed(exc)
            raise

    @transparent
    async def readline(self, **kwargs: Any) -> bytes:
        try:
            return self._self_passed(await self.__wrapped__.readline(**kwargs))  # type: ignore[no-any-return]
        except BaseException as exc:
            self._self_failed(exc)
            raise

    @transparent
    async def readuntil(self, *args: Any, **kwargs: Any) -> bytes:
        try:
            return self._self_passed(await self.__wrapped__.readuntil(*args, **kwargs))  # type: ignore[no-any-return]
        except BaseException as exc:
            self._self_failed(exc)
            raise

    @transparent
    async def readchunk(self) -> tuple[bytes, bool]:
        try:
            data, end = await self.__wrapped__.readchunk()
        except BaseException as exc:
            self._self_failed(exc)
            raise
        self._self_passed(data)
        return data, end

    @transparent
    def read_nowait(self, n: int = -1) -> bytes:
        try:
            return self._self_passed(self.__wrapped__.read_nowait(n))  # type: ignore[no-any-return]
        except BaseException as exc:
            self._self_failed(exc)
            raise

    def __aiter__(self) -> Any:
        return _iterator(self.readline)

    def iter_chunked(self, n: int) -> Any:
        return _iterator(lambda: self.read(n))

    def iter_any(self) -> Any:
        return _iterator(self.readany)

    def iter_chunks(self) -> Any:
        return _ContentChunks(self)

    def __del__(self) -> None:
        seen = getattr(self, "_self_seen", None)
        if seen is not None:
            seen.end("abandoned")


def _iterator(read: Any) -> Any:
    """aiohttp's own iterator over a read function: ends at an empty read."""
    from aiohttp.streams import AsyncStreamIterator

    return AsyncStreamIterator(read)


class _ContentChunks:
    """``iter_chunks()`` on the stand-in: ``(data, end of an HTTP chunk)`` until ``(b"", False)``."""

    def __init__(self, content: _Content) -> None:
        self._content = content

    def __aiter__(self) -> _ContentChunks:
        return self

    async def __anext__(self) -> tuple[bytes, bool]:
        chunk = await self._content.readchunk()
        if chunk == (b"", False):
            raise StopAsyncIteration
        return chunk
