"""Anthropic Messages: ``POST …/messages``, streamed when the body says ``"stream": true``.

Ids ``msg_01…``, ``toolu_01…`` and ``req_011C…`` (the ``request-id`` header); compact JSON; a
thinking block signed; ``input_tokens`` without the cache reads. The stream: ``message_start``, a
``ping`` once the first block has opened, each block's start, deltas (a thinking block's signature
whole, last) and stop, ``message_delta`` with the cumulative usage, ``message_stop``; failing midway,
an ``error`` event. Errors are ``{"type": "error", "error": {...}, "request_id": ...}``.
Claude on Bedrock answers ``invoke_model`` in this body (``bedrock`` imports it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import string
from functools import partial
from typing import Any

from . import media
from .tokenizers import model_messages
from .tokens import FRAME_TOKENS, Reading, schemas_tokens
from .wire import Event, Events, Exchange, Json, WireFormat, phrase, request_id_header, split, sse

#: What the model reads of a message (``tokens.Reading``): not its tool ids, cache hints, thinking
#: signatures, citations, a source's media type; a ``tool_use`` input is read keys and all.
READING = Reading(unread="tool_use_id cache_control signature citations media_type", media="source image",
                  structured="input")

#: Its ids' alphabet (``msg_01…``, ``toolu_01…``).
BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
FAILURE_STATUS = 529
ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low to access the Anthropic API."),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "model: {model}"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    504: ("timeout_error", "Request timed out"),
    529: ("overloaded_error", "Overloaded"),
}
# ``Reply`` speaks OpenAI's finish reasons; unknown ones pass through.
_STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def prompt_tokens(ex: Exchange) -> int:
    p = ex.payload
    config = p.get("output_config")
    schemas = schemas_tokens(p.get("tools"), p.get("output_format"),
                             config.get("format") if isinstance(config, dict) else None)
    return claude_prompt(ex.requested_model, p.get("system"), p.get("messages"), READING, schemas)


def claude_prompt(model: str, system: Any, messages: Any, reading: Reading, schemas: int) -> int:
    """What a Claude model reads of a request (Anthropic's Messages, Bedrock's Converse, each read as
    ``reading``): the system text a turn of its own, its text at its tokenizer's rate
    (``tokenizers.model_messages``), framing, media and ``schemas`` tokens as they are."""
    turns = ([system] if system else []) + (messages if isinstance(messages, list) else [])
    return model_messages(model, turns, reading, partial(media.anthropic, model)) + schemas + FRAME_TOKENS


def stop_reason(ex: Exchange) -> str:
    if ex.reply.refusal:
        return "refusal"
    return _STOP_REASONS.get(ex.finish, ex.finish)


def signature(ex: Exchange) -> str:
    """An opaque signature for a thinking block (Claude's on Bedrock too)."""
    raw = b"".join(hashlib.blake2b(f"{ex.nonce}/{ex.serial}/signature/{i}".encode()).digest() for i in range(3))
    return base64.b64encode(raw).decode()


def error(ex: Exchange, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    err_type, default = ERRORS.get(status, ("api_error" if status >= 500 else "invalid_request_error", phrase(status)))
    body = {"type": "error", "error": {"type": err_type, "message": message or default.format(model=ex.model)},
            "request_id": ex.request_id}
    return body, err_type


def _blocks(ex: Exchange) -> list[dict[str, Any]]:
    reply = ex.reply
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:
        blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature(ex)})
    if reply.text or reply.refusal or not ex.calls:
        blocks.append({"type": "text", "text": reply.text or reply.refusal})
    blocks.extend({"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in ex.calls)
    return blocks


def usage_of(ex: Exchange, output_tokens: int, *, delta: bool = False) -> dict[str, Any]:
    """``input_tokens`` excludes the cache reads and writes, as the real API counts them.  A
    ``message_delta`` repeats the cumulative counts without the breakdowns."""
    usage: dict[str, Any] = {
        "input_tokens": ex.input_tokens - ex.reply.cached_tokens - ex.reply.cache_write_tokens,
        "cache_creation_input_tokens": ex.reply.cache_write_tokens,
        "cache_read_input_tokens": ex.reply.cached_tokens,
    }
    if not delta:
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": ex.reply.cache_write_tokens,
                                   "ephemeral_1h_input_tokens": 0}
    usage["output_tokens"] = output_tokens
    if not delta:
        usage["service_tier"] = "standard"
    if ex.reasoning_tokens and output_tokens == ex.output_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": ex.reasoning_tokens}
    return usage


def message(ex: Exchange, model: str) -> dict[str, Any]:
    """The answer, naming ``model`` (Bedrock names it otherwise than the request)."""
    return {
        "model": model,
        "id": ex.id,
        "type": "message",
        "role": "assistant",
        "content": _blocks(ex),
        "stop_reason": stop_reason(ex),
        "stop_sequence": None,
        "usage": usage_of(ex, ex.output_tokens),
    }


def events(ex: Exchange, model: str) -> Events:
    """The stream's events, uncut."""
    out = Events()

    def ev(etype: str, *, said: bool = False, **fields: Any) -> None:
        out.add(etype, {"type": etype, **fields}, delta=said)

    start = {**message(ex, model), "content": [], "stop_reason": None, "usage": usage_of(ex, 1)}
    ev("message_start", message=start)
    for index, block in enumerate(_blocks(ex)):
        kind = block["type"]
        if kind == "thinking":
            ev("content_block_start", index=index, content_block={"type": "thinking", "thinking": "", "signature": ""})
        elif kind == "text":
            ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
        else:
            ev("content_block_start", index=index, content_block={**block, "input": {}})
        if index == 0:
            ev("ping")  # the service pings once the first block has opened
        if kind == "thinking":
            for piece in split(block["thinking"]):
                ev("content_block_delta", said=True, index=index, delta={"type": "thinking_delta", "thinking": piece})
            # The signature arrives whole, just before the block closes.
            ev("content_block_delta", index=index, delta={"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            for piece in split(block["text"], ex.reply.deltas):
                ev("content_block_delta", said=True, index=index, delta={"type": "text_delta", "text": piece})
        else:
            for piece in split(json.dumps(block["input"]), 2):
                ev("content_block_delta", said=True, index=index,
                   delta={"type": "input_json_delta", "partial_json": piece})
        ev("content_block_stop", index=index)
    ev("message_delta", delta={"stop_reason": stop_reason(ex), "stop_sequence": None},
       usage=usage_of(ex, ex.output_tokens, delta=True))
    ev("message_stop")
    return out


def stream(ex: Exchange) -> list[Event | None]:
    # Failing midway, the service sends an ``error`` event and ends the stream.
    failure = error(ex, FAILURE_STATUS, None)[0]
    return events(ex, ex.model).cut(ex, [("error", {"type": "error", "error": failure["error"]})])


FORMAT = WireFormat(
    name="anthropic.messages",
    path=re.compile(r".*/messages"),
    prompt_tokens=prompt_tokens,
    response_id=lambda ex: "msg_01" + ex.ident("id", BASE62, 22),
    request_id=lambda ex: "req_011C" + ex.ident("request", BASE62, 20),
    call_id=lambda ex, i, name: "toolu_01" + ex.ident("tool", BASE62, 22, i),
    finish=stop_reason,
    usage=lambda ex: usage_of(ex, ex.output_tokens, delta=ex.stream),
    body=lambda ex: message(ex, ex.model),
    stream=stream,
    error=error,
    failure_status=FAILURE_STATUS,
    # Compact, but with spaces after the separators.
    json=Json("application/json", lambda obj: json.dumps(obj, ensure_ascii=False).encode()),
    framing=sse(),
    headers=request_id_header("request-id"),
    address=("anthropic_base_url", ""),
)
