"""Bodies read as their bytes arrive: the readers of an HTTP response's body.

``EventBody`` decodes server-sent events and feeds each event's JSON ``data`` to a provider's
stream reader; ``LinesBody`` does the same for JSON lines (Ollama's streams); ``DocumentBody`` keeps
a JSON body until it has all arrived; ``body_reader`` picks one by the response's content type. All
are readers of an ``Observation`` (``feed(bytes)``, ``reply()``), and hold at most ``ANSWER_LIMIT``
of it.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Callable
from typing import Any

from ..payload import ANSWER_LIMIT, UNREAD, Answer
from ..providers.base import StreamReader
from .observation import Reader

__all__ = ["NOTHING", "DocumentBody", "EventBody", "Inflated", "LinesBody", "body_reader", "decoded"]


class _LineBody:
    """A body read a line at a time as its bytes arrive, each complete line handed to ``_line`` (a
    subclass's), which may keep some (``_held``: the bytes it keeps). What is held, that and the line
    arriving, never passes ``ANSWER_LIMIT``: past it the reading ends, the answer so far ``unread``
    (checked as each line arrives, not when the chunk is done: a transport may hand over far more
    than the limit at once)."""

    __slots__ = ("_buffer", "_held", "_reader", "complete", "unread")

    def __init__(self, reader: StreamReader) -> None:
        self._reader = reader
        self._buffer = bytearray()
        self._held = 0
        self.complete = False
        self.unread = False

    def feed(self, chunk: bytes) -> None:
        if self.unread:
            return
        buffer = self._buffer
        buffer += chunk
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            if self._held + end - start > ANSWER_LIMIT:
                self._stop()
                return
            self._line(bytes(buffer[start:end]))
            start = end + 1
            if self._held > ANSWER_LIMIT:
                self._stop()
                return
        del buffer[:start]
        if self._held + len(buffer) > ANSWER_LIMIT:
            self._stop()

    def _line(self, line: bytes) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        """Past ``ANSWER_LIMIT``: the reading ends, the answer so far ``unread``."""
        self.unread = True
        self._buffer, self._held = bytearray(), 0

    def _unread_reply(self) -> Answer | None:
        reply = self._reader.reply()
        reply.text, reply.unread = "", UNREAD
        return reply


class EventBody(_LineBody):
    """A server-sent event body, each event's JSON ``data`` fed to a provider's stream reader.
    ``complete`` once OpenAI's ``[DONE]``, an error event or the last event the reader knows of
    arrives (the end of the body also completes it). However long the body, what is held is the
    event arriving and what the reader keeps (``AnswerText``); an event longer than ``ANSWER_LIMIT``
    ends the reading, the answer so far ``unread``."""

    __slots__ = ("_data",)

    def __init__(self, reader: StreamReader) -> None:
        super().__init__(reader)
        self._data: list[bytes] = []

    def _line(self, line: bytes) -> None:
        line = line.rstrip(b"\r")
        if not line:
            self._dispatch()
        elif line.startswith(b"data:"):
            data = line[6:] if line[5:6] == b" " else line[5:]
            self._data.append(data)
            self._held += sys.getsizeof(data) + 8  # the object and its slot in ``_data``

    def _stop(self) -> None:
        super()._stop()
        self._data = []

    def _dispatch(self) -> None:
        data, self._data, self._held = b"\n".join(self._data), [], 0
        if not data:
            return
        if data.startswith(b"[DONE]"):
            self.complete = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            return  # not JSON: not an event a reader knows
        self._reader.feed(event)
        if type(event) is dict and (event.get("type") == "error" or type(event.get("error")) is dict):
            self.complete = True  # the service failed midway (Anthropic, Responses, Chat): nothing follows
        elif getattr(self._reader, "complete", False):
            self.complete = True  # the answer's last event (``StreamReader``)

    def reply(self) -> Answer | None:
        if self.unread:
            return self._unread_reply()
        self._dispatch()  # a last event without its blank line
        return self._reader.reply()


class LinesBody(_LineBody):
    """A body of JSON lines (``application/x-ndjson``: Ollama's streams), each line's object fed to a
    provider's stream reader as it arrives. A line longer than ``ANSWER_LIMIT`` ends the reading,
    the answer so far ``unread``."""

    __slots__ = ()

    def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            event = json.loads(line)
        except ValueError:
            return  # not JSON: not an event a reader knows
        self._reader.feed(event)

    def reply(self) -> Answer | None:
        if self.unread:
            return self._unread_reply()
        self._line(bytes(self._buffer))  # a last line without its newline
        self._buffer = bytearray()
        return self._reader.reply()


class DocumentBody:
    """A JSON body, read once it has all arrived; one longer than ``ANSWER_LIMIT`` is not kept, its
    answer ``unread``."""

    __slots__ = ("_parts", "_read", "complete", "size")

    def __init__(self, read: Callable[[Any], Answer | None]) -> None:
        self._read = read
        self._parts: list[bytes] = []
        self.complete = False
        self.size = 0

    @property
    def unread(self) -> bool:
        """More than ``ANSWER_LIMIT`` arrived: the document is not kept."""
        return self.size > ANSWER_LIMIT

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size <= ANSWER_LIMIT:
            self._parts.append(chunk)
        else:
            self._parts.clear()

    def reply(self) -> Answer | None:
        if self.size > ANSWER_LIMIT:
            return Answer(unread=UNREAD)
        if not self._parts:
            return None
        try:
            document = json.loads(b"".join(self._parts))
        except ValueError:
            return None  # not JSON: not an answer a provider module reads
        return self._read(document)


#: A reader of a response body, whichever its framing.
Body = EventBody | LinesBody | DocumentBody


def body_reader(content_type: str, reader: StreamReader, read: Callable[[Any], Answer | None]) -> Body:
    """The reader of a response body with ``content_type``: server-sent events and JSON lines
    through a provider's stream ``reader``, any other body as one JSON document through ``read``."""
    if content_type.startswith("text/event-stream"):
        return EventBody(reader)
    if content_type.startswith("application/x-ndjson"):
        return LinesBody(reader)
    return DocumentBody(read)


class Inflated:
    """A body sent compressed (``Content-Encoding: gzip`` or ``deflate``), inflated as it arrives
    for the reader beneath: at most ``_STEP`` bytes of output at a time, and nothing once the reader
    stopped keeping it (``unread``), so a small body that inflates to gigabytes costs no memory."""

    __slots__ = ("_inflate", "_raw", "_reader")

    _STEP = 1 << 20

    def __init__(self, reader: Body, encoding: str) -> None:
        self._reader = reader
        self._raw = encoding == "deflate"  # zlib-wrapped, or (as some servers send it) raw deflate
        # 47: a gzip or zlib header, detected; raw deflate is retried once if the first bytes are neither.
        self._inflate: Any = zlib.decompressobj(47)

    @property
    def complete(self) -> bool:
        return self._reader.complete

    def feed(self, chunk: bytes) -> None:
        inflate = self._inflate
        if inflate is None:
            return
        try:
            data = inflate.decompress(chunk, self._STEP)
        except zlib.error:
            if not self._raw:
                self._inflate = None  # not what the header said: the server's fault, left unread
                return
            self._raw = False
            self._inflate = inflate = zlib.decompressobj(-15)
            self.feed(chunk)
            return
        self._raw = False
        reader = self._reader
        while data:
            reader.feed(data)
            if reader.unread:
                self._inflate = None
                return
            data = inflate.decompress(inflate.unconsumed_tail, self._STEP)

    def reply(self) -> Answer | None:
        return self._reader.reply()


def decoded(body: Body, encoding: str | None) -> Reader:
    """``body`` behind what the response's ``Content-Encoding`` asks for: itself for none, inflated
    for ``gzip`` / ``deflate``; a body in another encoding (``br``, ``zstd``) is not read."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding in ("gzip", "x-gzip", "deflate"):
        return Inflated(body, "deflate" if encoding == "deflate" else "gzip")
    return NOTHING


class _Nothing:
    """A body that cannot be read (consumed before ctxguard saw it, a transport stream of a kind
    ctxguard does not know): no answer."""

    def feed(self, chunk: Any) -> None:
        pass

    def reply(self) -> None:
        return None


NOTHING = _Nothing()
