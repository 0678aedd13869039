"""Cohere SDK (``cohere`` 5.x-7.x): the v2 Chat API, ``chat`` / ``chat_stream``, sync and async.

``cohere.ClientV2`` and ``AsyncClientV2`` inherit these methods from ``V2Client`` /
``AsyncV2Client`` (``cohere.v2.client``), the classes ``cohere.Client().v2`` is an instance of
too: the call sites are declared there, where the methods are defined.

The v2 request: ``messages`` with roles ``system``, ``user``, ``assistant`` and ``tool``, the
system message at the head being the instruction; content a string or a list of blocks
(``text``, ``image_url``; a tool result's ``document``; an assistant's ``thinking``); an
assistant's ``tool_calls`` (``id``, ``function.name`` / ``arguments``) and its ``tool_plan``, a
tool message's ``tool_call_id``. ``documents`` (RAG: strings, or ``{id?, data: {...}}``) are
context the model reads: each is an item of its own after the messages (Cohere's prompt
template renders them after the conversation), role and source ``document``, so the fact checks
find what they carry. ``max_tokens`` is the reserved output; the ``tools`` and a
``response_format``'s ``json_schema`` are counted like the tools.

``chat_stream`` is a generator function, ``AsyncV2Client.chat_stream`` an async generator
function (``async def`` with ``yield``): called without ``await``, both return at once a
generator of the SDK's event objects, and send the request when the first event is asked for.
Both are ``sync`` call sites (``base.Kind``): the generator is observed as it is iterated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..memo import Memo
from ..payload import TOOL_CALL, TOOL_RESULT, Answer, AnswerText, Item, RequestView, tool_ref
from ._image import Size, size_of_url
from ._read import Unread, canonical, elements, items, schemas, structured_parts
from ._read import as_str as _str
from ._read import get as _get
from ._read import role as _role
from ._read import text_of as _text
from .base import CallSite, Methods, Provider, Translation

__all__ = ["ADAPTER", "PROVIDER", "image_tokens"]

_V2 = "cohere.v2.client"

SITES = (
    CallSite(_V2, "V2Client.chat", "chat"),
    CallSite(_V2, "V2Client.chat_stream", "chat_stream"),
    CallSite(_V2, "AsyncV2Client.chat", "chat", "async"),
    # An async generator function: calling it returns the async generator, there is nothing to await.
    CallSite(_V2, "AsyncV2Client.chat_stream", "chat_stream"),
)

#: The source (and role) of a RAG document's item.
DOCUMENT = "document"

#: Cohere's image rule (docs.cohere.com, "Image Inputs"): ``low`` detail is one 512-px image of
#: 256 tokens; ``high`` splits it into 512-px tiles of 256 tokens each (at most 12, Command A
#: Vision's processor) plus a 256-token thumbnail; ``auto`` (the default) is ``high`` for an image
#: larger than 768 px on a side, else ``low``.
_TILE = 512
_TILE_TOKENS = 256
_MAX_TILES = 12
_AUTO_HIGH = 768
#: An image whose size is not known here (a remote URL, never fetched): the most one can cost.
_IMAGE_BOUND = (_MAX_TILES + 1) * _TILE_TOKENS


def image_tokens(size: Size | None, detail: str | None = None) -> int:
    """What Cohere's vision models charge for an image of ``size`` (None: the bound) at ``detail``."""
    if size is None or size[0] <= 0 or size[1] <= 0:
        return _TILE_TOKENS if detail == "low" else _IMAGE_BOUND
    width, height = size
    if detail == "low" or (detail != "high" and max(width, height) <= _AUTO_HIGH):
        return _TILE_TOKENS
    tiles = min(_MAX_TILES, math.ceil(width / _TILE) * math.ceil(height / _TILE))
    return (tiles + 1) * _TILE_TOKENS


