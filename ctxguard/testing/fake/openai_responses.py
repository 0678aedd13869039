"""OpenAI Responses: ``POST …/responses``, streamed when the body says ``"stream": true``.

Ids ``resp_…`` and its items' ``msg_…``, ``fc_…``, ``rs_…``; a Response with every field the SDK
models require; no finish reason: a cut answer is an ``incomplete`` response. The stream is the
service's whole event sequence, numbered, its deltas padded (``obfuscation``); failing midway it
ends with ``response.failed``. With a model window set (``FakeLLM.windows["openai.responses"]``), a
longer prompt is refused (400) unless the request says ``truncation: "auto"``: then its oldest input
items go, and ``usage.input_tokens`` is what was kept. Errors, request ids and tool call ids are Chat
Completions' (the same service: imported from ``openai_chat``).
"""

from __future__ import annotations

import re
import time
from functools import partial
from typing import Any

from . import media
from .openai_chat import FAILURE_STATUS, call_id, error, padding, request_id
from .tokenizers import model_messages
from .tokens import FRAME_TOKENS, Reading, schemas_tokens
from .wire import (
    HEX,
    INDENTED,
    Event,
    Events,
    Exchange,
    ScriptedCall,
    WireFormat,
    request_id_header,
    split,
    sse,
)

_INCOMPLETE_REASONS: dict[str, str] = {"length": "max_output_tokens", "content_filter": "content_filter"}
#: What the model reads of an input item (``tokens.Reading``): not its call ids, statuses, an image's
#: ``detail``, annotations, log probabilities, encrypted reasoning.
READING = Reading(unread="call_id status detail annotations logprobs encrypted_content",
                  media="image_url input_image input_audio file file_data")


_FAILURE = ("An error occurred while processing your request. You can retry your request, or contact "
            "us through our help center at help.openai.com if the error persists.")


#: What the service answers a request over the model's window that does not let it truncate.
OVER_WINDOW = "Your input exceeds the context window of this model. Please adjust your input and try again."


def _held(ex: Exchange) -> tuple[int, int]:
    """(tokens kept, tokens dropped) of the prompt: with ``truncation: "auto"``, one over the model's
    window (``FakeLLM.windows["openai.responses"]``) loses its oldest input items until it fits, the
    instructions and tools kept ("dropping items from the beginning of the conversation", as the API
    reference says); it drops nothing otherwise."""
    p = ex.payload
    model, instructions = ex.requested_model, p.get("instructions")
    price = partial(media.openai, model)
    # As the model named reads it: a Claude model on a gateway's Responses reports Claude's own count.
    head = [instructions] if isinstance(instructions, str) else []
    fixed = model_messages(model, head, READING, price) + FRAME_TOKENS
    text = p.get("text")
    fixed += schemas_tokens(p.get("tools"), text.get("format") if isinstance(text, dict) else None)
    raw = p.get("input")
    inputs = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    costs = [model_messages(model, [item], READING, price) for item in inputs]
    full = fixed + sum(costs)
    if ex.window is None or full <= ex.window or p.get("truncation") != "auto":
        return full, 0
    first = 0
    while first < len(costs) - 1 and fixed + sum(costs[first:]) > ex.window:
        first += 1
    kept = fixed + sum(costs[first:])
    return kept, full - kept


def prompt_tokens(ex: Exchange) -> int:
    return _held(ex)[0]


def refuse(ex: Exchange) -> tuple[dict[str, Any], str] | None:
    """Over the model's window, a request is refused unless ``truncation: "auto"`` made it fit."""
    return error(ex, 400, OVER_WINDOW) if ex.window is not None and _held(ex)[0] > ex.window else None


def status(ex: Exchange) -> str:
    return "incomplete" if ex.finish in _INCOMPLETE_REASONS else "completed"


def _item_id(ex: Exchange, prefix: str, i: int = 0) -> str:
    """Output item ids (``msg_``, ``fc_``, ``rs_``) in the ``resp_`` style."""
    return prefix + ex.ident(prefix, HEX, 48, i)


