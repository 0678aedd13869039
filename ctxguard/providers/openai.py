"""OpenAI SDK (1.x on httpx, 3.x on httpx2): call sites and request/response translation.

Only translation lives here: keyword arguments of ``chat.completions.create``
and ``responses.create`` (and ``parse``) into a ``RequestView``, responses and
stream chunks into a ``Answer``. ``stream()`` helpers call ``create`` and are
covered through it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from ..memo import Memo
from ..payload import (
    CHOICES_KEPT,
    TOOL_CALL,
    TOOL_ELSEWHERE,
    TOOL_RESULT,
    Answer,
    AnswerText,
    Item,
    RequestView,
    tool_ref,
)
from ..tokens import NON_TEXT_PART
from . import identity
from ._image import openai_tokens, size_of_url
from ._read import as_int as _int
from ._read import as_str as _str
from ._read import (
    canonical,
    elements,
    exact_key,
    items,
    jsonable,
    output_type,
    rendering,
    settings,
    structured_parts,
    tool_texts,
)
from ._read import fields as _fields
from ._read import get as _get
from ._read import role as _role
from ._read import text_of as _text
from .base import CallSite, Identity, Methods, Provider, Translation, WireRoute
from .identity import resource_identity
from .openai_shaped import COMPATIBLE, read_as

__all__ = ["ADAPTER", "PROVIDER"]

_CHAT = "openai.resources.chat.completions.completions"
_RESPONSES = "openai.resources.responses.responses"
_BETA_RESPONSES = "openai.resources.beta.responses.responses"  # openai 3.x: the beta Responses API

SITES = (
    CallSite(_CHAT, "Completions.create", "chat.completions"),
    CallSite(_CHAT, "Completions.parse", "chat.completions"),
    CallSite(_CHAT, "AsyncCompletions.create", "chat.completions", "async"),
    CallSite(_CHAT, "AsyncCompletions.parse", "chat.completions", "async"),
    CallSite(_RESPONSES, "Responses.create", "responses"),
    CallSite(_RESPONSES, "Responses.parse", "responses"),
    CallSite(_RESPONSES, "AsyncResponses.create", "responses", "async"),
    CallSite(_RESPONSES, "AsyncResponses.parse", "responses", "async"),
    CallSite(_BETA_RESPONSES, "Responses.create", "responses"),
    CallSite(_BETA_RESPONSES, "AsyncResponses.create", "responses", "async"),
)

#: SDK results that hold the HTTP response instead of a parsed answer (streams,
#: ``with_raw_response`` / ``with_streaming_response``): (module, class, attribute holding it).
HTTP_RESULTS = (
    ("openai._streaming", "Stream", "response"),
    ("openai._streaming", "AsyncStream", "response"),
    ("openai._response", "BaseAPIResponse", "http_response"),
    ("openai._legacy_response", "LegacyAPIResponse", "http_response"),
)


def _image(model: str | None, detail: Any, url: str | None) -> int:
    """What an image part costs: by its size when it is a data URL, else the bound (docs/budget.md)."""
    return openai_tokens(model, detail, size_of_url(url) if url else None)


def _parts(content: Any, texts: list[str], refs: list[str], model: str | None) -> int:
    """Text of every content part; non-text parts as references (never their bytes). Returns
    the tokens the non-text parts cost."""
    cost = 0
    for part in structured_parts(content, texts):
        kind = _get(part, "type")
        text = _str(_get(part, "text")) or _str(_get(part, "refusal"))
        if text is not None:
            texts.append(text)
        elif kind == "image_url":
            image = _get(part, "image_url")
            url = _str(_get(image, "url")) if image is not None else None
            refs.append(url or "image")
            cost += _image(model, _get(image, "detail") if image is not None else None, url)
        elif kind == "input_image":
            url = _str(_get(part, "image_url"))
            refs.append(url or _str(_get(part, "file_id")) or "image")
            cost += _image(model, _get(part, "detail"), url)
        elif kind == "input_audio":
            audio = _get(part, "input_audio")
            refs.append(_str(_get(audio, "data")) or "audio") if audio is not None else refs.append("audio")
            cost += NON_TEXT_PART
        elif kind == "file":
            file = _get(part, "file")
            ref = None
            if file is not None:
                ref = _str(_get(file, "file_id")) or _str(_get(file, "file_data"))
            refs.append(ref or "file")
            cost += NON_TEXT_PART
        elif kind == "input_file":
            ref = _str(_get(part, "file_id")) or _str(_get(part, "file_url")) or _str(_get(part, "file_data"))
            refs.append(ref or "file")
            cost += NON_TEXT_PART
        elif kind is not None:
            refs.append(f"id:part:{_text(kind)}")
    return cost


#: A Chat Completions tool call is its own message to the model, addressed to the function
#: (``<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>``
#: in the rendering OpenAI documents for its open-weight models): tokens beyond its name and
#: arguments and beyond the one message framing already counted.
TOOL_CALL_FRAMING = 7


def arguments_as_read(arguments: str) -> str:
    """A tool call's arguments as the model reads them: OpenAI parses the JSON an app gives back and
    renders it compact, so whitespace between its tokens costs nothing (a call's arguments
    pretty-printed with two spaces, 464 tokens to cl100k, are 353 compact, and the API reported the
    request's 380 where 490 were counted with them as sent: n0isy/openai-tokens-count, which fits its
    counts to the API, renders them without that whitespace too). Arguments that are not JSON, or
    nest deeper than Python's parser goes, are read as sent. Most are compact already (what the
    model wrote) and are returned untouched."""
    if "\n" not in arguments and ": " not in arguments and ", " not in arguments:
        return arguments
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments
    return json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))


def _arguments(function: Any) -> str:
    arguments = _get(function, "arguments")
    return arguments_as_read(arguments) if isinstance(arguments, str) else _text(arguments or "")


def _parallel(calls: list[Any] | tuple[Any, ...]) -> str:
    """Several tool calls of one message as the model reads them: one call to the
    ``multi_tool_use.parallel`` wrapper the Chat models are given for parallel calls, its
    ``tool_uses`` naming each function (``functions.NAME``) and its arguments, compact. Counted so,
    a recorded request with two parallel calls (otel-chat-tools-2, gpt-4o-mini) is 94 for the 99
    reported, where a call apiece was 78 (n0isy/openai-tokens-count, fitted to the API, charges a
    message of several calls ~13 tokens more than as many single calls as well)."""
    uses = []
    for call in calls:
        function = _get(call, "function")
        name = _text(_get(function, "name") or "") if function is not None else ""
        arguments = _arguments(function) if function is not None else ""
        uses.append(f'{{"recipient_name":"functions.{name}","parameters":{arguments or "{}"}}}')
    return 'multi_tool_use.parallel {"tool_uses":[' + ",".join(uses) + "]}"


def _chat_item(message: Any, model: str | None) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    cost = _parts(_get(message, "content"), texts, refs, model)
    calls = elements(_get(message, "tool_calls"), "tool_calls")
    if calls:  # one call, or several as one call of the parallel wrapper
        cost += TOOL_CALL_FRAMING
        function = _get(calls[0], "function")
        if len(calls) > 1:
            texts.append(_parallel(calls))
        elif function is not None:
            texts.append(f"{_text(_get(function, 'name') or '')} {_arguments(function)}")
    for call in calls:
        refs.append(tool_ref(TOOL_CALL, _str(_get(call, "id"))))
    function_call = _get(message, "function_call")
    if function_call is not None:
        called = _text(_get(function_call, "name") or "")
        texts.append(f"{called} {_arguments(function_call)}")
        refs.append(tool_ref(TOOL_CALL, None, called))  # legacy function calling: paired by name
    role = _role(_get(message, "role"), "other")
    # Only with their key: a bare ``{"role": "tool", "content": ...}`` reads as the plain message it
    # is (``_read.items`` reads those inline, with no refs).
    call_id = _str(_get(message, "tool_call_id"))
    name = _str(_get(message, "name"))
    if call_id:
        refs.append(tool_ref(TOOL_RESULT, call_id))
    elif name and role == "function":
        refs.append(tool_ref(TOOL_RESULT, None, name))  # legacy function calling: paired by name
    if name:
        refs.append(f"id:name={name}")
    return (role, "\n".join(texts), tuple(refs), "message", cost)


#: Responses API items that call a tool the app runs, each answered by an item of its type plus
#: ``_output`` with the same ``call_id`` (the SDK's input item types). Calls the service runs
#: itself (web search, file search, MCP, code interpreter, image generation) carry their results
#: and are not paired.
_CALLS = frozenset({
    "function_call", "custom_tool_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call",
})
_RESULTS = frozenset(f"{kind}_output" for kind in _CALLS)


def _response_item(item: Any, model: str | None) -> Item:
    if isinstance(item, str):
        return ("user", item, (), "message", 0)
    kind = _get(item, "type")
    role = _get(item, "role")
    texts: list[str] = []
    refs: list[str] = []
    if role is not None or kind == "message":
        cost = _parts(_get(item, "content"), texts, refs, model)
        return (_role(role, "user"), "\n".join(texts), tuple(refs), "message", cost)
    if kind == "reasoning":
        for summary in elements(_get(item, "summary"), "reasoning summary"):
            text = _str(_get(summary, "text"))
            if text:
                texts.append(text)
        return ("assistant", "\n".join(texts), ("id:reasoning",), "message", 0)
    for key in ("name", "arguments", "input", "action"):
        value = _get(item, key)
        if isinstance(value, str):
            texts.append(arguments_as_read(value) if key == "arguments" else value)
    output = _get(item, "output")
    cost = _parts(output, texts, refs, model) if output is not None else 0
    kind_name = kind if isinstance(kind, str) else "item"
    call_id = _str(_get(item, "call_id"))
    if kind_name in _CALLS:
        refs.append(tool_ref(TOOL_CALL, call_id))
    elif kind_name in _RESULTS:
        refs.append(tool_ref(TOOL_RESULT, call_id))
    elif call_id:
        refs.append(f"id:call_id={call_id}")
    item_id = _str(_get(item, "id"))
    if item_id:
        refs.append(f"id:id={item_id}")
    if kind_name == "item_reference" or (kind is None and item_id and _get(item, "call_id") is None):
        refs.append(TOOL_ELSEWHERE)  # a stored item by its id: it may be any call or result
    refs.append(f"id:type={kind_name}")
    is_result = kind_name.endswith("_output") or output is not None
    return ("tool" if is_result else "assistant", "\n".join(texts), tuple(refs), "message", cost)


#: OpenAI shows the model its function tools as TypeScript declarations in a ``functions``
#: namespace, and a JSON schema response format under a heading (the format its open-weight
#: models document, "harmony"; counting that text, not the JSON the SDK sends, is what matches
#: the prompt tokens reported: docs/budget.md). Header and footer are counted once a request.
_TOOLS_FRAME = "# Tools\n\n## functions\n\nnamespace functions {\n\n} // namespace functions"
_TS_DEPTH = 8


def _typescript(schema: Any, depth: int = 0) -> str:
    """A JSON schema as the TypeScript type OpenAI renders it as."""
    if not isinstance(schema, Mapping) or depth > _TS_DEPTH:
        return "any"
    if "enum" in schema and isinstance(schema["enum"], (list, tuple)):
        return " | ".join(canonical(value) for value in schema["enum"]) or "any"
    if "const" in schema:
        return canonical(schema["const"])
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), (list, tuple)):
            joiner = " & " if key == "allOf" else " | "
            return joiner.join(_typescript(option, depth + 1) for option in schema[key]) or "any"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    kind = schema.get("type")
    if isinstance(kind, (list, tuple)):
        return " | ".join(_typescript({**schema, "type": one}, depth + 1) for one in kind) or "any"
    if kind == "array":
        return f"{_typescript(schema.get('items'), depth + 1)}[]"
    if kind == "object" or isinstance(schema.get("properties"), Mapping):
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            return "object"
        required = schema.get("required")
        if not isinstance(required, (list, tuple)):
            required = ()
        lines = ["{"]
        for name, value in properties.items():
            description = _get(value, "description") if isinstance(value, Mapping) else None
            if isinstance(description, str) and description:
                lines.append(f"// {description}")
            lines.append(f"{name}{'' if name in required else '?'}: {_typescript(value, depth + 1)},")
        lines.append("}")
        return "\n".join(lines)
    if kind == "integer":
        return "number"
    return kind if isinstance(kind, str) else "any"


def _function_text(function: Any) -> str:
    """One function tool as OpenAI declares it to the model."""
    lines = []
    description = _str(_get(function, "description"))
    if description:
        lines.append(f"// {description}")
    parameters = _get(function, "parameters")
    name = _text(_get(function, "name") or "")
    if isinstance(parameters, Mapping) and parameters.get("properties"):
        lines.append(f"type {name} = (_: {_typescript(parameters)}) => any;")
    else:
        lines.append(f"type {name} = () => any;")
    return "\n".join(lines)


def _format_text(format_: Any) -> str | None:
    """A ``json_schema`` response format as the model reads it: a heading and the compact schema."""
    if _get(format_, "type") != "json_schema":
        return None
    spec = _get(format_, "json_schema") or format_  # Chat nests it; the Responses API does not
    schema = _get(spec, "schema")
    lines = ["# Response Formats", "", f"## {_text(_get(spec, 'name') or 'response')}", ""]
    description = _str(_get(spec, "description"))
    if description:
        lines.append(f"// {description}")
    lines.append(json.dumps(schema, separators=(",", ":"), default=jsonable, ensure_ascii=False))
    return "\n".join(lines)


def _tools(tools: Any, view: RequestView) -> None:
    """Function tools as OpenAI renders them; any other tool (web search, MCP, a custom grammar) as
    canonical JSON, its nearest stand-in."""
    if not isinstance(tools, (list, tuple)):
        return
    try:
        view.tools = tool_texts(tools, _tool_texts)
    except Exception as exc:  # a tool schema that will not serialise is the app's business
        view.unreadable = f"tools could not be read ({type(exc).__name__})"


def _tool_texts(tools: list[Any] | tuple[Any, ...]) -> list[str]:
    texts = []
    functions = 0
    for tool in tools:
        kind = _get(tool, "type")
        function = _get(tool, "function") if kind == "function" else None
        if function is None and (kind == "function" or (kind is None and _get(tool, "name") is not None)):
            function = tool  # a Responses API function tool, or a legacy ``functions`` entry
        if function is None:
            texts.append(canonical(tool))
            continue
        functions += 1
        texts.append(rendering(("tool", canonical(function)), functools.partial(_function_text, function)))
    if functions:
        texts.append(_TOOLS_FRAME)
    return texts


def _parsed_format(value: Any, api: str) -> Any:
    """``.parse(response_format=Model)`` / ``.parse(text_format=Model)``: the class converted the way
    the SDK converts it before sending (the SDK is installed: the app is calling it)."""
    if not isinstance(value, type):
        return value
    if api == "responses":
        from openai.lib._parsing._responses import type_to_text_format_param

        return type_to_text_format_param(value)
    from openai.lib._parsing._completions import type_to_response_format_param

    return type_to_response_format_param(value)


def _response_format(value: Any, api: str, view: RequestView) -> None:
    """A structured-output schema is counted like the tools: it is in every request, and in the prompt.
    Cached by its canonical JSON, or by the pydantic class ``.parse`` was given."""
    if value is None:
        return
    try:
        key = ("format", value if isinstance(value, type) else exact_key(value) or canonical(value))
        text = rendering(key, lambda: _format_text(_parsed_format(value, api)) or "")
    except Exception:  # a schema the SDK itself will refuse to convert: its error reaches the app
        return
    if text:
        view.tools.append(text)


#: The request's sampling parameters: Chat Completions' and the Responses API's names ->
#: ``RequestView.settings``.
_CHAT_SETTINGS = {"temperature": "temperature", "top_p": "top_p", "stop": "stop_sequences", "seed": "seed",
                  "n": "choice.count", "frequency_penalty": "frequency_penalty",
                  "presence_penalty": "presence_penalty"}
_RESPONSES_SETTINGS = {"temperature": "temperature", "top_p": "top_p"}


class OpenAIAdapter(Translation):
    provider = "openai"

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        model = _str(_get(kwargs, "model"))
        view = RequestView(
            provider=self.provider,
            operation="chat",
            model=model,
            items=[],
            stream=_get(kwargs, "stream") is True,
        )
        _tools(_get(kwargs, "tools") or _get(kwargs, "functions"), view)
        if api == "responses":
            self._responses(kwargs, view, memo)
        else:
            self._chat(kwargs, view, memo)
        return view

    def _chat(self, kwargs: Mapping[str, Any], view: RequestView, memo: Memo | None) -> None:
        view.max_output_tokens = _int(_get(kwargs, "max_completion_tokens")) or _int(_get(kwargs, "max_tokens"))
        settings(kwargs, _CHAT_SETTINGS, view)
        if "response_format" in kwargs:
            response_format = _get(kwargs, "response_format")
            _response_format(response_format, "chat.completions", view)
            kind = "json_schema" if isinstance(response_format, type) else _get(response_format, "type")
            if output_type(kind) is not None:
                view.settings["output.type"] = output_type(kind)
        items(_get(kwargs, "messages"), _chat_item, view, name="messages", noun="message", plain_first=True, memo=memo)

    def _responses(self, kwargs: Mapping[str, Any], view: RequestView, memo: Memo | None) -> None:
        view.max_output_tokens = _int(_get(kwargs, "max_output_tokens"))
        settings(kwargs, _RESPONSES_SETTINGS, view)
        if "text_format" in kwargs or "text" in kwargs:
            text_format = _get(kwargs, "text_format")
            requested = text_format or _get(_get(kwargs, "text"), "format")
            _response_format(requested, "responses", view)
            kind = "json_schema" if isinstance(requested, type) else _get(requested, "type")
            if output_type(kind) is not None:
                view.settings["output.type"] = output_type(kind)
        previous = _str(_get(kwargs, "previous_response_id"))
        if previous:
            view.settings["previous_response.id"] = previous
        for key in ("previous_response_id", "conversation"):
            if _get(kwargs, key) is not None:
                view.history_elsewhere = f"history is provider-managed ({key})"
        if _get(kwargs, "context_management") is not None:
            # Compaction past a threshold, which the answer shows as a ``compaction`` output item: asked
            # for, and said (unlike ``truncation="auto"``, whose answer says nothing of what it dropped).
            view.server_edits = "the request lets the provider compact its context (context_management)"
        view.tool_results = "later"  # paired by call id wherever the output is (docs/design.md)
        instructions = _get(kwargs, "instructions")
        if isinstance(instructions, str) and instructions:
            view.items.append(("system", instructions, (), "instructions", 0))
        elif _get(kwargs, "prompt") is not None:
            # A stored prompt carries the instructions server-side: stand in for it by reference.
            prompt = _get(kwargs, "prompt")
            ref = f"id:prompt={_get(prompt, 'id')}@{_get(prompt, 'version')}"
            view.items.append(("system", "", (ref,), "instructions", 0))
        raw = _get(kwargs, "input")
        if raw is None:
            return
        if isinstance(raw, str):
            view.items.append(("user", raw, (), "message", 0))
            return
        items(raw, _response_item, view, name="input", noun="input item", plain_first=True, memo=memo)

    def read_response(self, api: str, result: Any) -> Answer | None:
        if api == "responses":
            return _response_reply(result)
        choices, model, id_, usage = _fields(result, "choices", "model", "id", "usage")
        if not isinstance(choices, list):
            return None  # a raw HTTP response (with_raw_response) or something else: nothing to read
        message = _get(choices[0], "message") if choices else None
        finish_reasons = []
        # A loop, not a comprehension over a generator (two frames a call): ~3,000 instructions a call
        # less at 20 messages (two runs a side; runs of the same code spread by ~3,500).
        for choice in choices:
            reason = _str(_get(choice, "finish_reason"))
            if reason:
                finish_reasons.append(reason)
        reply = Answer(
            model=_str(model),
            id=_str(id_),
            finish_reasons=finish_reasons,
            text=(_str(_get(message, "content")) or "") if message is not None else "",
        )
        _chat_usage(reply, usage)
        return reply

    def stream_reader(self, api: str) -> _ResponsesStream | _ChatStream:
        return _ResponsesStream() if api == "responses" else _ChatStream()

    def identity(self, instance: Any) -> Identity | None:
        return resource_identity(instance)

    def for_route(self, label: str) -> OpenAIAdapter:
        """The accounting of a call that reaches ``label``: the provider's own where its module reads
        an OpenAI-shaped request (``openai_shaped``: Anthropic's, Mistral's and Cohere's OpenAI-compatible
        endpoints), OpenAI Chat's everywhere else.

        >>> ADAPTER.for_route("mistral_ai").route, ADAPTER.for_route("groq") is ADAPTER
        ('mistral_ai', True)
        """
        return _ROUTED.get(label, ADAPTER)

    reads_captures = True

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
        return as_call(body, model)


def _chat_usage(reply: Answer, usage: Any) -> None:
    """Chat Completions' ``usage``: its totals include the cached and the reasoning tokens."""
    if usage is None:
        return
    inputs, outputs, prompt, completion = _fields(
        usage, "prompt_tokens", "completion_tokens", "prompt_tokens_details", "completion_tokens_details")
    reply.input_tokens, reply.output_tokens = _int(inputs), _int(outputs)
    if prompt is not None:
        reply.cache_read_tokens = _int(_get(prompt, "cached_tokens"))
    if completion is not None:
        reply.reasoning_tokens = _int(_get(completion, "reasoning_tokens"))


