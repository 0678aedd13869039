"""Cohere's v2 Chat API: ``POST /v2/chat``, streamed when the body says ``"stream": true``.

Ids are UUIDs (the request's in ``x-request-id``), a tool call's its function's name and 12 letters
or digits; compact JSON; the prompt template counted in ``usage.tokens``, not ``billed_units``; an
answer given documents cites the first. The stream's events are named (``event: content-delta``, the
same ``type`` in the data) and end with ``message-end`` and ``[DONE]``; broken off midway, with a
``message-end`` whose finish reason is ``ERROR``. No refusal (said as text). Errors are
``{"id": …, "message": …}``; the SDK picks its error class from the status.
"""

from __future__ import annotations

import re
import string
from functools import partial
from typing import Any

from . import media
from .tokens import FRAME_TOKENS, Reading, messages_tokens, read_tokens, schemas_tokens
from .wire import (
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

ERRORS: dict[int, str] = {
    400: "invalid request: message must be at least 1 token long or tool results must be specified.",
    401: "invalid api token",
    404: "model '{model}' not found, make sure the correct model ID was used and that you have access to the model.",
    422: "invalid request: the request could not be processed.",
    429: "You are using a Trial key, which is limited to 20 API calls / minute. You can continue to use the Trial "
         "key for free or upgrade to a Production key with higher rate limits at "
         "'https://dashboard.cohere.com/api-keys'.",
    500: "internal server error, this has been reported to our developers",
}
# ``COMPLETE``, ``STOP_SEQUENCE``, ``MAX_TOKENS``, ``TOOL_CALL``, ``ERROR``, ``TIMEOUT``.
_FINISH_REASONS: dict[str, str] = {
    "stop": "COMPLETE", "length": "MAX_TOKENS", "tool_calls": "TOOL_CALL", "function_call": "TOOL_CALL",
    "content_filter": "COMPLETE", "stop_sequence": "STOP_SEQUENCE", "error": "ERROR",
}
#: What the model reads of a message (``tokens.Reading``): not its tool call ids or citations.
READING = Reading(unread="tool_call_id citations index", media="image_url")


BROKEN = "ERROR"
#: The tokens Cohere's prompt template adds to what a request carries (its preambles, the tool-use
#: or grounding instructions, turn tokens), by model line, longest prefix first: for a plain chat,
#: a chat with tools, a chat with documents. ``usage.tokens.input_tokens`` counts them,
#: ``billed_units.input_tokens`` does not, so recorded traffic gives them as the one less the other
#: (tests/data/recorded: langchain-cohere, openllmetry, pydantic-ai; medians): ``command-r`` 66 /
#: 895 / 687, ``command-r7b-12-2024`` 529 / 1,500, ``command-a-03-2025`` 1,492 with tools and 1,705
#: with documents, ``command-a-vision-07-2025`` 496, ``command-a-reasoning-08-2025`` 1,759 / 1,414,
#: ``command-r-08-2024`` 200. Where nothing was recorded, a line takes its generation's increments
#: (R: +829 with tools, +621 with documents).
TEMPLATES: tuple[tuple[str, int, int, int], ...] = (
    ("command-a-reasoning", 1_759, 1_414, 1_759),
    ("command-a", 496, 1_492, 1_705),
    ("command-r7b", 529, 1_500, 1_705),
    ("command-r-08-2024", 200, 1_029, 821),
    ("command-r-plus-08-2024", 200, 1_029, 821),
    ("", 66, 895, 687),  # command, command-r, command-r-plus, command-light: the 2024 R template
)


def template_tokens(ex: Exchange) -> int:
    """What the model's prompt template adds to this request (``TEMPLATES``)."""
    p, model = ex.payload, ex.requested_model
    plain, tools, documents = next(t[1:] for t in TEMPLATES if model.startswith(t[0]))
    return tools if p.get("tools") else documents if p.get("documents") else plain


def uuid4(hex32: str) -> str:
    """32 hex digits as a version-4 UUID (its version and variant digits set)."""
    h = f"{hex32[:12]}4{hex32[13:16]}{'89ab'[int(hex32[16], 16) % 4]}{hex32[17:32]}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def prompt_tokens(ex: Exchange) -> int:
    # Documents are read key and value ("both the key name and the value will be passed to the model").
    p = ex.payload
    documents = p.get("documents")
    n = messages_tokens(p.get("messages"), READING, partial(media.cohere, ex.requested_model)) + sum(
        FRAME_TOKENS + read_tokens(d, READING, keys=True) for d in (documents if isinstance(documents, list) else []))
    n += schemas_tokens(p.get("tools"), p.get("response_format")) + template_tokens(ex)
    return n + FRAME_TOKENS


def finish(ex: Exchange) -> str:
    return _FINISH_REASONS.get(ex.finish, ex.finish)


def error(ex: Exchange, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    default = ERRORS.get(status, phrase(status).lower())
    return {"id": ex.request_id, "message": message or default.format(model=ex.model)}, phrase(status)


def usage(ex: Exchange) -> dict[str, Any]:
    """``tokens``: what the model read (its prompt template included) and wrote; ``billed_units``:
    the same without the template. The cached part of the prompt only when there is one."""
    usage: dict[str, Any] = {
        "billed_units": {"input_tokens": max(0, ex.input_tokens - template_tokens(ex)),
                         "output_tokens": ex.output_tokens},
        "tokens": {"input_tokens": ex.input_tokens, "output_tokens": ex.output_tokens},
    }
    if ex.reply.cached_tokens:
        usage["cached_tokens"] = ex.reply.cached_tokens
    return usage


def _calls(ex: Exchange) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in ex.calls]


def _citations(ex: Exchange, text: str) -> list[dict[str, Any]]:
    """Given documents, the answer cites the first one for its whole text (documents without an id
    get ``doc_0``, ``doc_1``... as the service numbers them)."""
    documents = ex.payload.get("documents")
    if not text or not isinstance(documents, list) or not documents:
        return []
    first = documents[0]
    data = first.get("data") if isinstance(first, dict) else {"text": first}
    doc_id = first.get("id") if isinstance(first, dict) and first.get("id") else "doc_0"
    return [{"start": 0, "end": len(text), "text": text, "sources": [
        {"type": "document", "id": doc_id, "document": {"id": doc_id, **(data if isinstance(data, dict) else {})}}],
        "content_index": 0, "type": "TEXT_CONTENT"}]


def body(ex: Exchange) -> dict[str, Any]:
    """A text answer's content blocks (its thinking first); a tool-call turn's plan (the scripted
    text) and calls, without content."""
    reply = ex.reply
    message: dict[str, Any] = {"role": "assistant"}
    if ex.calls:
        if reply.text:
            message["tool_plan"] = reply.text
        message["tool_calls"] = _calls(ex)
    else:
        text = reply.text or reply.refusal
        thinking = [{"type": "thinking", "thinking": reply.reasoning}] if reply.reasoning else []
        message["content"] = [*thinking, {"type": "text", "text": text}]
        citations = _citations(ex, text)
        if citations:
            message["citations"] = citations
    return {"id": ex.id, "message": message, "finish_reason": finish(ex), "usage": usage(ex)}


def stream(ex: Exchange) -> list[Event | None]:
    """``message-start``; each content block's ``content-start`` / ``-delta`` / ``-end`` (thinking,
    then text) with its citations; or the tool plan's deltas and each call's ``tool-call-start`` /
    ``-delta`` / ``-end``; then ``message-end`` with the finish reason and the usage, and ``[DONE]``."""
    out = Events()

    def ev(kind: str, *, said: bool = False, **fields: Any) -> None:
        out.add(kind, {"type": kind, **fields}, delta=said)

    def content(**fields: Any) -> dict[str, Any]:
        return {"message": {"content": fields}}

    reply = ex.reply
    ev("message-start", id=ex.id, delta={"message": {"role": "assistant", "content": [], "tool_plan": "",
                                                     "tool_calls": [], "citations": []}})
    if ex.calls:
        for piece in split(reply.text, reply.deltas):
            ev("tool-plan-delta", said=True, delta={"message": {"tool_plan": piece}})
        for i, call in enumerate(ex.calls):
            ev("tool-call-start", index=i, delta={"message": {"tool_calls": {
                "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}}})
            for piece in split(call.arguments, 2):
                ev("tool-call-delta", said=True, index=i,
                   delta={"message": {"tool_calls": {"function": {"arguments": piece}}}})
            ev("tool-call-end", index=i)
    else:
        index = 0
        if reply.reasoning:
            ev("content-start", index=0, delta=content(type="thinking", thinking=""))
            for piece in split(reply.reasoning):
                ev("content-delta", said=True, index=0, delta=content(thinking=piece))
            ev("content-end", index=0)
            index = 1
        text = reply.text or reply.refusal
        ev("content-start", index=index, delta=content(type="text", text=""))
        for piece in split(text, reply.deltas):
            ev("content-delta", said=True, index=index, delta=content(text=piece))
        for i, citation in enumerate(_citations(ex, text)):
            ev("citation-start", index=i, delta={"message": {"citations": {**citation, "content_index": index}}})
            ev("citation-end", index=i)
        ev("content-end", index=index)
    ev("message-end", delta={"finish_reason": finish(ex), "usage": usage(ex)})
    out.add(None, "[DONE]")
    broken = {"type": "message-end", "delta": {"error": ERRORS[500], "finish_reason": BROKEN}}
    return out.cut(ex, [("message-end", broken), (None, "[DONE]")])


FORMAT = WireFormat(
    name="cohere.chat",
    path=re.compile(r".*/v2/chat"),
    prompt_tokens=prompt_tokens,
    response_id=lambda ex: uuid4(ex.ident("id", HEX, 32)),
    request_id=lambda ex: uuid4(ex.ident("request", HEX, 32)),
    call_id=lambda ex, i, name: f"{name}_" + ex.ident("tool", string.ascii_lowercase + string.digits, 12, i),
    finish=finish,
    usage=usage,
    body=body,
    stream=stream,
    error=error,
    failure_status=500,
    json=COMPACT,
    framing=sse(),
    headers=request_id_header("x-request-id"),
    broken=BROKEN,
    address=("cohere_base_url", ""),
)
