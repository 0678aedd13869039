"""A loopback fake LLM server that speaks the OpenAI, Anthropic, Gemini, Mistral, Ollama, Cohere and
Bedrock wire formats.

Tests that mock the SDK objects never exercise what ctxguard actually depends
on: the bytes the real SDKs put on the wire and the way they parse replies,
including streaming.  This server sits behind the *real* SDKs over real HTTP so
those paths are covered, while staying deterministic, offline and free.

It answers the way the providers answer, because a fake with one shape hides
parsing bugs and a fake with fixed usage hides calibration bugs:

* usage grows with what the model reads (message text, instructions, tool
  results and arguments, tool and output schemas, a few tokens of framing per
  message) and with what it writes, never with JSON punctuation or parameters
  the model does not read.  The count is a deterministic approximation (about a
  token per five letters of a word, one per punctuation mark), not a tokenizer:
  ctxguard's own estimate must not agree with it by construction.  Cached and
  reasoning tokens can be scripted and land in each provider's own fields;
* ids look like the real ones (``chatcmpl-…``, ``resp_…``, ``msg_01…``,
  ``call_…``, ``toolu_01…``, Mistral's 32 hex digits and 9-character tool call
  ids), deterministic per server and request, and every
  answer is recorded in :attr:`FakeLLM.responses` so tests compare against what
  the server really sent;
* streams carry each provider's framing (OpenAI's ``obfuscation`` padding and
  usage-only last chunk, Anthropic's ``ping`` and cumulative ``message_delta``
  usage, the full Responses event sequence, Gemini's ``usageMetadata``, Ollama's
  NDJSON lines ending with ``done``) over chunked HTTP, and can fail midway the way
  real streams fail;
* Ollama holds the prompt to its context window (``options.num_ctx``, else
  :attr:`FakeLLM.ollama_num_ctx`) as its server does: the oldest messages but the
  system ones are dropped, then the prompt is cut, and ``prompt_eval_count`` never
  exceeds the window (:attr:`ServedResponse.truncated_tokens` says how much went);
* Bedrock's streams are binary ``application/vnd.amazon.eventstream`` messages with
  their CRCs;
* errors carry each provider's error body.

Only the standard library is used so importing this module never drags a
third-party dependency into the library or its test environment.

Usage::

    with FakeLLM() as llm:
        llm.script("hello", Reply(status=429))
        client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
        r = client.chat.completions.create(model="m", messages=[...])
        assert llm.bodies("/chat/completions")[0]["model"] == "m"
        assert r.id == llm.responses[0].id
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import secrets
import socket
import string
import sys
import threading
import time
import urllib.parse
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property, partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from . import _fake_media
from ._fake_media import FLAT

__all__ = ["FakeLLM", "RecordedRequest", "Reply", "ServedResponse"]

ReplyFn = Callable[["RecordedRequest"], "Reply | str"]

_CHAT = "/chat/completions"
_RESPONSES = "/responses"
_MESSAGES = "/messages"
# Gemini (google-genai): POST .../models/{model}:generateContent, and
# :streamGenerateContent?alt=sse for SSE; the model is in the path, not the body.
_GENERATE = ":generateContent"
_STREAM_GENERATE = ":streamGenerateContent"
_GEMINI = (_GENERATE, _STREAM_GENERATE)
# Mistral's chat API has OpenAI's path (``POST /v1/chat/completions``) on its own host: here, the
# same path under this prefix (``FakeLLM.mistral_base_url``). Its kind is a name, not a path suffix.
_MISTRAL_PREFIX = "/mistral"
_MISTRAL = "mistral:/chat/completions"
# Ollama's native chat API: ``POST /api/chat``; it streams NDJSON unless the body says ``"stream": false``.
_OLLAMA = "/api/chat"
# Cohere's v2 Chat API: ``POST /v2/chat`` (``"stream": true`` for SSE), on the server's origin.
_COHERE = "/v2/chat"
# Bedrock Runtime: POST /model/{modelId}/{operation}, the model id URL-encoded in the path (an
# inference profile's ``us.anthropic.claude-…-v1:0`` too). Its kinds are names, not path suffixes.
_BEDROCK_ROUTE = re.compile(r"/model/([^/]+)/(converse|converse-stream|invoke|invoke-with-response-stream)")
_CONVERSE = "bedrock:converse"
_CONVERSE_STREAM = "bedrock:converse-stream"
_INVOKE = "bedrock:invoke"
_INVOKE_STREAM = "bedrock:invoke-with-response-stream"
_BEDROCK = (_CONVERSE, _CONVERSE_STREAM, _INVOKE, _INVOKE_STREAM)

# Error bodies per status, worded as each service words them, so SDK code that
# branches on the type (or on the exception class chosen from the status) sees
# what the real service sends.  OpenAI: (type, code, message).
_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("request_forbidden", "unsupported_country_region_territory", "Country, region, or territory not supported"),
    404: ("invalid_request_error", "model_not_found",
          "The model `{model}` does not exist or you do not have access to it."),
    429: ("requests", "rate_limit_exceeded",
          "Rate limit reached for {model} on requests per min (RPM): Limit 3, Used 3, Requested 1."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    503: ("server_error", None, "The server is overloaded or not ready yet."),
}
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low to access the Anthropic API."),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "model: {model}"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    504: ("timeout_error", "Request timed out"),
    529: ("overloaded_error", "Overloaded"),
}
_GEMINI_ERRORS: dict[int, tuple[str, str]] = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "Request had invalid authentication credentials."),
    403: ("PERMISSION_DENIED", "The caller does not have permission"),
    404: ("NOT_FOUND", "models/{model} is not found for API version v1beta, or is not supported for generateContent."),
    429: ("RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details."),
    500: ("INTERNAL", "An internal error has occurred. Please retry or report in "
                      "https://developers.generativeai.google/guide/troubleshooting"),
    503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    504: ("DEADLINE_EXCEEDED", "Deadline expired before operation could complete."),
}
# Mistral: (type, code, message) of its ``{"object": "error", ...}`` envelope (as reported for
# 400, 429 and an unknown model). Two statuses answer otherwise: 401 comes from its gateway as
# ``{"message": "Unauthorized", "request_id": ...}``, 422 as ``{"detail": [...]}`` (the request
# validation errors the SDK's ``HTTPValidationError`` parses).
_MISTRAL_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    404: ("invalid_model", "1500", "Invalid model: {model}"),
    429: ("rate_limited", "1300", "Rate limit exceeded"),
    500: ("internal_server_error", None, "Internal server error"),
    503: ("service_unavailable", None, "Service unavailable."),
}
# Bedrock: status -> (error code, message); the code goes in the ``x-amzn-ErrorType`` header
# (``Code:namespace``), the body is ``{"message": ...}``, which botocore turns into a ClientError.
_BEDROCK_ERRORS: dict[int, tuple[str, str]] = {
    400: ("ValidationException", "The provided request is not valid"),
    403: ("AccessDeniedException", "You don't have access to the model with the specified model ID."),
    404: ("ResourceNotFoundException", "The provided model identifier is invalid."),
    408: ("ModelTimeoutException", "Model has timed out in processing the request. Try your request again."),
    424: ("ModelErrorException", "The model returned an error. Try your request again."),
    429: ("ThrottlingException", "Too many requests, please wait before trying again."),
    500: ("InternalServerException",
          "The system encountered an unexpected error during processing. Try your request again."),
    503: ("ServiceUnavailableException", "Bedrock is unable to process your request."),
}
_BEDROCK_NAMESPACE = "http://internal.amazon.com/coral/com.amazon.bedrock/"
# A scripted mid-stream failure is the error each service really sends when it
# fails after the first byte; when it happens before (a non-streaming request)
# it arrives as this HTTP status instead.
_FAILURE_STATUS = {_CHAT: 500, _RESPONSES: 500, _MESSAGES: 529, _GENERATE: 503, _STREAM_GENERATE: 503,
                    _MISTRAL: 500, _OLLAMA: 500, _COHERE: 500, **dict.fromkeys(_BEDROCK, 500)}
_RESPONSES_FAILURE = ("An error occurred while processing your request. You can retry your request, or contact "
                      "us through our help center at help.openai.com if the error persists.")

# OpenAI-style finish reasons are the lingua franca of ``Reply``; the other
# APIs get their equivalent so one script can drive all of them.
_GEMINI_FINISH_REASONS: dict[str, str] = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "content_filter": "SAFETY",
}
_ANTHROPIC_STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# Mistral's finish reasons are OpenAI's but for functions (``tool_calls``) and refusals, which it
# does not have (a refusal is said as text): ``stop``, ``length``, ``model_length``, ``error``,
# ``tool_calls``. A stream it breaks off ends with a chunk whose finish reason is ``error``.
_MISTRAL_FINISH_REASONS: dict[str, str] = {"function_call": "tool_calls"}
_MISTRAL_BROKEN = "error"
# Ollama's ``done_reason``: ``stop`` (tool calls too: it has no reason of their own), ``length``
# (``num_predict`` reached); ``load`` / ``unload`` answer requests without messages.
_OLLAMA_DONE_REASONS: dict[str, str] = {"tool_calls": "stop", "function_call": "stop", "content_filter": "stop"}
# Ollama's error bodies are ``{"error": "<text>"}``, nothing else.
_OLLAMA_ERRORS: dict[int, str] = {
    400: "invalid request",
    404: 'model "{model}" not found, try pulling it first',
    500: "an error was encountered while running the model: unexpected EOF",
}
#: The context window an Ollama server gives a request without ``options.num_ctx``: its default below
#: 24 GiB of VRAM (0.15.5 and later).
OLLAMA_NUM_CTX = 4096
# Cohere's finish reasons: ``COMPLETE``, ``STOP_SEQUENCE``, ``MAX_TOKENS``, ``TOOL_CALL``, ``ERROR``,
# ``TIMEOUT``. No refusal (said as text). A stream it breaks off ends with a ``message-end`` whose
# finish reason is ``ERROR``, its ``error`` saying why.
_COHERE_FINISH_REASONS: dict[str, str] = {
    "stop": "COMPLETE", "length": "MAX_TOKENS", "tool_calls": "TOOL_CALL", "function_call": "TOOL_CALL",
    "content_filter": "COMPLETE", "stop_sequence": "STOP_SEQUENCE", "error": "ERROR",
}
_COHERE_BROKEN = "ERROR"
# The tokens Cohere's prompt template adds to what the request carries (its preamble, turn tokens):
# ``usage.tokens.input_tokens`` counts them, ``billed_units.input_tokens`` does not (a short
# exchange reads 186 tokens and bills 21).
_COHERE_TEMPLATE = 160
# Cohere's error bodies are ``{"id": <uuid>, "message": ...}``; the SDK picks its error class from
# the status (``BadRequestError``, ``UnauthorizedError``, ``NotFoundError``,
# ``UnprocessableEntityError``, ``TooManyRequestsError``, ...).
_COHERE_ERRORS: dict[int, str] = {
    400: "invalid request: message must be at least 1 token long or tool results must be specified.",
    401: "invalid api token",
    404: "model '{model}' not found, make sure the correct model ID was used and that you have access to the model.",
    422: "invalid request: the request could not be processed.",
    429: "You are using a Trial key, which is limited to 20 API calls / minute. You can continue to use the Trial "
         "key for free or upgrade to a Production key with higher rate limits at "
         "'https://dashboard.cohere.com/api-keys'.",
    500: "internal server error, this has been reported to our developers",
}
# Converse's stop reasons (``end_turn``, ``tool_use``, ``max_tokens``, ``stop_sequence``,
# ``guardrail_intervened``, ``content_filtered``, ``model_context_window_exceeded``).
_CONVERSE_STOP_REASONS: dict[str, str] = {
    "stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
    "content_filter": "content_filtered",
}
# Responses has no finish reason: a cut answer is an ``incomplete`` response.
_INCOMPLETE_REASONS: dict[str, str] = {"length": "max_output_tokens", "content_filter": "content_filter"}

_ALNUM = string.ascii_letters + string.digits
_BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
_BASE64URL = _ALNUM + "-_"
_HEX = "0123456789abcdef"

# -- token estimate ------------------------------------------------------------

# Per message (role, separators) and once more for the reply's own header, as
# OpenAI's cookbook counts chat framing.
_FRAME_TOKENS = 3
# What a media part costs: a picture by its size as its provider prices it, audio, a file or a
# picture it cannot read a flat ``_fake_media.FLAT`` (see ``_fake_media``).
Media = Callable[[Any], int]
# Keys whose values the model never reads as text: ids, roles, block types, cache
# hints, signatures, Mistral's ``prefix`` flag.
_UNREAD_KEYS = frozenset({
    "type", "role", "id", "tool_call_id", "call_id", "tool_use_id", "cache_control", "signature", "status",
    "index", "mime_type", "media_type", "mimeType", "thought_signature", "thoughtSignature", "encrypted_content",
    "detail", "annotations", "logprobs", "citations", "prefix", "toolUseId",
})
_MEDIA_KEYS = frozenset({
    "image_url", "input_image", "image", "input_audio", "file", "source", "inlineData", "inline_data", "fileData",
    "file_data", "document_url",
})
# JSON objects the model reads keys and all: tool arguments and results, schemas (Mistral's
# tool-call ``arguments`` may be an object; elsewhere they are a JSON string, read the same).
_STRUCTURED_KEYS = frozenset({
    "input", "args", "response", "parameters", "input_schema", "schema", "properties", "arguments",
})
_PIECES = re.compile(r"[^\W\d_]+|\d{1,3}|[^\s]")


def _text_tokens(text: str) -> int:
    """Roughly what a BPE tokenizer makes of ``text``: a word is a token per ~5 letters,
    digits go in threes, every other visible character is its own token; non-ASCII
    words cost a token per ~3 UTF-8 bytes.  An approximation, not a tokenizer."""
    n = 0
    for piece in _PIECES.findall(text):
        if piece.isascii():
            n += 1 + (len(piece) - 1) // 5
        else:
            n += -(-len(piece.encode()) // 3)
    return n


def _flat(part: Any) -> int:
    return FLAT


def _read_tokens(value: Any, *, keys: bool = False, media: Media = _flat) -> int:
    """Tokens of what the model reads in a message, part or schema (``keys``: names count too;
    ``media``: what a part holding a picture, audio or a file costs, once per part)."""
    if isinstance(value, str):
        return _text_tokens(value)
    if isinstance(value, (bool, int, float)):
        return 1
    if isinstance(value, list):
        return sum(_read_tokens(v, keys=keys, media=media) for v in value)
    if not isinstance(value, dict):
        return 0
    n, priced = 0, False
    for key, v in value.items():
        if key in _MEDIA_KEYS and not keys:
            if not priced:
                n += media(value)
                priced = True
        elif keys or key not in _UNREAD_KEYS:
            n += (_text_tokens(str(key)) if keys else 0) + _read_tokens(
                v, keys=keys or key in _STRUCTURED_KEYS, media=media)
    return n


def _schemas_tokens(*schemas: Any) -> int:
    """Tool definitions and output formats, names and all; a plain-text format costs nothing."""
    n = 0
    for schema in schemas:
        for item in schema if isinstance(schema, list) else [schema]:
            if isinstance(item, dict) and item.get("type") != "text":
                n += _read_tokens(item, keys=True)
    return n


def _messages_tokens(messages: Any, media: Media = _flat) -> int:
    if isinstance(messages, str):
        messages = [messages]
    if not isinstance(messages, list):
        return 0
    return sum(_FRAME_TOKENS + _read_tokens(m, media=media) for m in messages)


def _pricing(kind: str, model: str) -> Media:
    """What a media part costs ``model`` on the API of ``kind``, as its provider prices it."""
    price = (_fake_media.openai if kind in (_CHAT, _RESPONSES) else _fake_media.mistral if kind == _MISTRAL else
             _fake_media.cohere if kind == _COHERE else _fake_media.ollama if kind == _OLLAMA else
             _fake_media.anthropic if kind == _MESSAGES or kind in _BEDROCK else _fake_media.gemini)
    return partial(price, model)


def _prompt_tokens(kind: str, p: Mapping[str, Any], model: str = "") -> int:
    """What the model reads for one request, by API; see ``_text_tokens`` for the unit (and
    ``_fake_media`` for a picture's)."""
    model = model or str(p.get("model") or "")
    media = _pricing(kind, model)
    if kind in (_CHAT, _MISTRAL):
        n = _messages_tokens(p.get("messages"), media)
        n += _schemas_tokens(p.get("tools"), p.get("functions"), p.get("response_format"))
    elif kind == _COHERE:
        # Documents are read key and value ("both the key name and the value will be passed to the model").
        documents = p.get("documents")
        n = _messages_tokens(p.get("messages"), media) + sum(
            _FRAME_TOKENS + _read_tokens(d, keys=True) for d in (documents if isinstance(documents, list) else []))
        n += _schemas_tokens(p.get("tools"), p.get("response_format")) + _COHERE_TEMPLATE
    elif kind == _RESPONSES:
        instructions = p.get("instructions")
        n = _messages_tokens([instructions] if isinstance(instructions, str) else []) + _messages_tokens(
            p.get("input"), media)
        text = p.get("text")
        n += _schemas_tokens(p.get("tools"), text.get("format") if isinstance(text, dict) else None)
    elif kind in _BEDROCK:
        return _bedrock_prompt_tokens(kind, p, model)
    elif kind == _MESSAGES:
        system = p.get("system")
        n = (_FRAME_TOKENS + _read_tokens(system) if system else 0) + _messages_tokens(p.get("messages"), media)
        config = p.get("output_config")
        n += _schemas_tokens(p.get("tools"), p.get("output_format"),
                             config.get("format") if isinstance(config, dict) else None)
    else:
        instruction = p.get("systemInstruction")
        n = (_FRAME_TOKENS + _read_tokens(instruction) if instruction else 0) + _messages_tokens(
            p.get("contents"), media)
        config = p.get("generationConfig")
        config = config if isinstance(config, dict) else {}
        n += _schemas_tokens(p.get("tools"), config.get("responseSchema"), config.get("responseJsonSchema"))
    return n + _FRAME_TOKENS


# -- records -----------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request exactly as it arrived, so tests can assert on wire bytes.

    ``path`` is the raw request target, query string included, because the
    point of recording is to see what the client really sent.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """Decode lazily: not every request (e.g. a stray GET) carries JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class ServedResponse:
    """What the fake answered to one request, recorded before the first byte left.

    Tests compare the SDK's parsed result and ctxguard's span with these rather
    than with constants: ``llm.responses[0].id == span.attributes["gen_ai.response.id"]``.

    ``finish_reasons`` are in the provider's own words (chat ``finish_reason``,
    Anthropic ``stop_reason``, Gemini ``finishReason``, the Responses ``status``).
    ``usage`` is the final usage object exactly as sent (None when the answer carried
    none: a chat stream without ``include_usage``); ``input_tokens`` and
    ``output_tokens`` are the totals as billed (cached prompt tokens included, so
    for Anthropic ``input_tokens + cache_read_input_tokens``; reasoning included, so
    for Gemini ``candidatesTokenCount + thoughtsTokenCount``; for Cohere ``usage.tokens``, what
    the model read, its prompt template included, not ``billed_units``).  A stream cut by a
    scripted ``stream_failure`` never reported its final usage: those are None.
    ``truncated_tokens``: prompt tokens the server dropped to fit its context window (Ollama,
    which does so silently: its ``prompt_eval_count`` is what it kept).
    """

    request: RecordedRequest
    status: int
    request_id: str
    id: str | None = None
    model: str | None = None
    stream: bool = False
    finish_reasons: tuple[str, ...] = ()
    usage: Mapping[str, Any] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    tool_call_ids: tuple[str, ...] = ()
    error_type: str | None = None
    failure: str | None = None
    truncated_tokens: int = 0


@dataclass(frozen=True)
class Reply:
    """What the fake model "says"; one description rendered per provider format.

    ``Reply(text="Pune")``; ``Reply(parsed={"city": "Pune"})`` for structured output
    (the text is that value's JSON); ``Reply(refusal="I can't help with that.")``;
    ``Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"q": "x"}}}])``;
    ``Reply(status=429)`` for an HTTP error, ``Reply(text="…", stream_failure="error")``
    for a stream that fails after its first delta (``"drop"``: the connection is cut).
    ``deltas`` is how many pieces a streamed answer's text comes in: 3 by default, so clients
    must really join them; a model streams about a token a piece (``deltas=len(text) // 4``).

    Token counts default to an estimate of what was sent and what is said (see the
    module docstring); explicit ``input_tokens`` / ``output_tokens`` win, and are
    totals the way OpenAI reports them: ``input_tokens`` includes ``cached_tokens``,
    ``output_tokens`` includes ``reasoning_tokens``.  ``reasoning`` is the thinking
    text: an Anthropic ``thinking`` block with its signature, a Responses reasoning
    item with a summary, a Gemini thought part (chat completions only report its
    token count).  ``finish_reason`` uses OpenAI vocabulary and is translated for
    the other APIs; it defaults to ``tool_calls`` when there are tool calls, else
    ``stop``.  Unknown values pass through verbatim.
    """

    text: str = ""
    status: int = 200
    tool_calls: list[dict[str, Any]] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    model: str | None = None
    cached_tokens: int = 0
    reasoning_tokens: int | None = None
    reasoning: str = ""
    parsed: Any = None
    refusal: str = ""
    stream_failure: str | None = None
    deltas: int = 3

    def __post_init__(self) -> None:
        # Mistakes rejected when the script is written, not when a test puzzles over a reply.
        if self.parsed is not None:
            if self.text:
                raise ValueError("Reply: give text or parsed, not both (parsed becomes the text)")
            object.__setattr__(self, "text", json.dumps(self.parsed, separators=(",", ":"), ensure_ascii=False))
        if self.refusal and (self.text or self.tool_calls):
            raise ValueError("Reply: a refusal carries no text or tool calls")
        if self.stream_failure not in (None, "error", "drop"):
            raise ValueError(f"Reply: stream_failure is 'error' or 'drop', not {self.stream_failure!r}")
        if self.deltas < 1:
            raise ValueError("Reply: a streamed text comes in one delta or more")
        if self.cached_tokens < 0 or (self.input_tokens is not None and self.cached_tokens > self.input_tokens):
            raise ValueError("Reply: cached_tokens is part of input_tokens")
        if (self.reasoning_tokens is not None and self.output_tokens is not None
                and self.reasoning_tokens > self.output_tokens):
            raise ValueError("Reply: reasoning_tokens is part of output_tokens")


def _coerce(reply: Reply | str) -> Reply:
    return Reply(text=reply) if isinstance(reply, str) else reply


def _split(text: str, parts: int = 3) -> list[str]:
    """Cut text into a few pieces so clients must really concatenate deltas."""
    if not text:
        return []
    n = min(parts, len(text))
    size, extra = divmod(len(text), n)
    out: list[str] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _ident(seed: str, alphabet: str, length: int) -> str:
    """``length`` characters of ``alphabet`` derived from ``seed``: random-looking, reproducible."""
    out: list[str] = []
    limit = 256 - 256 % len(alphabet)  # drop the bytes that would bias the first letters
    counter = 0
    while len(out) < length:
        for byte in hashlib.blake2b(f"{seed}/{counter}".encode(), digest_size=64).digest():
            if byte < limit:
                out.append(alphabet[byte % len(alphabet)])
        counter += 1
    return "".join(out[:length])


def _uuid4(hex32: str) -> str:
    """32 hex digits as a version-4 UUID (its version and variant digits set), as Cohere's ids are."""
    h = f"{hex32[:12]}4{hex32[13:16]}{'89ab'[int(hex32[16], 16) % 4]}{hex32[17:32]}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True)
class _Call:
    id: str
    name: str
    arguments: str

    @property
    def input(self) -> Any:
        """The arguments as a JSON value, for the APIs that send objects (Anthropic, Gemini)."""
        try:
            return json.loads(self.arguments) if self.arguments else {}
        except ValueError:
            return {}


# -- HTTP plumbing ---------------------------------------------------------------------


class _Drop:
    """Marks where a scripted ``stream_failure="drop"`` cuts the connection."""


_DROP = _Drop()
_Event = tuple[str | None, Any]


class _Server(ThreadingHTTPServer):
    """HTTP server that remembers live connections so stop() can sever them.

    Keep-alive connections pooled by SDK clients would otherwise leave handler
    threads parked in ``readline`` after shutdown.
    """

    daemon_threads = True
    allow_reuse_address = True
    # The default backlog of 5 drops the SYNs of a burst of connections: those clients
    # stall a second for the retry, or give up.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], fake: FakeLLM) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-stream and stop() severing sockets are
        # expected; anything else is a real bug worth a traceback.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    def sever_connections(self) -> None:
        with self.connections_lock:
            conns = list(self.connections)
            self.connections.clear()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def _streamed(kind: str, payload: Mapping[str, Any]) -> bool:
    """Whether the answer streams: Gemini by its path, Ollama unless told not to, the rest when asked."""
    if kind == _OLLAMA:
        return payload.get("stream") is not False
    if kind in _BEDROCK:
        return kind in (_CONVERSE_STREAM, _INVOKE_STREAM)
    return kind == _STREAM_GENERATE or (kind != _GENERATE and payload.get("stream") is True)


def _kind(route: str) -> str | None:
    """Which API a request path is for (None: no API the fake knows)."""
    bedrock = _BEDROCK_ROUTE.fullmatch(route)
    if bedrock is not None:
        return "bedrock:" + bedrock.group(2)
    kinds = (_CHAT, _RESPONSES, _MESSAGES, _GENERATE, _STREAM_GENERATE, _OLLAMA, _COHERE)
    kind = next((s for s in kinds if route.endswith(s)), None)
    if kind == _CHAT and route.startswith(_MISTRAL_PREFIX + "/"):
        return _MISTRAL
    return kind


class _Handler(BaseHTTPRequestHandler):
    """Translate one HTTP exchange into a RecordedRequest and a rendered Reply."""

    # HTTP/1.1 lets SDK connection pools reuse sockets like they do in production.
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate small writes; with Nagle on, each reply waits
    # ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        try:
            with contextlib.suppress(OSError):  # a dropped connection has nothing left to flush
                super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Access logs on stderr would drown pytest output."""

    def do_POST(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    # -- request side -----------------------------------------------------

    def _read_body(self) -> bytes:
        """Read exactly the announced body; short reads happen on big payloads."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        remaining = int(self.headers.get("Content-Length") or 0)
        chunks: list[bytes] = []
        while remaining > 0:
            chunk = self.rfile.read(remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size_line = self.rfile.readline()
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # Drain optional trailers up to the terminating blank line.
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def _handle(self) -> None:
        body = self._read_body()
        headers: dict[str, str] = {}
        for key, value in self.headers.items():
            k = key.lower()
            headers[k] = f"{headers[k]}, {value}" if k in headers else value
        req = RecordedRequest(method=self.command, path=self.path, headers=headers, body=body)
        fake = self.server.fake
        n, serial = fake._record(req)

        route = self.path.split("?", 1)[0].rstrip("/")
        kind = _kind(route)
        # Filled in as the request is understood: an unknown route is answered the OpenAI way.
        ctx = _Ctx(n=n, serial=serial, nonce=fake._nonce, kind=kind or _CHAT, reply=Reply(), payload={}, route=route,
                   ollama_num_ctx=fake.ollama_num_ctx)
        if kind is None or self.command != "POST":
            message = f"Invalid URL ({self.command} {self.path.split('?', 1)[0]})"
            error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
            self._send_error(ctx, req, 404, ({"error": error}, "invalid_request_error"))
            return

        try:
            payload = json.loads(body) if body else {}
            if not isinstance(payload, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            self._send_error(ctx, req, 400, _error_body(ctx, 400, f"Invalid JSON body: {exc}"))
            return
        ctx = replace(ctx, payload=payload)
        if kind == _OLLAMA and not payload.get("model"):  # checked before any model is looked for
            self._send_error(ctx, req, 400, _error_body(ctx, 400, "model is required"))
            return
        if kind in (_INVOKE, _INVOKE_STREAM) and _invoke_shape(payload) is None:
            # Bedrock validates the body against the model's own schema before anything else.
            self._send_error(ctx, req, 400, _error_body(ctx, 400, _MALFORMED))
            return

        try:
            reply = fake._next_reply(req, n)
        except Exception as exc:
            # Surface bugs in the reply callable to the client instead of hanging it.
            self._send_error(ctx, req, 500, _error_body(ctx, 500, f"FakeLLM reply callable failed: {exc!r}"))
            return

        ctx = replace(ctx, reply=reply)
        stream = _streamed(kind, payload)
        if reply.status != 200:
            self._send_error(ctx, req, reply.status, _error_body(ctx, reply.status, reply.text or None))
        elif reply.stream_failure == "error" and not stream:
            status = _FAILURE_STATUS[kind]
            self._send_error(ctx, req, status, _error_body(ctx, status, None), failure="error")
        elif stream:
            events = _STREAMS[kind](ctx)
            fake._served(ctx.served(req, 200, stream=True))
            (self._send_eventstream if kind in _BEDROCK else self._send_sse)(ctx, events)
        else:
            answer = _BODIES[kind](ctx)
            fake._served(ctx.served(req, 200))
            self._send_json(ctx, 200, answer, drop=reply.stream_failure == "drop")

    # -- response side ----------------------------------------------------

    def _send_error(
        self, ctx: _Ctx, req: RecordedRequest, status: int, error: tuple[dict[str, Any], str], *,
        failure: str | None = None,
    ) -> None:
        body, error_type = error
        self.server.fake._served(
            ServedResponse(request=req, status=status, request_id=ctx.request_id, model=ctx.model,
                           error_type=error_type, failure=failure)
        )
        self._send_json(ctx, status, body, error_type=error_type)

    def _start(self, ctx: _Ctx, status: int, content_type: str, error_type: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if ctx.kind in _BEDROCK:
            self._bedrock_headers(ctx, status, error_type)
        elif ctx.kind == _MESSAGES:
            self.send_header("request-id", ctx.request_id)
        elif ctx.kind == _MISTRAL:
            self.send_header("x-kong-request-id", ctx.request_id)  # its gateway's, as its 401 body names it
        elif ctx.kind not in (*_GEMINI, _OLLAMA):  # Ollama sends no request id
            self.send_header("x-request-id", ctx.request_id)

    def _send_json(
        self, ctx: _Ctx, status: int, obj: Any, *, drop: bool = False, error_type: str | None = None
    ) -> None:
        # OpenAI and Gemini indent their JSON bodies; Anthropic sends them compact, Mistral, Cohere,
        # Bedrock and Ollama without spaces (Ollama's Go encoder HTML-escaped, too).
        if ctx.kind == _OLLAMA:
            data = _go_json(obj).encode()
        else:
            indent = None if ctx.kind in (_MESSAGES, _MISTRAL, _COHERE, *_BEDROCK) else 2
            separators = (",", ":") if ctx.kind in (_MISTRAL, _COHERE, *_BEDROCK) else None
            data = json.dumps(obj, indent=indent, separators=separators, ensure_ascii=False).encode()
        try:
            kind = "application/json; charset=utf-8" if ctx.kind == _OLLAMA else "application/json"
            self._start(ctx, status, kind, error_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if drop:
                self.wfile.write(data[: len(data) // 2])
                self._drop()
                return
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _send_sse(self, ctx: _Ctx, events: Iterable[_Event | _Drop]) -> None:
        """Write events one by one, one HTTP chunk each, so clients see a genuinely
        incremental stream (and can tell a cut connection from the end of the body)."""
        if ctx.kind == _OLLAMA:
            self._send_ndjson(ctx, events)
            return
        separators = (", ", ": ") if ctx.kind in _GEMINI else (",", ":")
        try:
            self._start(ctx, 200, "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            for item in events:
                if isinstance(item, _Drop):
                    self._drop()
                    return
                event, data = item
                text = data if isinstance(data, str) else json.dumps(data, separators=separators, ensure_ascii=False)
                frame = (f"event: {event}\ndata: {text}\n\n" if event else f"data: {text}\n\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _send_ndjson(self, ctx: _Ctx, events: Iterable[_Event | _Drop]) -> None:
        """Ollama's stream: one JSON object a line, one HTTP chunk each."""
        try:
            self._start(ctx, 200, "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            for item in events:
                if isinstance(item, _Drop):
                    self._drop()
                    return
                line = (_go_json(item[1]) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _bedrock_headers(self, ctx: _Ctx, status: int, error_type: str | None) -> None:
        self.send_header("x-amzn-RequestId", ctx.request_id)
        if error_type is not None:
            self.send_header("x-amzn-ErrorType", f"{error_type}:{_BEDROCK_NAMESPACE}")
        elif ctx.kind == _INVOKE_STREAM:
            self.send_header("X-Amzn-Bedrock-Content-Type", "application/json")
        elif ctx.kind == _INVOKE and status == 200:  # the model's own counts, whatever its body
            self.send_header("X-Amzn-Bedrock-Invocation-Latency", str(ctx.latency_ms))
            self.send_header("X-Amzn-Bedrock-Output-Token-Count", str(ctx.output_tokens))
            self.send_header("X-Amzn-Bedrock-Input-Token-Count", str(ctx.input_tokens))

    def _send_eventstream(self, ctx: _Ctx, events: Iterable[_Event | _Drop]) -> None:
        """Bedrock's streams: binary event-stream messages, one HTTP chunk each."""
        try:
            self._start(ctx, 200, "application/vnd.amazon.eventstream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            for i, item in enumerate(events):
                if isinstance(item, _Drop):
                    self._drop()
                    return
                frame = _bedrock_frame(ctx, i, *item)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _drop(self) -> None:
        """Cut the connection mid-body, as a crashed upstream or a broken proxy does."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)


# -- what one request is answered with ------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    """Everything a renderer needs; each fact is computed once per request."""

    n: int
    serial: int
    nonce: str
    kind: str
    reply: Reply
    payload: dict[str, Any]
    route: str = ""
    #: The window an Ollama request without ``options.num_ctx`` gets (``FakeLLM.ollama_num_ctx``).
    ollama_num_ctx: int = OLLAMA_NUM_CTX

    def ident(self, tag: str, alphabet: str, length: int, i: int = 0) -> str:
        # Seeded by the server instance and its request serial (which, unlike ``n``,
        # survives ``clear()``), so no two answers share an id.
        return _ident(f"{self.nonce}/{self.serial}/{tag}/{i}", alphabet, length)

    @property
    def requested_model(self) -> str:
        """The model the request names, in its body or its path ("" if neither)."""
        # Gemini names the model in the path (".../models/gemini-2.5-flash:generateContent").
        in_path = self.route.rpartition("models/")[2].partition(":")[0] if ":" in self.route else ""
        if self.kind in _BEDROCK:  # /model/{modelId}/..., URL-encoded
            in_path = urllib.parse.unquote(self.route.split("/")[2])
        return str(self.payload.get("model") or in_path)

    @property
    def model(self) -> str:
        return self.reply.model or self.requested_model or "fake-model"

    @cached_property
    def id(self) -> str:
        if self.kind == _CHAT:
            return "chatcmpl-" + self.ident("id", _ALNUM, 29)
        if self.kind == _RESPONSES:
            return "resp_" + self.ident("id", _HEX, 48)
        if self.kind == _MESSAGES:
            return "msg_01" + self.ident("id", _BASE62, 22)
        if self.kind == _MISTRAL:
            return self.ident("id", _HEX, 32)
        if self.kind == _COHERE:
            return _uuid4(self.ident("id", _HEX, 32))
        if self.kind in (_INVOKE, _INVOKE_STREAM):
            return "msg_bdrk_01" + self.ident("id", _BASE62, 22)
        return self.ident("id", _BASE64URL, 22)

    @cached_property
    def request_id(self) -> str:
        if self.kind == _MESSAGES:
            return "req_011C" + self.ident("request", _BASE62, 20)
        if self.kind == _MISTRAL:
            return self.ident("request", _HEX, 32)
        if self.kind == _COHERE:
            return _uuid4(self.ident("request", _HEX, 32))
        if self.kind in _BEDROCK:  # a UUID
            raw = self.ident("request", _HEX, 32)
            return f"{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-a{raw[17:20]}-{raw[20:]}"
        return "req_" + self.ident("request", _HEX, 32)

    @property
    def fingerprint(self) -> str:
        """One backend configuration per server, as ``system_fingerprint`` names it."""
        return "fp_" + _ident(f"{self.nonce}/fingerprint", _HEX, 10)

    def item_id(self, prefix: str, i: int = 0) -> str:
        """Responses output item ids (``msg_``, ``fc_``, ``rs_``) in the ``resp_`` style."""
        return prefix + self.ident(prefix, _HEX, 48, i)

    def padding(self, i: int, size: int) -> str:
        """OpenAI's ``obfuscation`` field: random letters evening out the frame sizes."""
        return self.ident("obfuscation", _ALNUM, max(1, 16 - size) if size else 14, i)

    @cached_property
    def signature(self) -> str:
        """An opaque signature for an Anthropic thinking block."""
        raw = b"".join(hashlib.blake2b(f"{self.nonce}/{self.serial}/signature/{i}".encode()).digest()
                       for i in range(3))
        return base64.b64encode(raw).decode()

    @property
    def finish(self) -> str:
        reply = self.reply
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    @property
    def stop_reason(self) -> str:
        if self.reply.refusal:
            return "refusal"
        return _ANTHROPIC_STOP_REASONS.get(self.finish, self.finish)

    @property
    def gemini_finish(self) -> str:
        if self.reply.refusal:
            return "SAFETY"
        return _GEMINI_FINISH_REASONS.get(self.finish, self.finish)

    @property
    def mistral_finish(self) -> str:
        return _MISTRAL_FINISH_REASONS.get(self.finish, self.finish)

    @property
    def cohere_finish(self) -> str:
        return _COHERE_FINISH_REASONS.get(self.finish, self.finish)

    @property
    def converse_stop(self) -> str:
        if self.reply.refusal:
            return "content_filtered"
        return _CONVERSE_STOP_REASONS.get(self.finish, self.finish)

    @property
    def latency_ms(self) -> int:
        """Bedrock's ``latencyMs``: a plausible figure that grows with what is said."""
        return 180 + 12 * self.output_tokens

    @property
    def response_status(self) -> str:
        return "incomplete" if self.finish in _INCOMPLETE_REASONS else "completed"

    @property
    def ollama_done(self) -> str:
        return _OLLAMA_DONE_REASONS.get(self.finish, self.finish)

    @property
    def finish_word(self) -> str:
        """How the answering API says why the answer ended."""
        if self.kind == _CHAT:
            return self.finish
        if self.kind == _OLLAMA:
            return self.ollama_done
        if self.kind == _RESPONSES:
            return self.response_status
        if self.kind == _MISTRAL:
            return self.mistral_finish
        if self.kind == _COHERE:
            return self.cohere_finish
        if self.kind in (_CONVERSE, _CONVERSE_STREAM):
            return self.converse_stop
        if self.kind in (_INVOKE, _INVOKE_STREAM):
            return self.stop_reason if _invoke_shape(self.payload) == "anthropic" else _llama_stop(self)
        return self.stop_reason if self.kind == _MESSAGES else self.gemini_finish

    @cached_property
    def calls(self) -> list[_Call]:
        """The scripted tool calls, ids filled in the style of the API answering."""
        out = []
        for i, call in enumerate(self.reply.tool_calls or []):
            fn = call.get("function") or {}
            args = fn.get("arguments", "")
            if self.kind == _MESSAGES:
                default = "toolu_01" + self.ident("tool", _BASE62, 22, i)
            elif self.kind == _MISTRAL:
                default = self.ident("tool", _ALNUM, 9, i)
            elif self.kind == _COHERE:  # the function's name and 12 letters or digits: get_weather_1byjy32y4hvq
                default = f"{fn.get('name', '')}_" + self.ident("tool", string.ascii_lowercase + string.digits, 12, i)
            elif self.kind in (_CONVERSE, _CONVERSE_STREAM):
                default = "tooluse_" + self.ident("tool", _BASE64URL, 22, i)
            elif self.kind in _BEDROCK:
                default = "toolu_bdrk_01" + self.ident("tool", _BASE62, 22, i)
            else:
                default = "call_" + self.ident("tool", _ALNUM, 24, i)
            # Accept a dict for convenience; the wire format always carries a string.
            out.append(_Call(str(call.get("id") or default), str(fn.get("name", "")),
                             args if isinstance(args, str) else json.dumps(args)))
        return out

    # -- usage ----------------------------------------------------------------------

    @cached_property
    def input_tokens(self) -> int:
        """Prompt tokens, cached ones included."""
        scripted = self.reply.input_tokens
        if scripted is not None:
            return scripted
        if self.kind == _OLLAMA:
            return self.ollama_prompt[0]
        return max(_prompt_tokens(self.kind, self.payload, self.requested_model), self.reply.cached_tokens)

    @cached_property
    def ollama_prompt(self) -> tuple[int, int]:
        """(``prompt_eval_count``, tokens dropped) of an Ollama request held to its window."""
        options = self.payload.get("options")
        window = options.get("num_ctx") if isinstance(options, dict) else None
        window = window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None
        return _ollama_prompt(self.payload, window or self.ollama_num_ctx)

    @property
    def cached_tokens(self) -> int:
        return self.reply.cached_tokens

    @cached_property
    def reasoning_tokens(self) -> int:
        reply = self.reply
        if reply.reasoning_tokens is not None:
            return reply.reasoning_tokens
        estimate = _text_tokens(reply.reasoning) + (_FRAME_TOKENS if reply.reasoning else 0)
        return estimate if reply.output_tokens is None else min(estimate, reply.output_tokens)

    @cached_property
    def output_tokens(self) -> int:
        """Generated tokens, reasoning included."""
        reply = self.reply
        if reply.output_tokens is not None:
            return reply.output_tokens
        said = _text_tokens(reply.text or reply.refusal)
        said += sum(_FRAME_TOKENS + _text_tokens(c.name) + _text_tokens(c.arguments) for c in self.calls)
        return max(1, said) + self.reasoning_tokens

    def served(self, req: RecordedRequest, status: int, *, stream: bool = False) -> ServedResponse:
        """The record of a 200 answer; a scripted failure keeps it from reporting its end."""
        failed = self.reply.stream_failure is not None
        error_type = None
        finish_reasons = () if failed else (self.finish_word,)
        ollama = self.kind == _OLLAMA
        if self.reply.stream_failure == "error" and self.kind in (_MISTRAL, _COHERE):
            # No error body: the broken stream says why it ended with its last event's finish reason.
            broken = _MISTRAL_BROKEN if self.kind == _MISTRAL else _COHERE_BROKEN
            error_type, finish_reasons = broken, (broken,)
        elif self.reply.stream_failure == "error":
            error_type = _error_body(self, _FAILURE_STATUS[self.kind], None)[1]
        return ServedResponse(
            request=req,
            status=status,
            request_id=self.request_id,
            id=None if ollama or self.kind in (_CONVERSE, _CONVERSE_STREAM) else self.id,  # none: Ollama, Converse
            model=self.model,
            stream=stream,
            finish_reasons=finish_reasons,
            usage=None if failed else _final_usage(self, stream),
            input_tokens=None if failed else self.input_tokens,
            output_tokens=None if failed else self.output_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
            tool_call_ids=() if self.kind in (*_GEMINI, _OLLAMA) else tuple(c.id for c in self.calls),
            error_type=error_type,
            failure=self.reply.stream_failure,
            truncated_tokens=self.ollama_prompt[1] if ollama and self.reply.input_tokens is None else 0,
        )


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"Error {status}"


def _error_body(ctx: _Ctx, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    """The provider's error body for ``status`` and the error type it names."""
    model = ctx.model
    if ctx.kind == _MESSAGES:
        err_type, default = _ANTHROPIC_ERRORS.get(
            status, ("api_error" if status >= 500 else "invalid_request_error", _phrase(status))
        )
        body = {"type": "error", "error": {"type": err_type, "message": message or default.format(model=model)},
                "request_id": ctx.request_id}
        return body, err_type
    if ctx.kind in _GEMINI:
        code_name, default = _GEMINI_ERRORS.get(status, ("UNKNOWN", _phrase(status)))
        return {"error": {"code": status, "message": message or default.format(model=model), "status": code_name}}, \
            code_name
    if ctx.kind == _MISTRAL:
        return _mistral_error(ctx, status, message)
    if ctx.kind == _OLLAMA:
        default = _OLLAMA_ERRORS.get(status, _phrase(status).lower())
        return {"error": message or default.format(model=model)}, "error"
    if ctx.kind == _COHERE:
        default = _COHERE_ERRORS.get(status, _phrase(status).lower())
        return {"id": ctx.request_id, "message": message or default.format(model=model)}, _phrase(status)
    if ctx.kind in _BEDROCK:
        error, default = _BEDROCK_ERRORS.get(status, ("InternalServerException" if status >= 500
                                                       else "ValidationException", _phrase(status)))
        return {"message": message or default}, error
    err_type, code, default = _OPENAI_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, _phrase(status))
    )
    body = {"error": {"message": message or default.format(model=model), "type": err_type, "param": None,
                      "code": code}}
    return body, err_type


class _Events:
    """A stream's events, and the point where a scripted failure cuts it: after the
    first delta, or after the opening event when nothing is said."""

    def __init__(self) -> None:
        self.items: list[_Event] = []
        self._cut: int | None = None

    def add(self, event: str | None, data: Any, *, delta: bool = False) -> None:
        self.items.append((event, data))
        if delta and self._cut is None:
            self._cut = len(self.items)

    def cut(self, ctx: _Ctx, failure: list[_Event]) -> list[_Event | _Drop]:
        if ctx.reply.stream_failure is None:
            return list(self.items)
        kept: list[_Event | _Drop] = list(self.items[: self._cut or 1])
        if ctx.reply.stream_failure == "drop":
            return [*kept, _DROP]
        return kept + list(failure)


# -- OpenAI Chat Completions ------------------------------------------------------------------


def _chat_usage(ctx: _Ctx) -> dict[str, Any]:
    return {
        "prompt_tokens": ctx.input_tokens,
        "completion_tokens": ctx.output_tokens,
        "total_tokens": ctx.input_tokens + ctx.output_tokens,
        "prompt_tokens_details": {"cached_tokens": ctx.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": ctx.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_body(ctx: _Ctx) -> dict[str, Any]:
    reply = ctx.reply
    message: dict[str, Any] = {
        "role": "assistant",
        # The real API sends null content for pure tool-call turns and refusals.
        "content": reply.text if reply.text or not (reply.tool_calls or reply.refusal) else None,
        "refusal": reply.refusal or None,
        "annotations": [],
    }
    if ctx.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in ctx.calls
        ]
    return {
        "id": ctx.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": ctx.finish}],
        "usage": _chat_usage(ctx),
        "service_tier": "default",
        "system_fingerprint": ctx.fingerprint,
    }


def _chat_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    opts = ctx.payload.get("stream_options")
    opts = opts if isinstance(opts, dict) else {}
    include_usage = opts.get("include_usage") is True
    obfuscate = opts.get("include_obfuscation") is not False
    created = int(time.time())
    out = _Events()

    def chunk(delta: dict[str, Any], finish: str | None = None, *, size: int = 0) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": ctx.id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": ctx.model,
            "service_tier": "default",
            "system_fingerprint": ctx.fingerprint,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            # The real API puts an explicit null usage on every chunk but the last.
            obj["usage"] = None
        if obfuscate:
            obj["obfuscation"] = ctx.padding(len(out.items), size)
        return obj

    def call_start(i: int, call: _Call) -> dict[str, Any]:
        return {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}

    reply = ctx.reply
    calls = ctx.calls
    if reply.text or reply.refusal or not calls:
        out.add(None, chunk({"role": "assistant", "content": "", "refusal": None}))
        for piece in _split(reply.text, reply.deltas):
            out.add(None, chunk({"content": piece}, size=len(piece)), delta=True)
        for piece in _split(reply.refusal, reply.deltas):
            out.add(None, chunk({"refusal": piece}, size=len(piece)), delta=True)
        first = 0
    else:
        # A pure tool-call turn opens with the first call's header, content null.
        out.add(None, chunk({"role": "assistant", "content": None, "tool_calls": [call_start(0, calls[0])],
                             "refusal": None}, size=len(calls[0].name)))
        first = 1
    for i, call in enumerate(calls):
        if i >= first:
            out.add(None, chunk({"tool_calls": [call_start(i, call)]}, size=len(call.name)))
        for piece in _split(call.arguments, 2):
            out.add(None, chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}, size=len(piece)),
                    delta=True)
    out.add(None, chunk({}, ctx.finish))
    if include_usage:  # the usage-only last chunk: no choices
        last = chunk({})
        last["choices"], last["usage"] = [], _chat_usage(ctx)
        out.add(None, last)
    out.add(None, "[DONE]")
    # Failing midway, the service sends an error object and ends the stream without [DONE].
    return out.cut(ctx, [(None, _error_body(ctx, _FAILURE_STATUS[_CHAT], None)[0])])


# -- OpenAI Responses ----------------------------------------------------------------------------


def _reasoning_item(ctx: _Ctx, summary: str | None) -> dict[str, Any]:
    parts = [] if summary is None else [{"type": "summary_text", "text": summary}]
    return {"id": ctx.item_id("rs_"), "type": "reasoning", "summary": parts}


def _message_item(ctx: _Ctx, status: str, *, done: bool) -> dict[str, Any]:
    reply = ctx.reply
    content: list[dict[str, Any]] = []
    if done:
        if reply.refusal:
            content.append({"type": "refusal", "refusal": reply.refusal})
        else:
            content.append({"type": "output_text", "annotations": [], "logprobs": [], "text": reply.text})
    return {"id": ctx.item_id("msg_"), "type": "message", "status": status, "content": content, "role": "assistant"}


def _function_item(ctx: _Ctx, i: int, call: _Call, status: str, *, done: bool) -> dict[str, Any]:
    return {
        "id": ctx.item_id("fc_", i),
        "type": "function_call",
        "status": status,
        "arguments": call.arguments if done else "",
        "call_id": call.id,
        "name": call.name,
    }


def _output_items(ctx: _Ctx) -> list[dict[str, Any]]:
    """Final Responses output: reasoning, a message, then any function calls."""
    reply = ctx.reply
    status = ctx.response_status
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append(_reasoning_item(ctx, reply.reasoning))
    if reply.text or reply.refusal or not ctx.calls:
        items.append(_message_item(ctx, status, done=True))
    items.extend(_function_item(ctx, i, c, "completed", done=True) for i, c in enumerate(ctx.calls))
    return items


def _responses_usage(ctx: _Ctx) -> dict[str, Any]:
    return {
        "input_tokens": ctx.input_tokens,
        "input_tokens_details": {"cached_tokens": ctx.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": ctx.output_tokens,
        "output_tokens_details": {"reasoning_tokens": ctx.reasoning_tokens},
        "total_tokens": ctx.input_tokens + ctx.output_tokens,
    }


def _response_object(ctx: _Ctx, output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    """A Response with every field the SDK models treat as required."""
    p = ctx.payload
    tools = p.get("tools")
    now = int(time.time())
    reason = _INCOMPLETE_REASONS.get(ctx.finish)
    return {
        "id": ctx.id,
        "object": "response",
        "created_at": now,
        "status": status,
        "background": False,
        "completed_at": now if status == "completed" else None,
        "error": {"code": "server_error", "message": _RESPONSES_FAILURE} if status == "failed" else None,
        "incomplete_details": {"reason": reason} if status == "incomplete" else None,
        "instructions": p.get("instructions"),
        "max_output_tokens": p.get("max_output_tokens"),
        "max_tool_calls": p.get("max_tool_calls"),
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": p.get("parallel_tool_calls", True),
        "previous_response_id": p.get("previous_response_id"),
        "reasoning": p.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": "default",
        "store": p.get("store", True),
        "temperature": p.get("temperature", 1.0),
        "text": p.get("text") or {"format": {"type": "text"}},
        "tool_choice": p.get("tool_choice", "auto"),
        "tools": tools if isinstance(tools, list) else [],
        "top_p": p.get("top_p", 1.0),
        "truncation": p.get("truncation", "disabled"),
        "usage": _responses_usage(ctx) if status in ("completed", "incomplete") else None,
        "user": p.get("user"),
        "metadata": p.get("metadata") or {},
    }


def _responses_body(ctx: _Ctx) -> dict[str, Any]:
    return _response_object(ctx, _output_items(ctx), ctx.response_status)


def _responses_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    """The full real event sequence.

    The SDK's ``responses.stream()`` helper rebuilds a snapshot from
    ``output_item.added``/``content_part.added`` and refuses deltas for items
    it never saw announced, so the bare created/delta/done/completed quartet
    is not enough.
    """
    opts = ctx.payload.get("stream_options")
    obfuscate = not (isinstance(opts, dict) and opts.get("include_obfuscation") is False)
    out = _Events()

    def ev(etype: str, *, said: bool = False, **fields: Any) -> None:
        # sequence_number is filled in last: a scripted failure renumbers what is left.
        data = {"type": etype, "sequence_number": 0, **fields}
        if obfuscate and "delta" in fields:
            data["obfuscation"] = ctx.padding(len(out.items), len(fields["delta"]))
        out.add(etype, data, delta=said)

    def where(index: int, item_id: str, **more: Any) -> dict[str, Any]:
        return {"item_id": item_id, "output_index": index, **more}

    reply = ctx.reply
    status = ctx.response_status
    ev("response.created", response=_response_object(ctx, [], "in_progress"))
    ev("response.in_progress", response=_response_object(ctx, [], "in_progress"))
    final = _output_items(ctx)
    for index, item in enumerate(final):
        item_id = item["id"]
        if item["type"] == "reasoning":
            ev("response.output_item.added", output_index=index, item=_reasoning_item(ctx, None))
            part: dict[str, Any] = {"type": "summary_text", "text": ""}
            ev("response.reasoning_summary_part.added", **where(index, item_id, summary_index=0), part=part)
            for piece in _split(reply.reasoning):
                ev("response.reasoning_summary_text.delta", said=True, **where(index, item_id, summary_index=0),
                   delta=piece)
            ev("response.reasoning_summary_text.done", **where(index, item_id, summary_index=0),
               text=reply.reasoning)
            ev("response.reasoning_summary_part.done", **where(index, item_id, summary_index=0),
               part={**part, "text": reply.reasoning})
        elif item["type"] == "message":
            ev("response.output_item.added", output_index=index, item=_message_item(ctx, "in_progress", done=False))
            at = where(index, item_id, content_index=0)
            if reply.refusal:
                part = {"type": "refusal", "refusal": ""}
                ev("response.content_part.added", **at, part=part)
                for piece in _split(reply.refusal, reply.deltas):
                    ev("response.refusal.delta", said=True, **at, delta=piece)
                ev("response.refusal.done", **at, refusal=reply.refusal)
            else:
                part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
                ev("response.content_part.added", **at, part=part)
                for piece in _split(reply.text, reply.deltas):
                    ev("response.output_text.delta", said=True, **at, delta=piece, logprobs=[])
                ev("response.output_text.done", **at, text=reply.text, logprobs=[])
            ev("response.content_part.done", **at, part=item["content"][0])
        else:
            i = index - (len(final) - len(ctx.calls))
            ev("response.output_item.added", output_index=index,
               item=_function_item(ctx, i, ctx.calls[i], "in_progress", done=False))
            for piece in _split(item["arguments"], 2):
                ev("response.function_call_arguments.delta", said=True, **where(index, item_id), delta=piece)
            ev("response.function_call_arguments.done", **where(index, item_id), name=item["name"],
               arguments=item["arguments"])
        ev("response.output_item.done", output_index=index, item=item)
    ev(f"response.{status}", response=_response_object(ctx, final, status))
    failed = ("response.failed", {"type": "response.failed", "sequence_number": 0,
                                  "response": _response_object(ctx, [], "failed")})
    events = out.cut(ctx, [failed])
    for seq, event in enumerate(e for e in events if not isinstance(e, _Drop)):
        event[1]["sequence_number"] = seq
    return events


# -- Anthropic Messages ---------------------------------------------------------------------------


def _anthropic_blocks(ctx: _Ctx) -> list[dict[str, Any]]:
    reply = ctx.reply
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:
        blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": ctx.signature})
    if reply.text or reply.refusal or not ctx.calls:
        blocks.append({"type": "text", "text": reply.text or reply.refusal})
    blocks.extend({"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in ctx.calls)
    return blocks


def _anthropic_usage(ctx: _Ctx, output_tokens: int, *, delta: bool = False) -> dict[str, Any]:
    """``input_tokens`` excludes the cache reads, as the real API counts them.  A
    ``message_delta`` repeats the cumulative counts without the breakdowns."""
    usage: dict[str, Any] = {
        "input_tokens": ctx.input_tokens - ctx.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": ctx.cached_tokens,
    }
    if not delta:
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
    usage["output_tokens"] = output_tokens
    if not delta:
        usage["service_tier"] = "standard"
    if ctx.reasoning_tokens and output_tokens == ctx.output_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": ctx.reasoning_tokens}
    return usage


def _messages_body(ctx: _Ctx) -> dict[str, Any]:
    return {
        "model": _claude_name(ctx.model) if ctx.kind in _BEDROCK else ctx.model,
        "id": ctx.id,
        "type": "message",
        "role": "assistant",
        "content": _anthropic_blocks(ctx),
        "stop_reason": ctx.stop_reason,
        "stop_sequence": None,
        "usage": _anthropic_usage(ctx, ctx.output_tokens),
    }


def _messages_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    out = _Events()

    def ev(etype: str, *, said: bool = False, **fields: Any) -> None:
        out.add(etype, {"type": etype, **fields}, delta=said)

    start = {**_messages_body(ctx), "content": [], "stop_reason": None, "usage": _anthropic_usage(ctx, 1)}
    ev("message_start", message=start)
    for index, block in enumerate(_anthropic_blocks(ctx)):
        kind = block["type"]
        if kind == "thinking":
            ev("content_block_start", index=index, content_block={"type": "thinking", "thinking": "", "signature": ""})
        elif kind == "text":
            ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
        else:
            ev("content_block_start", index=index, content_block={**block, "input": {}})
        if index == 0:
            ev("ping")  # the service pings once the first block has opened
        if kind == "thinking":
            for piece in _split(block["thinking"]):
                ev("content_block_delta", said=True, index=index, delta={"type": "thinking_delta", "thinking": piece})
            # The signature arrives whole, just before the block closes.
            ev("content_block_delta", index=index, delta={"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            for piece in _split(block["text"], ctx.reply.deltas):
                ev("content_block_delta", said=True, index=index, delta={"type": "text_delta", "text": piece})
        else:
            for piece in _split(json.dumps(block["input"]), 2):
                ev("content_block_delta", said=True, index=index,
                   delta={"type": "input_json_delta", "partial_json": piece})
        ev("content_block_stop", index=index)
    ev("message_delta", delta={"stop_reason": ctx.stop_reason, "stop_sequence": None},
       usage=_anthropic_usage(ctx, ctx.output_tokens, delta=True))
    ev("message_stop")
    # Failing midway, the service sends an ``error`` event and ends the stream (on Bedrock, an
    # exception message in its place: ``_invoke_stream``).
    if ctx.kind in _BEDROCK:
        return out.cut(ctx, [("error", None)])
    error = _error_body(ctx, _FAILURE_STATUS[_MESSAGES], None)[0]
    return out.cut(ctx, [("error", {"type": "error", "error": error["error"]})])


# -- Gemini -------------------------------------------------------------------------------------------


def _gemini_usage(ctx: _Ctx, *, final: bool = True) -> dict[str, Any]:
    """``candidatesTokenCount`` excludes the thoughts, which Gemini counts apart; chunks
    before the last carry the prompt count only."""
    prompt = ctx.input_tokens
    usage: dict[str, Any] = {"promptTokenCount": prompt}
    if final:
        usage["candidatesTokenCount"] = ctx.output_tokens - ctx.reasoning_tokens
    usage["totalTokenCount"] = prompt + (ctx.output_tokens if final else 0)
    if ctx.cached_tokens:
        usage["cachedContentTokenCount"] = ctx.cached_tokens
    usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    if final and ctx.reasoning_tokens:
        usage["thoughtsTokenCount"] = ctx.reasoning_tokens
    return usage


def _gemini_chunk(ctx: _Ctx, parts: list[dict[str, Any]] | None, *, final: bool) -> dict[str, Any]:
    """A GenerateContentResponse; a blocked (refused) answer has no content at all."""
    candidate: dict[str, Any] = {}
    if parts is not None:
        candidate["content"] = {"parts": parts, "role": "model"}
    if final:
        candidate["finishReason"] = ctx.gemini_finish
    candidate["index"] = 0
    return {
        "candidates": [candidate],
        "usageMetadata": _gemini_usage(ctx, final=final),
        "modelVersion": ctx.model,
        "responseId": ctx.id,
    }


def _gemini_calls(ctx: _Ctx) -> list[dict[str, Any]]:
    return [{"functionCall": {"name": c.name, "args": c.input}} for c in ctx.calls]


def _gemini_body(ctx: _Ctx) -> dict[str, Any]:
    reply = ctx.reply
    if reply.refusal:
        return _gemini_chunk(ctx, None, final=True)
    parts = [{"text": reply.reasoning, "thought": True}] if reply.reasoning else []
    if reply.text or not ctx.calls:
        parts.append({"text": reply.text})
    return _gemini_chunk(ctx, parts + _gemini_calls(ctx), final=True)


def _gemini_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    out = _Events()
    reply = ctx.reply
    if reply.refusal:
        out.add(None, _gemini_chunk(ctx, None, final=True))
    else:
        if reply.reasoning:
            out.add(None, _gemini_chunk(ctx, [{"text": reply.reasoning, "thought": True}], final=False), delta=True)
        pieces = _split(reply.text, reply.deltas) or [""]
        for piece in pieces[:-1]:
            out.add(None, _gemini_chunk(ctx, [{"text": piece}], final=False), delta=True)
        last = [{"text": pieces[-1]}] if pieces[-1] or not ctx.calls else []
        out.add(None, _gemini_chunk(ctx, last + _gemini_calls(ctx), final=True), delta=True)
    # Failing midway, the service sends an error object as the next chunk.
    return out.cut(ctx, [(None, _error_body(ctx, _FAILURE_STATUS[_STREAM_GENERATE], None)[0])])


# -- Mistral chat completions ------------------------------------------------------------------


def _mistral_usage(ctx: _Ctx) -> dict[str, Any]:
    """Mistral's usage, in its order; the cached part of the prompt (``prompt_cache_key``) only
    when there is one."""
    usage: dict[str, Any] = {
        "prompt_tokens": ctx.input_tokens,
        "total_tokens": ctx.input_tokens + ctx.output_tokens,
        "completion_tokens": ctx.output_tokens,
    }
    if ctx.cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": ctx.cached_tokens}
    return usage


def _mistral_calls(ctx: _Ctx) -> list[dict[str, Any]]:
    return [{"id": c.id, "function": {"name": c.name, "arguments": c.arguments}, "index": i}
            for i, c in enumerate(ctx.calls)]


def _mistral_thinking(text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": [{"type": "text", "text": text}]}


def _mistral_content(text: str, reasoning: str) -> Any:
    """A string; or, when the model thought (Magistral), chunks: its thinking, then the text."""
    if not reasoning:
        return text
    return [_mistral_thinking(reasoning), {"type": "text", "text": text}]


def _mistral_body(ctx: _Ctx) -> dict[str, Any]:
    reply = ctx.reply
    # No refusal field: a refusal is said as text.
    message = {
        "role": "assistant",
        "tool_calls": _mistral_calls(ctx) or None,
        "content": _mistral_content(reply.text or reply.refusal, reply.reasoning),
    }
    return {
        "id": ctx.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "finish_reason": ctx.mistral_finish}],
        "usage": _mistral_usage(ctx),
    }


def _mistral_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    """Chunks opening with the role, text deltas, each tool call whole in one chunk (Mistral does
    not stream arguments), the finish reason with the usage on the last chunk, then ``[DONE]``."""
    created = int(time.time())
    out = _Events()

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": ctx.id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": ctx.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage is not None:
            obj["usage"] = usage
        return obj

    reply = ctx.reply
    out.add(None, chunk({"role": "assistant", "content": ""}))
    for piece in _split(reply.reasoning):
        out.add(None, chunk({"content": [_mistral_thinking(piece)]}), delta=True)
    for piece in _split(reply.text or reply.refusal, reply.deltas):
        out.add(None, chunk({"content": piece}), delta=True)
    if ctx.calls:
        out.add(None, chunk({"tool_calls": _mistral_calls(ctx)}), delta=True)
    out.add(None, chunk({"content": ""}, ctx.mistral_finish, _mistral_usage(ctx)))
    out.add(None, "[DONE]")
    # Broken off midway, the stream ends with a chunk whose finish reason is ``error``, then [DONE].
    return out.cut(ctx, [(None, chunk({"content": ""}, _MISTRAL_BROKEN)), (None, "[DONE]")])


def _mistral_error(ctx: _Ctx, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    if status == 401:  # from the gateway in front of the API, not the API's own envelope
        return {"message": message or "Unauthorized", "request_id": ctx.request_id}, "Unauthorized"
    if status == 422:
        detail = {"type": "value_error", "loc": ["body"], "msg": message or "Value error, invalid request",
                  "input": None}
        return {"detail": [detail]}, "value_error"
    err_type, code, default = _MISTRAL_ERRORS.get(
        status, ("internal_server_error" if status >= 500 else "invalid_request_error", None, _phrase(status))
    )
    return {"object": "error", "message": message or default.format(model=ctx.model), "type": err_type,
            "param": None, "code": code}, err_type


# -- Ollama chat ----------------------------------------------------------------------------------


def _go_json(obj: Any) -> str:
    """JSON as Ollama's Go encoder writes it: compact, ``<``, ``>`` and ``&`` escaped (they only ever
    occur inside strings, where the escape means the same character)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _ollama_message_tokens(message: Any, model: str) -> int:
    """A message as the chat template renders it: its text (thinking and tool calls too); each image
    what the model's vision encoder makes of one, never its base64."""
    if not isinstance(message, dict):
        return _FRAME_TOKENS + _read_tokens(message)
    images = message.get("images")
    rest = {k: v for k, v in message.items() if k != "images"}
    return _FRAME_TOKENS + _read_tokens(rest) + sum(_fake_media.ollama(model, image) for image in images) \
        if isinstance(images, list) else _FRAME_TOKENS + _read_tokens(rest)


def _ollama_prompt(payload: Mapping[str, Any], window: int) -> tuple[int, int]:
    """(tokens kept, tokens dropped) of a prompt held to ``window``, as Ollama's server does it: the
    chat template drops the oldest messages but the system ones (never the last) until the prompt
    fits; what still does not fit, the runner cuts to the window. Tools are rendered with the
    messages; ``format`` constrains the sampling and is not in the prompt."""
    messages = payload.get("messages")
    messages = messages if isinstance(messages, list) else []
    model = str(payload.get("model") or "")
    costs = [_ollama_message_tokens(m, model) for m in messages]
    fixed = _schemas_tokens(payload.get("tools")) + _FRAME_TOKENS
    full = fixed + sum(costs)
    if full <= window:
        return full, 0
    system = [isinstance(m, dict) and m.get("role") == "system" for m in messages]
    kept = fixed + sum(costs)
    for start in range(1, len(messages)):  # drop messages[:start] but their system messages
        kept = fixed + sum(c for i, c in enumerate(costs) if i >= start or system[i])
        if kept <= window:
            break
    return min(kept, window), full - min(kept, window)


def _ollama_created() -> str:
    """RFC 3339 with nanoseconds, as Go writes a UTC time."""
    now = time.time_ns()
    fraction = f"{now % 1_000_000_000:09d}".rstrip("0")
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now // 1_000_000_000))
    return seconds + (f".{fraction}" if fraction else "") + "Z"


def _ollama_metrics(ctx: _Ctx) -> dict[str, Any]:
    """The counts and timings (nanoseconds) of the last object of an answer; the times grow with the
    counts: ~1.5 ms a prompt token, ~20 ms an answer token, a warm model's load."""
    prompt_ns, eval_ns, load_ns = ctx.input_tokens * 1_500_000, ctx.output_tokens * 20_000_000, 2_154_458
    return {
        "total_duration": load_ns + prompt_ns + eval_ns + 1_000_000,
        "load_duration": load_ns,
        "prompt_eval_count": ctx.input_tokens,
        "prompt_eval_duration": prompt_ns,
        "eval_count": ctx.output_tokens,
        "eval_duration": eval_ns,
    }


def _ollama_calls(ctx: _Ctx) -> list[dict[str, Any]]:
    """Tool calls, arguments as an object, no id (Ollama's calls are known by their function's name)."""
    return [{"function": {"name": c.name, "arguments": c.input}} for c in ctx.calls]


def _ollama_message(content: str, *, thinking: str = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    if calls:
        message["tool_calls"] = calls
    return message


def _ollama_body(ctx: _Ctx) -> dict[str, Any]:
    reply = ctx.reply
    message = _ollama_message(reply.text or reply.refusal, thinking=reply.reasoning, calls=_ollama_calls(ctx))
    return {"model": ctx.model, "created_at": _ollama_created(), "message": message, "done_reason": ctx.ollama_done,
            "done": True, **_ollama_metrics(ctx)}


def _ollama_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    """NDJSON objects: thinking pieces, text pieces, the tool calls whole in one, then an empty message
    with ``done: true``, the reason and the counts."""
    out = _Events()

    def line(message: dict[str, Any], *, done: bool = False) -> dict[str, Any]:
        obj: dict[str, Any] = {"model": ctx.model, "created_at": _ollama_created(), "message": message, "done": done}
        if done:
            obj["done_reason"] = ctx.ollama_done
            obj.update(_ollama_metrics(ctx))
        return obj

    reply = ctx.reply
    for piece in _split(reply.reasoning):
        out.add(None, line(_ollama_message("", thinking=piece)), delta=True)
    for piece in _split(reply.text or reply.refusal, reply.deltas):
        out.add(None, line(_ollama_message(piece)), delta=True)
    if ctx.calls:
        out.add(None, line(_ollama_message("", calls=_ollama_calls(ctx))), delta=True)
    out.add(None, line(_ollama_message(""), done=True))
    # Failing midway, the server writes an error object as the last line (the status was sent: 200).
    return out.cut(ctx, [(None, _error_body(ctx, _FAILURE_STATUS[_OLLAMA], None)[0])])
# -- Cohere v2 chat ----------------------------------------------------------------------------


def _cohere_usage(ctx: _Ctx) -> dict[str, Any]:
    """``tokens``: what the model read (its prompt template included) and wrote; ``billed_units``:
    the same without the template. The cached part of the prompt only when there is one."""
    usage: dict[str, Any] = {
        "billed_units": {"input_tokens": max(0, ctx.input_tokens - _COHERE_TEMPLATE),
                         "output_tokens": ctx.output_tokens},
        "tokens": {"input_tokens": ctx.input_tokens, "output_tokens": ctx.output_tokens},
    }
    if ctx.cached_tokens:
        usage["cached_tokens"] = ctx.cached_tokens
    return usage


def _cohere_calls(ctx: _Ctx) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in ctx.calls]


def _cohere_citations(ctx: _Ctx, text: str) -> list[dict[str, Any]]:
    """Given documents, the answer cites the first one for its whole text (documents without an id
    get ``doc_0``, ``doc_1``... as the service numbers them)."""
    documents = ctx.payload.get("documents")
    if not text or not isinstance(documents, list) or not documents:
        return []
    first = documents[0]
    data = first.get("data") if isinstance(first, dict) else {"text": first}
    doc_id = first.get("id") if isinstance(first, dict) and first.get("id") else "doc_0"
    return [{"start": 0, "end": len(text), "text": text, "sources": [
        {"type": "document", "id": doc_id, "document": {"id": doc_id, **(data if isinstance(data, dict) else {})}}],
        "content_index": 0, "type": "TEXT_CONTENT"}]


def _cohere_body(ctx: _Ctx) -> dict[str, Any]:
    """A text answer's content blocks (its thinking first); a tool-call turn's plan (the scripted
    text) and calls, without content."""
    reply = ctx.reply
    message: dict[str, Any] = {"role": "assistant"}
    if ctx.calls:
        if reply.text:
            message["tool_plan"] = reply.text
        message["tool_calls"] = _cohere_calls(ctx)
    else:
        text = reply.text or reply.refusal
        thinking = [{"type": "thinking", "thinking": reply.reasoning}] if reply.reasoning else []
        message["content"] = [*thinking, {"type": "text", "text": text}]
        citations = _cohere_citations(ctx, text)
        if citations:
            message["citations"] = citations
    return {"id": ctx.id, "message": message, "finish_reason": ctx.cohere_finish, "usage": _cohere_usage(ctx)}


def _cohere_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    """Named events (``event: content-delta``, the same ``type`` in the data): ``message-start``;
    each content block's ``content-start`` / ``-delta`` / ``-end`` (thinking, then text) with its
    citations; or the tool plan's deltas and each call's ``tool-call-start`` / ``-delta`` / ``-end``;
    then ``message-end`` with the finish reason and the usage, and ``[DONE]``."""
    out = _Events()

    def ev(kind: str, *, said: bool = False, **fields: Any) -> None:
        out.add(kind, {"type": kind, **fields}, delta=said)

    def content(**fields: Any) -> dict[str, Any]:
        return {"message": {"content": fields}}

    reply = ctx.reply
    ev("message-start", id=ctx.id, delta={"message": {"role": "assistant", "content": [], "tool_plan": "",
                                                      "tool_calls": [], "citations": []}})
    if ctx.calls:
        for piece in _split(reply.text, reply.deltas):
            ev("tool-plan-delta", said=True, delta={"message": {"tool_plan": piece}})
        for i, call in enumerate(ctx.calls):
            ev("tool-call-start", index=i, delta={"message": {"tool_calls": {
                "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}}})
            for piece in _split(call.arguments, 2):
                ev("tool-call-delta", said=True, index=i,
                   delta={"message": {"tool_calls": {"function": {"arguments": piece}}}})
            ev("tool-call-end", index=i)
    else:
        index = 0
        if reply.reasoning:
            ev("content-start", index=0, delta=content(type="thinking", thinking=""))
            for piece in _split(reply.reasoning):
                ev("content-delta", said=True, index=0, delta=content(thinking=piece))
            ev("content-end", index=0)
            index = 1
        text = reply.text or reply.refusal
        ev("content-start", index=index, delta=content(type="text", text=""))
        for piece in _split(text, reply.deltas):
            ev("content-delta", said=True, index=index, delta=content(text=piece))
        for i, citation in enumerate(_cohere_citations(ctx, text)):
            ev("citation-start", index=i, delta={"message": {"citations": {**citation, "content_index": index}}})
            ev("citation-end", index=i)
        ev("content-end", index=index)
    ev("message-end", delta={"finish_reason": ctx.cohere_finish, "usage": _cohere_usage(ctx)})
    out.add(None, "[DONE]")
    broken = {"type": "message-end", "delta": {"error": _COHERE_ERRORS[500], "finish_reason": _COHERE_BROKEN}}
    return out.cut(ctx, [("message-end", broken), (None, "[DONE]")])


# -- AWS Bedrock Runtime ---------------------------------------------------------------------------

_MALFORMED = ("Malformed input request: #: subject must not be valid against schema "
              '{"required":["messages"]}#: required key [messages] not found, '
              "please reformat your input and try again.")


def _invoke_shape(payload: Mapping[str, Any]) -> str | None:
    """Which model body an ``invoke`` carries: Anthropic Messages, a Meta Llama prompt, or neither."""
    version = payload.get("anthropic_version")
    if isinstance(version, str) and version.startswith("bedrock-") and isinstance(payload.get("messages"), list):
        return "anthropic"
    return "prompt" if isinstance(payload.get("prompt"), str) else None


def _claude_name(model: str) -> str:
    """The name Anthropic's own answer gives a Bedrock model: ``us.anthropic.claude-x-v1:0`` -> ``claude-x``."""
    name = model.rpartition("anthropic.")[2]
    return re.sub(r"-v\d+(?::\d+)?$", "", name)


def _bedrock_prompt_tokens(kind: str, p: Mapping[str, Any], model: str) -> int:
    if kind in (_CONVERSE, _CONVERSE_STREAM):
        media = _pricing(kind, model)
        system = p.get("system")
        config = p.get("toolConfig")
        tools = config.get("tools") if isinstance(config, dict) else None
        n = (_FRAME_TOKENS + _read_tokens(system) if system else 0) + _messages_tokens(p.get("messages"), media)
        return n + _schemas_tokens([t for t in tools if "toolSpec" in t] if isinstance(tools, list) else None) \
            + _FRAME_TOKENS
    if _invoke_shape(p) == "anthropic":
        return _prompt_tokens(_MESSAGES, p, model)
    return _text_tokens(str(p.get("prompt") or ""))


def _converse_usage(ctx: _Ctx) -> dict[str, Any]:
    """``inputTokens`` excludes what was read from the cache; ``totalTokens`` counts everything."""
    usage: dict[str, Any] = {
        "inputTokens": ctx.input_tokens - ctx.cached_tokens,
        "outputTokens": ctx.output_tokens,
        "totalTokens": ctx.input_tokens + ctx.output_tokens,
    }
    if ctx.cached_tokens:
        usage["cacheReadInputTokens"] = ctx.cached_tokens
        usage["cacheWriteInputTokens"] = 0
    return usage


def _converse_blocks(ctx: _Ctx) -> list[dict[str, Any]]:
    reply = ctx.reply
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:
        blocks.append({"reasoningContent": {"reasoningText": {"text": reply.reasoning, "signature": ctx.signature}}})
    if reply.text or reply.refusal or not ctx.calls:
        blocks.append({"text": reply.text or reply.refusal})
    blocks.extend({"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.input}} for c in ctx.calls)
    return blocks


def _converse_body(ctx: _Ctx) -> dict[str, Any]:
    return {
        "metrics": {"latencyMs": ctx.latency_ms},
        "output": {"message": {"content": _converse_blocks(ctx), "role": "assistant"}},
        "stopReason": ctx.converse_stop,
        "usage": _converse_usage(ctx),
    }


def _converse_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    """messageStart, per block its deltas (a tool use opened by contentBlockStart) and its stop,
    messageStop with the stop reason, then metadata with the usage."""
    out = _Events()
    out.add("messageStart", {"role": "assistant"})
    for index, block in enumerate(_converse_blocks(ctx)):
        if "reasoningContent" in block:
            reasoning = block["reasoningContent"]["reasoningText"]
            for piece in _split(reasoning["text"]):
                out.add("contentBlockDelta", {"contentBlockIndex": index,
                                              "delta": {"reasoningContent": {"text": piece}}}, delta=True)
            out.add("contentBlockDelta", {"contentBlockIndex": index,
                                          "delta": {"reasoningContent": {"signature": reasoning["signature"]}}})
        elif "text" in block:
            for piece in _split(block["text"], ctx.reply.deltas):
                out.add("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}, delta=True)
        else:
            use = block["toolUse"]
            out.add("contentBlockStart", {"contentBlockIndex": index,
                                          "start": {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}})
            for piece in _split(json.dumps(use["input"]), 2):
                out.add("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}},
                        delta=True)
        out.add("contentBlockStop", {"contentBlockIndex": index})
    out.add("messageStop", {"stopReason": ctx.converse_stop})
    out.add("metadata", {"usage": _converse_usage(ctx), "metrics": {"latencyMs": ctx.latency_ms}})
    return out.cut(ctx, [_bedrock_exception(ctx)])


def _bedrock_exception(ctx: _Ctx) -> _Event:
    """A stream's failure: an exception message (``:message-type: exception``) and the end."""
    body, code = _error_body(ctx, _FAILURE_STATUS[ctx.kind], None)
    return _EXCEPTION + code[0].lower() + code[1:], body


def _llama_stop(ctx: _Ctx) -> str:
    return "length" if ctx.finish == "length" else "stop"


def _llama_usage(ctx: _Ctx) -> dict[str, Any]:
    return {"prompt_token_count": ctx.input_tokens, "generation_token_count": ctx.output_tokens}


def _invoke_body(ctx: _Ctx) -> dict[str, Any]:
    """The model's own answer: Anthropic's message (Bedrock's usage, no service tier), or Llama's."""
    if _invoke_shape(ctx.payload) == "anthropic":
        return {**_messages_body(ctx), "usage": _anthropic_usage(ctx, ctx.output_tokens, delta=True)}
    return {"generation": ctx.reply.text or ctx.reply.refusal, **_llama_usage(ctx), "stop_reason": _llama_stop(ctx)}


def _invocation_metrics(ctx: _Ctx) -> dict[str, Any]:
    return {"inputTokenCount": ctx.input_tokens, "outputTokenCount": ctx.output_tokens,
            "invocationLatency": ctx.latency_ms, "firstByteLatency": 150}


def _invoke_stream(ctx: _Ctx) -> list[_Event | _Drop]:
    """``chunk`` events whose ``bytes`` are the model's own stream events (Anthropic's, without its
    pings; or Llama's generations), the last one carrying ``amazon-bedrock-invocationMetrics``."""
    if _invoke_shape(ctx.payload) == "anthropic":
        events = [e for e in _messages_stream(ctx) if isinstance(e, _Drop) or e[0] != "ping"]
    else:
        pieces = _split(ctx.reply.text, ctx.reply.deltas) or [""]
        events = [(None, {"generation": piece, "prompt_token_count": ctx.input_tokens if i == 0 else None,
                          "generation_token_count": i + 1, "stop_reason": None}) for i, piece in enumerate(pieces)]
        events.append((None, {"generation": "", "prompt_token_count": None,
                              "generation_token_count": ctx.output_tokens, "stop_reason": _llama_stop(ctx)}))
        if ctx.reply.stream_failure == "drop":
            events = [events[0], _DROP]
        elif ctx.reply.stream_failure == "error":
            events = [events[0], ("error", None)]
    out: list[_Event | _Drop] = []
    for event in events:
        if isinstance(event, _Drop):
            out.append(event)
        elif event[0] == "error":  # the service failed midway: an exception message, not the model's event
            out.append(_bedrock_exception(ctx))
        else:
            data = dict(event[1])
            if data.get("type") == "message_stop" or data.get("stop_reason") is not None:
                data["amazon-bedrock-invocationMetrics"] = _invocation_metrics(ctx)
            raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
            out.append(("chunk", {"bytes": base64.b64encode(raw).decode()}))
    return out


#: An event whose name starts so is an exception message of that type.
_EXCEPTION = "exception:"


def _eventstream_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One ``application/vnd.amazon.eventstream`` message: its prelude (total and headers length)
    and the prelude's CRC32, string headers, the payload, and the CRC32 of all of it."""
    encoded = b"".join(
        bytes((len(name),)) + name + b"\x07" + len(value).to_bytes(2, "big") + value
        for name, value in ((k.encode(), v.encode()) for k, v in headers.items())
    )
    prelude = (16 + len(encoded) + len(payload)).to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def _bedrock_frame(ctx: _Ctx, i: int, event: str | None, data: Any) -> bytes:
    """An event (its payload padded with ``p``, as Bedrock evens out its sizes) or an exception."""
    name = event or "chunk"
    if name.startswith(_EXCEPTION):
        headers = {":exception-type": name.removeprefix(_EXCEPTION), ":content-type": "application/json",
                   ":message-type": "exception"}
        return _eventstream_message(headers, json.dumps(data, separators=(",", ":")).encode())
    size = len(json.dumps(data))
    padded = {**data, "p": _ALNUM[: max(1, 48 - size % 48)]}
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return _eventstream_message(headers, json.dumps(padded, separators=(",", ":"), ensure_ascii=False).encode())


_BODIES: dict[str, Callable[[_Ctx], dict[str, Any]]] = {
    _CHAT: _chat_body, _RESPONSES: _responses_body, _MESSAGES: _messages_body, _GENERATE: _gemini_body,
    _MISTRAL: _mistral_body, _OLLAMA: _ollama_body, _COHERE: _cohere_body, _CONVERSE: _converse_body,
    _INVOKE: _invoke_body,
}
_STREAMS: dict[str, Callable[[_Ctx], list[_Event | _Drop]]] = {
    _CHAT: _chat_stream, _RESPONSES: _responses_stream, _MESSAGES: _messages_stream, _STREAM_GENERATE: _gemini_stream,
    _MISTRAL: _mistral_stream, _OLLAMA: _ollama_stream, _COHERE: _cohere_stream, _CONVERSE_STREAM: _converse_stream,
    _INVOKE_STREAM: _invoke_stream,
}


def _final_usage(ctx: _Ctx, stream: bool) -> dict[str, Any] | None:
    """The last usage object a complete answer puts on the wire (a chat stream puts one only
    when asked with ``stream_options.include_usage``)."""
    if ctx.kind == _CHAT:
        opts = ctx.payload.get("stream_options")
        if stream and not (isinstance(opts, dict) and opts.get("include_usage") is True):
            return None
        return _chat_usage(ctx)
    if ctx.kind == _RESPONSES:
        return _responses_usage(ctx)
    if ctx.kind == _MESSAGES:
        return _anthropic_usage(ctx, ctx.output_tokens, delta=stream)
    if ctx.kind == _MISTRAL:
        return _mistral_usage(ctx)
    if ctx.kind == _OLLAMA:
        return _ollama_metrics(ctx)
    if ctx.kind == _COHERE:
        return _cohere_usage(ctx)
    if ctx.kind in (_CONVERSE, _CONVERSE_STREAM):
        return _converse_usage(ctx)
    if ctx.kind in _BEDROCK:
        if _invoke_shape(ctx.payload) == "anthropic":
            return _anthropic_usage(ctx, ctx.output_tokens, delta=True)
        return _llama_usage(ctx)
    return _gemini_usage(ctx)


# -- public server ------------------------------------------------------------


class FakeLLM:
    """Loopback server standing in for OpenAI / Anthropic / Gemini / Mistral / Ollama / Cohere / Bedrock endpoints.

    Reply precedence is: scripted replies (FIFO), then the ``reply`` callable,
    then a default ``"ok N"`` that makes request ordering visible in asserts.
    ``requests`` records every request as it arrived, ``responses`` what was
    answered (``ServedResponse``: ids, finish reasons, usage as reported).
    ``seed`` makes the ids reproducible: two servers with the same seed answer the
    same requests with the same ids (to compare a run with ctxguard and one without).

    usage: with FakeLLM() as llm: client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        reply: ReplyFn | None = None,
        seed: str | None = None,
    ) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            # A fake that answers anyone on the network is a liability.
            raise ValueError(f"FakeLLM binds to loopback only, not {host!r}")
        self._host = "127.0.0.1" if host == "localhost" else host
        self._port = port
        self._reply_fn = reply
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        # Seeds this server's ids: two servers never hand out the same one, unless seeded alike.
        self._nonce = seed if seed is not None else secrets.token_hex(8)
        self._serial = 0
        self.requests: list[RecordedRequest] = []
        self.responses: list[ServedResponse] = []
        #: The context window this server gives an Ollama request without ``options.num_ctx`` (its
        #: ``OLLAMA_CONTEXT_LENGTH``); set it to play a server configured otherwise.
        self.ollama_num_ctx = OLLAMA_NUM_CTX

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> FakeLLM:
        """Bind and serve in a background thread; returns self for chaining."""
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), self)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"FakeLLM:{server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Shut down, drop live connections and join; safe to call repeatedly."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.sever_connections()
        server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses ----------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port; only meaningful while started (port=0 picks a free one)."""
        if self._server is None:
            raise RuntimeError("FakeLLM is not running; call start() or use it as a context manager")
        return int(self._server.server_address[1])

    @property
    def origin(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI SDK ``base_url``; the SDK appends ``/chat/completions`` etc."""
        return f"{self.origin}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Anthropic SDK ``base_url``; that SDK appends ``/v1/messages`` itself."""
        return self.origin

    @property
    def gemini_base_url(self) -> str:
        """google-genai ``http_options={"base_url": ...}``; the SDK appends
        ``/v1beta/models/{model}:generateContent`` itself."""
        return self.origin

    @property
    def bedrock_endpoint_url(self) -> str:
        """boto3 ``client("bedrock-runtime", endpoint_url=...)``; botocore appends
        ``/model/{modelId}/converse`` (and the other operations) itself."""
        return self.origin

    @property
    def mistral_base_url(self) -> str:
        """mistralai ``Mistral(server_url=...)``; the SDK appends ``/v1/chat/completions`` itself.
        Mistral's path is OpenAI's: this prefix is what makes the fake answer as Mistral does."""
        return self.origin + _MISTRAL_PREFIX

    @property
    def ollama_host(self) -> str:
        """ollama ``Client(host=...)``; the SDK appends ``/api/chat`` itself."""
        return self.origin

    @property
    def cohere_base_url(self) -> str:
        """cohere ``ClientV2(base_url=...)``; the SDK appends ``/v2/chat`` itself."""
        return self.origin

    # -- scripting & inspection ----------------------------------------------

    def script(self, *replies: Reply | str) -> None:
        """Queue replies consumed one per endpoint request, in order."""
        with self._lock:
            self._script.extend(_coerce(r) for r in replies)

    def bodies(self, path_suffix: str | None = None) -> list[Any]:
        """Parsed JSON of recorded bodies; empty bodies (e.g. GETs) are skipped."""
        with self._lock:
            reqs = list(self.requests)
        out: list[Any] = []
        for r in reqs:
            route = r.path.split("?", 1)[0]
            if path_suffix is not None and not route.endswith(path_suffix):
                continue
            if r.body:
                out.append(r.json)
        return out

    def clear(self) -> None:
        """Forget recorded requests, answers and pending scripted replies between test phases."""
        with self._lock:
            self.requests.clear()
            self.responses.clear()
            self._script.clear()

    # -- used by the handler --------------------------------------------------

    def _record(self, req: RecordedRequest) -> tuple[int, int]:
        """Number the request: its place in ``requests`` and its serial for this server's life."""
        with self._lock:
            self.requests.append(req)
            self._serial += 1
            return len(self.requests), self._serial

    def _served(self, response: ServedResponse) -> None:
        with self._lock:
            self.responses.append(response)

    def _next_reply(self, req: RecordedRequest, n: int) -> Reply:
        with self._lock:
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            return scripted
        if self._reply_fn is not None:
            # Called outside the lock so a callable may inspect self.requests.
            return _coerce(self._reply_fn(req))
        return Reply(text=f"ok {n}")

    def __repr__(self) -> str:
        state = self.origin if self._server is not None else "stopped"
        return f"<FakeLLM {state} requests={len(self.requests)}>"
