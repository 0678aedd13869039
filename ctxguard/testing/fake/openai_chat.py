"""OpenAI Chat Completions: ``POST …/chat/completions``, streamed when the body says ``"stream": true``.

Ids ``chatcmpl-…``, ``call_…`` and ``req_…`` (``x-request-id``); indented JSON; SSE chunks each with
``obfuscation`` padding (unless ``stream_options.include_obfuscation`` is false), ``usage: null`` on
every chunk and a usage-only last one when ``stream_options.include_usage`` asks, then ``[DONE]``.
A stream failing midway sends an error object and no ``[DONE]``. Errors are ``{"error": {...}}``; a tool
result that answers no tool call made before it is refused (400) in OpenAI's words.
With ``FakeLLM.windows["openai.chat"]`` set it plays an OpenAI-compatible server at its maximum length,
where OpenAI itself refuses: a longer prompt keeps its last tokens, and ``usage.prompt_tokens`` says how
many (vLLM's ``truncate_prompt_tokens`` "will use only the last k tokens from the prompt", TGI's
``truncate``, llama.cpp's server cutting a prompt over its context size).
"""

from __future__ import annotations

import re
import time
from functools import partial
from typing import Any

from . import media
from .tokenizers import model_messages
from .tokens import FRAME_TOKENS, Reading, schemas_tokens
from .wire import (
    ALNUM,
    HEX,
    INDENTED,
    Event,
    Events,
    Exchange,
    ScriptedCall,
    WireFormat,
    ident,
    phrase,
    request_id_header,
    split,
    sse,
)

#: What the model reads of a message (``tokens.Reading``): not its tool call ids, an image's ``detail``,
#: a returned message's annotations and log probabilities, a streamed call's ``index``, a cache hint.
READING = Reading(unread="tool_call_id detail annotations logprobs index cache_control",
                  media="image_url input_audio file")


FAILURE_STATUS = 500

# Error bodies per status, worded as the service words them, so SDK code that branches on the type
# (or on the exception class chosen from the status) sees what the real service sends:
# (type, code, message).
ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("request_forbidden", "unsupported_country_region_territory", "Country, region, or territory not supported"),
    404: ("invalid_request_error", "model_not_found",
          "The model `{model}` does not exist or you do not have access to it."),
    429: ("requests", "rate_limit_exceeded",
          "Rate limit reached for {model} on requests per min (RPM): Limit 3, Used 3, Requested 1."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    503: ("server_error", None, "The server is overloaded or not ready yet."),
}


def error(ex: Exchange, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    err_type, code, default = ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, phrase(status))
    )
    body = {"error": {"message": message or default.format(model=ex.model), "type": err_type, "param": None,
                      "code": code}}
    return body, err_type


#: OpenAI's words (and spelling) for a tool result that answers no tool call made before it.
UNASKED_TOOL_RESULT = ("Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                       "with 'tool_calls'.")


def refuse(ex: Exchange) -> tuple[dict[str, Any], str] | None:
    """A tool result (``role: "tool"``) whose ``tool_call_id`` no earlier assistant message's
    ``tool_calls`` named is refused, as OpenAI refuses it: 400, the message's index in ``param``."""
    messages = ex.payload.get("messages")
    if not isinstance(messages, list):
        return None
    called: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list):
            called.update(call["id"] for call in calls if isinstance(call, dict) and isinstance(call.get("id"), str))
        elif message.get("role") == "tool":
            answered = message.get("tool_call_id")
            if not isinstance(answered, str) or answered not in called:
                return {"error": {"message": UNASKED_TOOL_RESULT, "type": "invalid_request_error",
                                  "param": f"messages.[{i}].role", "code": None}}, "invalid_request_error"
    return None


def invalid_url(method: str, path: str) -> tuple[dict[str, Any], str]:
    """The service's answer (404) to a route it does not have."""
    error = {"message": f"Invalid URL ({method} {path})", "type": "invalid_request_error", "param": None, "code": None}
    return {"error": error}, "invalid_request_error"


def request_id(ex: Exchange) -> str:
    return "req_" + ex.ident("request", HEX, 32)


def call_id(ex: Exchange, i: int, name: str) -> str:
    return "call_" + ex.ident("tool", ALNUM, 24, i)


def padding(ex: Exchange, i: int, size: int) -> str:
    """The ``obfuscation`` field: random letters evening out the frame sizes."""
    return ex.ident("obfuscation", ALNUM, max(1, 16 - size) if size else 14, i)


def _full(ex: Exchange) -> int:
    """The whole prompt, as the model named reads it: a Claude model on Anthropic's OpenAI SDK
    compatibility (or a gateway) reports Claude's own count, "``usage.prompt_tokens``: Fully supported"
    (https://platform.claude.com/docs/en/cli-sdks-libraries/libraries/openai-sdk, Response fields):
    its text at its tokenizer's rate (``tokenizers.model_messages``)."""
    p = ex.payload
    model = ex.requested_model
    n = model_messages(model, p.get("messages"), READING, partial(media.openai, model))
    n += schemas_tokens(p.get("tools"), p.get("functions"), p.get("response_format"))
    return n + FRAME_TOKENS


