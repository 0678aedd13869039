"""What a test scripts (``Reply``) and what the fake records: each request as it arrived
(``RecordedRequest``) and what it answered (``ServedResponse``). Neutral: no wire format here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RecordedRequest", "Reply", "ServedResponse"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request exactly as it arrived, for asserts on wire bytes: ``path`` is the raw target, query and all."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """Decode lazily: not every request (e.g. a stray GET) carries JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class ServedResponse:
    """What the fake answered to one request, recorded before the first byte left, for tests to
    compare the SDK's result and ctxguard's span with: ``llm.responses[0].id == span.attributes[...]``.

    ``finish_reasons`` are in the API's own words; ``usage`` is the final usage object exactly as
    sent (None: none); the token counts are totals as ``Reply`` counts them, whatever the API's
    breakdown; a stream cut by a scripted ``stream_failure`` never reports its final ones (None).
    ``truncated_tokens``: prompt tokens the server dropped to fit its context window (``FakeLLM.windows``).
    """

    request: RecordedRequest
    status: int
    request_id: str
    id: str | None = None
    model: str | None = None
    stream: bool = False
    finish_reasons: tuple[str, ...] = ()
    usage: Mapping[str, Any] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    tool_call_ids: tuple[str, ...] = ()
    error_type: str | None = None
    failure: str | None = None
    truncated_tokens: int = 0


@dataclass(frozen=True)
class Reply:
    """What the fake model "says"; one description rendered in each wire format (docs/testing.md
    shows each field): ``Reply(text="Pune")``, ``Reply(status=429)``, ``Reply(text="…",
    stream_failure="error")`` for a stream that fails after its first delta (``"drop"``: cut).
    ``deltas``: 3 by default, so clients must really join them; a model streams about a token a piece.

    Token counts default to an estimate of what was sent and what is said (``tokens``); explicit
    ``input_tokens`` / ``output_tokens`` win. They are totals, as OpenAI reports them: ``input_tokens``
    includes ``cached_tokens`` (read from the prompt cache) and ``cache_write_tokens`` (written to it;
    only Anthropic and Bedrock report those), ``output_tokens`` includes ``reasoning_tokens``
    (``reasoning`` is the thinking text). ``finish_reason`` is in OpenAI's words, which each API
    translates (by default ``tool_calls`` when there are tool calls, else ``stop``; unknown ones pass).
    """

    text: str = ""
    status: int = 200
    tool_calls: list[dict[str, Any]] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    model: str | None = None
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int | None = None
    reasoning: str = ""
    parsed: Any = None
    refusal: str = ""
    stream_failure: str | None = None
    deltas: int = 3

    def __post_init__(self) -> None:
        # Mistakes rejected when the script is written, not when a test puzzles over a reply.
        if self.parsed is not None:
            if self.text:
                raise ValueError("Reply: give text or parsed, not both (parsed becomes the text)")
            object.__setattr__(self, "text", json.dumps(self.parsed, separators=(",", ":"), ensure_ascii=False))
        if self.refusal and (self.text or self.tool_calls):
            raise ValueError("Reply: a refusal carries no text or tool calls")
        if self.stream_failure not in (None, "error", "drop"):
            raise ValueError(f"Reply: stream_failure is 'error' or 'drop', not {self.stream_failure!r}")
        if self.deltas < 1:
            raise ValueError("Reply: a streamed text comes in one delta or more")
        over = self.input_tokens is not None and self.cached_tokens + self.cache_write_tokens > self.input_tokens
        if min(self.cached_tokens, self.cache_write_tokens) < 0 or over:
            raise ValueError("Reply: cached_tokens and cache_write_tokens are parts of input_tokens")
        if (self.reasoning_tokens is not None and self.output_tokens is not None
                and self.reasoning_tokens > self.output_tokens):
            raise ValueError("Reply: reasoning_tokens is part of output_tokens")


def coerce(reply: Reply | str) -> Reply:
    return Reply(text=reply) if isinstance(reply, str) else reply
