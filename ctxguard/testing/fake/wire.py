"""What a wire format is made of: the ``WireFormat`` record its module declares, its writers (``Json``,
a stream's ``Framing``), and the ``Exchange`` its hooks read: a request, its reply, what follows from both."""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from http.client import responses
from itertools import pairwise
from typing import Any, NamedTuple

from .script import RecordedRequest, Reply, ServedResponse
from .tokens import FRAME_TOKENS, text_tokens

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
#: A stream's event: its name (None: unnamed) and its data. In a stream's list, None marks where a
#: scripted ``stream_failure="drop"`` cuts the connection.
Event = tuple[str | None, Any]
Headers = list[tuple[str, str]]


class Json(NamedTuple):
    """A JSON body: its content type and its encoder."""

    content_type: str
    dumps: Callable[[Any], bytes]


class Framing(NamedTuple):
    """A stream: its content type, one event's bytes (``frame(name, data)``, an HTTP chunk), its own headers."""

    content_type: str
    frame: Callable[[str | None, Any], bytes]
    headers: tuple[tuple[str, str], ...] = ()


#: OpenAI and Gemini indent their JSON bodies; Mistral, Cohere and Bedrock write them compact.
INDENTED = Json("application/json", lambda obj: json.dumps(obj, ensure_ascii=False, indent=2).encode())
COMPACT = Json("application/json", lambda obj: json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())


def sse(separators: tuple[str, str] = (",", ":")) -> Framing:
    """``event: name`` (when named) and ``data: …`` lines; a string ``data`` (``[DONE]``) goes as is."""

    def frame(event: str | None, data: Any) -> bytes:
        text = data if isinstance(data, str) else json.dumps(data, separators=separators, ensure_ascii=False)
        return (f"event: {event}\ndata: {text}\n\n" if event else f"data: {text}\n\n").encode()

    return Framing("text/event-stream; charset=utf-8", frame, (("Cache-Control", "no-cache"),))


@dataclass(frozen=True)
class WireFormat:
    """One API as the fake speaks it: all that differs between APIs is a hook, called the same for each API.

    usage: FORMAT = WireFormat(name="cohere.chat", path=re.compile(r".*/v2/chat"), prompt_tokens=..., ...)
    """

    #: How the registry and its tests name it (``openai.chat``, ``bedrock.converse``).
    name: str
    #: The routes it answers: a request path (query and trailing ``/`` cut) this matches whole.
    path: re.Pattern[str]
    #: What the model reads of the request, in the estimate's unit (``tokens``).
    prompt_tokens: Callable[[Exchange], int]
    #: The answer's id (None: the API gives none), the request's, a tool call's (None: none).
    response_id: Callable[[Exchange], str | None]
    request_id: Callable[[Exchange], str]
    call_id: Callable[[Exchange, int, str], str] | None
    #: Why the answer ended, in the API's words (``Exchange.finish`` is OpenAI's).
    finish: Callable[[Exchange], str]
    #: The last usage object a complete answer puts on the wire (None: none).
    usage: Callable[[Exchange], Mapping[str, Any] | None]
    #: The JSON answer; a streamed one's events (``Events.cut`` ends them as a scripted failure does).
    body: Callable[[Exchange], dict[str, Any]]
    stream: Callable[[Exchange], list[Event | None]]
    #: The error body for a status (the scripted message, else the API's own words), and the type it names.
    error: Callable[[Exchange, int, str | None], tuple[dict[str, Any], str]]
    #: The status a scripted ``stream_failure="error"`` comes as when nothing streams.
    failure_status: int
    #: How its bodies and streams are written.
    json: Json
    framing: Framing
    #: Whether the answer streams: the body asks for it (by default), or the route says so.
    streamed: Callable[[Exchange], bool] = lambda exchange: exchange.payload.get("stream") is True
    #: Headers after Content-Type, given the status and the error type (None: no error).
    headers: Callable[[Exchange, int, str | None], Headers] = lambda exchange, status, error_type: []
    #: The model a route names, for an API whose body does not.
    model_in_path: Callable[[str], str] = lambda route: ""
    #: The error (body, type) a request is refused with (400) before any reply is taken, or None.
    refuse: Callable[[Exchange], tuple[dict[str, Any], str] | None] = lambda exchange: None
    #: The finish reason a stream the service breaks off ends with, when it sends no error body.
    broken: str | None = None
    #: Prompt tokens the server drops to fit its context window; it reports what it kept, never more.
    truncated_tokens: Callable[[Exchange], int] = lambda exchange: 0
    #: Where its SDK is pointed: a ``FakeLLM`` attribute and its path after the origin (None: another format's).
    address: tuple[str, str] | None = None
    #: The ``FakeLLM`` attribute that reads and sets its server's window for a request setting none, and that window.
    server_window: tuple[str, int] | None = None


def request_id_header(name: str) -> Callable[[Exchange, int, str | None], Headers]:
    return lambda exchange, status, error_type: [(name, exchange.request_id)]


def phrase(status: int) -> str:
    return responses.get(status, f"Error {status}")


def ident(seed: str, alphabet: str, length: int) -> str:
    """``length`` characters of ``alphabet`` derived from ``seed``: random-looking, reproducible."""
    out: list[str] = []
    limit = 256 - 256 % len(alphabet)  # drop the bytes that would bias the first letters
    counter = 0
    while len(out) < length:
        for byte in hashlib.blake2b(f"{seed}/{counter}".encode(), digest_size=64).digest():
            if byte < limit:
                out.append(alphabet[byte % len(alphabet)])
        counter += 1
    return "".join(out[:length])


