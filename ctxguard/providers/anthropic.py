"""Anthropic SDK: ``messages.create`` / ``messages.stream`` (and ``beta.messages``), translated.

The ``system`` parameter (a string or text blocks, cache-control included) is the
head instruction; content blocks become readable text (text, tool_use name and
input, tool_result content, thinking) or references (images, documents).
``thinking.budget_tokens`` is drawn from ``max_tokens``: it is not reserved
again, and the room it leaves the visible reply is reported.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from ..memo import Memo
from ..payload import TOOL_CALL, TOOL_RESULT, Answer, AnswerText, Item, RequestView, tool_ref
from ..tokens import NON_TEXT_PART
from . import identity
from ._image import ANTHROPIC_HIGH_RES, ANTHROPIC_STANDARD, Size, anthropic_tokens, size_of_base64
from ._read import (
    Unread,
    canonical,
    earlier_thinking_not_read,
    elements,
    family,
    items,
    schemas,
    settings,
    structured_parts,
)
from ._read import as_int as _int
from ._read import as_str as _str
from ._read import get as _get
from ._read import role as _role
from ._read import text_of as _text
from .base import CallSite, Identity, Methods, Provider, Translation, WireRoute
from .identity import resource_identity

__all__ = ["ADAPTER", "NEWER_TOKENIZER", "PROVIDER", "image_tokens", "strips_earlier_thinking", "text_scale",
           "thinks_by_default", "tool_prompt_tokens"]

_MESSAGES = "anthropic.resources.messages.messages"
_BETA = "anthropic.resources.beta.messages.messages"

#: SDK results that hold the HTTP response instead of a parsed answer (streams,
#: ``with_raw_response`` / ``with_streaming_response``): (module, class, attribute holding it).
HTTP_RESULTS = (
    ("anthropic._streaming", "Stream", "response"),
    ("anthropic._streaming", "AsyncStream", "response"),
    ("anthropic._response", "BaseAPIResponse", "http_response"),
    ("anthropic._legacy_response", "LegacyAPIResponse", "http_response"),
)


#: Per model family: (tool-use system prompt tokens with ``tool_choice`` auto or none, with any
#: or tool), and the image limits. Anthropic's "Tool use" pricing table (current rows, and the
#: earlier page's rows for the Claude 3 models it no longer lists); image limits from "Images and
#: vision" (docs/budget.md).
_MODELS: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "claude-opus-4-8": ((290, 410), ANTHROPIC_HIGH_RES),
    "claude-opus-4-7": ((675, 804), ANTHROPIC_HIGH_RES),
    "claude-opus-4-6": ((497, 589), ANTHROPIC_STANDARD),
    "claude-opus-4-5": ((496, 588), ANTHROPIC_STANDARD),
    "claude-opus-4-1": ((313, 315), ANTHROPIC_STANDARD),
    "claude-opus-4": ((313, 315), ANTHROPIC_STANDARD),
    "claude-sonnet-5": ((354, 474), ANTHROPIC_STANDARD),
    "claude-sonnet-4-6": ((497, 589), ANTHROPIC_STANDARD),
    "claude-sonnet-4-5": ((496, 588), ANTHROPIC_STANDARD),
    "claude-sonnet-4": ((313, 315), ANTHROPIC_STANDARD),
    "claude-haiku-4-5": ((496, 588), ANTHROPIC_STANDARD),
    "claude-3-5-haiku": ((264, 355), ANTHROPIC_STANDARD),
    "claude-haiku-3-5": ((264, 355), ANTHROPIC_STANDARD),
    "claude-3-7-sonnet": ((346, 313), ANTHROPIC_STANDARD),
    "claude-3-5-sonnet": ((346, 313), ANTHROPIC_STANDARD),
    "claude-3-5-sonnet-20240620": ((294, 261), ANTHROPIC_STANDARD),
    "claude-3-opus": ((530, 281), ANTHROPIC_STANDARD),
    "claude-3-sonnet": ((159, 235), ANTHROPIC_STANDARD),
    "claude-3-haiku": ((264, 340), ANTHROPIC_STANDARD),
}
#: A model not in the table (a newer one, say): the largest published numbers, so a budget is
#: not under-counted for it.
_UNKNOWN = ((675, 804), ANTHROPIC_HIGH_RES)
#: What may follow a family's name: a date, ``-latest``, a Bedrock or Vertex version; not another
#: version number (``claude-opus-4-9`` is not ``claude-opus-4``).
_SUFFIX = re.compile(r"(?:-0)?(?:-\d{8})?(?:-latest|-v\d.*|@.*|:.*)?", re.DOTALL)


#: Prompts Anthropic adds that it documents but does not size, measured on the recorded corpus
#: (tests/data/recorded/; docs/budget.md): structured outputs ("Claude automatically receives an
#: additional system prompt explaining the expected output format") cost 128 and 129 tokens beyond
#: the schema in two recordings (Sonnet 4.5 ``output_format``, Sonnet 4.6 ``output_config``);
#: extended thinking 29 and 31 beyond the messages in two (Claude 3.7 Sonnet).
STRUCTURED_OUTPUT_PROMPT = 128
THINKING_PROMPT = 29
#: A tool call and its result cost more than their texts: Anthropic renders them into the prompt
#: with markup it does not document. Measured on the recorded corpus (Anthropic's API and Claude on
#: Bedrock): 62 tokens a pair, the median over the fit half's 13 requests with tool exchanges of
#: what each was short by, less the 8 its requests with tools but no exchange are (median), per pair.
#: Split between the call and its result: only their sum is measured. Kept at 62 since Sonnet 5's
#: text is counted at its tokenizer's ratio (two of the 13 are Sonnet 5's): the same fit gives 47 now,
#: its median crossing a gap (59 to 73) in 13 values, while the held half's 9 are 75 a pair short and
#: all 22 together 67.5; 47 would under-count every agent history more (docs/budget.md).
TOOL_BLOCK_MARKUP = 31


#: Claude 2 and Claude Instant (retired from Anthropic's API; on Bedrock ``anthropic.claude-v2``,
#: ``anthropic.claude-instant-v1``) read a Messages request as their text-completion prompt:
#: ``{system}\n\nHuman: {user}\n\nAssistant: {answer}`` … ``\n\nAssistant:``. In their tokenizer
#: (the one the anthropic SDK shipped as ``tokenizer.json`` until 0.38) a turn's marker is 4 tokens
#: (``\n``, ``\n``, ``Human``, ``:``), the system text has none, and the prompt begins with one more:
#: "Say this is a test" is 5 tokens and 14 reported; with a system prompt and three turns, 37 (the
#: prompt's 36 and that one).
CLAUDE_2_TURN = 4
CLAUDE_2_START = 1
_CLAUDE_2 = re.compile(r"claude-(?:2|v2|instant)")


def claude_2(model: str | None) -> bool:
    """``model`` is Claude 2 or Claude Instant (a Bedrock id too), which read the ``Human:`` /
    ``Assistant:`` prompt."""
    return isinstance(model, str) and _CLAUDE_2.search(model.lower()) is not None


def claude_2_framing(view: RequestView) -> None:
    """Claude 2's prompt format on a request read: a marker a turn, none for the system text (taken
    off the reply's marker, which the request count carries), and the prompt's first token."""
    view.message_framing = CLAUDE_2_TURN
    system = bool(view.items) and view.items[0][0] == "system"
    view.reply_priming = CLAUDE_2_START + (0 if system else CLAUDE_2_TURN)


#: The models that read an earlier turn's thinking not at all: the thinking blocks of the answers
#: before the last user query (a tool result is not one) are stripped from the prompt and not counted
#: ("Extended thinking", "Context windows"; Bedrock's "Extended thinking" says the same of Claude there).
#: Claude Opus 4.5 and later Opus models, Sonnet 4.6 and later keep them all, and so does a model not
#: in the table (a newer one): counted, the safe side.
_STRIPS_EARLIER_THINKING = frozenset({"claude-3-7-sonnet", "claude-sonnet-4", "claude-sonnet-4-5", "claude-opus-4",
                                      "claude-opus-4-1", "claude-haiku-4-5"})


@functools.lru_cache(maxsize=256)  # read on every call: a scan of the model table, once a model
def strips_earlier_thinking(model: str | None) -> bool:
    """Whether ``model`` (a Bedrock id too) leaves the thinking of the answers before the last user
    query out of its prompt."""
    name = model.lower() if isinstance(model, str) else ""
    start = name.find("claude")
    return start >= 0 and family(name[start:], _MODELS, _SUFFIX) in _STRIPS_EARLIER_THINKING


#: Claude's newer tokenizer: "Claude Opus 4.7 and later Opus models, Claude Fable 5, Claude Mythos 5,
#: Claude Mythos Preview, and Claude Sonnet 5 use a newer tokenizer. The same input text produces
#: approximately 30 percent more tokens than on earlier models" (Anthropic, "Token counting",
#: https://platform.claude.com/docs/en/build-with-claude/token-counting); "roughly 30% more tokens for
#: the same text than Claude Sonnet 4.6" (https://platform.claude.com/docs/en/models/sonnet-5/migration-guide);
#: "1.0-1.35x" depending on content for Opus 4.7 ("What's new in Claude Opus 4.7"). Earlier models read
#: text as cl100k counts it (the corpus: docs/budget.md). The documented typical ratio, for all of them:
#: the corpus's Opus 4.8 request reports 1.3 times cl100k's count of its text, its Sonnet 5 requests
#: 1.1 to 1.5, and an under-count is the side a budget must not err on.
NEWER_TOKENIZER = 1.3
#: A Claude model's line and version in its id (an Anthropic, Bedrock, Vertex or OpenRouter id): ``claude-opus-4-8``,
#: ``us.anthropic.claude-sonnet-5-v1:0``, ``claude-mythos-preview``, ``anthropic/claude-opus-4.7`` (OpenRouter
#: spells the minor after a dot); not a date (``claude-sonnet-4-20250514`` is Sonnet 4), and not the Claude 3
#: ids, which name the version first (``claude-3-7-sonnet``).
_LINE = re.compile(r"claude-(opus|sonnet|haiku|fable|mythos)(?:-(\d{1,2})(?:[-.](\d{1,2}))?(?!\d))?")
#: Lines that think unasked: adaptive thinking is on by default on Sonnet 5 (its migration guide:
#: "adaptive thinking is on by default"), always on on Fable and Mythos.
_THINK_UNASKED = frozenset({"fable", "mythos"})


@functools.lru_cache(maxsize=256)  # read on every call (``text_scale``): a regular expression, once a model
def _line(model: str | None) -> tuple[str, int | None, int]:
    """``model``'s line, major version (None if its id has none) and minor (0 if none); ``("", None, 0)``
    for an id that names none (a Claude 3 or 2 id, another vendor's)."""
    match = _LINE.search(model.lower()) if isinstance(model, str) else None
    if match is None:
        return "", None, 0
    line, major, minor = match.groups()
    return line, int(major) if major else None, int(minor) if minor else 0


def text_scale(model: str | None) -> float:
    """What ``model``'s tokenizer makes of a text cl100k counts a token: ``NEWER_TOKENIZER`` for Claude
    Opus 4.7 and later, and every Claude of version 5 and later (Sonnet 5, Opus 5, Fable, Mythos; a
    Bedrock, Vertex or OpenRouter id too), 1.0 for earlier Claude models and any other. The measurer
    asks it for every request, whatever API carries it (``providers.TOKENIZERS``)."""
    line, major, minor = _line(model)
    if not line:
        return 1.0
    if major is None:
        return NEWER_TOKENIZER if line in _THINK_UNASKED else 1.0  # ``claude-mythos-preview``
    return NEWER_TOKENIZER if major >= 5 or (line == "opus" and major == 4 and minor >= 7) else 1.0


def thinks_by_default(model: str | None) -> bool:
    """Whether ``model`` thinks without being asked (Sonnet 5 and later Sonnets, Fable, Mythos): asking
    for thinking adds no prompt beyond its own framing, which its reports already calibrate (measured:
    docs/budget.md, "Claude's tokenizers")."""
    line, major, _ = _line(model)
    return line in _THINK_UNASKED or (line == "sonnet" and major is not None and major >= 5)


def _thinking(message: Any) -> list[str]:
    """The texts of a message's thinking blocks (a redacted one has none to count)."""
    return [_str(_get(block, "thinking")) or "" for block in elements(_get(message, "content"), "content")
            if _get(block, "type") == "thinking"]


def _model(model: str | None) -> tuple[tuple[int, int], tuple[int, int]]:
    name = model.lower() if isinstance(model, str) else ""
    start = name.find("claude")  # Bedrock ("us.anthropic.claude-...") and gateway prefixes
    key = family(name[start:], _MODELS, _SUFFIX) if start >= 0 else None
    return _MODELS[key] if key is not None else _UNKNOWN


def tool_prompt_tokens(model: str | None, *, forced: bool) -> int:
    """The tool-use system prompt Anthropic adds for ``model`` (a Bedrock id too): with
    ``tool_choice`` any or tool if ``forced``, else auto or none."""
    auto, forcing = _model(model)[0]
    return forcing if forced else auto


def image_tokens(model: str | None, size: Size | None) -> int:
    """What an image of ``size`` costs ``model`` (None: the most it can cost)."""
    return anthropic_tokens(size, _model(model)[1])


def _blocks(content: Any, texts: list[str], refs: list[str], model: str | None) -> int:
    """Readable text of ``content`` into ``texts``, references into ``refs``; returns what its
    non-text blocks cost."""
    cost = 0
    for block in structured_parts(content, texts):
        kind = _get(block, "type")
        if kind == "text":
            texts.append(_str(_get(block, "text")) or "")
        elif kind in ("thinking", "redacted_thinking"):
            texts.append(_str(_get(block, "thinking")) or "")
            refs.append(f"id:{kind}")
        elif kind in ("tool_use", "server_tool_use"):
            tool_input = _get(block, "input")
            text = tool_input if isinstance(tool_input, str) else canonical(tool_input)
            texts.append(f"{_text(_get(block, 'name') or '')} {text}")
            if kind == "tool_use":
                refs.append(tool_ref(TOOL_CALL, _str(_get(block, "id"))))
                cost += TOOL_BLOCK_MARKUP
            else:  # a server tool's result is in the same assistant message: nothing to pair
                refs.append(f"id:{kind}={_text(_get(block, 'id'))}")
        elif kind == "tool_result" or (isinstance(kind, str) and kind.endswith("_tool_result")):
            cost += _blocks(_get(block, "content"), texts, refs, model)
            if kind == "tool_result":
                refs.append(tool_ref(TOOL_RESULT, _str(_get(block, "tool_use_id"))))
                cost += TOOL_BLOCK_MARKUP
            else:
                refs.append(f"id:{kind}={_text(_get(block, 'tool_use_id'))}")
        elif kind in ("image", "document"):
            source = _get(block, "source")
            ref = data = None
            if source is not None:
                data = _str(_get(source, "data"))
                ref = _str(_get(source, "url")) or _str(_get(source, "file_id")) or data
            refs.append(ref or kind)
            if kind == "image":
                size = size_of_base64(data) if data and _get(source, "type") == "base64" else None
                cost += anthropic_tokens(size, _model(model)[1])
            else:
                cost += NON_TEXT_PART
            title = _str(_get(block, "title"))
            if title:
                texts.append(title)
        elif kind is not None:
            refs.append(f"id:block={_text(kind)}")
    return cost


def _structured_output(kwargs: Mapping[str, Any]) -> Any:
    """The structured-output format a call sends: ``output_format`` (the beta parameter: a dict on
    older SDKs' ``beta.messages.create``, a type on ``parse`` and ``stream``), else
    ``output_config.format``. ``extra_body`` is merged into the body by the SDK, over the named
    parameters: it is the only way the newer SDKs' ``create`` sends the beta ``output_format``."""
    extra = _get(kwargs, "extra_body")
    extra = extra if isinstance(extra, Mapping) else {}
    return (extra.get("output_format") or _get(kwargs, "output_format")
            or _get(extra.get("output_config") or _get(kwargs, "output_config"), "format"))


def _schema(output: Any) -> Any:
    """The JSON schema of a structured-output format: a dict's ``schema``; a type (``parse`` and
    ``stream`` take a pydantic model, a dataclass, a TypedDict) as the SDK converts it before
    sending (the SDK is installed: the app is calling it). Never ``getattr(type, "schema")``:
    on a pydantic model that is its deprecated classmethod."""
    if not isinstance(output, type):
        return _get(output, "schema")
    from pydantic import TypeAdapter

    try:
        from anthropic.lib._parse._transform import transformed_json_schema
    except ImportError:
        try:  # anthropic 0.x: pydantic's schema, transformed
            from anthropic.lib._parse._transform import transform_schema
        except ImportError:  # an SDK without either helper sends pydantic's own schema
            return TypeAdapter(output).json_schema()
        return transform_schema(TypeAdapter(output).json_schema())
    return transformed_json_schema(TypeAdapter(output))


def _output_format(output: Any, view: RequestView) -> None:
    """A structured-output schema (``output_format``, ``output_config.format``): counted like a tool."""
    try:
        schema = _schema(output)
        if schema is None:
            return
        view.tools.append(canonical(schema))
    except Exception:  # a schema that will not convert or serialise: the SDK's own error reaches the app
        return
    view.prompt_overhead += STRUCTURED_OUTPUT_PROMPT


def _message_item(message: Any, model: str | None) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    cost = _blocks(_get(message, "content"), texts, refs, model)
    return (_role(_get(message, "role"), "other"), "\n".join(texts), tuple(refs), "message", cost)


class AnthropicAdapter(Translation):
    provider = "anthropic"

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        max_tokens = _int(_get(kwargs, "max_tokens"))
        view = RequestView(
            provider=self.provider,
            operation="chat",
            model=_str(_get(kwargs, "model")),
            items=[],
            max_output_tokens=max_tokens,
            stream=_get(kwargs, "stream") is True or api == "messages.stream",
        )
        if _get(kwargs, "context_management") is not None:
            # Edits the server applies (clearing old tool results or thinking, compacting), which the
            # answer lists (``context_management.applied_edits``): asked for, and said.
            view.server_edits = "the request lets the provider edit its context (context_management)"
        thinking = _get(kwargs, "thinking")
        budget = _int(_get(thinking, "budget_tokens")) if thinking is not None else None
        if budget is not None and max_tokens is not None:
            view.reply_room = max(0, max_tokens - budget)
        if _get(thinking, "type") in ("enabled", "adaptive") and not thinks_by_default(view.model):
            view.prompt_overhead += THINKING_PROMPT
        tools = _get(kwargs, "tools")
        schemas(tools, view)
        if isinstance(tools, (list, tuple)) and tools:
            auto, forced = _model(view.model)[0]
            view.prompt_overhead += forced if _get(_get(kwargs, "tool_choice"), "type") in ("any", "tool") else auto
        settings(kwargs, _SETTINGS, view)
        extra = _get(kwargs, "extra_body")
        if isinstance(extra, Mapping):  # anthropic 2.x takes the sampling parameters only there
            settings(extra, _SETTINGS, view)
        output = _structured_output(kwargs)
        if output is not None:
            _output_format(output, view)
            view.settings["output.type"] = "json"  # a JSON schema, the one kind Anthropic's formats take
        system = _get(kwargs, "system")
        if system is not None:
            texts: list[str] = []
            refs: list[str] = []
            try:
                cost = _blocks(system, texts, refs, view.model)
            except Unread as why:
                view.unreadable = f"system: {why}"
                return view
            text = "\n".join(texts)
            if text.strip():
                view.items.append(("system", text, tuple(refs), "instructions", cost))
        messages, first = _get(kwargs, "messages"), len(view.items)
        items(messages, _message_item, view, name="messages", noun="message", plain_first=True, memo=memo)
        if strips_earlier_thinking(view.model):
            earlier_thinking_not_read(view, messages, first, _thinking)
        if claude_2(view.model):
            claude_2_framing(view)
        return view

    def read_response(self, api: str, result: Any) -> Answer | None:
        content = _get(result, "content")
        if not isinstance(content, list):
            return None
        reason = _str(_get(result, "stop_reason"))
        reply = Answer(
            model=_str(_get(result, "model")),
            id=_str(_get(result, "id")),
            finish_reasons=[reason] if reason else [],
            text="".join(_str(_get(b, "text")) or "" for b in content if _get(b, "type") == "text"),
        )
        _usage(reply, _get(result, "usage"))
        return reply

    def stream_reader(self, api: str) -> _AnthropicEvents:
        return _AnthropicEvents()

    def final_reply(self, stream: Any) -> Answer | None:
        """The answer of a ``messages.stream()`` helper, from its accumulated snapshot; None for a
        stream left before its first event (the SDK's property asserts there is a snapshot)."""
        try:
            snapshot = stream.current_message_snapshot
        except (AttributeError, AssertionError):
            return None
        return self.read_response("messages", snapshot)

    def identity(self, instance: Any) -> Identity | None:
        return resource_identity(instance)

    reads_captures = True

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
        return as_call(body, model)


def _usage(reply: Answer, usage: Any, *, output: bool = True) -> None:
    """The counts of a ``usage`` that has them (a ``message_delta``'s may have the output only; a
    ``message_start``'s output count is a placeholder: ``output=False``).
    Anthropic reports the cached reads and writes apart from ``input_tokens``: everything the prompt
    cost is their sum (the GenAI conventions' ``gen_ai.usage.input_tokens`` includes them)."""
    if usage is None:
        return
    written = _int(_get(usage, "output_tokens")) if output else None
    if written is not None:
        reply.output_tokens = written
        details = _get(usage, "output_tokens_details")
        if details is not None:
            reply.reasoning_tokens = _int(_get(details, "thinking_tokens"))
    base = _int(_get(usage, "input_tokens"))
    if base is None:
        return
    read = _int(_get(usage, "cache_read_input_tokens"))
    wrote = _int(_get(usage, "cache_creation_input_tokens"))
    reply.input_tokens = base + (read or 0) + (wrote or 0)
    reply.cache_read_tokens, reply.cache_write_tokens = read, wrote


#: The request's sampling parameters -> ``RequestView.settings``.
_SETTINGS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "stop_sequences": "stop_sequences"}


