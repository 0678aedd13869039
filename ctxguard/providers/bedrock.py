"""AWS Bedrock Runtime through botocore (boto3's ``bedrock-runtime`` client): ``converse``,
``converse_stream``, ``invoke_model`` and ``invoke_model_with_response_stream``, translated.

botocore generates its client classes: every operation of every AWS client goes through one
method, ``BaseClient._make_api_call(operation_name, api_params)``, which is the call site, shared
(``dispatch`` picks the four model operations of a ``bedrock-runtime`` client and lets every other
call through). docs/design.md says why there and not botocore's event handlers.

Converse: the ``system`` blocks are the instruction (text, guard content; ``cachePoint`` markers
are not read); messages' content blocks become readable text (text, tool use name and input, tool
result content, reasoning text, documents' text) or references (images, documents, videos); tool
uses and results are written as the neutral tool refs; ``toolConfig.tools`` specs are counted
like tools, ``inferenceConfig.maxTokens`` is the reserved output. Its answer: ``output.message``,
``stopReason``, ``usage`` (cache reads and writes are input too); no response id exists.

Converse renders one request into each model's own prompt format: the count is the texts plus what
the format of the model family behind the id adds (``bedrock_families``: role markers, begin-of-text
and the reply's header, a default system block, a tool prompt and how the template writes a tool,
tool call and result markers, the family's image formula). Claude keeps Anthropic's accounting.

InvokeModel: the body is the model's own request, read where the model family's format is
documented: an Anthropic Messages body (``anthropic_version`` ``bedrock-…``) by the Anthropic module,
the model id from ``modelId``; Nova's (Converse's shape) as Converse; a prompt string (Llama's,
Mistral's, Cohere Command's ``prompt``, Titan's ``inputText``) as one message; Cohere Command R's
chat (``preamble``, ``chat_history``, ``message``). A body of any other shape or model is not read
(every check skips, saying so), never guessed at. Its answer is read off the
body as the app reads it (the raw stream beneath botocore's ``StreamingBody``, which the app
keeps); the token counts Bedrock puts in its response headers (and in a stream's last chunk,
``amazon-bedrock-invocationMetrics``) serve for any model.

Streams (``EventStream``) are proxied: the app iterates the same events.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from ..memo import Memo
from ..payload import TOOL_CALL, TOOL_RESULT, Answer, AnswerText, Item, RequestView, tool_ref
from ..tokens import NON_TEXT_PART
from ._image import size_of_base64, size_of_bytes
from ._read import as_int as _int
from ._read import as_str as _str
from ._read import canonical, earlier_thinking_not_read, elements, items, last_query, settings, tool_definitions
from ._read import get as _get
from ._read import role as _role
from ._read import text_of as _text
from .anthropic import ADAPTER as ANTHROPIC
from .anthropic import (
    STRUCTURED_OUTPUT_PROMPT,
    THINKING_PROMPT,
    claude_2,
    claude_2_framing,
    image_tokens,
    strips_earlier_thinking,
    thinks_by_default,
    tool_prompt_tokens,
)
from .base import CallSite, Identity, Pending, Provider, SharedDispatch, Translation, WireRoute
from .bedrock_families import ANTHROPIC as CLAUDE
from .bedrock_families import Family, family
from .identity import url_server

__all__ = ["ADAPTER", "PROVIDER"]

LABEL = "aws.bedrock"
_SERVICE = "bedrock-runtime"
#: botocore operation name -> api (the client method's name).
_OPERATIONS = {
    "Converse": "converse",
    "ConverseStream": "converse_stream",
    "InvokeModel": "invoke_model",
    "InvokeModelWithResponseStream": "invoke_model_with_response_stream",
}
_STREAMS = frozenset({"converse_stream", "invoke_model_with_response_stream"})

SITES = (CallSite("botocore.client", "BaseClient._make_api_call", "bedrock-runtime"),)
#: botocore's HTTP layer, after signing: the body as sent.
TRANSPORT = (("botocore.httpsession", "URLLib3Session.send", "body"),)


def dispatch(instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """``_make_api_call(operation_name, api_params)`` of a ``bedrock-runtime`` client: its api and
    the app's keyword arguments; None for any other operation or service."""
    operation = args[0] if args else kwargs.get("operation_name")
    api = _OPERATIONS.get(operation) if type(operation) is str else None
    if api is None:
        return None
    model = getattr(getattr(instance, "meta", None), "service_model", None)
    if getattr(model, "service_name", None) != _SERVICE:
        return None
    params = args[1] if len(args) > 1 else kwargs.get("api_params")
    return api, params if isinstance(params, Mapping) else {}


