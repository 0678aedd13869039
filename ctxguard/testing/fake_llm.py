"""A loopback fake LLM server that speaks the OpenAI, Anthropic and Gemini wire formats.

Tests that mock the SDK objects never exercise what ctxguard actually depends
on: the bytes the real SDKs put on the wire and the way they parse replies,
including streaming.  This server sits behind the *real* SDKs over real HTTP so
those paths are covered, while staying deterministic, offline and free.

Only the standard library is used so importing this module never drags a
third-party dependency into the library or its test environment.

Usage::

    with FakeLLM() as llm:
        llm.script("hello", Reply(status=429))
        client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
        client.chat.completions.create(model="m", messages=[...])
        assert llm.bodies("/chat/completions")[0]["model"] == "m"
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeLLM", "RecordedRequest", "Reply"]

ReplyFn = Callable[["RecordedRequest"], "Reply | str"]

_CHAT = "/chat/completions"
_RESPONSES = "/responses"
_MESSAGES = "/messages"
# Gemini (google-genai): POST .../models/{model}:generateContent, and
# :streamGenerateContent?alt=sse for SSE; the model is in the path, not the body.
_GENERATE = ":generateContent"
_STREAM_GENERATE = ":streamGenerateContent"

# Error "type" strings per status, so SDK code that branches on them (or on the
# exception subclass chosen from the status) sees what the real service sends.
_OPENAI_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_ANTHROPIC_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
# OpenAI-style finish reasons are the lingua franca of ``Reply``; Anthropic
# callers get the equivalent stop_reason so one script can drive both APIs.
_GEMINI_STATUSES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_GEMINI_FINISH_REASONS: dict[str, str] = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "content_filter": "SAFETY",
}
_ANTHROPIC_STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request exactly as it arrived, so tests can assert on wire bytes.

    ``path`` is the raw request target, query string included, because the
    point of recording is to see what the client really sent.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """Decode lazily: not every request (e.g. a stray GET) carries JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    """What the fake model "says"; one description rendered per provider format.

    Token counts default to cheap byte-based estimates so usage-accounting
    code always sees plausible, non-zero numbers without a tokenizer.
    ``finish_reason`` uses OpenAI vocabulary and is translated for Anthropic
    (``stop`` -> ``end_turn`` and so on); unknown values pass through verbatim.
    """

    text: str = ""
    status: int = 200
    tool_calls: list[dict[str, Any]] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str = "stop"
    model: str | None = None


def _coerce(reply: Reply | str) -> Reply:
    return Reply(text=reply) if isinstance(reply, str) else reply


def _split(text: str, parts: int = 3) -> list[str]:
    """Cut text into a few pieces so clients must really concatenate deltas."""
    if not text:
        return []
    n = min(parts, len(text))
    size, extra = divmod(len(text), n)
    out: list[str] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _tool_parts(call: dict[str, Any], index: int, n: int) -> tuple[str, str, str]:
    """Return ``(id, name, arguments)`` tolerating partially specified calls."""
    fn = call.get("function") or {}
    call_id = str(call.get("id") or f"call_fake_{n}_{index}")
    name = str(fn.get("name", ""))
    args = fn.get("arguments", "")
    # Accept a dict for convenience; the wire format always carries a string.
    arguments = args if isinstance(args, str) else json.dumps(args)
    return call_id, name, arguments


