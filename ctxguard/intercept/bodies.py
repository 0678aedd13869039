"""Bodies read as their bytes arrive: the two readers of an HTTP response's body.

``EventBody`` decodes server-sent events and feeds each event's JSON ``data`` to a provider's
stream reader; ``DocumentBody`` keeps a JSON body until it has all arrived. Both are readers of
an ``Observation`` (``feed(bytes)``, ``reply()``), and both hold at most ``ANSWER_LIMIT`` of it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from ..payload import ANSWER_LIMIT, UNREAD, Answer
from ..providers.base import StreamReader

__all__ = ["NOTHING", "DocumentBody", "EventBody"]


class EventBody:
    """A server-sent event body, each event's JSON ``data`` fed to a provider's stream reader.
    ``complete`` once OpenAI's ``[DONE]``, an error event or the last event the reader knows of
    arrives (the end of the body also completes it). However long the body, what is held is the
    event arriving and what the reader keeps (``AnswerText``); an event longer than ``ANSWER_LIMIT``
    ends the reading, the answer so far ``unread``."""

    __slots__ = ("_buffer", "_data", "_held", "_reader", "complete", "unread")

    def __init__(self, reader: StreamReader) -> None:
        self._reader = reader
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._held = 0  # bytes of ``_data``'s objects and slots
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
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if not line:
                self._dispatch()
            elif line.startswith(b"data:"):
                data = line[6:] if line[5:6] == b" " else line[5:]
                self._data.append(data)
                self._held += sys.getsizeof(data) + 8
                if self._held > ANSWER_LIMIT:  # before its blank line can dispatch it, in this chunk
                    self._stop()
                    return
        del buffer[:start]
        if self._held + len(buffer) > ANSWER_LIMIT:
            self._stop()

    def _stop(self) -> None:
        """An event past ``ANSWER_LIMIT``: the reading ends, the answer so far ``unread``."""
        self.unread = True
        self._buffer, self._data, self._held = bytearray(), [], 0

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
            reply = self._reader.reply()
            reply.text, reply.unread = "", UNREAD
            return reply
        self._dispatch()  # a last event without its blank line
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


class _Nothing:
    """A body that cannot be read (consumed before ctxguard saw it, a transport stream of a kind
    ctxguard does not know): no answer."""

    def feed(self, chunk: Any) -> None:
        pass

    def reply(self) -> None:
        return None


NOTHING = _Nothing()
