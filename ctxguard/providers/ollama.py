"""Ollama's Python SDK (``ollama`` 0.x, on httpx): ``chat``, on ``Client``, ``AsyncClient`` and the module.

``messages`` carry roles ``system``, ``user``, ``assistant`` and ``tool``, the system message at the
head being the instruction; a message's ``images`` (base64, bytes or a path) are references, its
``thinking`` (a previous answer's) is read as text where the model's template writes it
(``Template.thinking``). Tool calls have no id: an assistant's call is known by its function's name,
and a ``tool`` message answers it by its ``tool_name``, as Gemini's do (``payload.tool_ref``).
``options.num_predict`` is the reserved output and ``options.num_ctx`` the window: the server holds
the prompt to it and silently drops what does not fit, so the request's own window is what the
budget must be judged against (``RequestView.window``; a request without one gets the server's
default, configured as ``Config.ollama_num_ctx``).

The server renders the messages and tools into one prompt with the model's chat template (the
Modelfile's ``TEMPLATE``, or a renderer of its own for the newest families), and that prompt is what
``num_ctx`` holds: its turn markers, the instructions it writes around the tools, the model's default
``SYSTEM``. ``Template`` says, per model family of Ollama's library, what those cost; a model whose
family is not in the table is counted as OpenAI's chat format frames a prompt, its tools as their JSON.

``ollama.chat`` is a method bound, at import, to the module's default ``Client``: the function it
calls is the class's, as it was before any patching, so a call through it reaches ctxguard once, at
the module's wrapper. ``stream=True`` returns a generator (an async one from ``AsyncClient``) that
sends its request on the first chunk; its ``ChatResponse`` chunks pass through unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..memo import Memo
from ..payload import TOOL_CALL, TOOL_RESULT, Answer, AnswerText, Item, RequestView, tool_ref
from ._read import as_int as _int
from ._read import as_str as _str
from ._read import canonical, earlier_thinking_not_read, elements, family, items, settings, tool_texts
from ._read import get as _get
from ._read import role as _role
from ._read import text_of as _text
from .base import CallSite, Identity, Methods, Provider, Translation, WireRoute
from .identity import url_server
from .mistral import tokenizer_surplus

__all__ = ["ADAPTER", "PROVIDER", "Template", "image_tokens", "template"]

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


#: Go's JSON encoder, which Ollama writes tools and arguments with, escapes these in strings.
_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})
#: A tool property's fields as Ollama's ``api.ToolProperty`` keeps them, in its order (the others,
#: ``title``, ``default``, ``format`` ..., are dropped when the server reads the request).
_PROPERTY_FIELDS = ("anyOf", "type", "items", "description", "enum", "properties", "required")


def _go_property(prop: Any) -> Any:
    if not isinstance(prop, Mapping):
        return prop
    out = {key: prop[key] for key in _PROPERTY_FIELDS if prop.get(key)}
    if "anyOf" in out and isinstance(out["anyOf"], list):
        out["anyOf"] = [_go_property(p) for p in out["anyOf"]]
    if "properties" in out and isinstance(out["properties"], Mapping):
        out["properties"] = {name: _go_property(p) for name, p in out["properties"].items()}
    return out


def _go_function(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's function as Ollama's ``api.ToolFunction`` marshals it: name, description (if any),
    parameters (type, ``$defs``, items, required, properties), unknown fields dropped."""
    function = tool.get("function")
    function = function if isinstance(function, Mapping) else {}
    params = function.get("parameters")
    params = params if isinstance(params, Mapping) else {}
    go_params: dict[str, Any] = {"type": params.get("type") or ""}
    go_params.update({key: params[key] for key in ("$defs", "items", "required") if params.get(key)})
    properties = params.get("properties")
    go_params["properties"] = ({name: _go_property(p) for name, p in properties.items()}
                               if isinstance(properties, Mapping) else None)
    out: dict[str, Any] = {"name": function.get("name") or ""}
    if function.get("description"):
        out["description"] = function["description"]
    out["parameters"] = go_params
    return out


def _go_json(obj: Any, separators: tuple[str, str] = (",", ":")) -> str:
    return json.dumps(obj, separators=separators, ensure_ascii=False, default=str).translate(_GO_ESCAPES)