def _digest(data: bytes | bytearray) -> str:
    """A reference to inline bytes (an image, a document): their digest, never the bytes."""
    return hashlib.blake2b(bytes(data), digest_size=16).hexdigest()


#: Claude's citations mode: a document with ``citations.enabled`` costs this much beyond its text and
#: the flat document estimate (Anthropic documents the prompt, not its size): measured on the recorded
#: corpus, fitted on its fit half (bench/bedrock_fit.py; docs/budget.md "Bedrock").
CITATIONS_PROMPT = 793


def _media(kind: str, value: Any, refs: list[str], texts: list[str], model: str | None) -> int:
    """An image, document or video block: a reference (its S3 URI, or a digest of its bytes);
    a document's name and inline text are read. Returns what it costs: an image by the model
    family's formula (Claude's where the family has none), a document the flat estimate, and
    Claude's citations prompt where it asks for citations."""
    source = _get(value, "source")
    data = _get(source, "bytes") if source is not None else None
    location = _get(source, "s3Location") if source is not None else None
    uri = _str(_get(location, "uri")) if location is not None else None
    if isinstance(data, (bytes, bytearray)):
        refs.append(f"{kind}:{_digest(data)}")
    elif isinstance(data, str):  # a captured body: base64, as it went on the wire
        refs.append(data)
    else:
        refs.append(uri or kind)
    if kind == "document":
        name = _str(_get(value, "name"))
        if name:
            texts.append(name)
        inline = _get(source, "text") if source is not None else None
        if isinstance(inline, str):
            texts.append(inline)
        for part in elements(_get(source, "content") if source is not None else None, "content"):
            texts.append(_str(_get(part, "text")) or "")
        cites = _get(_get(value, "citations"), "enabled") is True and family(model) is CLAUDE
        return NON_TEXT_PART + (CITATIONS_PROMPT if cites else 0)
    if kind != "image":
        return NON_TEXT_PART
    if isinstance(data, (bytes, bytearray)):
        size = size_of_bytes(bytes(data))
    else:
        size = size_of_base64(data) if isinstance(data, str) else None
    priced = family(model).image
    return priced(size) if priced is not None else image_tokens(model, size)


def _block(kind: str, value: Any, texts: list[str], refs: list[str], model: str | None) -> int:
    """One member of a Converse content block (a union: one key per block)."""
    if kind == "text":
        texts.append(_text(value))
    elif kind in ("image", "document", "video"):
        return _media(kind, value, refs, texts, model)
    elif kind == "toolUse":
        tool_input = _get(value, "input")
        text = tool_input if isinstance(tool_input, str) else canonical(tool_input)
        texts.append(f"{_text(_get(value, 'name') or '')} {text}")
        refs.append(tool_ref(TOOL_CALL, _str(_get(value, "toolUseId"))))
        return family(model).tool_call
    elif kind == "toolResult":
        cost = _blocks(_get(value, "content"), texts, refs, model)
        refs.append(tool_ref(TOOL_RESULT, _str(_get(value, "toolUseId"))))
        return cost + family(model).tool_result
    elif kind == "json":  # a tool result's structured content
        texts.append(canonical(value))
    elif kind == "reasoningContent":
        reasoning = _get(value, "reasoningText")
        texts.append(_str(_get(reasoning, "text")) or "" if reasoning is not None else "")
        refs.append("id:reasoning")
    elif kind == "guardContent":
        guarded = _get(value, "text")
        texts.append(_str(_get(guarded, "text")) or "" if guarded is not None else "")
    elif kind in ("citationsContent", "searchResult"):
        return _blocks(_get(value, "content"), texts, refs, model)
    elif kind != "cachePoint":  # a cache marker says nothing the model reads
        refs.append(f"id:block={kind}")
    return 0


