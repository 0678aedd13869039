"""How an answer is written: a JSON body as an API encodes it, and a stream's events as Server-Sent
Events (or as a format's own: Ollama's NDJSON lines, Bedrock's AWS event-stream messages). A wire
format picks one of each."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["COMPACT", "INDENTED", "Framing", "Json", "sse"]


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


#: OpenAI and Gemini indent their JSON bodies; Mistral, Cohere and Bedrock write them compact.
INDENTED = _json(indent=2)
COMPACT = _json(separators=(",", ":"))


def sse(separators: tuple[str, str] = (",", ":")) -> Framing:
    """``event: name`` (when named) and ``data: …`` lines; a string ``data`` (``[DONE]``) goes as is."""

    def frame(event: str | None, data: Any) -> bytes:
        text = data if isinstance(data, str) else json.dumps(data, separators=separators, ensure_ascii=False)
        return (f"event: {event}\ndata: {text}\n\n" if event else f"data: {text}\n\n").encode()

    return Framing("text/event-stream; charset=utf-8", frame, (("Cache-Control", "no-cache"),))
