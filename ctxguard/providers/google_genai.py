"""Google GenAI SDK (``google-genai``): ``models.generate_content`` / ``generate_content_stream``, translated.

Chat sessions (``client.chats.create(...).send_message``) call the same two methods with
the whole curated history, so they are covered through them. ``config.system_instruction``
is the head instruction (like Anthropic's ``system``); role ``model`` reads as ``assistant``.
Bare parts in ``contents`` (strings, ``Part`` objects) are grouped into one turn, as the
SDK groups them before sending. Inline bytes become a digest-only reference.

A request is counted as the API it reaches and its model's generation count it in
``promptTokenCount`` (``GeminiCounting``; docs/budget.md, "Gemini"): the texts of its parts, a
token a content from Gemini 2.5 on, function calls, results and declarations as the texts in them
(Gemini 2.0 and earlier, and every model on Vertex AI) or as their JSON (2.5 and later on the
Gemini Developer API), a function call's thought signature on the Developer API from Gemini 3 on,
images by the generation's formula, and no response schema. Who a call reaches is read off its
client before the request is measured (``identity``, then ``for_route``): the Gemini Developer API
or Vertex AI.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..memo import Memo
from ..payload import TOOL_CALL, TOOL_RESULT, Answer, AnswerText, Item, RequestView, tool_ref
from ..tokens import NON_TEXT_PART
from ._image import gemini_generation, gemini_tokens, size_of_base64, size_of_bytes
from ._read import Unread, items, jsonable, settings, tool_definitions, tool_texts, unread_if_one_shot
from ._read import as_int as _int
from ._read import as_str as _str
from ._read import get as _get
from ._read import role as _role
from .base import CallSite, Identity, Methods, Provider, Translation, WireRoute
from .identity import url_server

__all__ = ["ADAPTER", "CLASSIC", "CURRENT", "GEMINI_API", "PROVIDER", "SIGNATURE_CHARS", "SIGNED", "VERTEX_AI",
           "GeminiCounting", "counting"]

_MODELS = "google.genai.models"

SITES = (
    CallSite(_MODELS, "Models.generate_content", "generate_content"),
    CallSite(_MODELS, "Models.generate_content_stream", "generate_content_stream"),
    CallSite(_MODELS, "AsyncModels.generate_content", "generate_content", "async"),
    CallSite(_MODELS, "AsyncModels.generate_content_stream", "generate_content_stream", "async"),
)


def _field(obj: Any, name: str) -> Any:
    """A field by its Python name, or by the camelCase alias a dict may use instead."""
    value = _get(obj, name)
    if value is None and isinstance(obj, Mapping):
        head, *rest = name.split("_")
        value = _get(obj, head + "".join(word.title() for word in rest))
    return value


@dataclass(frozen=True, slots=True)
class GeminiCounting:
    """How a Gemini model generation counts a prompt in ``promptTokenCount``: measured on the
    recorded corpus (tests/data/recorded/, the constants fitted on half of its 132 Gemini requests;
    docs/budget.md, "Gemini"), where Google documents no number.

    >>> counting("gemini-2.0-flash-001") is CLASSIC, counting("models/gemini-2.5-pro") is CURRENT
    (True, True)
    >>> counting("gemini-3-flash", GEMINI_API) is SIGNED, counting("gemini-3-flash", VERTEX_AI) is CLASSIC
    (True, True)
    """

    #: Tokens each content (a turn, and the system instruction) costs beyond its parts
    #: (``RequestView.message_framing``): "What is the capital of France?" is 7 tokens to Gemini 2.0
    #: and 8 to Gemini 2.5.
    framing: int
    #: Function calls, their results and the function declarations read as their JSON (Gemini 2.5
    #: and later), else as the texts in them: names, descriptions, keys and string values, as the
    #: SDK's own local tokenizer reads them (``google.genai.local_tokenizer._TextsAccumulator``).
    as_json: bool
    #: Tokens a function call or result costs beyond what is counted of it.
    call: int
    #: Tokens the function declarations cost beyond what is counted of them, once a request.
    tools: int
    #: Characters of a function call's ``thought_signature`` (its base64) per token it costs: given
    #: back to Gemini 3 on the Gemini Developer API, it brings that turn's thinking back into the
    #: prompt. 0: not counted (Vertex AI, and models before Gemini 3, count none of it).
    signature_chars: int = 0


#: Who a google-genai client reaches (the GenAI conventions' ``gen_ai.provider.name``): its
#: ``vertexai`` flag set, Vertex AI; else the Gemini Developer API (the SDK's default).
GEMINI_API = "gcp.gemini"
VERTEX_AI = "gcp.vertex_ai"

#: Characters of a thought signature a token (``GeminiCounting.signature_chars``): fitted on the fit
#: half of the recorded corpus's Gemini 3 requests to the Developer API that give signatures back
#: (``bench/gemini_fit.py``: their characters over the tokens they were short by).
SIGNATURE_CHARS = 7

#: Gemini 1.x and 2.0, and every model on Vertex AI.
CLASSIC = GeminiCounting(framing=0, as_json=False, call=2, tools=4)
#: Gemini 2.5 and later, and any model whose name gives no generation (the larger counts).
CURRENT = GeminiCounting(framing=1, as_json=True, call=4, tools=0)
#: Gemini 3 and later on the Gemini Developer API: ``CURRENT``, and a function call's signature.
SIGNED = GeminiCounting(framing=1, as_json=True, call=4, tools=0, signature_chars=SIGNATURE_CHARS)


def counting(model: str | None, route: str | None = None) -> GeminiCounting:
    """How ``model`` counts a prompt on ``route`` (``GEMINI_API``, ``VERTEX_AI``, None: not known):
    ``CLASSIC`` on Vertex AI and before Gemini 2.5, ``SIGNED`` from Gemini 3 on on the Developer
    API, else ``CURRENT``. An unknown route is counted as the model alone says (no signature): the
    Developer API's rules would over-count Vertex AI's requests with tools by up to half."""
    if route == VERTEX_AI:
        return CLASSIC
    generation = gemini_generation(model)
    if generation is not None and generation < (2, 5):
        return CLASSIC
    if route == GEMINI_API and generation is not None and generation >= (3, 0):
        return SIGNED
    return CURRENT


@dataclass(frozen=True, slots=True)
class _Reading:
    """What reading one request's parts needs: its model, how the model counts, and the request's
    ``media_resolution`` (a part's own overrides it)."""

    model: str | None
    counting: GeminiCounting
    resolution: str | None = None


def _compact(value: Any) -> str:
    """JSON without spaces, keys sorted (one text for equal values, whatever their order)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=jsonable, ensure_ascii=False)


def _strings(value: Any, out: list[str]) -> None:
    """The texts in a JSON value as the SDK's local tokenizer counts them: every key of an object
    and every string, in order; numbers, booleans and nulls are not counted."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        out.extend(key for key in value if isinstance(key, str))
        for inner in value.values():
            _strings(inner, out)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            _strings(inner, out)


def _call_text(name: str, key: str, value: Any, how: GeminiCounting) -> str:
    """A function call (``key`` ``args``) or result (``response``) as its model reads it."""
    if how.as_json:
        return _compact({"name": name, key: value if value is not None else {}})
    pieces = [name]
    _strings(value, pieces)
    return " ".join(pieces)


def _parts(parts: Any, texts: list[str], refs: list[str], reading: _Reading) -> int:
    """Readable text into ``texts``, references into ``refs``; returns what the media parts cost,
    the framing of function calls and results, and a function call's ``thought_signature`` where
    its API counts it (``GeminiCounting.signature_chars``; docs/budget.md, "Gemini")."""
    cost = 0
    unread_if_one_shot(parts, "parts")
    for part in parts if isinstance(parts, (list, tuple)) else (parts,):
        if isinstance(part, str):
            texts.append(part)
            continue
        text = _str(_get(part, "text"))
        call = _field(part, "function_call")
        result = _field(part, "function_response")
        blob = _field(part, "inline_data")
        file = _field(part, "file_data")
        code = _field(part, "executable_code")
        output = _field(part, "code_execution_result")
        if text is not None:
            texts.append(text)
        elif call is not None:
            name = _str(_get(call, "name")) or ""
            texts.append(_call_text(name, "args", _get(call, "args"), reading.counting))
            cost += reading.counting.call + _signature(part, reading.counting)
            # By name, and by id too when given: the SDK's own automatic function calling (and
            # ``Part.from_function_response``) answers without one.
            refs.append(tool_ref(TOOL_CALL, _str(_get(call, "id")), name))
        elif result is not None:
            name = _str(_get(result, "name")) or ""
            texts.append(_call_text(name, "response", _get(result, "response"), reading.counting))
            cost += reading.counting.call
            # Gemini 3 takes pictures and files in a result (``FunctionResponse.parts``).
            cost += _parts(_get(result, "parts") or (), texts, refs, reading)
            refs.append(tool_ref(TOOL_RESULT, _str(_get(result, "id")), name))
        elif blob is not None:
            data = _get(blob, "data")
            raw = data if isinstance(data, bytes) else str(data).encode()
            # The bytes themselves never leave this function; only a digest of them does.
            refs.append(f"inline:{_field(blob, 'mime_type')}:{hashlib.blake2b(raw, digest_size=16).hexdigest()}")
            cost += _media(reading, _field(blob, "mime_type"), data, part)
        elif file is not None:
            refs.append(_str(_field(file, "file_uri")) or "file")
            cost += _media(reading, _field(file, "mime_type"), None, part)
        elif code is not None:
            texts.append(_str(_get(code, "code")) or "")
        elif output is not None:
            texts.append(_str(_get(output, "output")) or "")
        else:
            refs.append(f"id:part={type(part).__name__}")
    return cost


def _signature(part: Any, how: GeminiCounting) -> int:
    """What a function call's ``thought_signature`` costs: its base64 characters (the wire's; the
    SDK's ``Part`` holds the bytes) over ``how.signature_chars``, rounded up."""
    if not how.signature_chars:
        return 0
    signature = _field(part, "thought_signature")
    if isinstance(signature, bytes):
        chars = (len(signature) + 2) // 3 * 4
    elif isinstance(signature, str):
        chars = len(signature)
    else:
        return 0
    return -(-chars // how.signature_chars)


def _level(value: Any) -> str | None:
    """A ``media_resolution`` level (an enum or its name) as its name."""
    return _str(getattr(value, "value", value))


def _media(reading: _Reading, mime: Any, data: Any, part: Any) -> int:
    """An image by its header (bytes, or the base64 a dict part carries) and its model's formula;
    audio, video and documents a flat estimate."""
    if not (isinstance(mime, str) and mime.startswith("image/")):
        return NON_TEXT_PART
    resolution = reading.resolution
    own = _field(part, "media_resolution")  # Gemini 3: per part, a level or a token count
    if own is not None:
        tokens = _int(_field(own, "num_tokens"))
        if tokens is not None:
            return tokens
        resolution = _level(_get(own, "level")) or resolution
    if isinstance(data, str):
        return gemini_tokens(reading.model, size_of_base64(data), resolution)
    return gemini_tokens(reading.model, size_of_bytes(data) if isinstance(data, bytes) else None, resolution)


def _is_content(element: Any) -> bool:
    return _get(element, "parts") is not None or _get(element, "role") is not None


def _turns(contents: Any) -> Any:
    """``contents`` as the SDK sends it: one turn per Content, consecutive bare parts as one turn."""
    if isinstance(contents, str) or not isinstance(contents, (list, tuple)):
        unread_if_one_shot(contents, "contents")
        return [contents]
    turns: list[Any] = []
    run: list[Any] | None = None
    for element in contents:
        if _is_content(element):
            turns.append(element)
            run = None
        else:
            if run is None:
                run = []
                turns.append(run)
            run.append(element)
    return turns


def _turn_item(turn: Any, reading: _Reading) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    if isinstance(turn, list):  # bare parts: a model turn only if they are function calls
        cost = _parts(turn, texts, refs, reading)
        role = "assistant" if any(_field(p, "function_call") is not None for p in turn) else "user"
        return (role, "\n".join(texts), tuple(refs), "message", cost)
    if _is_content(turn):
        cost = _parts(_get(turn, "parts") or (), texts, refs, reading)
        role = _role(_get(turn, "role"), "user")
        return ("assistant" if role == "model" else role, "\n".join(texts), tuple(refs), "message", cost)
    cost = _parts(turn, texts, refs, reading)
    return ("user", "\n".join(texts), tuple(refs), "message", cost)


def _schema_strings(schema: Any, out: list[str]) -> None:
    """The texts of a parameter schema as the SDK's local tokenizer counts them (its ``add_schema``):
    format, description, enum values, required names and property names, through properties and
    items; JSON Schema's ``anyOf``/``oneOf``/``allOf`` and ``$defs`` alike. Types are not counted."""
    if not isinstance(schema, Mapping):
        return
    for key in ("format", "description"):
        value = schema.get(key)
        if isinstance(value, str) and value:
            out.append(value)
    for key in ("enum", "required"):
        out.extend(str(value) for value in schema.get(key) or ())
    _schema_strings(schema.get("items"), out)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, inner in properties.items():
            out.append(str(name))
            _schema_strings(inner, out)
    for key in ("anyOf", "any_of", "oneOf", "allOf"):
        for inner in schema.get(key) or ():
            _schema_strings(inner, out)
    for key in ("$defs", "defs", "definitions"):
        defined = schema.get(key)
        for inner in defined.values() if isinstance(defined, Mapping) else ():
            _schema_strings(inner, out)
    if "example" in schema:
        _strings(schema["example"], out)


def _declaration(declaration: Mapping[str, Any], as_json: bool) -> str:
    """A function declaration as its model reads it: its JSON (name, description, parameters,
    response), else its texts. Read as texts, a declaration's JSON Schema parameters and response
    (``parameters_json_schema``, ``response_json_schema``) count nothing: only Gemini's own
    ``parameters`` and ``response`` schemas do, as the SDK's local tokenizer reads a declaration
    (``_TextsAccumulator._function_declaration_traverse``), and as Gemini 2.0 reported them
    (docs/budget.md, "Gemini")."""
    parameters = _field(declaration, "parameters")
    response = _field(declaration, "response")
    name, description = declaration.get("name"), declaration.get("description")
    if as_json:
        if parameters is None:
            parameters = _field(declaration, "parameters_json_schema")
        if response is None:
            response = _field(declaration, "response_json_schema")
        shown = {"name": name, "description": description, "parameters": parameters, "response": response}
        return _compact({key: value for key, value in shown.items() if value})
    pieces = [str(name or "")]
    if isinstance(description, str) and description:
        pieces.append(description)
    _schema_strings(parameters, pieces)
    _schema_strings(response, pieces)
    return " ".join(pieces)


def _tool_texts(tools: list[Any] | tuple[Any, ...], as_json: bool) -> list[str]:
    """One text a function declaration; any other tool (Google Search, code execution) as its JSON."""
    texts = []
    for tool in tools:
        data = tool if isinstance(tool, Mapping) else jsonable(tool)
        if not isinstance(data, Mapping):  # a Python function, which the SDK declares as it sends: its repr
            texts.append(_compact(data))
            continue
        declarations = _field(data, "function_declarations")
        for declaration in declarations if isinstance(declarations, (list, tuple)) else ():
            found = declaration if isinstance(declaration, Mapping) else jsonable(declaration)
            texts.append(_declaration(found, as_json) if isinstance(found, Mapping) else _compact(found))
        rest = {key: value for key, value in data.items()
                if key not in ("function_declarations", "functionDeclarations") and value is not None}
        if rest:
            texts.append(_compact(rest))
    return texts


def _as_json(tools: list[Any] | tuple[Any, ...]) -> list[str]:
    return _tool_texts(tools, True)


def _as_texts(tools: list[Any] | tuple[Any, ...]) -> list[str]:
    return _tool_texts(tools, False)


def _tools(tools: Any, view: RequestView, how: GeminiCounting) -> None:
    """``config.tools`` as the model reads them (``GeminiCounting.as_json``), cached like every
    provider's tools (``_read.tool_texts``)."""
    if not isinstance(tools, (list, tuple)) or not tools:
        return
    try:
        view.tools = tool_texts(tools, _as_json if how.as_json else _as_texts)
    except Exception as exc:  # a tool that will not serialise is the app's business
        view.unreadable = f"tools could not be read ({type(exc).__name__})"
        return
    view.prompt_overhead += how.tools


_UNSET = object()


#: ``GenerateContentConfig``'s sampling parameters -> ``RequestView.settings``.
_SETTINGS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "stop_sequences": "stop_sequences",
             "seed": "seed", "candidate_count": "choice.count", "frequency_penalty": "frequency_penalty",
             "presence_penalty": "presence_penalty"}
#: ``response_mime_type`` -> ``gen_ai.output.type``.
_OUTPUT_TYPES = {"application/json": "json", "text/plain": "text"}


class GoogleGenAIAdapter(Translation):
    """``route``: the API its requests reach (``GEMINI_API``, ``VERTEX_AI``), which counts them
    (``counting``); None when not known (``ADAPTER``, the provider's own)."""

    provider = "gcp.gen_ai"

    def __init__(self, route: str | None = None) -> None:
        self.route = route

    def for_route(self, label: str) -> GoogleGenAIAdapter:
        """The accounting of a call that reaches ``label``: the Developer API's or Vertex AI's.

        >>> ADAPTER.for_route(VERTEX_AI).route, ADAPTER.for_route("gcp.gen_ai") is ADAPTER
        ('gcp.vertex_ai', True)
        """
        return _ROUTED.get(label, ADAPTER)

    def tool_definitions(self, api: str, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``config.tools``' function declarations, with ``parameters_json_schema`` as their parameters
        (``parameters`` is Gemini's own schema type, not JSON Schema: left out); another tool (Google
        Search, code execution) names no function: left out too."""
        tools = _get(_get(kwargs, "config"), "tools")
        declared = []
        for tool in tools if isinstance(tools, (list, tuple)) else ():
            data = tool if isinstance(tool, Mapping) else jsonable(tool)
            declarations = _field(data, "function_declarations") if isinstance(data, Mapping) else None
            for declaration in declarations if isinstance(declarations, (list, tuple)) else ():
                found = declaration if isinstance(declaration, Mapping) else jsonable(declaration)
                if isinstance(found, Mapping):
                    declared.append({"name": _get(found, "name"), "description": _get(found, "description"),
                                     "parameters": _field(found, "parameters_json_schema")})
        return tool_definitions(declared)

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        # Contents are rarely plain dicts here (parts lists, Content objects): read whole each call.
        config = _get(kwargs, "config")
        model = _str(_get(kwargs, "model"))
        how = counting(model, self.route)
        # Gemini's prompt frames each content and nothing else: no reply priming.
        view = RequestView(
            provider=self.route or self.provider,
            operation="chat",
            model=model,
            items=[],
            stream=api == "generate_content_stream",
            message_framing=how.framing,
            reply_priming=0,
            # Counted as their JSON, which Vertex AI counts as Gemini 2.0 does (keys and strings only),
            # when the route is not known.
            loose_tool_counts=how.as_json and self.route is None,
        )
        reading = _Reading(model, how, _level(_field(config, "media_resolution")) if config is not None else None)
        if config is not None:
            view.max_output_tokens = _int(_field(config, "max_output_tokens"))
            settings(config, _SETTINGS, view)
            mime = _field(config, "response_mime_type")
            if mime in _OUTPUT_TYPES:
                view.settings["output.type"] = _OUTPUT_TYPES[mime]
            _tools(_get(config, "tools"), view, how)
            if _field(config, "cached_content") is not None:
                view.history_elsewhere = "history is provider-managed (cached_content)"
            instruction = _field(config, "system_instruction")
            if instruction is not None:
                texts: list[str] = []
                refs: list[str] = []
                try:
                    cost = _parts(
                        _get(instruction, "parts") if _is_content(instruction) else instruction, texts, refs, reading
                    )
                except Unread as why:
                    view.unreadable = f"system_instruction: {why}"
                    return view
                text = "\n".join(texts)
                if text.strip():
                    view.items.append(("system", text, tuple(refs), "instructions", cost))
            # A response schema (``response_schema``, ``response_json_schema``) constrains the
            # answer and is not in ``promptTokenCount``: "Hi" with a schema counts 2 (docs/budget.md).
        try:
            turns = _turns(_get(kwargs, "contents"))
        except Unread as why:
            view.unreadable = str(why)
            return view
        items(turns, lambda turn, _model: _turn_item(turn, reading), view, name="contents", noun="content")
        return view

    def read_response(self, api: str, result: Any) -> Answer | None:
        if _get(result, "candidates") is None and _field(result, "usage_metadata") is None:
            return None
        reader = _Responses()
        reader.feed(result)
        return reader.reply()

    def stream_reader(self, api: str) -> _Responses:
        return _Responses()

    def identity(self, instance: Any) -> Identity | None:
        """The Gemini Developer API or Vertex AI, by the client's own ``vertexai`` flag (what its
        requests are made for, whatever host its base URL names), and the server of its base URL;
        None for an instance with no google-genai client (``gcp.gen_ai`` stays)."""
        client = getattr(instance, "_api_client", None)
        vertexai = getattr(client, "vertexai", _UNSET)
        if vertexai is _UNSET:
            return None
        url = _get(getattr(client, "_http_options", None), "base_url")  # a dict in early 1.x releases
        host, port = (url_server(url) if isinstance(url, str) else None) or (None, None)
        return (VERTEX_AI if vertexai else GEMINI_API), host, port

    reads_captures = True

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
        return as_call(body, model)


class _Responses:
    """One ``GenerateContentResponse``, or the chunks of a stream (each one a response)."""

    def __init__(self) -> None:
        self._reply = Answer()
        self._text = AnswerText()

    def feed(self, response: Any) -> None:
        reply = self._reply
        reply.id = reply.id or _str(_field(response, "response_id"))
        reply.model = reply.model or _str(_field(response, "model_version"))
        reasons = []
        for index, candidate in enumerate(_get(response, "candidates") or ()):
            content = _get(candidate, "content")
            if index == 0 and content is not None:
                for part in _get(content, "parts") or ():
                    text = _str(_get(part, "text"))
                    if text and not _get(part, "thought"):
                        self._text.add(text)
            reason = _field(candidate, "finish_reason")
            value = _str(getattr(reason, "value", reason))
            if value:
                reasons.append(value)
        if reasons:
            reply.finish_reasons = reasons
        usage = _field(response, "usage_metadata")
        if usage is not None:
            reply.input_tokens = _int(_field(usage, "prompt_token_count"))  # the cached tokens included
            reply.cache_read_tokens = _int(_field(usage, "cached_content_token_count"))
            output = _int(_field(usage, "candidates_token_count"))
            # Thinking tokens are generated and billed as output too.
            reply.reasoning_tokens = _int(_field(usage, "thoughts_token_count"))
            reply.output_tokens = None if output is None else output + (reply.reasoning_tokens or 0)

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


ADAPTER = GoogleGenAIAdapter()
#: The accounting per API a client reaches (``GoogleGenAIAdapter.for_route``).
_ROUTED = {route: GoogleGenAIAdapter(route) for route in (GEMINI_API, VERTEX_AI)}


def as_call(body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
    """A captured REST body as the SDK's arguments: the model is in the URL (the capture line's
    ``model``), the settings are in camelCase."""
    generation = body.get("generationConfig")
    config = dict(generation) if isinstance(generation, Mapping) else {}
    for key in ("systemInstruction", "tools", "cachedContent"):
        if key in body:
            config[key] = body[key]
    return "generate_content", {"model": model or body.get("model"), "contents": body.get("contents"),
                                "config": config}


def _from_wire(api: str) -> Callable[[Mapping[str, Any], str], tuple[str, Mapping[str, Any]]]:
    """A REST body sent to ``.../models/{model}:{method}`` (the Gemini API's and Vertex AI's path) as
    the call ``api`` would have made: the model is the path's."""

    def read(body: Mapping[str, Any], path: str) -> tuple[str, Mapping[str, Any]]:
        model = path.rpartition("/models/")[2].partition(":")[0] or None
        return api, as_call(body, model)[1]

    return read


PROVIDER = Provider(
    distribution="google-genai",
    module="google.genai",
    supported=(1, 3),
    label="gcp.gen_ai",
    adapter=ADAPTER,
    family=Methods(SITES),
    routes=(GEMINI_API, VERTEX_AI),
    wire=(WireRoute(":generateContent", ("contents",), _from_wire("generate_content")),
          WireRoute(":streamGenerateContent", ("contents",), _from_wire("generate_content_stream"))),
)
