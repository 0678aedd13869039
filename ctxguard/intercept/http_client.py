"""The standard library's ``http.client`` on the wire, and urllib3 above it: urllib, urllib3,
requests and hand-made clients.

**The request** is read where a client hands it over whole, method, target and body together:
``http.client.HTTPConnection.request`` (urllib.request, hand-made clients) and
``urllib3.connection.HTTPConnection.request`` (urllib3, and requests above it). urllib3 overrides
``request`` and writes through http.client's ``putrequest`` / ``endheaders`` / ``send`` without
calling http.client's ``request``, so a request through requests, urllib3 and http.client is read
once. Lower, ``send`` sees the bytes in pieces (http.client joins the head and a bytes body in one
``send``, urllib3 sends the body alone) that would have to be put back together; higher
(``urlopen``, a session's ``request``) sees the app's arguments before they are encoded. The body
is the object the client is about to write: bytes as they are, a string encoded as that client
encodes it (http.client in Latin-1, urllib3 in UTF-8), never copied; a file or an iterable is
sent unread (reading it would consume it) and the request is not judged.

**The answer**: ``HTTPConnection.getresponse`` (urllib3's calls http.client's) returns the
response once its head is read. Every way its body is read comes down to the socket file it
reads from (``response.fp``): http.client's ``read`` / ``readinto`` / ``read1`` / ``readline``,
and urllib3's chunked reads, which reach past http.client to ``fp.readline`` and ``_safe_read``.
That file is replaced by a tap that passes every read through unchanged and feeds what was read,
de-chunked and inflated, to the body's reader: the answer is read as the app reads it, never
ahead, and ends when its last byte has passed, when the response is closed before that, or when
the tap is collected.

Between the two, the request's call waits on the connection (one attribute of its ``__dict__``,
taken back by ``getresponse``); every other request pays a method comparison in ``request`` and
a dict look-up in ``getresponse``, and wrapt's call through each (docs/performance.md, "Observing
HTTP clients": 29,000 instructions a plain GET, 9% of http.client's own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._isolation import report_internal_error
from .answers import tap_wire_answer
from .frames import transparent
from .observation import Observation
from .wire import Ours, Sending, Unguarded, leaving

__all__ = ["getresponse", "request"]

#: Where a request's call waits on its connection until ``getresponse``.
_PENDING = "_ctxguard_wire"


def _sent(body: Any, encoding: str) -> bytes | bytearray | None:
    """The body as the client writes it, if it is in memory."""
    if isinstance(body, (bytes, bytearray)):
        return body
    if isinstance(body, str):
        return body.encode(encoding)
    return None  # a file, an iterable: streamed unread


@transparent
def request(unguarded: Unguarded, encoding: str) -> Any:
    """The wrapper of a connection's ``request(method, url, body=None, ...)``; ``encoding``: how
    that client encodes a string body."""

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        method = args[0] if args else kwargs.get("method")
        if method != "POST":
            return wrapped(*args, **kwargs)
        target = args[1] if len(args) > 1 else kwargs.get("url", "")
        body = args[2] if len(args) > 2 else kwargs.get("body")
        ours = leaving(unguarded, method, target, lambda: _sent(body, encoding))
        if ours is None:
            return wrapped(*args, **kwargs)
        with Sending(ours):
            result = wrapped(*args, **kwargs)
        instance.__dict__[_PENDING] = ours
        return result

    return wrapper


@transparent
def getresponse(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``http.client.HTTPConnection.getresponse``: a request guarded from the wire
    reads its answer from the response."""
    ours = instance.__dict__.pop(_PENDING, None)
    if ours is None:
        return wrapped(*args, **kwargs)
    try:
        response = wrapped(*args, **kwargs)
    except BaseException as exc:
        ours[0].end("failed", error=exc)
        raise
    _tap(response, ours)
    return response


def _tap(response: Any, ours: Ours) -> None:
    def place(seen: Observation) -> None:
        if response.fp is None or response.length == 0:
            seen.end("complete")
            return
        framing = _Chunked() if response.chunked else _Length(response.length)
        response.fp = _FileTap(response.fp, seen, framing)

    tap_wire_answer(*ours, response.status, response.getheader("content-type") or "",
                    response.getheader("content-encoding"), place)


