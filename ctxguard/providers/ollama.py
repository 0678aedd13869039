"""Ollama's Python SDK (``ollama`` 0.x, on httpx): ``chat``, on ``Client``, ``AsyncClient`` and the module.

``messages`` carry roles ``system``, ``user``, ``assistant`` and ``tool``, the system message at the
head being the instruction; a message's ``images`` (base64, bytes or a path) are references, its
``thinking`` (a previous answer's) is read as text. Tool calls have no id: an assistant's call is known
by its function's name, and a ``tool`` message answers it by its ``tool_name``, as Gemini's do
(``payload.tool_ref``). ``options.num_predict`` is the reserved output and ``options.num_ctx`` the
window: the server holds the prompt to it and silently drops what does not fit, so the request's own
window is what the budget must be judged against (``RequestView.window``; a request without one gets
the server's default, configured as ``Config.ollama_num_ctx``).

``ollama.chat`` is a method bound, at import, to the module's default ``Client``: the function it
calls is the class's, as it was before any patching, so a call through it reaches ctxguard once, at
the module's wrapper. ``stream=True`` returns a generator (an async one from ``AsyncClient``) that
sends its request on the first chunk; its ``ChatResponse`` chunks pass through unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ..memo import Memo
from ..payload import TOOL_CALL, TOOL_RESULT, Answer, AnswerText, Item, RequestView, tool_ref
from ._read import as_int as _int
from ._read import as_str as _str
from ._read import canonical, elements, family, items
from ._read import get as _get
from ._read import role as _role
from ._read import text_of as _text
from .base import CallSite, Methods, Provider, Translation

__all__ = ["ADAPTER", "PROVIDER", "image_tokens"]

_CLIENT = "ollama._client"

# ``AsyncClient.chat`` is a coroutine function; ``chat`` on the module is the default client's
# bound method, wrapped where the app finds it (``ollama.chat``), not through the class.
SITES = (
    CallSite("ollama", "chat", "chat"),
    CallSite(_CLIENT, "Client.chat", "chat"),
    CallSite(_CLIENT, "AsyncClient.chat", "chat", "async"),
)

#: What an image costs, by model family: Gemma 3's encoder makes 256 tokens of any image; LLaVA 1.5
#: 576 (24 x 24 patches of a 336-pixel square), the cost assumed for every other vision model
#: (those with dynamic resolution, LLaVA 1.6 and Qwen2.5-VL, may charge more for a large image).
_IMAGE_TOKENS = {"gemma3": 256, "gemma4": 256}
_IMAGE_DEFAULT = 576


def image_tokens(model: str | None) -> int:
    """What one image costs ``model``'s prompt.

    >>> image_tokens("gemma3:4b"), image_tokens("llava:7b")
    (256, 576)
    """
    found = family(model, _IMAGE_TOKENS)
    return _IMAGE_TOKENS[found] if found is not None else _IMAGE_DEFAULT


def _image_ref(image: Any) -> str:
    """A digest of the image as given (base64 text, a path or bytes; an SDK ``Image`` by its value):
    the bytes themselves never leave this function."""
    value = _get(image, "value") if not isinstance(image, (str, bytes)) else image
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")
    return "image:" + hashlib.blake2b(raw, digest_size=16).hexdigest()


def _message_item(message: Any, model: str | None) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    content = _get(message, "content")
    if content:  # the SDK drops an empty one before sending
        texts.append(_text(content))
    thinking = _str(_get(message, "thinking"))
    if thinking:  # a previous answer's thinking, sent back: the template may show it to the model
        texts.append(thinking)
        refs.append("id:thinking")
    images = elements(_get(message, "images"), "images")
    refs.extend(_image_ref(image) for image in images)
    for call in elements(_get(message, "tool_calls"), "tool_calls"):
        function = _get(call, "function")
        name = (_str(_get(function, "name")) or "") if function is not None else ""
        # Name and arguments on lines of their own (``wire_intact`` finds a fact by its line); the
        # arguments are an object, read as canonical JSON.
        texts.append(name)
        texts.append(_text(_get(function, "arguments") or {}) if function is not None else "")
        refs.append(tool_ref(TOOL_CALL, None, name))
    if _role(_get(message, "role"), "other") == "tool":
        # Without a ``tool_name`` the result answers no call by name (docs/supported.md says so).
        refs.append(tool_ref(TOOL_RESULT, None, _str(_get(message, "tool_name")) or ""))
    return (_role(_get(message, "role"), "other"), "\n".join(texts), tuple(refs), "message",
            image_tokens(model) * len(images))


def _function_schema(function: Callable[..., Any]) -> str | None:
    """The schema the SDK sends for a Python function (``ollama._utils.convert_function_to_tool``,
    already imported with the SDK); None if it cannot convert it (the SDK then raises its own error)."""
    try:
        return _converted(function)
    except Exception:
        return None


@functools.lru_cache(maxsize=256)
def _converted(function: Callable[..., Any]) -> str:
    """Python functions given as tools, by identity: the SDK's schema of each, remembered (its
    pydantic conversion builds a model class per call, too slow to repeat per request); a failure
    is not remembered. Bounded: an app's tools are few."""
    convert = sys.modules["ollama._utils"].convert_function_to_tool
    return canonical(convert(function).model_dump(exclude_none=True))