def _blocks(content: Any, texts: list[str], refs: list[str], model: str | None) -> int:
    """Readable text of Converse ``content`` blocks into ``texts``, references into ``refs``;
    returns what the non-text blocks cost."""
    if isinstance(content, str):
        texts.append(content)
        return 0
    cost = 0
    for block in elements(content, "content"):
        if isinstance(block, Mapping):
            for kind, value in block.items():
                cost += _block(kind, value, texts, refs, model)
        else:
            texts.append(_text(block))
    return cost


def _message_item(message: Any, model: str | None) -> Item:
    texts: list[str] = []
    refs: list[str] = []
    cost = _blocks(_get(message, "content"), texts, refs, model)
    role = _role(_get(message, "role"), "other")
    fam = family(model)
    if role == "assistant":
        cost += fam.assistant
    text = "\n".join(texts)
    return (role, text, tuple(refs), "message", cost + fam.surplus(text))


def _tools(config: Any, view: RequestView, fam: Family) -> None:
    """``toolConfig.tools``' specs are counted as the model's template writes them (``cachePoint``
    entries are not tools), with the prompt it adds for them: Anthropic's tool-use prompt on Claude."""
    specs = [_get(tool, "toolSpec") for tool in elements(_get(config, "tools"), "tools")]
    specs = [spec for spec in specs if spec is not None]
    if not specs:
        return
    try:
        view.tools = [fam.tool_text(spec) if isinstance(spec, Mapping) else canonical(spec) for spec in specs]
    except Exception as exc:  # a schema that will not serialise is the app's business
        view.unreadable = f"tools could not be read ({type(exc).__name__})"
        return
    if fam is CLAUDE:
        choice = _get(config, "toolChoice")
        forced = choice is not None and (_get(choice, "any") is not None or _get(choice, "tool") is not None)
        view.prompt_overhead += tool_prompt_tokens(view.model, forced=forced)
    else:
        view.prompt_overhead += fam.tool_prompt


def _output_schema(output: Any, view: RequestView) -> None:
    """``outputConfig.textFormat``'s JSON schema, on Claude: counted like a tool, with the prompt
    Anthropic adds to explain it (as its own API's ``output_config``). The other families Bedrock
    serves constrain their decoding to the schema and do not read it (the recorded corpus: Mistral,
    Qwen, Gemma report the prompt without it)."""
    structure = _get(_get(output, "textFormat"), "structure")
    schema = _get(_get(structure, "jsonSchema"), "schema") if structure is not None else None
    if isinstance(schema, str):  # the wire's form: the schema as a JSON string
        try:
            schema = json.loads(schema)
        except ValueError:
            view.tools.append(schema)
            view.prompt_overhead += STRUCTURED_OUTPUT_PROMPT
            return
    if schema is None:
        return
    try:
        view.tools.append(canonical(schema))
    except Exception:  # a schema that will not serialise: the SDK's own error reaches the app
        return
    view.prompt_overhead += STRUCTURED_OUTPUT_PROMPT


def _frame(view: RequestView, fam: Family) -> None:
    """The family's prompt format: its framing of each message and what it adds once a request."""
    view.message_framing = fam.message
    view.reply_priming = fam.request + (fam.no_system if not view.items or view.items[0][0] != "system" else 0)


#: Converse's ``inferenceConfig`` -> ``RequestView.settings``.
_SETTINGS = {"temperature": "temperature", "topP": "top_p", "stopSequences": "stop_sequences"}


