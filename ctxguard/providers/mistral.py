"""Mistral AI SDK (``mistralai`` 3.x, on httpx2): ``chat.complete`` / ``chat.stream``, sync and async.

Mistral's chat API is shaped like OpenAI's Chat Completions: ``messages`` with roles
``system``, ``user``, ``assistant`` and ``tool``, the system message at the head being the
instruction; ``max_tokens`` is the reserved output. It differs where this module reads it
its own way: content may be a list of chunks (``text``, ``image_url``, ``document_url``,
``reference``, ``file``, ``thinking``, ``input_audio``, ``resource``), tool-call arguments may
be an object as well as a string, an assistant message may be a ``prefix`` (the start of the
answer), and the SDK's request and response models carry its ``UNSET`` sentinel for fields
not given. ``chat.parse`` / ``parse_stream`` (and their async twins) call ``complete`` /
``stream`` and are covered through them.

Streams (``EventStream`` / ``EventStreamAsync``) hold the httpx2 response: their body is read
as it passes, and the app keeps the SDK's own object.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ..memo import Memo
from ..payload import CHOICES_KEPT, TOOL_CALL, TOOL_RESULT, Answer, AnswerText, Item, RequestView, tool_ref
from ..tokens import NON_TEXT_PART, capitals_surplus, digit_surplus
from ._image import Size, size_of_url
from ._read import as_int as _int
from ._read import as_str as _str
from ._read import (
    canonical,
    elements,
    family,
    items,
    jsonable,
    output_type,
    settings,
    structured_parts,
    tool_texts,
)
from ._read import get as _get
from ._read import role as _role
from ._read import text_of as _text
from .base import CallSite, Identity, Methods, Provider, Translation, WireRoute
from .identity import url_server

__all__ = ["ADAPTER", "PROVIDER"]

_CHAT = "mistralai.client.chat"

# ``complete_async`` / ``stream_async`` are coroutine functions on the same class as the sync
# methods: declared async, since nothing in a class name says so.
SITES = (
    CallSite(_CHAT, "Chat.complete", "chat.complete"),
    CallSite(_CHAT, "Chat.complete_async", "chat.complete", "async"),
    CallSite(_CHAT, "Chat.stream", "chat.stream"),
    CallSite(_CHAT, "Chat.stream_async", "chat.stream", "async"),
)

#: The SDK's streams hold the httpx2 response (``EventStream.response``): its body is read as it
#: passes, so the app keeps the SDK's own stream object.
HTTP_RESULTS = (
    ("mistralai.client.utils.eventstreaming", "EventStream", "response"),
    ("mistralai.client.utils.eventstreaming", "EventStreamAsync", "response"),
)

#: How deep chunks nest (a thinking chunk's parts, a resource's content) before reading stops.
_DEPTH = 4


#: How Mistral's tokenizers frame a prompt (mistral-common's instruct tokenizers, v7 and later:
#: docs/budget.md, "Mistral"), in control tokens: a user turn is ``[INST]`` ... ``[/INST]``, a system
#: prompt ``[SYSTEM_PROMPT]`` ... ``[/SYSTEM_PROMPT]``, a tool result ``[TOOL_RESULTS]`` ...
#: ``[/TOOL_RESULTS]``, an assistant turn its text and ``</s>``: two a message at most.
MESSAGE_FRAMING = 2
#: The prompt's ``<s>``: the reply follows the last ``[/INST]``, nothing primes it.
REPLY_PRIMING = 1
#: ``[AVAILABLE_TOOLS]`` and ``[/AVAILABLE_TOOLS]`` around the tools' JSON.
TOOLS_FRAMING = 2
#: ``[TOOL_CALLS]`` name ``[ARGS]`` arguments (v11 and later): two control tokens a call beyond its
#: name and arguments (v11 adds ``[CALL_ID]`` and the id; v3 and v7 wrote a JSON list with it).
TOOL_CALL_FRAMING = 2
#: Tokenizer v15's model settings, ``[MODEL_SETTINGS]{"reasoning_effort": "none"}[/MODEL_SETTINGS]``
#: (``InstructTokenizerV15._encode_settings``): two control tokens and 9 of JSON, whatever the effort.
MODEL_SETTINGS = 11
#: Models that write them when the request sets no ``reasoning_effort``: the aliases of Mistral Small
#: 4, the first v15 model (tests/data/recorded/pydantic-ai.jsonl: 28 tokens reported for a 13-token
#: prompt on ``mistral-small-latest`` and ``magistral-small-latest``, 12 more than its framing).
_SETTINGS_BY_DEFAULT = frozenset({"mistral-small-latest", "magistral-small-latest"})


#: What Mistral's tokenizers read of all-caps text beyond cl100k, in tokens a capital letter (of a
#: run of two or more): they split upper-case words that cl100k keeps whole (" SIGN" is " S" + "IGN"
#: to Tekken, one token to cl100k). Measured on general text, not on the corpus (docs/budget.md,
#: "All-caps text"): Tekken (mistral-common's ``tekken_240911.json``) reads 0.11 to 0.13 more a
#: capital on four licences upper-cased (GPL-3, Apache-2.0, MPL-2.0, GFDL-1.3), 0.09 to 0.14 on
#: the 1,000 to 20,000 commonest English words upper-cased, 0.18 on all-caps disclaimer lines as
#: written; 0.12 is their median. SentencePiece v1 (``mistral-tiny``'s) 0.09 to 0.13. The same texts
#: in lower case: Tekken 1.01 to 1.03 times cl100k.
CAPITALS_PER_LETTER = 0.12

#: Pixtral's image encoding (mistral-common): the image scaled down to fit a square of
#: ``side`` pixels, one token per ``patch``-pixel square, and one more per row (its break, the
#: last one the image's end). Pixtral 12B's numbers by default: 16-pixel patches over 1024.
_PIXTRAL = (16, 1024)
#: Model families whose encoder makes 28-pixel patches (14 merged 2 x 2) over at most 1540 pixels:
#: Mistral Medium, whose reported counts are this formula's (tests/data/recorded/pydantic-ai.jsonl:
#: 598, 781 and 254 tokens for requests with a 597 x 566 and a 400 x 301 picture; Pixtral's
#: charged them three times that). The other families keep Pixtral 12B's, which charges more.
_ENCODERS = {"mistral-medium": (28, 1540)}


def image_tokens(size: Size | None, model: str | None = None) -> int:
    """What ``model``'s vision encoder makes of an image of ``size`` (None: the most an image can
    cost; no model: Pixtral 12B's).

    >>> image_tokens((597, 566)), image_tokens((597, 566), "mistral-medium-latest")
    (1404, 483)
    """
    found = family(model, _ENCODERS)
    patch, side = _ENCODERS[found] if found is not None else _PIXTRAL
    width, height = size if size is not None and min(size) > 0 else (side, side)
    scale = min(1.0, side / max(width, height))
    columns = math.ceil(width * scale / patch)
    rows = math.ceil(height * scale / patch)
    return rows * columns + rows


def _chunks(content: Any, texts: list[str], refs: list[str], model: str | None, depth: int = 0) -> int:
    """Text of every chunk into ``texts``; non-text chunks into ``refs`` (never their bytes).
    Returns the tokens the non-text chunks cost ``model``."""
    cost = 0
    for part in structured_parts(content, texts):
        kind = _get(part, "type")
        if kind == "text":
            texts.append(_str(_get(part, "text")) or "")
        elif kind == "thinking":
            refs.append("id:thinking")
            if depth < _DEPTH:
                cost += _chunks(elements(_get(part, "thinking"), "thinking"), texts, refs, model, depth + 1)
        elif kind == "image_url":
            image = _get(part, "image_url")
            url = image if isinstance(image, str) else _str(_get(image, "url")) if image is not None else None
            refs.append(url or "image")
            cost += image_tokens(size_of_url(url) if url else None, model)
        elif kind == "document_url":
            refs.append(_str(_get(part, "document_url")) or "document")
            cost += NON_TEXT_PART
        elif kind == "file":
            refs.append(_str(_get(part, "file_id")) or "file")
            cost += NON_TEXT_PART
        elif kind == "input_audio":
            refs.append(_str(_get(part, "input_audio")) or "audio")
            cost += NON_TEXT_PART
        elif kind == "reference":  # citations of earlier tool results, by their ids
            refs.append("id:reference=" + ",".join(_text(i) for i in elements(_get(part, "reference_ids"), "ids")))
        elif kind == "tool_reference":  # a source a tool found, cited in thinking
            refs.append(f"id:tool_reference={_text(_get(part, 'url') or _get(part, 'title') or '')}")
        elif kind in ("resource", "resource_link"):
            refs.append(_str(_get(part, "uri")) or kind)
            inner = _get(part, "content")
            if inner is not None and depth < _DEPTH:
                cost += _chunks([inner], texts, refs, model, depth + 1)
        elif kind is not None:
            refs.append(f"id:chunk={_text(kind)}")
    return cost


def tokenizer_surplus(text: str) -> int:
    """What Mistral's tokenizers (Tekken, and the SentencePiece of v1 to v7) read of ``text`` beyond
    cl100k: its all-caps words split finer (``CAPITALS_PER_LETTER``) and each digit a token (all of
    mistral-common's tokenizer files: ``2024-08-27``'s digits are 8 tokens, 4 to cl100k). Every route to a
    Mistral model charges it: this API, Bedrock's Mistral family, Ollama's Mistral templates."""
    return capitals_surplus(text, CAPITALS_PER_LETTER) + digit_surplus(text)


def _message_item(message: Any, model: str | None) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    cost = _chunks(_get(message, "content"), texts, refs, model)
    for call in elements(_get(message, "tool_calls"), "tool_calls"):
        cost += TOOL_CALL_FRAMING
        function = _get(call, "function")
        if function is not None:
            # Name and arguments on lines of their own: ``wire_intact`` finds a fact the arguments
            # carry by its line, and a string's line is in the body as sent (JSON-escaped). Arguments
            # may also be an object: canonical JSON (as the memo compares them), which no line of
            # the body, where the object is raw JSON, can match.
            texts.append(_text(_get(function, "name") or ""))
            texts.append(_text(_get(function, "arguments") or ""))
        refs.append(tool_ref(TOOL_CALL, _str(_get(call, "id"))))
    if _get(message, "prefix") is True:  # the start of the answer, which the model continues
        refs.append("id:prefix")
    call_id = _str(_get(message, "tool_call_id"))
    if call_id:
        refs.append(tool_ref(TOOL_RESULT, call_id))
    name = _str(_get(message, "name"))
    if name:
        refs.append(f"id:name={name}")
    text = "\n".join(texts)
    return (_role(_get(message, "role"), "other"), text, tuple(refs), "message",
            cost + tokenizer_surplus(text))


def _tool_texts(tools: list[Any] | tuple[Any, ...]) -> list[str]:
    """Each tool as mistral-common writes it between ``[AVAILABLE_TOOLS]`` tokens: its ``Tool`` model
    dumped, ``{"type": "function", "function": {"name", "description", "parameters"}}`` in that order
    (the type and an empty description written even when the request leaves them out), as
    ``json.dumps`` spaces it."""
    texts = []
    for tool in tools:
        function = _get(tool, "function")
        if function is None:  # not a function tool: its JSON as sent
            texts.append(canonical(tool))
            continue
        texts.append(json.dumps({"type": "function", "function": {
            "name": _get(function, "name") or "", "description": _get(function, "description") or "",
            "parameters": _get(function, "parameters") or {}}}, ensure_ascii=False, default=jsonable))
    return texts


def _tools(tools: Any, view: RequestView) -> None:
    if not isinstance(tools, (list, tuple)) or not tools:
        return
    try:
        view.tools = tool_texts(tools, _tool_texts)
    except Exception as exc:  # a tool schema that will not serialise is the app's business
        view.unreadable = f"tools could not be read ({type(exc).__name__})"
        return
    view.prompt_overhead += TOOLS_FRAMING


def _json_schema(spec: Any) -> Any:
    """A ``json_schema`` response format's schema: ``schema_definition`` in the SDK's model and
    TypedDict, ``schema`` on the wire (a captured body). Never ``getattr(model, "schema")``: that
    is pydantic's deprecated classmethod."""
    schema = _get(spec, "schema_definition")
    if schema is None and isinstance(spec, Mapping):
        schema = spec.get("schema")
    return schema


