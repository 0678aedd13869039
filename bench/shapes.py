"""Request shapes for ``bench/instructions.py --own --shape NAME``: what one call sends and gets back.

Each shape is a real SDK call (the original, unwrapped function) on an in-process mock
transport, as in bench/overhead.py: ``send(history)`` makes it and returns the parsed
response and the body the SDK really sent, which ctxguard's hooks are then given. The
mock's usage grows with what was sent (input tokens = body bytes // 4); ``chat`` and
``facts`` answer bench/overhead.py's ``chat.completion`` (so ``facts`` differs from ``chat``
by the facts alone).

* ``chat``: Chat Completions, a system message holding a pinned block, plain messages;
* ``tools``: Chat Completions with three function tools, a tool-using agent's history
  (``overhead.agent_messages``), answered with a tool call (``finish_reason: tool_calls``);
* ``parts``: Chat Completions, user messages as content parts: text, and in every 4th
  user message a base64 data-URL PNG (16x16, a valid file: ctxguard reads its size);
* ``responses``: the Responses API, ``instructions`` and message items, a ``response`` object;
* ``anthropic``: the anthropic SDK's ``messages.create``, ``system`` and alternating messages;
* ``facts``: ``chat`` with 10 facts recorded in the conversation, each value in the history.

``msgs`` counts the system prompt (``instructions``, ``system``) as one message, as ``chat`` does.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import overhead as ov
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import ctxguard

http_lib: Any = ov.http_lib  # type: ignore[attr-defined]  # httpx2 (openai 3.x, anthropic 2.x) or httpx

NAMES = ("chat", "tools", "parts", "responses", "anthropic", "facts")
ANTHROPIC_MODEL = "claude-sonnet-4-5"
FACTS = 10
#: The call site's object, as the wrappers pass it (its client's identity is read per call).
IDENTITY_URL = "http://127.0.0.1:9"

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "lookup_order",
        "description": "Look up an order by its id: items, amounts, status and shipping address.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string", "description": "The order id, e.g. A-1041.", "pattern": "^A-[0-9]+$"},
            "include_items": {"type": "boolean", "description": "Also return the order's line items."},
        }, "required": ["order_id"], "additionalProperties": False},
    }},
    {"type": "function", "function": {
        "name": "track_parcel",
        "description": "Where a parcel is now and when it is expected, from the courier's tracking.",
        "parameters": {"type": "object", "properties": {
            "tracking_number": {"type": "string", "description": "The courier's tracking number."},
            "courier": {"type": "string", "enum": ["bluedart", "delhivery", "dhl", "fedex", "ups"]},
        }, "required": ["tracking_number", "courier"], "additionalProperties": False},
    }},
    {"type": "function", "function": {
        "name": "issue_refund",
        "description": "Refund all or part of an order to the customer's original payment method.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string", "description": "The order id, e.g. A-1041."},
            "amount": {"type": "number", "minimum": 0, "description": "Amount in the order's currency."},
            "reason": {"type": "string", "enum": ["damaged", "late", "wrong_item", "not_delivered", "other"]},
            "notify_customer": {"type": "boolean", "description": "Email the customer a confirmation."},
        }, "required": ["order_id", "amount", "reason"], "additionalProperties": False},
    }},
]


@dataclass
class Shape:
    """One request shape: the call site ctxguard guards and the SDK call that feeds its hooks."""

    name: str
    provider: Any  #: ctxguard's ``Provider``
    api: str  #: the operation its adapter reads the keyword arguments as
    site: Any  #: the ``CallSite`` whose result ``observe_answer`` reads
    resource: Any  #: the call site's object (``instance=``)
    history: list[Any]  #: the messages (or input items) sent, ``size`` of them with the system prompt
    kwargs: Callable[[list[Any]], dict[str, Any]]  #: the ``create`` keyword arguments for a history
    send: Callable[[list[Any]], tuple[Any, bytes]]  #: the SDK call: (its parsed response, the body sent)
    more: Callable[[int], Any]  #: the ``i``-th message appended with ``--grow``
    marker: bytes  #: in every body this shape sends
    label: str  #: the provider ctxguard's payload names
    prepare: Callable[[], None] | None = None  #: inside the conversation, before the first call


class SpanCounter(SpanExporter):
    """Counts the spans it is given (bench/instructions.py adds it after the counted calls)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def tiny_png(width: int = 16, height: int = 16) -> bytes:
    """A valid RGB PNG (IHDR, IDAT, IEND, each with its CRC), orange."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x80\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


IMAGE_URL = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()


def usage_of(request: Any) -> tuple[int, int]:
    """(input, output) tokens for a request: its body bytes // 4, and a short reply's."""
    return len(request.content) // 4, 12