def _converse(api: str, kwargs: Mapping[str, Any], memo: Memo | None) -> RequestView:
    config = _get(kwargs, "inferenceConfig")
    max_tokens = _int(_get(config, "maxTokens")) if config is not None else None
    view = RequestView(provider=LABEL, operation="chat", model=_str(_get(kwargs, "modelId")), items=[],
                       max_output_tokens=max_tokens, stream=api == "converse_stream")
    settings(config, _SETTINGS, view)
    fields = _get(kwargs, "additionalModelRequestFields")
    thinking = _get(fields, "thinking") if isinstance(fields, Mapping) else None
    budget = _int(_get(thinking, "budget_tokens")) if isinstance(thinking, Mapping) else None
    if budget is not None and max_tokens is not None:
        view.reply_room = max(0, max_tokens - budget)
    fam = family(view.model)
    _tools(_get(kwargs, "toolConfig"), view, fam)
    if fam is CLAUDE:
        output = _get(kwargs, "outputConfig")
        if output is not None:
            _output_schema(output, view)
        if isinstance(thinking, Mapping) and _get(thinking, "type") in ("enabled", "adaptive") \
                and not thinks_by_default(view.model):
            view.prompt_overhead += THINKING_PROMPT
    system = _get(kwargs, "system")
    if system is not None:
        texts: list[str] = []
        refs: list[str] = []
        cost = _blocks(system, texts, refs, view.model)
        text = "\n".join(texts)
        cost += fam.surplus(text)
        if text.strip():
            view.items.append(("system", text, tuple(refs), "instructions", cost))
    messages, first = _get(kwargs, "messages"), len(view.items)
    items(messages, _message_item, view, name="messages", noun="message", plain_first=True, memo=memo)
    if fam.drops_earlier_thinking:
        _earlier_think_tags_not_read(view)
    elif fam is CLAUDE and strips_earlier_thinking(view.model):
        earlier_thinking_not_read(view, messages, first, _reasoning)
    _frame(view, fam)
    if fam is CLAUDE and claude_2(view.model):
        claude_2_framing(view)
    return view


def _earlier_think_tags_not_read(view: RequestView) -> None:
    """The assistant turns before the last user query are read without their thinking (the text up
    to the last ``</think>``), as the family's template writes them (``RequestView.not_read``: the
    messages stay as sent). The turns of an agent loop since that query keep theirs (Qwen3's
    ``last_query_index``). DeepSeek-R1 drops it from every answer; from the earlier ones only, here,
    errs on the safe side."""
    for i in range(last_query(view.items)):
        role, text, _, _, _ = view.items[i]
        if role == "assistant" and "</think>" in text:
            kept = text.split("</think>")[-1].lstrip("\n")
            view.not_read[i] = text[: len(text) - len(kept)]


def _reasoning(message: Any) -> list[str]:
    """The texts of a message's ``reasoningContent`` blocks (a redacted one has none to count)."""
    texts = []
    for block in elements(_get(message, "content"), "content"):
        reasoning = _get(block, "reasoningContent") if isinstance(block, Mapping) else None
        if reasoning is not None:
            texts.append(_str(_get(_get(reasoning, "reasoningText"), "text")) or "")
    return texts