def _response_reply(result: Any) -> Answer | None:
    output = _get(result, "output")
    if not isinstance(output, list):
        return None
    usage = _get(result, "usage")
    texts = []
    for item in output:
        for part in _get(item, "content") or ():
            # Output text only: a reasoning item's ``reasoning_text`` is not the answer.
            text = _str(_get(part, "text")) if _get(part, "type") == "output_text" else None
            if text:
                texts.append(text)
    status = _str(_get(result, "status"))
    error = _get(result, "error") if status == "failed" else None
    reply = Answer(
        error=(_str(_get(error, "code")) or "failed") if status == "failed" else None,
        model=_str(_get(result, "model")),
        id=_str(_get(result, "id")),
        finish_reasons=[status] if status else [],
        text="".join(texts),
    )
    if usage is not None:  # totals that include the cached and the reasoning tokens
        reply.input_tokens = _int(_get(usage, "input_tokens"))
        reply.output_tokens = _int(_get(usage, "output_tokens"))
        details = _get(usage, "input_tokens_details")
        if details is not None:
            reply.cache_read_tokens = _int(_get(details, "cached_tokens"))
        details = _get(usage, "output_tokens_details")
        if details is not None:
            reply.reasoning_tokens = _int(_get(details, "reasoning_tokens"))
    return reply