class _AnthropicEvents:
    """``stream=True``: message_start, content_block_delta, message_delta, message_stop events."""

    def __init__(self) -> None:
        self.complete = False  # message_stop, the last event, arrived (``StreamReader``)
        self._reply = Answer()
        self._text = AnswerText()

    def feed(self, event: Any) -> None:
        kind = _get(event, "type")
        reply = self._reply
        if kind == "message_start":
            message = _get(event, "message")
            reply.id = _str(_get(message, "id"))
            reply.model = _str(_get(message, "model"))
            _usage(reply, _get(message, "usage"), output=False)
        elif kind == "content_block_delta":
            delta = _get(event, "delta")
            text = _str(_get(delta, "text")) if delta is not None else None
            if text:
                self._text.add(text)
        elif kind == "message_delta":
            delta = _get(event, "delta")
            reason = _str(_get(delta, "stop_reason")) if delta is not None else None
            if reason:
                reply.finish_reasons = [reason]
            # Cumulative usage, as the SDK keeps it: later counts replace message_start's.
            _usage(reply, _get(event, "usage"))
        elif kind == "message_stop":
            self.complete = True
        elif kind == "error":
            error = _get(event, "error")
            reply.error = _str(_get(error, "type")) if error is not None else None
            reply.error = reply.error or "error"

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