def _body(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON document of an ``invoke_model`` body, or why it is not read."""
    if isinstance(value, (bytes, bytearray, str)):
        try:
            document = json.loads(value)
        except ValueError:
            return None, "body is not JSON"
        if isinstance(document, dict):
            return document, None
        return None, "body is not a JSON object"
    if value is None:
        return None, "no body"
    return None, f"body is a {type(value).__name__}, left unread for the SDK"


def _anthropic_body(document: Mapping[str, Any]) -> bool:
    version = document.get("anthropic_version")
    return isinstance(version, str) and version.startswith("bedrock-")


def _prompt_body(view: RequestView, document: Mapping[str, Any], fam: Family, key: str) -> str | None:
    """A body that is the model's own prompt string (Llama's, Mistral's and Cohere Command's
    ``prompt``, Titan's ``inputText``): one message, its text as written, and what the family's
    tokenizer adds (a begin-of-text token). Template markers an app writes into the prompt
    (``<|start_header_id|>``) are counted as text, several tokens each where the model reads one.
    Why not, if the body is not one."""
    prompt = document.get(key)
    if not isinstance(prompt, str):
        return f"body has no {key} string"
    if document.get("images") is not None:  # Llama 3.2's images: not priced here
        return "body has images"
    config = document.get("textGenerationConfig")
    view.max_output_tokens = _int(document.get("max_gen_len")) or _int(document.get("max_tokens")) or (
        _int(config.get("maxTokenCount")) if isinstance(config, dict) else None)
    view.items.append(("user", prompt, (), "message", fam.surplus(prompt)))
    view.message_framing, view.reply_priming = 0, fam.prompt_request
    return None


#: Cohere Command R's chat roles -> ctxguard's.
_COHERE_ROLES = {"USER": "user", "CHATBOT": "assistant", "SYSTEM": "system"}


def _cohere_body(view: RequestView, document: Mapping[str, Any], fam: Family) -> str | None:
    """Cohere Command R's chat body: ``preamble``, ``chat_history``, ``message``, ``documents``,
    ``tools`` (counted as their JSON)."""
    message = document.get("message")
    if not isinstance(message, str):
        return "body has no message string"
    preamble = document.get("preamble")
    if isinstance(preamble, str) and preamble.strip():
        view.items.append(("system", preamble, (), "instructions", 0))
    for turn in elements(document.get("chat_history"), "chat_history"):
        text = _get(turn, "message")
        if not isinstance(text, str):
            return "chat_history holds a turn without a message string"
        view.items.append((_COHERE_ROLES.get(str(_get(turn, "role")), "other"), text, (), "message", 0))
    documents = document.get("documents")
    view.items.append(("user", message + (f"\n{canonical(documents)}" if documents else ""), (), "message", 0))
    tools = document.get("tools")
    if isinstance(tools, list) and tools:
        view.tools = [canonical(tool) for tool in tools]
    view.max_output_tokens = _int(document.get("max_tokens"))
    view.message_framing, view.reply_priming = fam.message, fam.request
    return None


def _invoke(api: str, kwargs: Mapping[str, Any], memo: Memo | None) -> RequestView:
    """The model's own body, read where its family's format is documented (``Family.invoke``):
    Anthropic Messages (by the Anthropic module), Nova's (Converse's shape, ``messages-v1``), a
    prompt string (Llama, Mistral, Titan, Cohere Command), Cohere Command R's chat. Any other body
    is not read (every check skips, saying why): never guessed at."""
    model = _str(_get(kwargs, "modelId"))
    stream = api in _STREAMS
    document, why = _body(_get(kwargs, "body"))
    if document is not None and _anthropic_body(document):
        view = ANTHROPIC.normalise("messages", {**document, "model": model}, memo)
        view.provider, view.stream = LABEL, stream
        return view
    fam = family(model)
    if document is not None and "messages" in fam.invoke and isinstance(document.get("messages"), list):
        config = document.get("inferenceConfig")
        config = config if isinstance(config, dict) else {}
        limit = _int(config.get("max_new_tokens")) or _int(config.get("maxTokens"))
        view = _converse(api, {**document, "modelId": model, "inferenceConfig": {"maxTokens": limit}}, memo)
        view.stream = stream
        return view
    view = RequestView(provider=LABEL, operation="chat", model=model, items=[], stream=stream)
    if document is not None:
        if "message" in fam.invoke and "message" in document:
            why = _cohere_body(view, document, fam)
        elif fam.invoke & {"prompt", "inputText"}:
            why = _prompt_body(view, document, fam, "inputText" if "inputText" in fam.invoke else "prompt")
        else:
            why = f"a body for {model!r}, whose format is not read here"
    if why is not None:
        view.items, view.tools = [], []
        view.unreadable = f"invoke_model: {why}"
    return view


def _usage(answer: Answer, usage: Any) -> None:
    """Converse ``usage``: everything the prompt cost, cache reads and writes included."""
    if usage is None:
        return
    base = _int(_get(usage, "inputTokens"))
    if base is not None:
        read, wrote = _int(_get(usage, "cacheReadInputTokens")), _int(_get(usage, "cacheWriteInputTokens"))
        answer.input_tokens = base + (read or 0) + (wrote or 0)
        answer.cache_read_tokens, answer.cache_write_tokens = read, wrote
    answer.output_tokens = _int(_get(usage, "outputTokens"))


def _reply_text(content: Any) -> str:
    return "".join(_str(_get(b, "text")) or "" for b in elements(content, "content") if isinstance(b, Mapping))


def _converse_answer(result: Any) -> Answer | None:
    output = _get(result, "output")
    if output is None:
        return None
    message = _get(output, "message")
    reason = _str(_get(result, "stopReason"))
    answer = Answer(finish_reasons=[reason] if reason else [],
                    text=_reply_text(_get(message, "content")) if message is not None else "")
    _usage(answer, _get(result, "usage"))
    return answer


def _headers(result: Any) -> Mapping[str, Any]:
    metadata = _get(result, "ResponseMetadata")
    headers = _get(metadata, "HTTPHeaders") if metadata is not None else None
    return headers if isinstance(headers, Mapping) else {}


def _header_int(headers: Mapping[str, Any], name: str) -> int | None:
    value = headers.get(name)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _counted(answer: Answer, headers: Mapping[str, Any]) -> Answer:
    """Bedrock's own token counts (response headers), where the body gave none."""
    if answer.input_tokens is None:
        answer.input_tokens = _header_int(headers, "x-amzn-bedrock-input-token-count")
    if answer.output_tokens is None:
        answer.output_tokens = _header_int(headers, "x-amzn-bedrock-output-token-count")
    return answer