def _document_text(document: Any, refs: list[str]) -> str:
    """A document as the model reads it: a string as it is; an object's ``data`` field by field,
    each name and value on a line of its own (a value's line is in the body as sent, where
    ``wire_intact`` looks for it), in sorted order (equal dicts read the same); its id a ref."""
    if isinstance(document, str):
        return document
    doc_id = _str(_get(document, "id"))
    if doc_id:
        refs.append(f"id:document={doc_id}")
    data = _get(document, "data")
    if not isinstance(data, Mapping):
        return _text(data) if data is not None else ""
    lines: list[str] = []
    for key in sorted(data, key=str):
        lines.append(str(key))
        lines.append(_text(data[key]))
    return "\n".join(lines)


def _blocks(content: Any, texts: list[str], refs: list[str]) -> int:
    """Text of every block into ``texts``; images and documents' ids into ``refs`` (never their
    bytes). Returns the tokens the images cost."""
    cost = 0
    for part in structured_parts(content, texts):
        kind = _get(part, "type")
        if kind == "text":
            texts.append(_str(_get(part, "text")) or "")
        elif kind == "thinking":
            texts.append(_str(_get(part, "thinking")) or "")
        elif kind == "image_url":
            image = _get(part, "image_url")
            url = image if isinstance(image, str) else _str(_get(image, "url")) if image is not None else None
            refs.append(url or "image")
            detail = _str(_get(image, "detail")) if image is not None and not isinstance(image, str) else None
            cost += image_tokens(size_of_url(url) if url else None, detail)
        elif kind == DOCUMENT:  # a tool result given as a document
            document = _get(part, DOCUMENT)
            if document is not None:
                texts.append(_document_text(document, refs))
        elif kind is not None:
            refs.append(f"id:block={_text(kind)}")
    return cost


def _message_item(message: Any, model: str | None) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    plan = _str(_get(message, "tool_plan"))
    if plan:  # the model's plan before its calls: it reads it back
        texts.append(plan)
    cost = _blocks(_get(message, "content"), texts, refs)
    for call in elements(_get(message, "tool_calls"), "tool_calls"):
        function = _get(call, "function")
        if function is not None:
            # Name and arguments on lines of their own: ``wire_intact`` finds a fact the arguments
            # carry by its line, and the arguments string's line is in the body (JSON-escaped).
            texts.append(_text(_get(function, "name") or ""))
            texts.append(_text(_get(function, "arguments") or ""))
        refs.append(tool_ref(TOOL_CALL, _str(_get(call, "id"))))
    call_id = _str(_get(message, "tool_call_id"))
    if call_id:
        refs.append(tool_ref(TOOL_RESULT, call_id))
    return (_role(_get(message, "role"), "other"), "\n".join(texts), tuple(refs), "message", cost)


def _documents(documents: Any, view: RequestView) -> None:
    """Each RAG document as an item after the messages; on any failure the view says why."""
    try:
        for document in elements(documents, "documents"):
            refs: list[str] = []
            view.items.append((DOCUMENT, _document_text(document, refs), tuple(refs), DOCUMENT, 0))
    except Unread as why:
        view.items = []
        view.unreadable = str(why)
    except Exception as exc:
        view.items = []
        view.unreadable = f"documents could not be read ({type(exc).__name__})"


def _response_format(value: Any, view: RequestView) -> None:
    """A JSON schema the answer must follow is counted like the tools: it is in every request."""
    if value is None or _get(value, "type") != "json_object":
        return
    schema = _get(value, "json_schema")
    if schema is None:
        return
    try:
        view.tools.append(canonical(schema))
    except Exception:  # a schema that will not serialise: the SDK's own error reaches the app
        return


