"""Mistral chat completions: OpenAI's path (``POST /v1/chat/completions``) on Mistral's own host,
here under the prefix ``/mistral`` (``FakeLLM.mistral_base_url``); streamed when the body says so.

Ids of 32 hex digits (``x-kong-request-id``, its gateway's header), tool call ids of 9 letters or
digits; compact JSON; no refusal field (a refusal is said as text); a thinking model's (Magistral)
content in chunks. The stream: the role, text deltas, each tool call whole (Mistral does not stream
arguments), the finish reason with the usage, ``[DONE]``; broken off midway, a last chunk whose
finish reason is ``error``, then ``[DONE]``.
"""

from __future__ import annotations

import re
import time
from functools import partial
from typing import Any

from . import media
from .tokens import FRAME_TOKENS, Reading, messages_tokens, schemas_tokens
from .wire import (
    ALNUM,
    COMPACT,
    HEX,
    Event,
    Events,
    Exchange,
    WireFormat,
    phrase,
    request_id_header,
    split,
    sse,
)

# (type, code, message) of its ``{"object": "error", ...}`` envelope (as reported for 400, 429 and an
# unknown model). Two statuses answer otherwise: 401 comes from its gateway as
# ``{"message": "Unauthorized", "request_id": ...}``, 422 as ``{"detail": [...]}`` (the request
# validation errors the SDK's ``HTTPValidationError`` parses).
ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    404: ("invalid_model", "1500", "Invalid model: {model}"),
    429: ("rate_limited", "1300", "Rate limit exceeded"),
    500: ("internal_server_error", None, "Internal server error"),
    503: ("service_unavailable", None, "Service unavailable."),
}
# Its finish reasons are OpenAI's but for functions (``tool_calls``) and refusals, which it does not
# have: ``stop``, ``length``, ``model_length``, ``error``, ``tool_calls``.
_FINISH_REASONS: dict[str, str] = {"function_call": "tool_calls"}
#: What the model reads of a message (``tokens.Reading``): not its tool call ids, ``prefix`` flag or a
#: streamed call's ``index``; a call's ``arguments``, which may be an object, are read keys and all.
READING = Reading(unread="tool_call_id prefix index", media="image_url document_url input_audio file",
                  structured="arguments")


BROKEN = "error"


#: A run of digits: Mistral's tokenizers (Tekken, SentencePiece) take each digit as a token, where
#: the fake's ``text_tokens`` takes three.
_DIGITS = re.compile(r"[0-9]+")


def _digits_apart(value: Any) -> int:
    """The tokens more that each digit of the messages' texts costs taken one at a time."""
    if isinstance(value, str):
        return sum(len(run) - (len(run) + 2) // 3 for run in _DIGITS.findall(value))
    if isinstance(value, list):
        return sum(_digits_apart(v) for v in value)
    if isinstance(value, dict):
        return sum(_digits_apart(v) for k, v in value.items() if k not in READING.unread)
    return 0


def prompt_tokens(ex: Exchange) -> int:
    p = ex.payload
    n = messages_tokens(p.get("messages"), READING, partial(media.mistral, ex.requested_model))
    n += _digits_apart(p.get("messages"))
    n += schemas_tokens(p.get("tools"), p.get("functions"), p.get("response_format"))
    return n + FRAME_TOKENS


def finish(ex: Exchange) -> str:
    return _FINISH_REASONS.get(ex.finish, ex.finish)


def error(ex: Exchange, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    if status == 401:  # from the gateway in front of the API, not the API's own envelope
        return {"message": message or "Unauthorized", "request_id": ex.request_id}, "Unauthorized"
    if status == 422:
        detail = {"type": "value_error", "loc": ["body"], "msg": message or "Value error, invalid request",
                  "input": None}
        return {"detail": [detail]}, "value_error"
    err_type, code, default = ERRORS.get(
        status, ("internal_server_error" if status >= 500 else "invalid_request_error", None, phrase(status))
    )
    return {"object": "error", "message": message or default.format(model=ex.model), "type": err_type,
            "param": None, "code": code}, err_type


def usage(ex: Exchange) -> dict[str, Any]:
    """In Mistral's order; the cached part of the prompt (``prompt_cache_key``) only when there is one."""
    usage: dict[str, Any] = {
        "prompt_tokens": ex.input_tokens,
        "total_tokens": ex.input_tokens + ex.output_tokens,
        "completion_tokens": ex.output_tokens,
    }
    if ex.reply.cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": ex.reply.cached_tokens}
    return usage


def _calls(ex: Exchange) -> list[dict[str, Any]]:
    return [{"id": c.id, "function": {"name": c.name, "arguments": c.arguments}, "index": i}
            for i, c in enumerate(ex.calls)]


def _thinking(text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": [{"type": "text", "text": text}]}


def _content(text: str, reasoning: str) -> Any:
    """A string; or, when the model thought (Magistral), chunks: its thinking, then the text."""
    if not reasoning:
        return text
    return [_thinking(reasoning), {"type": "text", "text": text}]


def body(ex: Exchange) -> dict[str, Any]:
    reply = ex.reply
    message = {
        "role": "assistant",
        "tool_calls": _calls(ex) or None,
        "content": _content(reply.text or reply.refusal, reply.reasoning),
    }
    return {
        "id": ex.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": ex.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish(ex)}],
        "usage": usage(ex),
    }


def stream(ex: Exchange) -> list[Event | None]:
    created = int(time.time())
    out = Events()

    def chunk(delta: dict[str, Any], reason: str | None = None, counts: dict[str, Any] | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": ex.id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": ex.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
        }
        if counts is not None:
            obj["usage"] = counts
        return obj

    reply = ex.reply
    out.add(None, chunk({"role": "assistant", "content": ""}))
    for piece in split(reply.reasoning):
        out.add(None, chunk({"content": [_thinking(piece)]}), delta=True)
    for piece in split(reply.text or reply.refusal, reply.deltas):
        out.add(None, chunk({"content": piece}), delta=True)
    if ex.calls:
        out.add(None, chunk({"tool_calls": _calls(ex)}), delta=True)
    out.add(None, chunk({"content": ""}, finish(ex), usage(ex)))
    out.add(None, "[DONE]")
    return out.cut(ex, [(None, chunk({"content": ""}, BROKEN)), (None, "[DONE]")])


FORMAT = WireFormat(
    name="mistral.chat",
    path=re.compile(r"(?=/mistral/).*/chat/completions"),
    prompt_tokens=prompt_tokens,
    response_id=lambda ex: ex.ident("id", HEX, 32),
    request_id=lambda ex: ex.ident("request", HEX, 32),
    call_id=lambda ex, i, name: ex.ident("tool", ALNUM, 9, i),
    finish=finish,
    usage=usage,
    body=body,
    stream=stream,
    error=error,
    failure_status=500,
    json=COMPACT,
    framing=sse(),
    headers=request_id_header("x-kong-request-id"),
    broken=BROKEN,
    address=("mistral_base_url", "/mistral"),
)