class _Server(ThreadingHTTPServer):
    """HTTP server that remembers live connections so stop() can sever them.

    Keep-alive connections pooled by SDK clients would otherwise leave handler
    threads parked in ``readline`` after shutdown.
    """

    daemon_threads = True
    allow_reuse_address = True
    # The default backlog of 5 drops the SYNs of a burst of connections: those clients
    # stall a second for the retry, or give up.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], fake: FakeLLM) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-stream and stop() severing sockets are
        # expected; anything else is a real bug worth a traceback.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    def sever_connections(self) -> None:
        with self.connections_lock:
            conns = list(self.connections)
            self.connections.clear()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    """Translate one HTTP exchange into a RecordedRequest and a rendered Reply."""

    # HTTP/1.1 lets SDK connection pools reuse sockets like they do in production.
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate small writes; with Nagle on, each reply waits
    # ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Access logs on stderr would drown pytest output."""

    def do_POST(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    # -- request side -----------------------------------------------------

    def _read_body(self) -> bytes:
        """Read exactly the announced body; short reads happen on big payloads."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        remaining = int(self.headers.get("Content-Length") or 0)
        chunks: list[bytes] = []
        while remaining > 0:
            chunk = self.rfile.read(remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size_line = self.rfile.readline()
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # Drain optional trailers up to the terminating blank line.
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def _handle(self) -> None:
        body = self._read_body()
        headers: dict[str, str] = {}
        for key, value in self.headers.items():
            k = key.lower()
            headers[k] = f"{headers[k]}, {value}" if k in headers else value
        req = RecordedRequest(method=self.command, path=self.path, headers=headers, body=body)
        fake = self.server.fake
        n = fake._record(req)

        route = self.path.split("?", 1)[0].rstrip("/")
        kinds = (_CHAT, _RESPONSES, _MESSAGES, _GENERATE, _STREAM_GENERATE)
        kind = next((s for s in kinds if route.endswith(s)), None)
        if kind is None or self.command != "POST":
            self._send_json(404, _openai_error(404, f"No fake route for {self.command} {self.path}"))
            return

        try:
            payload = json.loads(body) if body else {}
            if not isinstance(payload, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            self._send_json(400, _error_body(kind, 400, f"Invalid JSON body: {exc}"))
            return

        try:
            reply = fake._next_reply(req, n)
        except Exception as exc:
            # Surface bugs in the reply callable to the client instead of hanging it.
            self._send_json(500, _error_body(kind, 500, f"FakeLLM reply callable failed: {exc!r}"))
            return

        if reply.status != 200:
            message = reply.text or f"Fake error {reply.status}"
            self._send_json(reply.status, _error_body(kind, reply.status, message))
            return

        ctx = _Ctx(n=n, reply=reply, payload=payload, body_len=len(body), route=route)
        if kind == _GENERATE:
            self._send_json(200, _gemini_body(ctx, ctx.reply.text, final=True))
        elif kind == _STREAM_GENERATE:
            self._send_sse(_gemini_stream(ctx))
        elif payload.get("stream") is True:
            if kind == _CHAT:
                self._send_sse(_chat_stream(ctx))
            elif kind == _RESPONSES:
                self._send_sse(_responses_stream(ctx))
            else:
                self._send_sse(_messages_stream(ctx))
        elif kind == _CHAT:
            self._send_json(200, _chat_body(ctx))
        elif kind == _RESPONSES:
            self._send_json(200, _response_object(ctx, ctx.output_items()))
        else:
            self._send_json(200, _messages_body(ctx))

    # -- response side ----------------------------------------------------

    def _send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _send_sse(self, events: Iterable[tuple[str | None, Any]]) -> None:
        """Write events one by one so clients see a genuinely incremental stream."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            for event, data in events:
                text = data if isinstance(data, str) else json.dumps(data)
                frame = f"event: {event}\ndata: {text}\n\n" if event else f"data: {text}\n\n"
                self.wfile.write(frame.encode())
                self.wfile.flush()
        except OSError:
            pass


# -- payload builders --------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    """Everything a renderer needs, computed once per request."""

    n: int
    reply: Reply
    payload: dict[str, Any]
    body_len: int
    route: str = ""

    @property
    def model(self) -> str:
        # Gemini names the model in the path (".../models/gemini-2.5-flash:generateContent").
        in_path = self.route.rpartition("models/")[2].partition(":")[0] if ":" in self.route else ""
        return self.reply.model or str(self.payload.get("model") or in_path or "fake-model")

    @property
    def input_tokens(self) -> int:
        r = self.reply.input_tokens
        return r if r is not None else self.body_len // 4

    @property
    def output_tokens(self) -> int:
        r = self.reply.output_tokens
        return r if r is not None else max(1, len(self.reply.text) // 4)

    def tools(self) -> list[tuple[str, str, str]]:
        return [_tool_parts(c, i, self.n) for i, c in enumerate(self.reply.tool_calls or [])]

    def output_items(self) -> list[dict[str, Any]]:
        """Final Responses-API output items: a message, then any function calls."""
        items: list[dict[str, Any]] = []
        if self.reply.text or not self.reply.tool_calls:
            items.append(_message_item(self.n, self.reply.text, "completed"))
        for i, (call_id, name, args) in enumerate(self.tools()):
            items.append(_function_item(self.n, i, call_id, name, args, "completed"))
        return items


def _openai_error(status: int, message: str) -> dict[str, Any]:
    err_type = _OPENAI_ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": err_type, "param": None, "code": err_type}}


def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    err_type = _ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": err_type, "message": message}}


def _gemini_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": _GEMINI_STATUSES.get(status, "UNKNOWN")}}


def _error_body(kind: str, status: int, message: str) -> dict[str, Any]:
    if kind == _MESSAGES:
        return _anthropic_error(status, message)
    if kind in (_GENERATE, _STREAM_GENERATE):
        return _gemini_error(status, message)
    return _openai_error(status, message)


def _chat_usage(ctx: _Ctx) -> dict[str, Any]:
    return {
        "prompt_tokens": ctx.input_tokens,
        "completion_tokens": ctx.output_tokens,
        "total_tokens": ctx.input_tokens + ctx.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_body(ctx: _Ctx) -> dict[str, Any]:
    reply = ctx.reply
    message: dict[str, Any] = {
        "role": "assistant",
        # The real API sends null content for pure tool-call turns.
        "content": reply.text if reply.text or not reply.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in ctx.tools()
        ]
    return {
        "id": f"chatcmpl-fake-{ctx.n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
        "usage": _chat_usage(ctx),
        "service_tier": "default",
        "system_fingerprint": None,
    }


def _chat_stream(ctx: _Ctx) -> Iterator[tuple[str | None, Any]]:
    opts = ctx.payload.get("stream_options")
    include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        obj: dict[str, Any] = {
            "id": f"chatcmpl-fake-{ctx.n}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": ctx.model,
            "service_tier": "default",
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            # The real API puts an explicit null usage on every non-final chunk.
            obj["usage"] = None
        return None, obj

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in _split(ctx.reply.text):
        yield chunk({"content": piece})
    for i, (cid, name, args) in enumerate(ctx.tools()):
        yield chunk(
            {
                "tool_calls": [
                    {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
                ]
            }
        )
        for piece in _split(args, 2):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, ctx.reply.finish_reason)
    if include_usage:
        yield (
            None,
            {
                "id": f"chatcmpl-fake-{ctx.n}",
                "object": "chat.completion.chunk",
                "created": created,
                "model": ctx.model,
                "service_tier": "default",
                "system_fingerprint": None,
                "choices": [],
                "usage": _chat_usage(ctx),
            },
        )
    yield None, "[DONE]"


def _message_item(n: int, text: str, status: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if status == "completed":
        content.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    return {
        "type": "message",
        "id": f"msg_fake_{n}",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _function_item(n: int, i: int, call_id: str, name: str, args: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_fake_{n}_{i}",
        "call_id": call_id,
        "name": name,
        "arguments": args,
        "status": status,
    }


def _response_object(ctx: _Ctx, output: list[dict[str, Any]], status: str = "completed") -> dict[str, Any]:
    """Build a Response with every field the SDK models treat as required."""
    p = ctx.payload
    done = status == "completed"
    tools = p.get("tools")
    return {
        "id": f"resp_fake_{ctx.n}",
        "object": "response",
        "created_at": int(time.time()),
        "completed_at": int(time.time()) if done else None,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": p.get("instructions"),
        "max_output_tokens": p.get("max_output_tokens"),
        "max_tool_calls": p.get("max_tool_calls"),
        "model": ctx.model,
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
        "usage": (
            {
                "input_tokens": ctx.input_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": ctx.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": ctx.input_tokens + ctx.output_tokens,
            }
            if done
            else None
        ),
        "user": p.get("user"),
        "metadata": p.get("metadata") or {},
    }


def _responses_stream(ctx: _Ctx) -> Iterator[tuple[str | None, Any]]:
    """Emit the full real event sequence.

    The SDK's ``responses.stream()`` helper rebuilds a snapshot from
    ``output_item.added``/``content_part.added`` and refuses deltas for items
    it never saw announced, so the bare created/delta/done/completed quartet
    is not enough.
    """
    seq = 0

    def ev(etype: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        nonlocal seq
        data = {"type": etype, "sequence_number": seq, **fields}
        seq += 1
        return etype, data

    yield ev("response.created", response=_response_object(ctx, [], "in_progress"))
    yield ev("response.in_progress", response=_response_object(ctx, [], "in_progress"))
    final = ctx.output_items()
    for index, item in enumerate(final):
        item_id = item["id"]
        if item["type"] == "message":
            text = ctx.reply.text
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield ev(
                "response.output_item.added",
                output_index=index,
                item=_message_item(ctx.n, "", "in_progress"),
            )
            yield ev(
                "response.content_part.added",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=part,
            )
            for piece in _split(text):
                yield ev(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            yield ev(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            )
            yield ev(
                "response.content_part.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part={**part, "text": text},
            )
        else:
            yield ev(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for piece in _split(item["arguments"], 2):
                yield ev(
                    "response.function_call_arguments.delta",
                    item_id=item_id,
                    output_index=index,
                    delta=piece,
                )
            yield ev(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        yield ev("response.output_item.done", output_index=index, item=item)
    yield ev("response.completed", response=_response_object(ctx, final))


def _anthropic_blocks(ctx: _Ctx) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if ctx.reply.text or not ctx.reply.tool_calls:
        blocks.append({"type": "text", "text": ctx.reply.text})
    for cid, name, args in ctx.tools():
        try:
            parsed = json.loads(args) if args else {}
        except ValueError:
            parsed = {}
        blocks.append({"type": "tool_use", "id": cid, "name": name, "input": parsed})
    return blocks


def _anthropic_usage(ctx: _Ctx, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": ctx.input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _stop_reason(ctx: _Ctx) -> str:
    reason = ctx.reply.finish_reason
    return _ANTHROPIC_STOP_REASONS.get(reason, reason)


def _messages_body(ctx: _Ctx) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{ctx.n}",
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": _anthropic_blocks(ctx),
        "stop_reason": _stop_reason(ctx),
        "stop_sequence": None,
        "usage": _anthropic_usage(ctx, ctx.output_tokens),
    }


def _messages_stream(ctx: _Ctx) -> Iterator[tuple[str | None, Any]]:
    def ev(etype: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return etype, {"type": etype, **fields}

    start = {**_messages_body(ctx), "content": [], "stop_reason": None, "usage": _anthropic_usage(ctx, 1)}
    yield ev("message_start", message=start)
    for index, block in enumerate(_anthropic_blocks(ctx)):
        if block["type"] == "text":
            yield ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in _split(block["text"]):
                yield ev("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        else:
            yield ev("content_block_start", index=index, content_block={**block, "input": {}})
            for piece in _split(json.dumps(block["input"]), 2):
                yield ev(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
        yield ev("content_block_stop", index=index)
    yield ev(
        "message_delta",
        delta={"stop_reason": _stop_reason(ctx), "stop_sequence": None},
        usage={"output_tokens": ctx.output_tokens},
    )
    yield ev("message_stop")


def _gemini_body(ctx: _Ctx, text: str, *, final: bool, tools: bool = True) -> dict[str, Any]:
    """A GenerateContentResponse; stream chunks carry a piece of text, the last one the rest."""
    parts: list[dict[str, Any]] = [{"text": text}] if text or not ctx.reply.tool_calls else []
    if tools:
        for _, name, args in ctx.tools():
            try:
                parsed = json.loads(args) if args else {}
            except ValueError:
                parsed = {}
            parts.append({"functionCall": {"name": name, "args": parsed}})
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": ctx.model, "responseId": f"gen-fake-{ctx.n}"}
    if final:
        reason = ctx.reply.finish_reason
        candidate["finishReason"] = _GEMINI_FINISH_REASONS.get(reason, reason)
        body["usageMetadata"] = {
            "promptTokenCount": ctx.input_tokens,
            "candidatesTokenCount": ctx.output_tokens,
            "totalTokenCount": ctx.input_tokens + ctx.output_tokens,
        }
    return body


def _gemini_stream(ctx: _Ctx) -> Iterator[tuple[str | None, Any]]:
    pieces = _split(ctx.reply.text) or [""]
    for piece in pieces[:-1]:
        yield None, _gemini_body(ctx, piece, final=False, tools=False)
    yield None, _gemini_body(ctx, pieces[-1], final=True)


# -- public server ------------------------------------------------------------


class FakeLLM:
    """Loopback server standing in for OpenAI / Anthropic / Gemini endpoints.

    Reply precedence is: scripted replies (FIFO), then the ``reply`` callable,
    then a default ``"ok N"`` that makes request ordering visible in asserts.

    usage: with FakeLLM() as llm: client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        reply: ReplyFn | None = None,
    ) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            # A fake that answers anyone on the network is a liability.
            raise ValueError(f"FakeLLM binds to loopback only, not {host!r}")
        self._host = "127.0.0.1" if host == "localhost" else host
        self._port = port
        self._reply_fn = reply
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[RecordedRequest] = []

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> FakeLLM:
        """Bind and serve in a background thread; returns self for chaining."""
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), self)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"FakeLLM:{server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Shut down, drop live connections and join; safe to call repeatedly."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.sever_connections()
        server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses ----------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port; only meaningful while started (port=0 picks a free one)."""
        if self._server is None:
            raise RuntimeError("FakeLLM is not running; call start() or use it as a context manager")
        return int(self._server.server_address[1])

    @property
    def origin(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI SDK ``base_url``; the SDK appends ``/chat/completions`` etc."""
        return f"{self.origin}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Anthropic SDK ``base_url``; that SDK appends ``/v1/messages`` itself."""
        return self.origin

    @property
    def gemini_base_url(self) -> str:
        """google-genai ``http_options={"base_url": ...}``; the SDK appends
        ``/v1beta/models/{model}:generateContent`` itself."""
        return self.origin

    # -- scripting & inspection ----------------------------------------------

    def script(self, *replies: Reply | str) -> None:
        """Queue replies consumed one per endpoint request, in order."""
        with self._lock:
            self._script.extend(_coerce(r) for r in replies)

    def bodies(self, path_suffix: str | None = None) -> list[Any]:
        """Parsed JSON of recorded bodies; empty bodies (e.g. GETs) are skipped."""
        with self._lock:
            reqs = list(self.requests)
        out: list[Any] = []
        for r in reqs:
            route = r.path.split("?", 1)[0]
            if path_suffix is not None and not route.endswith(path_suffix):
                continue
            if r.body:
                out.append(r.json)
        return out

    def clear(self) -> None:
        """Forget recorded requests and pending scripted replies between test phases."""
        with self._lock:
            self.requests.clear()
            self._script.clear()

    # -- used by the handler --------------------------------------------------

    def _record(self, req: RecordedRequest) -> int:
        with self._lock:
            self.requests.append(req)
            return len(self.requests)

    def _next_reply(self, req: RecordedRequest, n: int) -> Reply:
        with self._lock:
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            return scripted
        if self._reply_fn is not None:
            # Called outside the lock so a callable may inspect self.requests.
            return _coerce(self._reply_fn(req))
        return Reply(text=f"ok {n}")

    def __repr__(self) -> str:
        state = self.origin if self._server is not None else "stopped"
        return f"<FakeLLM {state} requests={len(self.requests)}>"