def _reasoning_item(ex: Exchange, summary: str | None) -> dict[str, Any]:
    parts = [] if summary is None else [{"type": "summary_text", "text": summary}]
    return {"id": _item_id(ex, "rs_"), "type": "reasoning", "summary": parts}


def _message_item(ex: Exchange, status: str, *, done: bool) -> dict[str, Any]:
    reply = ex.reply
    content: list[dict[str, Any]] = []
    if done:
        if reply.refusal:
            content.append({"type": "refusal", "refusal": reply.refusal})
        else:
            content.append({"type": "output_text", "annotations": [], "logprobs": [], "text": reply.text})
    return {"id": _item_id(ex, "msg_"), "type": "message", "status": status, "content": content, "role": "assistant"}


def _function_item(ex: Exchange, i: int, call: ScriptedCall, status: str, *, done: bool) -> dict[str, Any]:
    return {
        "id": _item_id(ex, "fc_", i),
        "type": "function_call",
        "status": status,
        "arguments": call.arguments if done else "",
        "call_id": call.id,
        "name": call.name,
    }


def _output_items(ex: Exchange) -> list[dict[str, Any]]:
    """Final output: reasoning, a message, then any function calls."""
    reply = ex.reply
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append(_reasoning_item(ex, reply.reasoning))
    if reply.text or reply.refusal or not ex.calls:
        items.append(_message_item(ex, status(ex), done=True))
    items.extend(_function_item(ex, i, c, "completed", done=True) for i, c in enumerate(ex.calls))
    return items