def _response_format(value: Any, view: RequestView) -> None:
    """A structured-output schema is counted like the tools: it is in every request."""
    if value is None or _get(value, "type") != "json_schema":
        return
    spec = _get(value, "json_schema")
    schema = _json_schema(spec) if spec is not None else None
    if schema is None:
        return
    try:
        view.tools.append(canonical(schema))
    except Exception:  # a schema that will not serialise: the SDK's own error reaches the app
        return


def _reply_text(content: Any) -> str:
    """The answer's text: a string, or the ``text`` chunks of a chunk list (not its thinking)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        return ""
    return "".join(_str(_get(c, "text")) or "" for c in content if _get(c, "type") == "text")


#: Mistral's finish reason for an answer the service broke off: the call ends in error.
_BROKEN = "error"


#: The request's sampling parameters -> ``RequestView.settings``.
_SETTINGS = {"temperature": "temperature", "top_p": "top_p", "stop": "stop_sequences", "random_seed": "seed",
             "n": "choice.count", "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty"}


class MistralAdapter(Translation):
    provider = "mistral_ai"

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        view = RequestView(
            provider=self.provider,
            operation="chat",
            model=_str(_get(kwargs, "model")),
            items=[],
            max_output_tokens=_int(_get(kwargs, "max_tokens")),
            stream=api == "chat.stream" or _get(kwargs, "stream") is True,
        )
        view.message_framing, view.reply_priming = MESSAGE_FRAMING, REPLY_PRIMING
        settings(kwargs, _SETTINGS, view)
        kind = output_type(_get(_get(kwargs, "response_format"), "type"))
        if kind is not None:
            view.settings["output.type"] = kind
        _tools(_get(kwargs, "tools"), view)
        _response_format(_get(kwargs, "response_format"), view)
        server_url = _str(_get(kwargs, "server_url"))  # this call's own server, over the client's
        if server_url:
            view.server = url_server(server_url)
        if _get(kwargs, "reasoning_effort") is not None or view.model in _SETTINGS_BY_DEFAULT:
            view.prompt_overhead += MODEL_SETTINGS
        items(_get(kwargs, "messages"), _message_item, view, name="messages", noun="message", plain_first=True,
              memo=memo, plain_cost=tokenizer_surplus)
        return view

    def read_response(self, api: str, result: Any) -> Answer | None:
        choices = _get(result, "choices")
        if not isinstance(choices, list):
            return None
        usage = _get(result, "usage")
        message = _get(choices[0], "message") if choices else None
        reasons = [r for r in (_str(_get(c, "finish_reason")) for c in choices) if r]
        reply = Answer(
            model=_str(_get(result, "model")),
            id=_str(_get(result, "id")),
            finish_reasons=reasons,
            text=_reply_text(_get(message, "content")) if message is not None else "",
            error=_BROKEN if _BROKEN in reasons else None,
        )
        _usage(reply, usage)
        return reply

    def stream_reader(self, api: str) -> _MistralChunks:
        return _MistralChunks()

    def identity(self, instance: Any) -> Identity | None:
        """The server a ``Chat`` resource's client sends to: its configuration's ``server_url``, else
        its named server's URL, as the SDK reads them for each request (``get_server_details``, which
        also settles the default server name, as the request is about to)."""
        details = getattr(getattr(instance, "sdk_configuration", None), "get_server_details", None)
        if details is None:
            return None
        try:
            url = details()[0]
        except ValueError:  # a server name the SDK does not know: its own request fails on it
            return None
        server = url_server(url) if isinstance(url, str) else None
        return (None, *server) if server is not None else None

    reads_captures = True

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
        return as_call(body, model)


class _MistralChunks:
    """``chat.completion.chunk`` events: the wire's JSON, or the SDK's ``CompletionEvent`` (whose
    ``data`` is the chunk) if the stream is ever read as objects."""

    def __init__(self) -> None:
        self._reply = Answer()
        self._text = AnswerText()

    def feed(self, chunk: Any) -> None:
        data = _get(chunk, "data")
        if data is not None and _get(chunk, "choices") is None:
            chunk = data
        reply = self._reply
        if _get(chunk, "object") == "error":  # an error object instead of a chunk
            reply.error = _str(_get(chunk, "type")) or "error"
            return
        reply.id = reply.id or _str(_get(chunk, "id"))
        reply.model = reply.model or _str(_get(chunk, "model"))
        for choice in _get(chunk, "choices") or ():
            delta = _get(choice, "delta")
            if delta is not None:
                text = _reply_text(_get(delta, "content"))
                if text:
                    self._text.add(text)
            reason = _str(_get(choice, "finish_reason"))
            if reason and len(reply.finish_reasons) < CHOICES_KEPT:
                reply.finish_reasons.append(reason)
                if reason == _BROKEN:
                    reply.error = _BROKEN
        _usage(reply, _get(chunk, "usage"))  # on the last chunk, with its finish reason

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


ADAPTER = MistralAdapter()


def as_call(body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
    """A captured body is the call's keyword arguments (Mistral's wire is snake_case too)."""
    return ("chat.stream" if body.get("stream") is True else "chat.complete"), body


PROVIDER = Provider(
    distribution="mistralai",
    # mistralai 2.x and later ship ``mistralai`` as a namespace package (``client``, ``azure``,
    # ``gcp``, ``extra`` beside each other): importing one fires no hook on ``mistralai`` itself.
    module="mistralai.client",
    supported=(3, 3),
    label="mistral_ai",
    adapter=ADAPTER,
    family=Methods(SITES, http_results=HTTP_RESULTS),
    # OpenAI's path and shape: with openai's module chosen too, its route (first) reads these.
    wire=(WireRoute("/v1/chat/completions", ("model", "messages"), lambda body, path: as_call(body)),),
)


def _usage(reply: Answer, usage: Any) -> None:
    """``usage``: its prompt total includes the cached tokens (``prompt_tokens_details``)."""
    if usage is None:
        return
    reply.input_tokens = _int(_get(usage, "prompt_tokens"))
    reply.output_tokens = _int(_get(usage, "completion_tokens"))
    details = _get(usage, "prompt_tokens_details")
    if details is not None:
        reply.cache_read_tokens = _int(_get(details, "cached_tokens"))