class _Length:
    """A body of ``length`` bytes (``None``: until the server closes the connection)."""

    __slots__ = ("_left", "done")

    def __init__(self, length: int | None) -> None:
        self._left = length
        self.done = False

    def feed(self, raw: bytes, out: Callable[[bytes], None]) -> None:
        left = self._left
        if left is None:
            out(raw)
            return
        out(raw[:left] if len(raw) > left else raw)
        self._left = left = max(left - len(raw), 0)
        self.done = left == 0


class _Chunked:
    """A chunked body (``Transfer-Encoding: chunked``) as it passes in any pieces: each chunk's data
    out, ``done`` at the last chunk. A malformed one stops being read (http.client raises to the app)."""

    __slots__ = ("_after_data", "_left", "_line", "broken", "done")

    _LINE_MAX = 4096  # a chunk-size line, with extensions

    def __init__(self) -> None:
        self._line = bytearray()
        self._left = 0
        self._after_data = False
        self.done = False
        self.broken = False

    def feed(self, raw: bytes, out: Callable[[bytes], None]) -> None:
        i, n = 0, len(raw)
        while i < n and not (self.done or self.broken):
            if self._left:
                take = min(self._left, n - i)
                out(raw[i:i + take])
                i += take
                self._left -= take
                self._after_data = not self._left
                continue
            end = raw.find(b"\n", i)
            self._line += raw[i:] if end < 0 else raw[i:end]
            if end < 0:
                self.broken = len(self._line) > self._LINE_MAX
                return
            i = end + 1
            line, self._line = bytes(self._line).strip(), bytearray()
            if self._after_data:  # the line ending a chunk's data
                self._after_data = False
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                self.broken = True
                return
            self.done = size == 0
            self._left = size


class _FileTap:
    """Stands in for an http.client response's socket file (``response.fp``): every read passes
    through unchanged, and what it read is fed to the observation (``peek`` reads nothing)."""

    __slots__ = ("_framing", "_inner", "_seen")

    def __init__(self, inner: Any, seen: Observation, framing: _Length | _Chunked) -> None:
        self._inner = inner
        self._seen = seen
        self._framing = framing

    def __getattr__(self, name: str) -> Any:  # ``closed``, ``fileno``, ``peek``, ``raw``, ...
        return getattr(self._inner, name)

    def _passed(self, data: Any, asked: int, *, whole: bool = False) -> None:
        """``data`` was read, ``asked`` bytes at most; ``whole``: a read to the end of the file."""
        seen, framing = self._seen, self._framing
        if seen.ended:
            return
        if data:
            try:
                framing.feed(bytes(data), seen.feed)
            except Exception as exc:
                report_internal_error("stream", exc)
        if framing.done:
            seen.end("complete")
        elif whole or (not data and asked != 0):  # the end of the file: the server closed the connection
            seen.end("complete" if type(framing) is _Length else "abandoned")

    @transparent
    def read(self, size: int | None = -1) -> Any:
        data = self._through(self._inner.read, size)
        self._passed(data, -1, whole=size is None or size < 0)
        return data

    @transparent
    def read1(self, size: int = -1) -> Any:
        data = self._through(self._inner.read1, size)
        self._passed(data, size)
        return data

    @transparent
    def readline(self, size: int | None = -1) -> Any:
        data = self._through(self._inner.readline, size)
        self._passed(data, -1 if size is None else size)
        return data

    @transparent
    def readinto(self, buffer: Any) -> Any:
        count = self._through(self._inner.readinto, buffer)
        self._passed(memoryview(buffer)[:count] if count else b"", len(buffer))
        return count

    @transparent
    def readinto1(self, buffer: Any) -> Any:
        count = self._through(self._inner.readinto1, buffer)
        self._passed(memoryview(buffer)[:count] if count else b"", len(buffer))
        return count

    @transparent
    def _through(self, read: Callable[[Any], Any], argument: Any) -> Any:
        try:
            return read(argument)
        except BaseException as exc:
            self._seen.end("failed", error=exc)
            raise

    @transparent
    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._seen.end("abandoned")

    def __del__(self) -> None:
        self._seen.end("abandoned")
