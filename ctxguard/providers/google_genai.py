"""Google GenAI SDK (``google-genai``): ``models.generate_content`` / ``generate_content_stream``, translated.

Chat sessions (``client.chats.create(...).send_message``) call the same two methods with
the whole curated history, so they are covered through them. ``config.system_instruction``
is the head instruction (like Anthropic's ``system``); role ``model`` reads as ``assistant``.
Bare parts in ``contents`` (strings, ``Part`` objects) are grouped into one turn, as the
SDK groups them before sending. Inline bytes become a digest-only reference.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ..memo import Memo
from ..payload import TOOL_CALL, TOOL_RESULT, Answer, AnswerText, Item, RequestView, tool_ref
from ..tokens import NON_TEXT_PART
from ._image import gemini_tokens, size_of_base64, size_of_bytes
from ._read import Unread, canonical, items, schemas, unread_if_one_shot
from ._read import as_int as _int
from ._read import as_str as _str
from ._read import get as _get
from ._read import role as _role
from .base import CallSite, Methods, Provider, Translation

__all__ = ["ADAPTER", "PROVIDER"]

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


def _parts(parts: Any, texts: list[str], refs: list[str], model: str | None) -> int:
    """Readable text into ``texts``, references into ``refs``; returns what the media parts cost."""
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
            texts.append(f"{_get(call, 'name') or ''} {canonical(_get(call, 'args'))}")
            # By name, and by id too when given: the SDK's own automatic function calling (and
            # ``Part.from_function_response``) answers without one.
            refs.append(tool_ref(TOOL_CALL, _str(_get(call, "id")), _str(_get(call, "name")) or ""))
        elif result is not None:
            texts.append(canonical(_get(result, "response")))
            refs.append(tool_ref(TOOL_RESULT, _str(_get(result, "id")), _str(_get(result, "name")) or ""))
        elif blob is not None:
            data = _get(blob, "data")
            raw = data if isinstance(data, bytes) else str(data).encode()
            # The bytes themselves never leave this function; only a digest of them does.
            refs.append(f"inline:{_field(blob, 'mime_type')}:{hashlib.blake2b(raw, digest_size=16).hexdigest()}")
            cost += _media(model, _field(blob, "mime_type"), data, part)
        elif file is not None:
            refs.append(_str(_field(file, "file_uri")) or "file")
            cost += _media(model, _field(file, "mime_type"), None, part)
        elif code is not None:
            texts.append(_str(_get(code, "code")) or "")
        elif output is not None:
            texts.append(_str(_get(output, "output")) or "")
        else:
            refs.append(f"id:part={type(part).__name__}")
    return cost


def _media(model: str | None, mime: Any, data: Any, part: Any) -> int:
    """An image by its header (bytes, or the base64 a dict part carries) and Gemini's formula;
    audio, video and documents a flat estimate."""
    if not (isinstance(mime, str) and mime.startswith("image/")):
        return NON_TEXT_PART
    resolution = _field(part, "media_resolution")  # Gemini 3: per part, a level or a token count
    if resolution is not None:
        tokens = _int(_field(resolution, "num_tokens"))
        if tokens is not None:
            return tokens
        level = _get(resolution, "level")
        resolution = _str(getattr(level, "value", level))
    if isinstance(data, str):
        return gemini_tokens(model, size_of_base64(data), resolution)
    return gemini_tokens(model, size_of_bytes(data) if isinstance(data, bytes) else None, resolution)


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


def _turn_item(turn: Any, model: str | None) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    if isinstance(turn, list):  # bare parts: a model turn only if they are function calls
        cost = _parts(turn, texts, refs, model)
        role = "assistant" if any(_field(p, "function_call") is not None for p in turn) else "user"
        return (role, "\n".join(texts), tuple(refs), "message", cost)
    if _is_content(turn):
        cost = _parts(_get(turn, "parts") or (), texts, refs, model)
        role = _role(_get(turn, "role"), "user")
        return ("assistant" if role == "model" else role, "\n".join(texts), tuple(refs), "message", cost)
    cost = _parts(turn, texts, refs, model)
    return ("user", "\n".join(texts), tuple(refs), "message", cost)


def _response_schema(config: Any, view: RequestView) -> None:
    """``config.response_schema`` / ``response_json_schema``: the structured output's schema, counted
    like the tools (a pydantic class as its JSON schema, a ``types.Schema`` as its fields)."""
    schema = _field(config, "response_json_schema") or _field(config, "response_schema")
    if schema is None:
        return
    as_schema = getattr(schema, "model_json_schema", None)
    try:
        view.tools.append(canonical(as_schema() if isinstance(schema, type) and callable(as_schema) else schema))
    except Exception:  # a schema that will not serialise: the SDK's own error reaches the app
        return


class GoogleGenAIAdapter(Translation):
    provider = "gcp.gen_ai"

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        # Contents are rarely plain dicts here (parts lists, Content objects): read whole each call.
        config = _get(kwargs, "config")
        view = RequestView(
            provider=self.provider,
            operation="chat",
            model=_str(_get(kwargs, "model")),
            items=[],
            stream=api == "generate_content_stream",
        )
        if config is not None:
            view.max_output_tokens = _int(_field(config, "max_output_tokens"))
            schemas(_get(config, "tools"), view)
            if _field(config, "cached_content") is not None:
                view.history_elsewhere = "history is provider-managed (cached_content)"
            instruction = _field(config, "system_instruction")
            if instruction is not None:
                texts: list[str] = []
                refs: list[str] = []
                try:
                    cost = _parts(
                        _get(instruction, "parts") if _is_content(instruction) else instruction, texts, refs, view.model
                    )
                except Unread as why:
                    view.unreadable = f"system_instruction: {why}"
                    return view
                text = "\n".join(texts)
                if text.strip():
                    view.items.append(("system", text, tuple(refs), "instructions", cost))
            _response_schema(config, view)
        try:
            turns = _turns(_get(kwargs, "contents"))
        except Unread as why:
            view.unreadable = str(why)
            return view
        items(turns, _turn_item, view, name="contents", noun="content")
        return view

    def read_response(self, api: str, result: Any) -> Answer | None:
        if _get(result, "candidates") is None and _get(result, "usage_metadata") is None:
            return None
        reader = _Responses()
        reader.feed(result)
        return reader.reply()

    def stream_reader(self, api: str) -> _Responses:
        return _Responses()

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
        reply.id = reply.id or _str(_get(response, "response_id"))
        reply.model = reply.model or _str(_get(response, "model_version"))
        reasons = []
        for index, candidate in enumerate(_get(response, "candidates") or ()):
            content = _get(candidate, "content")
            if index == 0 and content is not None:
                for part in _get(content, "parts") or ():
                    text = _str(_get(part, "text"))
                    if text and not _get(part, "thought"):
                        self._text.add(text)
            reason = _get(candidate, "finish_reason")
            value = _str(getattr(reason, "value", reason))
            if value:
                reasons.append(value)
        if reasons:
            reply.finish_reasons = reasons
        usage = _get(response, "usage_metadata")
        if usage is not None:
            reply.input_tokens = _int(_get(usage, "prompt_token_count"))
            output = _int(_get(usage, "candidates_token_count"))
            # Thinking tokens are generated and billed as output too.
            reply.output_tokens = None if output is None else output + (_int(_get(usage, "thoughts_token_count")) or 0)

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


ADAPTER = GoogleGenAIAdapter()


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


PROVIDER = Provider(
    distribution="google-genai",
    module="google.genai",
    supported=(1, 3),
    label="gcp.gen_ai",
    adapter=ADAPTER,
    family=Methods(SITES),
)