class _ChatStream:
    def __init__(self) -> None:
        self._reply = Answer()
        self._text = AnswerText()

    def feed(self, chunk: Any) -> None:
        reply = self._reply
        error = _get(chunk, "error")
        if error is not None:  # the service failed midway: an error object instead of a chunk
            reply.error = _str(_get(error, "type")) or _str(_get(error, "code")) or "error"
            return
        reply.id = reply.id or _str(_get(chunk, "id"))
        reply.model = reply.model or _str(_get(chunk, "model"))
        for choice in _get(chunk, "choices") or ():
            delta = _get(choice, "delta")
            text = _str(_get(delta, "content")) if delta is not None else None
            if text:
                self._text.add(text)
            reason = _str(_get(choice, "finish_reason"))
            if reason and len(reply.finish_reasons) < CHOICES_KEPT:
                reply.finish_reasons.append(reason)
        _chat_usage(reply, _get(chunk, "usage"))

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


class _ResponsesStream:
    _FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        self.complete = False  # the final event arrived (``StreamReader``)
        self._final: Answer | None = None
        self._started = Answer()  # who answers, from the first event: kept if the stream fails midway
        self._text = AnswerText()

    def feed(self, event: Any) -> None:
        kind = _get(event, "type")
        if kind == "response.output_text.delta":
            delta = _str(_get(event, "delta"))
            if delta:
                self._text.add(delta)
        elif kind in self._FINAL:
            self._final = _response_reply(_get(event, "response"))
            self.complete = True
        elif kind == "response.created":
            response = _get(event, "response")
            self._started.id, self._started.model = _str(_get(response, "id")), _str(_get(response, "model"))

    def reply(self) -> Answer:
        # The final response carries the whole text (no longer than the event that brought it).
        reply = self._final or self._started
        return reply if reply.text else self._text.fill(reply)