def prompt_tokens(ex: Exchange) -> int:
    """What the model reads: all of the prompt, or its last ``FakeLLM.windows["openai.chat"]`` tokens."""
    full = _full(ex)
    return full if ex.window is None else min(full, ex.window)


def truncated_tokens(ex: Exchange) -> int:
    return 0 if ex.window is None else max(0, _full(ex) - ex.window)


def _fingerprint(ex: Exchange) -> str:
    """One backend configuration per server, as ``system_fingerprint`` names it."""
    return "fp_" + ident(f"{ex.nonce}/fingerprint", HEX, 10)


def _usage(ex: Exchange) -> dict[str, Any]:
    return {
        "prompt_tokens": ex.input_tokens,
        "completion_tokens": ex.output_tokens,
        "total_tokens": ex.input_tokens + ex.output_tokens,
        "prompt_tokens_details": {"cached_tokens": ex.reply.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": ex.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _options(ex: Exchange) -> dict[str, Any]:
    opts = ex.payload.get("stream_options")
    return opts if isinstance(opts, dict) else {}


def usage(ex: Exchange) -> dict[str, Any] | None:
    """A stream puts usage on the wire only when asked with ``stream_options.include_usage``."""
    if ex.stream and _options(ex).get("include_usage") is not True:
        return None
    return _usage(ex)


def body(ex: Exchange) -> dict[str, Any]:
    reply = ex.reply
    message: dict[str, Any] = {
        "role": "assistant",
        # The real API sends null content for pure tool-call turns and refusals.
        "content": reply.text if reply.text or not (reply.tool_calls or reply.refusal) else None,
        "refusal": reply.refusal or None,
        "annotations": [],
    }
    if ex.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in ex.calls
        ]
    return {
        "id": ex.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": ex.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": ex.finish}],
        "usage": _usage(ex),
        "service_tier": "default",
        "system_fingerprint": _fingerprint(ex),
    }


def stream(ex: Exchange) -> list[Event | None]:
    opts = _options(ex)
    include_usage = opts.get("include_usage") is True
    obfuscate = opts.get("include_obfuscation") is not False
    created = int(time.time())
    out = Events()

    def chunk(delta: dict[str, Any], finish: str | None = None, *, size: int = 0) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": ex.id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": ex.model,
            "service_tier": "default",
            "system_fingerprint": _fingerprint(ex),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            # The real API puts an explicit null usage on every chunk but the last.
            obj["usage"] = None
        if obfuscate:
            obj["obfuscation"] = padding(ex, len(out.items), size)
        return obj

    def call_start(i: int, call: ScriptedCall) -> dict[str, Any]:
        return {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}

    reply = ex.reply
    calls = ex.calls
    if reply.text or reply.refusal or not calls:
        out.add(None, chunk({"role": "assistant", "content": "", "refusal": None}))
        for piece in split(reply.text, reply.deltas):
            out.add(None, chunk({"content": piece}, size=len(piece)), delta=True)
        for piece in split(reply.refusal, reply.deltas):
            out.add(None, chunk({"refusal": piece}, size=len(piece)), delta=True)
        first = 0
    else:
        # A pure tool-call turn opens with the first call's header, content null.
        out.add(None, chunk({"role": "assistant", "content": None, "tool_calls": [call_start(0, calls[0])],
                             "refusal": None}, size=len(calls[0].name)))
        first = 1
    for i, call in enumerate(calls):
        if i >= first:
            out.add(None, chunk({"tool_calls": [call_start(i, call)]}, size=len(call.name)))
        for piece in split(call.arguments, 2):
            out.add(None, chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}, size=len(piece)),
                    delta=True)
    out.add(None, chunk({}, ex.finish))
    if include_usage:  # the usage-only last chunk: no choices
        last = chunk({})
        last["choices"], last["usage"] = [], _usage(ex)
        out.add(None, last)
    out.add(None, "[DONE]")
    # Failing midway, the service sends an error object and ends the stream without [DONE].
    return out.cut(ex, [(None, error(ex, FAILURE_STATUS, None)[0])])


FORMAT = WireFormat(
    name="openai.chat",
    # Mistral's chat API has this path too, under the prefix that is Mistral's (``mistral``).
    path=re.compile(r"(?!/mistral/).*/chat/completions"),
    prompt_tokens=prompt_tokens,
    response_id=lambda ex: "chatcmpl-" + ex.ident("id", ALNUM, 29),
    request_id=request_id,
    call_id=call_id,
    finish=lambda ex: ex.finish,
    usage=usage,
    body=body,
    stream=stream,
    error=error,
    failure_status=FAILURE_STATUS,
    json=INDENTED,
    framing=sse(),
    headers=request_id_header("x-request-id"),
    refuse=refuse,
    truncated_tokens=truncated_tokens,
    address=("base_url", "/v1"),
)
