"""How an answer is written: a JSON body as an API encodes it, and a stream's events as Server-Sent
Events, NDJSON lines or AWS event-stream messages. A wire format picks one of each."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["COMPACT", "INDENTED", "SPACED", "Framing", "Json", "eventstream_message", "ndjson", "sse"]


@dataclass(frozen=True)
class Json:
    """A JSON body: its content type and its encoder."""

    content_type: str
    dumps: Callable[[Any], bytes]


@dataclass(frozen=True)
class Framing:
    """A stream: its content type, headers of its own, and one event's bytes (``frame(name, data)``),
    each sent as one HTTP chunk."""

    content_type: str
    frame: Callable[[str | None, Any], bytes]
    headers: tuple[tuple[str, str], ...] = ()


def _json(**options: Any) -> Json:
    return Json("application/json", lambda obj: json.dumps(obj, ensure_ascii=False, **options).encode())


#: OpenAI and Gemini indent their JSON bodies; Anthropic sends them compact, with spaces after the
#: separators; Mistral, Cohere and Bedrock without spaces.
INDENTED = _json(indent=2)
SPACED = _json()
COMPACT = _json(separators=(",", ":"))


def sse(separators: tuple[str, str] = (",", ":")) -> Framing:
    """``event: name`` (when named) and ``data: …`` lines; a string ``data`` (``[DONE]``) goes as is."""

    def frame(event: str | None, data: Any) -> bytes:
        text = data if isinstance(data, str) else json.dumps(data, separators=separators, ensure_ascii=False)
        return (f"event: {event}\ndata: {text}\n\n" if event else f"data: {text}\n\n").encode()

    return Framing("text/event-stream; charset=utf-8", frame, (("Cache-Control", "no-cache"),))


def ndjson(dumps: Callable[[Any], bytes]) -> Framing:
    """One JSON object a line."""
    return Framing("application/x-ndjson", lambda event, data: dumps(data) + b"\n")


def eventstream_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One ``application/vnd.amazon.eventstream`` message: its prelude (total and headers length)
    and the prelude's CRC32, string headers, the payload, and the CRC32 of all of it."""
    encoded = b"".join(
        bytes((len(name),)) + name + b"\x07" + len(value).to_bytes(2, "big") + value
        for name, value in ((k.encode(), v.encode()) for k, v in headers.items())
    )
    prelude = (16 + len(encoded) + len(payload)).to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + zlib.crc32(message).to_bytes(4, "big")
