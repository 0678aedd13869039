"""Gemini (google-genai): ``POST …/models/{model}:generateContent``, and ``:streamGenerateContent``
(``?alt=sse``) for a stream; the model is in the path, not the body.

A ``responseId`` of 22 URL-safe letters, no request id header, no tool call ids; indented JSON;
``usageMetadata`` on every chunk (the prompt count only before the last), thoughts counted apart;
a refused (blocked) answer has no content. Failing midway, the stream's next chunk is an error
object. Errors are ``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from . import media
from .tokens import FRAME_TOKENS, Reading, messages_tokens, read_tokens, schemas_tokens
from .wire import ALNUM, HEX, INDENTED, Event, Events, Exchange, WireFormat, phrase, split, sse

#: What the model reads of a content (``tokens.Reading``): not its thought signatures or MIME types; a
#: function call's ``args`` and a function response are read keys and all.
READING = Reading(unread="thoughtSignature thought_signature mimeType mime_type",
                  media="inlineData inline_data fileData file_data", structured="args response")


FAILURE_STATUS = 503
ERRORS: dict[int, tuple[str, str]] = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "Request had invalid authentication credentials."),
    403: ("PERMISSION_DENIED", "The caller does not have permission"),
    404: ("NOT_FOUND", "models/{model} is not found for API version v1beta, or is not supported for generateContent."),
    429: ("RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details."),
    500: ("INTERNAL", "An internal error has occurred. Please retry or report in "
                      "https://developers.generativeai.google/guide/troubleshooting"),
    503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    504: ("DEADLINE_EXCEEDED", "Deadline expired before operation could complete."),
}
_FINISH_REASONS: dict[str, str] = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "content_filter": "SAFETY",
}


def model_in_path(route: str) -> str:
    """``…/models/gemini-2.5-flash:generateContent`` names ``gemini-2.5-flash``."""
    return route.rpartition("models/")[2].partition(":")[0] if ":" in route else ""


def prompt_tokens(ex: Exchange) -> int:
    p = ex.payload
    instruction = p.get("systemInstruction")
    n = (FRAME_TOKENS + read_tokens(instruction, READING) if instruction else 0) + messages_tokens(
        p.get("contents"), READING, partial(media.gemini, ex.requested_model))
    config = p.get("generationConfig")
    config = config if isinstance(config, dict) else {}
    n += schemas_tokens(p.get("tools"), config.get("responseSchema"), config.get("responseJsonSchema"))
    return n + FRAME_TOKENS


def finish(ex: Exchange) -> str:
    if ex.reply.refusal:
        return "SAFETY"
    return _FINISH_REASONS.get(ex.finish, ex.finish)


def error(ex: Exchange, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    code_name, default = ERRORS.get(status, ("UNKNOWN", phrase(status)))
    return {"error": {"code": status, "message": message or default.format(model=ex.model), "status": code_name}}, \
        code_name


def usage(ex: Exchange, *, final: bool = True) -> dict[str, Any]:
    """``candidatesTokenCount`` excludes the thoughts, which Gemini counts apart; chunks
    before the last carry the prompt count only."""
    prompt = ex.input_tokens
    usage: dict[str, Any] = {"promptTokenCount": prompt}
    if final:
        usage["candidatesTokenCount"] = ex.output_tokens - ex.reasoning_tokens
    usage["totalTokenCount"] = prompt + (ex.output_tokens if final else 0)
    if ex.reply.cached_tokens:
        usage["cachedContentTokenCount"] = ex.reply.cached_tokens
    usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    if final and ex.reasoning_tokens:
        usage["thoughtsTokenCount"] = ex.reasoning_tokens
    return usage


def _chunk(ex: Exchange, parts: list[dict[str, Any]] | None, *, final: bool) -> dict[str, Any]:
    """A GenerateContentResponse; a blocked (refused) answer has no content at all."""
    candidate: dict[str, Any] = {}
    if parts is not None:
        candidate["content"] = {"parts": parts, "role": "model"}
    if final:
        candidate["finishReason"] = finish(ex)
    candidate["index"] = 0
    return {
        "candidates": [candidate],
        "usageMetadata": usage(ex, final=final),
        "modelVersion": ex.model,
        "responseId": ex.id,
    }


def _calls(ex: Exchange) -> list[dict[str, Any]]:
    return [{"functionCall": {"name": c.name, "args": c.input}} for c in ex.calls]


def body(ex: Exchange) -> dict[str, Any]:
    reply = ex.reply
    if reply.refusal:
        return _chunk(ex, None, final=True)
    parts = [{"text": reply.reasoning, "thought": True}] if reply.reasoning else []
    if reply.text or not ex.calls:
        parts.append({"text": reply.text})
    return _chunk(ex, parts + _calls(ex), final=True)


def stream(ex: Exchange) -> list[Event | None]:
    out = Events()
    reply = ex.reply
    if reply.refusal:
        out.add(None, _chunk(ex, None, final=True))
    else:
        if reply.reasoning:
            out.add(None, _chunk(ex, [{"text": reply.reasoning, "thought": True}], final=False), delta=True)
        pieces = split(reply.text, reply.deltas) or [""]
        for piece in pieces[:-1]:
            out.add(None, _chunk(ex, [{"text": piece}], final=False), delta=True)
        last = [{"text": pieces[-1]}] if pieces[-1] or not ex.calls else []
        out.add(None, _chunk(ex, last + _calls(ex), final=True), delta=True)
    # Failing midway, the service sends an error object as the next chunk.
    return out.cut(ex, [(None, error(ex, FAILURE_STATUS, None)[0])])


FORMAT = WireFormat(
    name="gemini.generate_content",
    path=re.compile(r".*:(generateContent|streamGenerateContent)"),
    streamed=lambda ex: ex.route.endswith(":streamGenerateContent"),
    prompt_tokens=prompt_tokens,
    response_id=lambda ex: ex.ident("id", ALNUM + "-_", 22),
    request_id=lambda ex: "req_" + ex.ident("request", HEX, 32),
    call_id=None,
    finish=finish,
    usage=usage,
    body=body,
    stream=stream,
    error=error,
    failure_status=FAILURE_STATUS,
    json=INDENTED,
    framing=sse((", ", ": ")),
    model_in_path=model_in_path,
    address=("gemini_base_url", ""),
)