ADAPTER = AnthropicAdapter()


def as_call(body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
    """A captured body is the call's keyword arguments; on Bedrock and Vertex AI the model is in
    the URL, not the body (the capture line's ``model``)."""
    if model is not None and "model" not in body:
        body = {**body, "model": model}
    return "messages", body


# ``parse`` (structured outputs) posts itself, not through ``create``; ``stream`` returns a
# stream manager at once, on the async client too, whose answer is its own snapshot at the end.
SITES = (
    CallSite(_MESSAGES, "Messages.create", "messages"),
    CallSite(_MESSAGES, "AsyncMessages.create", "messages", "async"),
    CallSite(_MESSAGES, "Messages.stream", "messages.stream", "manager", ADAPTER.final_reply),
    CallSite(_MESSAGES, "AsyncMessages.stream", "messages.stream", "manager", ADAPTER.final_reply),
    CallSite(_MESSAGES, "Messages.parse", "messages"),
    CallSite(_MESSAGES, "AsyncMessages.parse", "messages", "async"),
    CallSite(_BETA, "Messages.create", "messages"),
    CallSite(_BETA, "AsyncMessages.create", "messages", "async"),
    CallSite(_BETA, "Messages.parse", "messages"),
    CallSite(_BETA, "AsyncMessages.parse", "messages", "async"),
    CallSite(_BETA, "Messages.stream", "messages.stream", "manager", ADAPTER.final_reply),
    CallSite(_BETA, "AsyncMessages.stream", "messages.stream", "manager", ADAPTER.final_reply),
)

PROVIDER = Provider(
    distribution="anthropic",
    module="anthropic",
    supported=(0, 2),
    label="anthropic",
    adapter=ADAPTER,
    family=Methods(SITES, http_results=HTTP_RESULTS),
    routes=identity.ROUTES,
    # ``max_tokens`` is required by the Messages API, and tells its body from Chat Completions'.
    wire=(WireRoute("/v1/messages", ("model", "messages", "max_tokens"), lambda body, path: ("messages", body)),),
)