def usage(ex: Exchange) -> dict[str, Any]:
    return {
        "input_tokens": ex.input_tokens,
        "input_tokens_details": {"cached_tokens": ex.reply.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": ex.output_tokens,
        "output_tokens_details": {"reasoning_tokens": ex.reasoning_tokens},
        "total_tokens": ex.input_tokens + ex.output_tokens,
    }


def _response(ex: Exchange, output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    """A Response with every field the SDK models treat as required."""
    p = ex.payload
    tools = p.get("tools")
    now = int(time.time())
    reason = _INCOMPLETE_REASONS.get(ex.finish)
    return {
        "id": ex.id,
        "object": "response",
        "created_at": now,
        "status": status,
        "background": False,
        "completed_at": now if status == "completed" else None,
        "error": {"code": "server_error", "message": _FAILURE} if status == "failed" else None,
        "incomplete_details": {"reason": reason} if status == "incomplete" else None,
        "instructions": p.get("instructions"),
        "max_output_tokens": p.get("max_output_tokens"),
        "max_tool_calls": p.get("max_tool_calls"),
        "model": ex.model,
        "output": output,
        "parallel_tool_calls": p.get("parallel_tool_calls", True),
        "previous_response_id": p.get("previous_response_id"),
        "reasoning": p.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": "default",
        "store": p.get("store", True),
        "temperature": p.get("temperature", 1.0),
        "text": p.get("text") or {"format": {"type": "text"}},
        "tool_choice": p.get("tool_choice", "auto"),
        "tools": tools if isinstance(tools, list) else [],
        "top_p": p.get("top_p", 1.0),
        "truncation": p.get("truncation", "disabled"),
        "usage": usage(ex) if status in ("completed", "incomplete") else None,
        "user": p.get("user"),
        "metadata": p.get("metadata") or {},
    }


def body(ex: Exchange) -> dict[str, Any]:
    return _response(ex, _output_items(ex), status(ex))


def stream(ex: Exchange) -> list[Event | None]:
    """The full real event sequence.

    The SDK's ``responses.stream()`` helper rebuilds a snapshot from
    ``output_item.added``/``content_part.added`` and refuses deltas for items
    it never saw announced, so the bare created/delta/done/completed quartet
    is not enough.
    """
    opts = ex.payload.get("stream_options")
    obfuscate = not (isinstance(opts, dict) and opts.get("include_obfuscation") is False)
    out = Events()

    def ev(etype: str, *, said: bool = False, **fields: Any) -> None:
        # sequence_number is filled in last: a scripted failure renumbers what is left.
        data = {"type": etype, "sequence_number": 0, **fields}
        if obfuscate and "delta" in fields:
            data["obfuscation"] = padding(ex, len(out.items), len(fields["delta"]))
        out.add(etype, data, delta=said)

    def where(index: int, item_id: str, **more: Any) -> dict[str, Any]:
        return {"item_id": item_id, "output_index": index, **more}

    reply = ex.reply
    done = status(ex)
    ev("response.created", response=_response(ex, [], "in_progress"))
    ev("response.in_progress", response=_response(ex, [], "in_progress"))
    final = _output_items(ex)
    for index, item in enumerate(final):
        item_id = item["id"]
        if item["type"] == "reasoning":
            ev("response.output_item.added", output_index=index, item=_reasoning_item(ex, None))
            part: dict[str, Any] = {"type": "summary_text", "text": ""}
            ev("response.reasoning_summary_part.added", **where(index, item_id, summary_index=0), part=part)
            for piece in split(reply.reasoning):
                ev("response.reasoning_summary_text.delta", said=True, **where(index, item_id, summary_index=0),
                   delta=piece)
            ev("response.reasoning_summary_text.done", **where(index, item_id, summary_index=0),
               text=reply.reasoning)
            ev("response.reasoning_summary_part.done", **where(index, item_id, summary_index=0),
               part={**part, "text": reply.reasoning})
        elif item["type"] == "message":
            ev("response.output_item.added", output_index=index, item=_message_item(ex, "in_progress", done=False))
            at = where(index, item_id, content_index=0)
            if reply.refusal:
                part = {"type": "refusal", "refusal": ""}
                ev("response.content_part.added", **at, part=part)
                for piece in split(reply.refusal, reply.deltas):
                    ev("response.refusal.delta", said=True, **at, delta=piece)
                ev("response.refusal.done", **at, refusal=reply.refusal)
            else:
                part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
                ev("response.content_part.added", **at, part=part)
                for piece in split(reply.text, reply.deltas):
                    ev("response.output_text.delta", said=True, **at, delta=piece, logprobs=[])
                ev("response.output_text.done", **at, text=reply.text, logprobs=[])
            ev("response.content_part.done", **at, part=item["content"][0])
        else:
            i = index - (len(final) - len(ex.calls))
            ev("response.output_item.added", output_index=index,
               item=_function_item(ex, i, ex.calls[i], "in_progress", done=False))
            for piece in split(item["arguments"], 2):
                ev("response.function_call_arguments.delta", said=True, **where(index, item_id), delta=piece)
            ev("response.function_call_arguments.done", **where(index, item_id), name=item["name"],
               arguments=item["arguments"])
        ev("response.output_item.done", output_index=index, item=item)
    ev(f"response.{done}", response=_response(ex, final, done))
    failed = ("response.failed", {"type": "response.failed", "sequence_number": 0,
                                  "response": _response(ex, [], "failed")})
    events = out.cut(ex, [failed])
    for seq, event in enumerate(e for e in events if e is not None):
        event[1]["sequence_number"] = seq
    return events


FORMAT = WireFormat(
    name="openai.responses",
    path=re.compile(r".*/responses"),
    prompt_tokens=prompt_tokens,
    response_id=lambda ex: "resp_" + ex.ident("id", HEX, 48),
    request_id=request_id,
    call_id=call_id,
    finish=status,
    usage=usage,
    body=body,
    stream=stream,
    error=error,
    failure_status=FAILURE_STATUS,
    json=INDENTED,
    framing=sse(),
    headers=request_id_header("x-request-id"),
    refuse=refuse,
    truncated_tokens=lambda ex: _held(ex)[1],
)