def _invoke_answer(headers: Mapping[str, Any], document: Any) -> Answer:
    """An ``invoke_model`` body, once read: an Anthropic message is read as one; any other body's
    content is not, only Bedrock's counts."""
    answer = None
    if isinstance(document, dict) and document.get("type") == "message":
        answer = ANTHROPIC.read_response("messages", document)
    return _counted(answer or Answer(), headers)


class BedrockAdapter(Translation):
    provider = LABEL

    def tool_definitions(self, api: str, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Converse's ``toolConfig.tools``: each ``toolSpec``, its parameters in ``inputSchema.json``
        (an ``invoke_model`` body is the model's own format: not read for content)."""
        tools = _get(_get(kwargs, "toolConfig"), "tools") if api.startswith("converse") else None
        specs = [_get(tool, "toolSpec") for tool in tools] if isinstance(tools, (list, tuple)) else []
        return tool_definitions([{"name": _get(spec, "name"), "description": _get(spec, "description"),
                                  "parameters": _get(_get(spec, "inputSchema"), "json")}
                                 for spec in specs if spec is not None])

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        if api.startswith("converse"):
            return _converse(api, kwargs, memo)
        return _invoke(api, kwargs, memo)

    def read_response(self, api: str, result: Any) -> Answer | None:
        """The result ``_make_api_call`` returned: Converse's answer; an ``invoke_model`` result whose
        body was not observed gives Bedrock's counts only."""
        if api.startswith("converse"):
            return _converse_answer(result)
        return _counted(Answer(), _headers(result))

    def stream_reader(self, api: str) -> _ConverseStream | _InvokeChunks:
        return _ConverseStream() if api == "converse_stream" else _InvokeChunks()

    def identity(self, instance: Any) -> Identity | None:
        """The server of the ``bedrock-runtime`` client's endpoint (``client.meta.endpoint_url``: the
        ``endpoint_url`` it was made with, else its region's, which its requests are sent to)."""
        url = getattr(getattr(instance, "meta", None), "endpoint_url", None)
        server = url_server(url) if isinstance(url, str) else None
        return (None, *server) if server is not None else None

    reads_captures = True

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
        return as_call(body, model)


def pending(api: str, result: Any) -> Pending | None:
    """Where the result holds its answer still to come: a stream's ``EventStream``; the raw body
    beneath ``invoke_model``'s ``StreamingBody``. Converse's result is its answer."""
    if not isinstance(result, dict):
        return None
    if api == "converse_stream" and "stream" in result:
        return Pending(result, "stream", "events")
    if api == "invoke_model_with_response_stream" and "body" in result:
        return Pending(result, "body", "events")
    body = result.get("body") if api == "invoke_model" else None
    if body is None or getattr(body, "_raw_stream", None) is None:
        return None
    headers = _headers(result)
    return Pending(body, "_raw_stream", "body", read=lambda document: _invoke_answer(headers, document))


class _ConverseStream:
    """ConverseStream events: messageStart, contentBlockStart / Delta / Stop, messageStop, metadata."""

    def __init__(self) -> None:
        self.complete = False  # metadata, the last event, arrived (``StreamReader``)
        self._reply = Answer()
        self._text = AnswerText()

    def feed(self, event: Any) -> None:
        if not isinstance(event, Mapping):
            return
        delta = _get(_get(event, "contentBlockDelta"), "delta") if "contentBlockDelta" in event else None
        if delta is not None:
            text = _str(_get(delta, "text"))
            if text:
                self._text.add(text)
        stop = _get(event, "messageStop")
        if stop is not None:
            reason = _str(_get(stop, "stopReason"))
            if reason:
                self._reply.finish_reasons = [reason]
        metadata = _get(event, "metadata")
        if metadata is not None:
            _usage(self._reply, _get(metadata, "usage"))
            self.complete = True

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


class _InvokeChunks:
    """InvokeModelWithResponseStream events: ``chunk``s whose ``bytes`` are the model's own stream
    events (Anthropic's, read by the Anthropic module); the last one carries Bedrock's counts."""

    def __init__(self) -> None:
        self._anthropic = ANTHROPIC.stream_reader("messages")
        self._metrics: Any = None

    def feed(self, event: Any) -> None:
        chunk = _get(event, "chunk") if isinstance(event, Mapping) else None
        data = _get(chunk, "bytes") if chunk is not None else None
        if not isinstance(data, (bytes, bytearray)):
            return
        try:
            document = json.loads(data)
        except ValueError:  # not JSON: not a body read here
            return
        if not isinstance(document, dict):
            return
        if isinstance(document.get("type"), str):
            self._anthropic.feed(document)
        metrics = document.get("amazon-bedrock-invocationMetrics")
        if metrics is not None:
            self._metrics = metrics

    @property
    def complete(self) -> bool:
        """The model's last event arrived (Anthropic's ``message_stop``, which brings Bedrock's counts)."""
        return bool(getattr(self._anthropic, "complete", False))

    def reply(self) -> Answer:
        answer = self._anthropic.reply()
        metrics = self._metrics
        if metrics is not None:
            if answer.input_tokens is None:
                answer.input_tokens = _int(_get(metrics, "inputTokenCount"))
            if answer.output_tokens is None:
                answer.output_tokens = _int(_get(metrics, "outputTokenCount"))
        return answer


ADAPTER = BedrockAdapter()


def as_call(body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
    """A captured body as its call site saw it: a body with ``messages`` is Converse's (whose wire
    names are its argument names; Nova's own body reads the same; ``converse_stream``'s where it says
    ``stream``, as the Converse request LiteLLM's streamed call is read as does), but an Anthropic
    one; those and any other (a prompt string, Cohere's chat) are ``invoke_model`` bodies. The model
    is the capture line's."""
    if isinstance(body.get("messages"), list) and not _anthropic_body(body):
        return ("converse_stream" if body.get("stream") is True else "converse"), {**body, "modelId": model}
    return "invoke_model", {"modelId": model, "body": json.dumps(body)}


def _from_wire(api: str) -> Callable[[Mapping[str, Any], str], tuple[str, Mapping[str, Any]] | None]:
    """A body sent to the Runtime's ``/model/{modelId}/{operation}`` as the call ``api`` would have
    made: the model is the path's (percent-encoded: ``anthropic.claude-3-haiku-20240307-v1%3A0``);
    a path without ``/model/`` is not the Runtime's."""

    def read(body: Mapping[str, Any], path: str) -> tuple[str, Mapping[str, Any]] | None:
        _, found, rest = path.partition("/model/")
        model = unquote(rest.rpartition("/")[0]) if found else ""
        if not model:
            return None
        if api.startswith("converse"):
            return api, {**body, "modelId": model}
        return api, {"modelId": model, "body": json.dumps(body)}

    return read


PROVIDER = Provider(
    distribution="botocore",
    module="botocore",
    supported=(1, 1),
    label=LABEL,
    adapter=ADAPTER,
    family=SharedDispatch(SITES, dispatch=dispatch, pending=pending, transport=TRANSPORT),
    # Converse's body is its own; ``invoke_model``'s is the model family's (read as its call reads it).
    wire=(WireRoute("/converse", ("messages",), _from_wire("converse")),
          WireRoute("/converse-stream", ("messages",), _from_wire("converse_stream")),
          WireRoute("/invoke", (), _from_wire("invoke_model")),
          WireRoute("/invoke-with-response-stream", (), _from_wire("invoke_model_with_response_stream"))),
)
