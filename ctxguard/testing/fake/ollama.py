"""Ollama's native chat API: ``POST /api/chat``, streamed as NDJSON unless the body says ``"stream": false``.

No ids at all (tool calls are known by their function's name) and no request id header; JSON as
Go writes it (compact, ``<``, ``>`` and ``&`` escaped); the counts and timings of an answer on its
last object, ``done: true``. The prompt is held to the context window (``options.num_ctx``, else the
server's, ``FakeLLM.ollama_num_ctx``) as its server does: the oldest messages but the system ones
are dropped, then the prompt is cut, and ``prompt_eval_count`` never exceeds the window. Failing
midway, the last line is an error object (the status, 200, was sent). Errors are ``{"error": "…"}``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

from . import media
from .tokens import FRAME_TOKENS, Reading, read_tokens, schemas_tokens
from .wire import HEX, Event, Events, Exchange, Framing, Json, WireFormat, phrase, split

#: What the model reads of a message (``tokens.Reading``; its ``images`` are priced apart): a tool
#: call's ``arguments``, an object, are read keys and all.
READING = Reading(unread="index", structured="arguments")


FAILURE_STATUS = 500
#: The context window an Ollama server gives a request without ``options.num_ctx``: its default below
#: 24 GiB of VRAM (0.15.5 and later). ``FakeLLM.ollama_num_ctx`` sets the server's own.
OLLAMA_NUM_CTX = 4096
ERRORS: dict[int, str] = {
    400: "invalid request",
    404: 'model "{model}" not found, try pulling it first',
    500: "an error was encountered while running the model: unexpected EOF",
}
# ``done_reason``: ``stop`` (tool calls too: it has no reason of their own), ``length`` (``num_predict``
# reached); ``load`` / ``unload`` answer requests without messages.
_DONE_REASONS: dict[str, str] = {"tool_calls": "stop", "function_call": "stop", "content_filter": "stop"}


def go_json(obj: Any) -> bytes:
    """JSON as Ollama's Go encoder writes it: compact, ``<``, ``>`` and ``&`` escaped (they only ever
    occur inside strings, where the escape means the same character)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


#: Tokens of instructions a chat template writes around the tools it is given (not ctxguard's
#: per-family figures: the fake's own, so that the two do not agree by construction).
TOOL_INSTRUCTIONS = 120


def _thinking_written(model: str, think: Any) -> str:
    """Which answers' ``thinking`` the model's chat template writes: ``"none"``, ``"current"`` (those
    after the last user message) or ``"all"``. DeepSeek-R1's template writes ``.Content`` only; Qwen 3's
    the current turn's when the request sets ``think``; Ollama's Qwen 3.5 renderer (3.5 and 3.6) the
    current turn's unless ``think`` is false; any other family here, all of it."""
    name = model.rsplit("/", 1)[-1].split(":", 1)[0].lower()
    if name.startswith("deepseek-r1"):
        return "none"
    if name.startswith(("qwen3.5", "qwen3.6")):
        return "none" if think is False else "current"
    if name.startswith("qwen3") and not name.startswith(("qwen3-coder", "qwen3-vl")):
        return "none" if think is None else "current"
    return "all"


def _message_tokens(message: Any, model: str, thinking: bool = True) -> int:
    """A message as the chat template renders it: its text (tool calls too, and its thinking where
    ``thinking``); each image what the model's vision encoder makes of one, never its base64."""
    if not isinstance(message, dict):
        return FRAME_TOKENS + read_tokens(message, READING)
    images = message.get("images")
    rest = {k: v for k, v in message.items() if k != "images" and (thinking or k != "thinking")}
    return FRAME_TOKENS + read_tokens(rest, READING) + sum(media.ollama(model, image) for image in images) \
        if isinstance(images, list) else FRAME_TOKENS + read_tokens(rest, READING)


def _held(payload: Mapping[str, Any], window: int | None) -> tuple[int, int]:
    """(tokens kept, tokens dropped) of a prompt held to ``window``, as Ollama's server does it: the
    chat template drops the oldest messages but the system ones (never the last) until the prompt
    fits; what still does not fit, the runner cuts to the window. Tools are rendered with the
    messages; ``format`` constrains the sampling and is not in the prompt."""
    messages = payload.get("messages")
    messages = messages if isinstance(messages, list) else []
    model = str(payload.get("model") or "")
    written = _thinking_written(model, payload.get("think"))
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), default=-1)
    costs = [_message_tokens(m, model, written == "all" or (written == "current" and i > last_user))
             for i, m in enumerate(messages)]
    tools = payload.get("tools")
    # A model's chat template renders tools inside instructions of its own (Llama 3.x's "Given the
    # following functions...", Qwen's <tools> block): the fake's round figure for them.
    fixed = schemas_tokens(tools) + (TOOL_INSTRUCTIONS if tools else 0) + FRAME_TOKENS
    full = fixed + sum(costs)
    if window is None or full <= window:
        return full, 0
    system = [isinstance(m, dict) and m.get("role") == "system" for m in messages]
    kept = fixed + sum(costs)
    for start in range(1, len(messages)):  # drop messages[:start] but their system messages
        kept = fixed + sum(c for i, c in enumerate(costs) if i >= start or system[i])
        if kept <= window:
            break
    return min(kept, window), full - min(kept, window)