def json_response(body: dict[str, Any]) -> Any:
    return http_lib.Response(200, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def tool_call_completion(request: Any) -> Any:
    """A ``chat.completion`` whose message calls a tool."""
    prompt, completion = usage_of(request)
    call = {"id": "call_bench", "type": "function",
            "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": "A-1041"})}}
    message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]}
    return json_response({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1_700_000_000, "model": ov.MODEL,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}},
        "system_fingerprint": "fp_bench",
    })


def text_completion(request: Any) -> Any:
    """A ``chat.completion`` answering "ok", its usage grown with the request."""
    prompt, completion = usage_of(request)
    message = {"role": "assistant", "content": "ok", "refusal": None}
    return json_response({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1_700_000_000, "model": ov.MODEL,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}},
        "system_fingerprint": "fp_bench",
    })


def responses_response(request: Any) -> Any:
    """A Responses API ``response`` object: one output message, the request's instructions echoed."""
    prompt, completion = usage_of(request)
    sent = json.loads(request.content)
    text = {"type": "output_text", "text": "ok", "annotations": [], "logprobs": []}
    output = {"type": "message", "id": "msg_bench", "role": "assistant", "status": "completed", "content": [text]}
    return json_response({
        "id": "resp_bench", "object": "response", "created_at": 1_700_000_000, "status": "completed",
        "model": sent.get("model", ov.MODEL), "output": [output], "instructions": sent.get("instructions"),
        "error": None, "incomplete_details": None, "metadata": {}, "parallel_tool_calls": True,
        "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "store": True,
        "temperature": 1.0, "top_p": 1.0, "max_output_tokens": None, "text": {"format": {"type": "text"}},
        "tool_choice": "auto", "tools": [], "truncation": "disabled", "user": None, "service_tier": "default",
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt + completion},
    })


def anthropic_message(request: Any) -> Any:
    """An anthropic Messages API ``message``: one text block, ``end_turn``."""
    prompt, completion = usage_of(request)
    return json_response({
        "id": "msg_bench", "type": "message", "role": "assistant", "model": ANTHROPIC_MODEL,
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "service_tier": "standard"},
    })


def transport(respond: Callable[[Any], Any], sent: list[bytes]) -> Any:
    """An ``http_lib.Client`` whose every request is kept in ``sent`` and answered by ``respond``."""

    def handler(request: Any) -> Any:
        sent.append(request.content)
        return respond(request)

    return http_lib.Client(transport=http_lib.MockTransport(handler))


def unwrapped(cls: type, name: str) -> Callable[..., Any]:
    """The SDK's own ``cls.name`` under ctxguard's wrapper (as the chat shape's ``Completions.create.__wrapped__``)."""
    import wrapt

    wrapper = cls.__dict__[name]
    assert isinstance(wrapper, wrapt.FunctionWrapper), f"{cls.__name__}.{name}: not wrapped by ctxguard"
    return wrapper.__wrapped__  # type: ignore[no-any-return]


def sender(original: Callable[..., Any], resource: Any, kwargs: Callable[[list[Any]], dict[str, Any]],
           sent: list[bytes]) -> Callable[[list[Any]], tuple[Any, bytes]]:
    def send(history: list[Any]) -> tuple[Any, bytes]:
        response = original(resource, **kwargs(history))
        return response, sent.pop()

    return send


def parts_message(i: int) -> dict[str, Any]:
    """``overhead.message(i)``; a user message's content as parts, every 4th user message with an image."""
    message: dict[str, Any] = ov.message(i)
    if message["role"] != "user":
        return message
    parts: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}]
    if (i + 1) // 2 % 4 == 0:
        parts.append({"type": "image_url", "image_url": {"url": IMAGE_URL}})
    return {"role": "user", "content": parts}


def fact_values() -> list[str]:
    return [f"ACC-{k:04d}-bench" for k in range(FACTS)]


def with_facts(history: list[Any]) -> list[Any]:
    """``history`` with each fact's value appended to a message, spread evenly (as bench/facts.py)
    over all but the last five, which ``--grow``'s warm-up leaves out of its shorter histories."""
    history = list(history)
    spread = max(1, len(history) - 6)
    for k, value in enumerate(fact_values()):
        i = 1 + k * spread // FACTS
        history[i] = {**history[i], "content": f"{history[i]['content']} [{value}]"}
    return history