def _tools(tools: Any, view: RequestView) -> None:
    """Tool schemas as they are sent: dicts and the SDK's ``Tool`` as their JSON, Python functions as
    the schema the SDK makes of them. The chat template renders them into the prompt."""
    if not isinstance(tools, (list, tuple)):  # never iterated: a generator is the SDK's to consume
        return
    for tool in tools:
        schema = _function_schema(tool) if callable(tool) else canonical(tool)
        if schema is not None:
            view.tools.append(schema)


def _options(options: Any, view: RequestView) -> None:
    if options is None:
        return
    predict = _int(_get(options, "num_predict"))
    # -1: until the answer ends, -2: until the window is full; neither reserves a known amount.
    view.max_output_tokens = predict if predict is not None and predict >= 0 else None
    window = _int(_get(options, "num_ctx"))
    view.window = window if window is not None and window > 0 else None


class OllamaAdapter(Translation):
    provider = "ollama"

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        view = RequestView(
            provider=self.provider,
            operation="chat",
            model=_str(_get(kwargs, "model")),
            items=[],
            stream=_get(kwargs, "stream") is True,
        )
        _options(_get(kwargs, "options"), view)
        # ``format`` (a JSON schema, or "json") constrains the sampling and is not in the prompt: it
        # costs no input tokens (docs/budget.md). ``think`` draws on ``num_predict``, like OpenAI's
        # reasoning on ``max_completion_tokens``: nothing more to reserve.
        try:
            _tools(_get(kwargs, "tools"), view)
        except Exception as exc:  # a tool that will not serialise is the app's business
            view.unreadable = f"tools could not be read ({type(exc).__name__})"
        messages = _get(kwargs, "messages")
        if messages is not None:  # None is the SDK's default: a request with no messages
            items(messages, _message_item, view, name="messages", noun="message", plain_first=True, memo=memo)
        return view

    def read_response(self, api: str, result: Any) -> Answer | None:
        """A ``ChatResponse``, or its JSON (a body read off the wire)."""
        message = _get(result, "message")
        if message is None:
            return None
        reason = _str(_get(result, "done_reason"))
        return Answer(
            model=_str(_get(result, "model")),
            finish_reasons=[reason] if reason else [],
            input_tokens=_int(_get(result, "prompt_eval_count")),
            output_tokens=_int(_get(result, "eval_count")),
            text=_str(_get(message, "content")) or "",
        )

    def stream_reader(self, api: str) -> _OllamaChunks:
        return _OllamaChunks()

    reads_captures = True

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
        return as_call(body, model)


class _OllamaChunks:
    """``ChatResponse`` chunks: each one's ``message.content`` a piece of the answer; the last
    (``done``) carries the reason it ended and the counts."""

    def __init__(self) -> None:
        self._reply = Answer()
        self._text = AnswerText()

    def feed(self, chunk: Any) -> None:
        reply = self._reply
        reply.model = reply.model or _str(_get(chunk, "model"))
        message = _get(chunk, "message")
        text = _str(_get(message, "content")) if message is not None else None
        if text:
            self._text.add(text)
        if _get(chunk, "done") is True:
            reason = _str(_get(chunk, "done_reason"))
            if reason:
                reply.finish_reasons = [reason]
            reply.input_tokens = _int(_get(chunk, "prompt_eval_count"))
            reply.output_tokens = _int(_get(chunk, "eval_count"))

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


ADAPTER = OllamaAdapter()


def as_call(body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
    """A captured body is the call's keyword arguments (the SDK sends them as they are named)."""
    return "chat", body


PROVIDER = Provider(
    distribution="ollama",
    module="ollama",
    # Still 0.x: the record speaks majors, so every 0.x release is accepted (0.6 tested, the first
    # with ``tool_name`` and ``think``); a 1.0 is left untouched until it is tested.
    supported=(0, 0),
    # Not one of the GenAI conventions' well-known ``gen_ai.provider.name`` values (which have none
    # for a local server); the name the SDK, its server and OpenTelemetry's contrib use.
    label="ollama",
    adapter=ADAPTER,
    family=Methods(SITES, positional=("model", "messages")),
)