def _compact(tool: Mapping[str, Any]) -> str:
    """``{{ . }}`` of a tool (``api.Tool.String``): its compact JSON, on a line of its own."""
    return _go_json({"type": tool.get("type") or "function", "function": _go_function(tool)}) + "\n"


def _hermes(tool: Mapping[str, Any]) -> str:
    """Qwen's Hermes-style line: ``{"type": "function", "function": {{ .Function }}}``."""
    return '\n{"type": "function", "function": ' + _go_json(_go_function(tool)) + "}"


def _spaced(tool: Mapping[str, Any]) -> str:
    """Ollama's Qwen 3.5 renderer: the tool's JSON with a space after each ``:`` and ``,``
    (``marshalWithSpaces``), on a line of its own."""
    return "\n" + _go_json({"type": tool.get("type") or "function", "function": _go_function(tool)}, (", ", ": "))


@dataclass(frozen=True)
class Template:
    """How a model family's chat template frames the prompt Ollama builds from a chat request, in
    tokens of the model's own tokenizer (docs/budget.md, "Ollama"): what ``RequestView`` counts for it.

    >>> template("qwen3.6:latest").framing, template("llama3.1:8b").priming, template("my-model") is None
    (5, 5, True)
    """

    #: Around each message: its turn's markers (``<|im_start|>user\n`` ... ``<|im_end|>\n``).
    framing: int
    #: Once a prompt: the tokenizer's BOS, the reply's turn, and what the template always writes.
    priming: int
    #: When the request's first message is not a system one: the system turn the template writes
    #: anyway, the model's default ``SYSTEM`` (Ollama puts it first) with its markers.
    system: int = 0
    #: The instructions the template writes with the tools (plain text; its special tokens are in
    #: ``tools_fixed``), and each tool as it writes it; no ``tool``: a template without tools (the
    #: server refuses tools for it), whose tools are counted as their JSON.
    tools: str = ""
    tools_fixed: int = 0
    tool: Callable[[Mapping[str, Any]], str] | None = None
    #: A tool call's markers beyond its name and one argument.
    call: int = 0
    #: What the model's tokenizer reads of a text beyond cl100k (Mistral's: all-caps words split
    #: finer, each digit a token: ``mistral.tokenizer_surplus``), a cost of the message.
    surplus: Callable[[str], int] | None = None
    #: Which answers' ``thinking`` the template writes into the prompt: ``"all"`` (as ctxguard reads a
    #: family whose template it does not know), ``"none"`` (a template with no ``.Thinking``),
    #: ``"current if think"`` (only the answers after the last user query, and only when the request
    #: sets ``think``: Qwen 3's template, ``and $.IsThinkSet (or $last (gt $i $lastUserIdx))``),
    #: ``"current unless no think"`` (the same unless ``think`` is false: Ollama's Qwen 3.5 renderer,
    #: ``isThinking && i > lastQueryIndex``). What it leaves out is sent but not read
    #: (``RequestView.not_read``), so the message's text and digest stay as sent.
    thinking: str = "all"


#: Ollama's Qwen 3.5 renderer (model/renderers/qwen35.go): ChatML turns, ``<think>\n`` after the
#: reply's, the tools as spaced JSON in a system turn with instructions for an XML call format.
#: ``<tool_call>`` and ``</tool_call>`` (4 of them) are single special tokens: left out of the text.
_QWEN35 = Template(framing=5, priming=5, tools=(
    "# Tools\n\nYou have access to the following functions:\n\n<tools>\n</tools>\n\nIf you choose to call a "
    "function ONLY reply in the following format with NO suffix:\n\n\n<function=example_function_name>\n"
    "<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value "
    "for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block "
    "must be nested within  XML tags\n- Required parameters MUST be specified\n- You may provide optional "
    "reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there "
    "is no function call available, answer the question like normal with your current knowledge and do not "
    "tell the user about function calls\n</IMPORTANT>"), tools_fixed=5 + 4, tool=_spaced, call=12,
    thinking="current unless no think")