def _prompt(ex: Exchange) -> tuple[int, int]:
    options = ex.payload.get("options")
    window = options.get("num_ctx") if isinstance(options, dict) else None
    window = window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None
    return _held(ex.payload, window or ex.window)


def finish(ex: Exchange) -> str:
    return _DONE_REASONS.get(ex.finish, ex.finish)


def error(ex: Exchange, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    default = ERRORS.get(status, phrase(status).lower())
    return {"error": message or default.format(model=ex.model)}, "error"


def _created() -> str:
    """RFC 3339 with nanoseconds, as Go writes a UTC time."""
    now = time.time_ns()
    fraction = f"{now % 1_000_000_000:09d}".rstrip("0")
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now // 1_000_000_000))
    return seconds + (f".{fraction}" if fraction else "") + "Z"


def metrics(ex: Exchange) -> dict[str, Any]:
    """The counts and timings (nanoseconds) of the last object of an answer; the times grow with the
    counts: ~1.5 ms a prompt token, ~20 ms an answer token, a warm model's load."""
    prompt_ns, eval_ns, load_ns = ex.input_tokens * 1_500_000, ex.output_tokens * 20_000_000, 2_154_458
    return {
        "total_duration": load_ns + prompt_ns + eval_ns + 1_000_000,
        "load_duration": load_ns,
        "prompt_eval_count": ex.input_tokens,
        "prompt_eval_duration": prompt_ns,
        "eval_count": ex.output_tokens,
        "eval_duration": eval_ns,
    }


def _calls(ex: Exchange) -> list[dict[str, Any]]:
    """Tool calls, arguments as an object, no id."""
    return [{"function": {"name": c.name, "arguments": c.input}} for c in ex.calls]


def _message(content: str, *, thinking: str = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    if calls:
        message["tool_calls"] = calls
    return message


def body(ex: Exchange) -> dict[str, Any]:
    reply = ex.reply
    message = _message(reply.text or reply.refusal, thinking=reply.reasoning, calls=_calls(ex))
    return {"model": ex.model, "created_at": _created(), "message": message, "done_reason": finish(ex),
            "done": True, **metrics(ex)}


def stream(ex: Exchange) -> list[Event | None]:
    """Objects: thinking pieces, text pieces, the tool calls whole in one, then an empty message with
    ``done: true``, the reason and the counts."""
    out = Events()

    def line(message: dict[str, Any], *, done: bool = False) -> dict[str, Any]:
        obj: dict[str, Any] = {"model": ex.model, "created_at": _created(), "message": message, "done": done}
        if done:
            obj["done_reason"] = finish(ex)
            obj.update(metrics(ex))
        return obj

    reply = ex.reply
    for piece in split(reply.reasoning):
        out.add(None, line(_message("", thinking=piece)), delta=True)
    for piece in split(reply.text or reply.refusal, reply.deltas):
        out.add(None, line(_message(piece)), delta=True)
    if ex.calls:
        out.add(None, line(_message("", calls=_calls(ex))), delta=True)
    out.add(None, line(_message(""), done=True))
    return out.cut(ex, [(None, error(ex, FAILURE_STATUS, None)[0])])


FORMAT = WireFormat(
    name="ollama.chat",
    path=re.compile(r".*/api/chat"),
    streamed=lambda ex: ex.payload.get("stream") is not False,
    prompt_tokens=lambda ex: _prompt(ex)[0],
    response_id=lambda ex: None,
    request_id=lambda ex: "req_" + ex.ident("request", HEX, 32),
    call_id=None,
    finish=finish,
    usage=metrics,
    body=body,
    stream=stream,
    error=error,
    failure_status=FAILURE_STATUS,
    json=Json("application/json; charset=utf-8", go_json),
    framing=Framing("application/x-ndjson", lambda event, data: go_json(data) + b"\n"),  # one object a line
    # Checked before any model is looked for.
    refuse=lambda ex: None if ex.payload.get("model") else error(ex, 400, "model is required"),
    truncated_tokens=lambda ex: _prompt(ex)[1],
    address=("ollama_host", ""),
    server_window=("ollama_num_ctx", OLLAMA_NUM_CTX),
)