def split(text: str, parts: int = 3) -> list[str]:
    """Cut text into a few pieces so clients must really concatenate deltas."""
    n = min(parts, len(text))
    size, extra = divmod(len(text), n) if n else (0, 0)
    cuts = [i * size + min(i, extra) for i in range(n + 1)]  # the first ``extra`` pieces one longer
    return [text[a:b] for a, b in pairwise(cuts)]


class ScriptedCall(NamedTuple):
    """A scripted tool call, its id in the style of the API answering (``Exchange.calls``)."""

    id: str
    name: str
    arguments: str

    @property
    def input(self) -> Any:
        """The arguments as a JSON value, for the APIs that send objects."""
        try:
            return json.loads(self.arguments) if self.arguments else {}
        except ValueError:
            return {}


class Events:
    """A stream's events, cut by a scripted failure after the first delta (or the opening event if none)."""

    def __init__(self) -> None:
        self.items: list[Event] = []
        self._cut: int | None = None

    def add(self, event: str | None, data: Any, *, delta: bool = False) -> None:
        self.items.append((event, data))
        if delta and self._cut is None:
            self._cut = len(self.items)

    def cut(self, exchange: Exchange, failure: list[Event]) -> list[Event | None]:
        """All the events, or those before a scripted failure and then ``failure`` (or the drop)."""
        if exchange.reply.stream_failure is None:
            return list(self.items)
        kept: list[Event | None] = list(self.items[: self._cut or 1])
        if exchange.reply.stream_failure == "drop":
            return [*kept, None]
        return kept + list(failure)


@dataclass(frozen=True)
class Exchange:
    """One request and what it is answered with; each fact computed once, by its format's hooks."""

    format: WireFormat
    nonce: str
    serial: int
    route: str
    #: The context window the server holds this API's prompts to (``FakeLLM.windows``), if any.
    window: int | None
    payload: dict[str, Any] = field(default_factory=dict)
    reply: Reply = field(default_factory=Reply)
    stream: bool = False

    def ident(self, tag: str, alphabet: str, length: int, i: int = 0) -> str:
        # Seeded by the server instance and its request serial (which, unlike the request's
        # place in ``FakeLLM.requests``, survives ``clear()``), so no two answers share an id.
        return ident(f"{self.nonce}/{self.serial}/{tag}/{i}", alphabet, length)

    @property
    def requested_model(self) -> str:
        return str(self.payload.get("model") or self.format.model_in_path(self.route))

    @property
    def model(self) -> str:
        return self.reply.model or self.requested_model or "fake-model"

    @cached_property
    def id(self) -> str | None:
        return self.format.response_id(self)

    @cached_property
    def request_id(self) -> str:
        return self.format.request_id(self)

    @property
    def finish(self) -> str:
        """Why the answer ended, in OpenAI's words: ``Reply``'s vocabulary, which formats translate."""
        return self.reply.finish_reason or ("tool_calls" if self.reply.tool_calls else "stop")

    @cached_property
    def calls(self) -> list[ScriptedCall]:
        out = []
        for i, call in enumerate(self.reply.tool_calls or []):
            fn = call.get("function") or {}
            name, args = str(fn.get("name", "")), fn.get("arguments", "")
            call_id = call.get("id") or (self.format.call_id(self, i, name) if self.format.call_id else "")
            # Accept a dict for convenience; the wire format always carries a string.
            out.append(ScriptedCall(str(call_id), name, args if isinstance(args, str) else json.dumps(args)))
        return out

    @cached_property
    def input_tokens(self) -> int:
        """Prompt tokens, cached ones included; what the server kept, if it cut the prompt."""
        if self.reply.input_tokens is not None:
            return self.reply.input_tokens
        if self.format.truncated_tokens(self):
            return self.format.prompt_tokens(self)
        return max(self.format.prompt_tokens(self), self.reply.cached_tokens + self.reply.cache_write_tokens)

    @cached_property
    def reasoning_tokens(self) -> int:
        reply = self.reply
        if reply.reasoning_tokens is not None:
            return reply.reasoning_tokens
        estimate = text_tokens(reply.reasoning) + (FRAME_TOKENS if reply.reasoning else 0)
        return estimate if reply.output_tokens is None else min(estimate, reply.output_tokens)

    @cached_property
    def output_tokens(self) -> int:
        """Generated tokens, reasoning included."""
        reply = self.reply
        if reply.output_tokens is not None:
            return reply.output_tokens
        said = text_tokens(reply.text or reply.refusal)
        said += sum(FRAME_TOKENS + text_tokens(c.name) + text_tokens(c.arguments) for c in self.calls)
        return max(1, said) + self.reasoning_tokens

    def served(self, request: RecordedRequest) -> ServedResponse:
        """The record of a 200 answer; a scripted failure keeps it from reporting its end."""
        fmt, reply, failure = self.format, self.reply, self.reply.stream_failure
        error_type = None
        finish_reasons = () if failure else (fmt.finish(self),)
        if failure == "error" and fmt.broken is not None:
            # No error body: the broken stream says why it ended with its last event's finish reason.
            error_type, finish_reasons = fmt.broken, (fmt.broken,)
        elif failure == "error":
            error_type = fmt.error(self, fmt.failure_status, None)[1]
        ended = failure is None
        return ServedResponse(
            request=request, status=200, request_id=self.request_id, id=self.id, model=self.model, stream=self.stream,
            finish_reasons=finish_reasons, usage=fmt.usage(self) if ended else None,
            input_tokens=self.input_tokens if ended else None, output_tokens=self.output_tokens if ended else None,
            cached_tokens=reply.cached_tokens, cache_write_tokens=reply.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens, error_type=error_type, failure=failure,
            tool_call_ids=tuple(c.id for c in self.calls) if fmt.call_id else (),
            truncated_tokens=fmt.truncated_tokens(self) if reply.input_tokens is None else 0)