def _count(value: Any) -> int | None:
    """A token count: the SDK's usage models hold floats (``71.0``), the wire JSON integers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return int(value)


def _usage(usage: Any) -> tuple[int | None, int | None]:
    """(input, output) tokens. ``tokens`` is what the model read and wrote, Cohere's prompt template
    (its preamble, the rendered documents and tools) included, and its images apart, in
    ``image_tokens`` (an answer about a favicon: 502 input and 259 image tokens): both fill the window,
    so both are what the budget is calibrated against. ``billed_units`` leaves the template out (21
    billed for 186 read in a short exchange); read only when ``tokens`` is absent."""
    if usage is None:
        return None, None
    for field in ("tokens", "billed_units"):
        counts = _get(usage, field)
        if counts is not None:
            read, wrote = _count(_get(counts, "input_tokens")), _count(_get(counts, "output_tokens"))
            images = _count(_get(counts, "image_tokens"))
            if read is not None and images:
                read += images
            if read is not None or wrote is not None:
                return read, wrote
    return None, None


def _reply_text(content: Any) -> str:
    """The answer's text: its ``text`` blocks (not its thinking)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        return ""
    return "".join(_str(_get(c, "text")) or "" for c in content if _get(c, "type") == "text")


#: Finish reasons that say the service failed the generation: the call ends in error.
_FAILED = frozenset({"ERROR", "TIMEOUT"})


class CohereAdapter(Translation):
    provider = "cohere"

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        max_tokens = _get(kwargs, "max_tokens")
        view = RequestView(
            provider=self.provider,
            operation="chat",
            model=_str(_get(kwargs, "model")),
            items=[],
            max_output_tokens=max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None,
            stream=api == "chat_stream" or _get(kwargs, "stream") is True,
        )
        schemas(_get(kwargs, "tools"), view)
        _response_format(_get(kwargs, "response_format"), view)
        items(_get(kwargs, "messages"), _message_item, view, name="messages", noun="message", plain_first=True,
              memo=memo)
        if view.unreadable is None:
            _documents(_get(kwargs, "documents"), view)
        return view

    def read_response(self, api: str, result: Any) -> Answer | None:
        message = _get(result, "message")
        reason = _str(_get(result, "finish_reason"))
        if message is None and reason is None:
            return None
        read, wrote = _usage(_get(result, "usage"))
        return Answer(
            id=_str(_get(result, "id")),
            finish_reasons=[reason] if reason else [],
            input_tokens=read,
            output_tokens=wrote,
            text=_reply_text(_get(message, "content")) if message is not None else "",
            error=reason if reason in _FAILED else None,
        )

    def stream_reader(self, api: str) -> _CohereEvents:
        return _CohereEvents()

    reads_captures = True

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
        return as_call(body, model)


class _CohereEvents:
    """The v2 stream's events, as the SDK's objects (or their JSON): the id on ``message-start``,
    text on ``content-delta``, the finish reason and usage on ``message-end``."""

    def __init__(self) -> None:
        self._reply = Answer()
        self._text = AnswerText()

    def feed(self, event: Any) -> None:
        kind = _get(event, "type")
        reply = self._reply
        if kind == "message-start":
            reply.id = reply.id or _str(_get(event, "id"))
        elif kind == "content-delta":
            content = _get(_get(_get(event, "delta"), "message"), "content")
            text = _str(_get(content, "text"))
            if text:
                self._text.add(text)
        elif kind == "message-end":
            delta = _get(event, "delta")
            reason = _str(_get(delta, "finish_reason"))
            if reason:
                reply.finish_reasons = [reason]
                if reason in _FAILED:
                    reply.error = reason
            reply.input_tokens, reply.output_tokens = _usage(_get(delta, "usage"))

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


ADAPTER = CohereAdapter()


def as_call(body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
    """A captured body is the call's keyword arguments (Cohere's wire is snake_case too)."""
    return ("chat_stream" if body.get("stream") is True else "chat"), body


PROVIDER = Provider(
    distribution="cohere",
    module="cohere",
    supported=(5, 7),
    label="cohere",
    adapter=ADAPTER,
    family=Methods(SITES),
)