#: Qwen 2, 2.5 and 3 in Ollama's library (template eb4402837c78): ChatML turns, the tools Hermes-style
#: in the system turn.
_HERMES = Template(framing=5, priming=3, tools=(
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>\n</tools>\n\nFor each function call, return a "
    "json object with function name and arguments within  XML tags:\n\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n'), tools_fixed=4 + 4, tool=_hermes, call=9)
#: Llama 3 (template 19753c18c01183), Llama 3.2 Vision: header turns, no tools.
_LLAMA3 = Template(framing=5, priming=5)
#: The instructions Llama 3.1 and 3.2 put before the last user message (their templates).
_LLAMA_TOOLS = (
    "\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments "
    "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
    "dictionary of argument name and its value}. Do not use variables.\n\n")
_LLAMA_SYSTEM_TOOLS = ("When you receive a tool call response, use the output to format an answer to the orginal "
                       "user question.\n\nYou are a helpful assistant with tool calling capabilities.")
#: Llama 3.1 and 3.3: a system turn for the tools with the knowledge date, the tools before the last
#: user message as compact JSON, ``Question:`` before it.
_LLAMA31 = Template(framing=5, priming=5, tools="\n\nCutting Knowledge Date: December 2023\n\n" + _LLAMA_SYSTEM_TOOLS
                    + _LLAMA_TOOLS + "\nQuestion: ", tools_fixed=5, tool=_compact, call=7)
#: Llama 3.2 (template 966de95ca8a6): a system turn always, ``Cutting Knowledge Date: December
#: 2023\n\n`` in it (10 tokens).
_LLAMA32 = Template(framing=5, priming=5 + 10, system=5, tools=_LLAMA_SYSTEM_TOOLS + _LLAMA_TOOLS, tool=_compact,
                    call=7)
#: Gemma, Gemma 2, Gemma 3 (template e0a42594d802): ``<start_of_turn>user\n`` ... ``<end_of_turn>\n``
#: (a system message is a user turn), ``<bos>`` and ``<start_of_turn>model\n``; no tools.
_GEMMA = Template(framing=5, priming=4)
#: Mistral v0.3 and Mistral Large (template 1ff5b64b61b9): ``[INST]`` ... ``[/INST]``, an answer and
#: ``</s>``, ``<s>``; the tools as a JSON list between ``[AVAILABLE_TOOLS]`` tokens, a call as
#: ``[TOOL_CALLS] [{"name": ..., "arguments": ...}]``.
_MISTRAL = Template(framing=2, priming=1, tools_fixed=2, tool=_compact, call=8, surplus=tokenizer_surplus)
#: Mistral NeMo and Small (3.0, 3.1), Devstral: the same without spaces, ``[SYSTEM_PROMPT]`` turns.
_MISTRAL_NEMO = replace(_MISTRAL, call=9)
#: Mistral Small 3.2 and Magistral: ``[TOOL_CALLS]`` name ``[CALL_ID]`` index ``[ARGS]`` arguments.
_MISTRAL_ARGS = replace(_MISTRAL, call=2)

#: By model family (the model's name without its tag; the longest key that names it): the templates
#: of Ollama's library, and each model's default ``SYSTEM`` (tokens of cl100k, with its two control
#: tokens). A family mapped to None has a template or renderer of its own not modelled here; it and a
#: family not in the table are counted as OpenAI's chat format frames a prompt, their tools as JSON.
_TEMPLATES: dict[str, Template | None] = {
    "qwen3.5": _QWEN35,
    "qwen3.6": _QWEN35,  # recorded counts match the 3.5 renderer to the token (tests/data/recorded)
    "qwen3": replace(_HERMES, thinking="current if think"),
    "qwen2.5": replace(_HERMES, system=5 + 16),  # SYSTEM "You are Qwen, created by Alibaba Cloud. ..."
    "qwen2": replace(_HERMES, system=5 + 16),
    "qwen3-coder": None,  # renderer qwen3-coder: XML tools, a default system line
    "qwen3-vl": None,  # renderer qwen3-vl
    "llama3": _LLAMA3,
    "llama3.1": _LLAMA31,
    "llama3.3": _LLAMA31,
    "llama3.2": _LLAMA32,
    "llama3.2-vision": _LLAMA3,  # template 715415638c89: header turns, no system, no tools
    "gemma": _GEMMA,
    "gemma2": _GEMMA,
    "gemma3": _GEMMA,
    "gemma3n": _GEMMA,
    "mistral": _MISTRAL,
    "mistral-large": _MISTRAL,
    "mistral-nemo": _MISTRAL_NEMO,
    "mistral-small": replace(_MISTRAL_NEMO, system=2 + 151),  # blob 6db27cd4e277's SYSTEM, "Mistral Small 3"
    "mistral-small3.1": replace(_MISTRAL_NEMO, system=2 + 337),
    "mistral-small3.2": replace(_MISTRAL_ARGS, system=2 + 482),  # blob 706c4d1164f7
    "magistral": replace(_MISTRAL_ARGS, system=2 + 164),  # blob 35f7a1efc383
    "devstral": replace(_MISTRAL_NEMO, system=2 + 1173),  # blob ea9ec42474e0
    "mixtral": Template(framing=2, priming=1, surplus=tokenizer_surplus),  # template 53d74de0d84c: [INST], no tools
    "codestral": Template(framing=2, priming=1, surplus=tokenizer_surplus),
    "phi3": Template(framing=4, priming=3),  # <|user|>\n ... <|end|>\n, <s> and <|assistant|>\n
    "phi3.5": Template(framing=4, priming=3),
    "phi4": Template(framing=6, priming=4),  # <|im_start|>user<|im_sep|>\n ... <|im_end|>\n
    # <|user|> ... <|end|>; the tools between <|tool|> tokens in the system turn, with a default line.
    "phi4-mini": Template(framing=2, priming=1, tools="You are a helpful assistant with some tools.",
                          tools_fixed=4, tool=_compact, call=7),
    # User and Assistant markers, end of sentence after an answer; begin of sentence (blob 369ca498f347).
    "deepseek-r1": Template(framing=2, priming=2, thinking="none"),  # ``.Content`` only: no ``.Thinking``
}


@functools.lru_cache(maxsize=256)
def template(model: str | None) -> Template | None:
    """The chat template ``model``'s family renders its prompt with, if ctxguard knows it."""
    found = family(model, _TEMPLATES)
    return _TEMPLATES[found] if found is not None else None


def _image_ref(image: Any) -> str:
    """A digest of the image as given (base64 text, a path or bytes; an SDK ``Image`` by its value):
    the bytes themselves never leave this function."""
    value = _get(image, "value") if not isinstance(image, (str, bytes)) else image
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")
    return "image:" + hashlib.blake2b(raw, digest_size=16).hexdigest()


def _message_item(message: Any, model: str | None) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    found = template(model)
    cost = 0
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
        cost += found.call if found is not None else 0
    if _role(_get(message, "role"), "other") == "tool":
        # Without a ``tool_name`` the result answers no call by name (docs/supported.md says so).
        refs.append(tool_ref(TOOL_RESULT, None, _str(_get(message, "tool_name")) or ""))
    text = "\n".join(texts)
    if found is not None and found.surplus is not None:
        cost += found.surplus(text)
    cost += image_tokens(model) * len(images)
    return (_role(_get(message, "role"), "other"), text, tuple(refs), "message", cost)


def _function_schema(function: Callable[..., Any]) -> Mapping[str, Any] | None:
    """The schema the SDK sends for a Python function (``ollama._utils.convert_function_to_tool``,
    already imported with the SDK); None if it cannot convert it (the SDK then raises its own error)."""
    try:
        return _converted(function)
    except Exception:
        return None


@functools.lru_cache(maxsize=256)
def _converted(function: Callable[..., Any]) -> Mapping[str, Any]:
    """Python functions given as tools, by identity: the SDK's schema of each, remembered (its
    pydantic conversion builds a model class per call, too slow to repeat per request); a failure
    is not remembered. Bounded: an app's tools are few."""
    convert = sys.modules["ollama._utils"].convert_function_to_tool
    dumped: Mapping[str, Any] = json.loads(canonical(convert(function).model_dump(exclude_none=True)))
    return dumped


def _tool_dicts(tools: list[Any] | tuple[Any, ...]) -> list[Mapping[str, Any]]:
    """Tools as they are sent: dicts as they are, the SDK's ``Tool`` as its JSON, Python functions as
    the schema the SDK makes of them (one it cannot convert is the SDK's error to raise)."""
    dicts = []
    for tool in tools:
        found = tool if isinstance(tool, Mapping) else _function_schema(tool) if callable(tool) else json.loads(
            canonical(tool))
        if found is not None:
            dicts.append(found)
    return dicts


def _as_json(tools: list[Any] | tuple[Any, ...]) -> list[str]:
    """A model whose template ctxguard does not know: its tools counted as their JSON."""
    return [canonical(tool) for tool in _tool_dicts(tools)]


def _render(found: Template, tools: list[Any] | tuple[Any, ...]) -> list[str]:
    """The tools as ``found`` writes them, then its instructions for them."""
    dicts = _tool_dicts(tools)
    if found.tool is None or not dicts:
        return [canonical(tool) for tool in dicts]
    return [*map(found.tool, dicts), *((found.tools,) if found.tools else ())]


#: One reader a template (``tool_texts`` caches the texts by reader and tools).
_READERS = {found: functools.partial(_render, found) for found in _TEMPLATES.values() if found is not None}


def _tools(tools: Any, view: RequestView, found: Template | None) -> None:
    """The tools as the model's chat template writes them into the prompt, with its instructions for
    them; as their JSON for a model whose template ctxguard does not know."""
    if not isinstance(tools, (list, tuple)) or not tools:  # never iterated: a generator is the SDK's to consume
        return
    view.tools = tool_texts(tools, _as_json if found is None else _READERS[found])
    if found is not None and found.tool is not None and view.tools:
        view.prompt_overhead += found.tools_fixed


#: The sampling parameters of a request's ``options`` -> ``RequestView.settings``.
_SETTINGS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "seed": "seed", "stop": "stop_sequences",
             "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty"}


def _options(options: Any, view: RequestView) -> None:
    if options is None:
        return
    settings(options, _SETTINGS, view)
    predict = _int(_get(options, "num_predict"))
    # -1: until the answer ends, -2: until the window is full; neither reserves a known amount.
    view.max_output_tokens = predict if predict is not None and predict >= 0 else None
    window = _int(_get(options, "num_ctx"))
    view.window = window if window is not None and window > 0 else None


def _thinking(message: Any) -> list[str]:
    return [_str(_get(message, "thinking")) or ""]


def _thinking_not_read(view: RequestView, messages: Any, rule: str, think: Any) -> None:
    """The answers' ``thinking`` the family's template leaves out of the prompt (``Template.thinking``),
    as not read: the messages are the request's only items, one each. ``think``: the request's (None
    when not set; a level such as ``"high"`` is set, and on)."""
    if rule == "none" or (rule == "current if think" and think is None) or (
            rule == "current unless no think" and think is False):
        earlier_thinking_not_read(view, messages, 0, _thinking, before=len(view.items))  # none of it
    else:
        earlier_thinking_not_read(view, messages, 0, _thinking)


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
        # ``format``: "json", or the JSON schema the answer follows.
        output_format = _get(kwargs, "format")
        if output_format == "json" or isinstance(output_format, Mapping):
            view.settings["output.type"] = "json"
        # ``format`` (a JSON schema, or "json") constrains the sampling and is not in the prompt: it
        # costs no input tokens (docs/budget.md). ``think`` draws on ``num_predict``, like OpenAI's
        # reasoning on ``max_completion_tokens``: nothing more to reserve.
        found = template(view.model)
        try:
            _tools(_get(kwargs, "tools"), view, found)
        except Exception as exc:  # a tool that will not serialise is the app's business
            view.unreadable = f"tools could not be read ({type(exc).__name__})"
        messages = _get(kwargs, "messages")
        if messages is not None:  # None is the SDK's default: a request with no messages
            items(messages, _message_item, view, name="messages", noun="message", plain_first=True, memo=memo,
                  plain_cost=found.surplus if found is not None else None)
            if found is not None and found.thinking != "all":
                _thinking_not_read(view, messages, found.thinking, _get(kwargs, "think"))
        if found is not None:
            view.message_framing = found.framing
            # The server puts the model's default system prompt first when the request has none.
            view.reply_priming = found.priming + (found.system if not view.items or view.items[0][0] != "system"
                                                  else 0)
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

    def identity(self, instance: Any) -> Identity | None:
        """The server of the client's host (``Client(host=...)``, ``OLLAMA_HOST``, or the default
        ``127.0.0.1:11434``): the base URL of its httpx client, which every request is sent to."""
        url = getattr(getattr(instance, "_client", None), "base_url", None)
        server = url_server(str(url)) if url is not None else None
        return (None, *server) if server is not None else None

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
    wire=(WireRoute("/api/chat", ("model", "messages"), lambda body, path: as_call(body)),),
)