def record_facts() -> None:
    for k, value in enumerate(fact_values()):
        ctxguard.record_fact(f"account_{k}", value)


def openai_shape(name: str, size: int, pinned: str) -> Shape:
    """The Chat Completions shapes (tools, parts, facts)."""
    import openai
    from openai.resources.chat.completions.completions import Completions

    from ctxguard.providers import openai as openai_provider

    sent: list[bytes] = []
    respond = {"tools": tool_call_completion, "parts": text_completion, "facts": ov.handler}[name]
    client = openai.OpenAI(api_key="x", base_url=ov.BASE_URL, max_retries=0, http_client=transport(respond, sent))
    resource = openai.OpenAI(api_key="bench", base_url=f"{IDENTITY_URL}/v1").chat.completions
    system = ov.system_message(pinned)
    more: Callable[[int], Any] = lambda i: ov.message(200_000 + i)  # noqa: E731
    prepare = None
    if name == "tools":
        history, marker = [system, *ov.agent_messages(size)[1:]], b'"tools"'

        def kwargs(history: list[Any]) -> dict[str, Any]:
            return {"model": ov.MODEL, "messages": history, "tools": TOOLS}
    else:
        if name == "parts":
            history, marker = [system, *(parts_message(i) for i in range(1, size))], b'"image_url"'
            more = lambda i: parts_message(200_000 + i)  # noqa: E731
        else:
            history, marker = with_facts([system, *(ov.message(i) for i in range(1, size))]), b"ACC-0009-bench"
            prepare = record_facts

        def kwargs(history: list[Any]) -> dict[str, Any]:
            return {"model": ov.MODEL, "messages": history}

    send = sender(unwrapped(Completions, "create"), client.chat.completions, kwargs, sent)
    return Shape(name, openai_provider.PROVIDER, "chat.completions", openai_provider.SITES[0], resource, history,
                 kwargs, send, more, marker, "openai", prepare)


def responses_shape(size: int, pinned: str) -> Shape:
    import openai
    from openai.resources.responses.responses import Responses

    from ctxguard.providers import openai as openai_provider

    sent: list[bytes] = []
    client = openai.OpenAI(api_key="x", base_url=ov.BASE_URL, max_retries=0,
                           http_client=transport(responses_response, sent))
    resource = openai.OpenAI(api_key="bench", base_url=f"{IDENTITY_URL}/v1").responses
    instructions = ov.system_message(pinned)["content"]
    site = next(s for s in openai_provider.SITES if s.attribute == "Responses.create" and "beta" not in s.module)

    def kwargs(history: list[Any]) -> dict[str, Any]:
        return {"model": ov.MODEL, "instructions": instructions, "input": history}

    send = sender(unwrapped(Responses, "create"), client.responses, kwargs, sent)
    history = [ov.message(i) for i in range(1, size)]
    return Shape("responses", openai_provider.PROVIDER, "responses", site, resource, history, kwargs, send,
                 lambda i: ov.message(200_000 + i), b'"instructions"', "openai")


def anthropic_shape(size: int, pinned: str) -> Shape:
    import anthropic
    from anthropic.resources.messages.messages import Messages

    from ctxguard.providers import anthropic as anthropic_provider

    sent: list[bytes] = []
    # The anthropic SDK runs on httpx2 (as openai 3.x does): overhead.http_lib's MockTransport fits it.
    client = anthropic.Anthropic(api_key="x", base_url="http://bench.invalid", max_retries=0,
                                 http_client=transport(anthropic_message, sent))
    resource = anthropic.Anthropic(api_key="bench", base_url=IDENTITY_URL).messages
    system = ov.system_message(pinned)["content"]

    def kwargs(history: list[Any]) -> dict[str, Any]:
        return {"model": ANTHROPIC_MODEL, "max_tokens": 1024, "system": system, "messages": history}

    send = sender(unwrapped(Messages, "create"), client.messages, kwargs, sent)
    history = [ov.message(i) for i in range(1, size)]  # user first, then alternating
    site = anthropic_provider.SITES[0]
    return Shape("anthropic", anthropic_provider.PROVIDER, site.api, site, resource, history, kwargs, send,
                 lambda i: ov.message(200_000 + i), b'"max_tokens"', "anthropic")


def build(name: str, size: int, pinned: str) -> Shape:
    """Shape ``name`` (not ``chat``, which bench/instructions.py builds on its own client) at ``size`` messages."""
    if name == "responses":
        return responses_shape(size, pinned)
    if name == "anthropic":
        return anthropic_shape(size, pinned)
    return openai_shape(name, size, pinned)