class _RoutedAdapter(OpenAIAdapter):
    """The openai SDK pointed at another provider's OpenAI-compatible endpoint (``route``: its label):
    a Chat Completions call is counted as that provider accounts for it (``openai_shaped``), since
    it reads the messages and tools as its own API's and renders them for its own models; what else
    the module reads of the request (its settings, its window) is that provider's too. The label,
    the server and the answer are read as for any openai SDK call. The Responses API keeps OpenAI's
    accounting: none of these endpoints serves it as its own API."""

    def __init__(self, route: str) -> None:
        self.route = route

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        view = None
        if api == "chat.completions":
            view = read_as(self.route, kwargs, _str(_get(kwargs, "model")) or "", memo)
        if view is None:
            return super().normalise(api, kwargs, memo)
        view.provider = self.provider
        return view


ADAPTER = OpenAIAdapter()
#: The accounting per provider an openai client reaches, where it is not OpenAI's (``for_route``).
_ROUTED = {label: _RoutedAdapter(label) for label in COMPATIBLE}


def as_call(body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
    """A captured body is the call's keyword arguments; a Responses body has no ``messages``."""
    responses = "messages" not in body and ("input" in body or "instructions" in body)
    return ("responses" if responses else "chat.completions"), body


PROVIDER = Provider(
    distribution="openai",
    module="openai",
    supported=(1, 3),
    label="openai",
    adapter=ADAPTER,
    family=Methods(SITES, http_results=HTTP_RESULTS),
    routes=identity.ROUTES,
    # Whole path segments, so ``/v1/threads/{id}/messages`` (Assistants) is no model endpoint; every
    # OpenAI-compatible server (vLLM, LM Studio, gateways, Groq...) answers at the same paths.
    wire=(WireRoute("/chat/completions", ("model", "messages"), lambda body, path: ("chat.completions", body)),
          WireRoute("/responses", ("model", "input"), lambda body, path: ("responses", body))),
)
