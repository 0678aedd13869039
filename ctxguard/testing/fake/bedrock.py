"""The Bedrock Runtime: ``POST /model/{modelId}/{operation}``, the model id URL-encoded in the path (an
inference profile's ``us.anthropic.claude-…-v1:0`` too). Two wire formats:

* ``CONVERSE`` (``converse``, ``converse-stream``): Bedrock's own body, no answer id, tool use ids
  ``tooluse_…``, ``latencyMs``; the stream's events ``messageStart``, per block its deltas and stop,
  ``messageStop``, ``metadata`` with the usage.
* ``INVOKE`` (``invoke``, ``invoke-with-response-stream``): the model's own body, answered in the
  model's own shape: Anthropic's Messages (``anthropic_messages``: ids ``msg_bdrk_01…``, Bedrock's
  usage, no service tier), Amazon Nova's (``output.message``, ``usage.inputTokens``), Titan Text's
  (``inputTextTokenCount``, ``results``), Cohere Command R's chat (``text``, ``finish_reason``), and a
  prompt string's as its vendor answers it (Meta Llama's ``generation``, Mistral's ``outputs``, Cohere
  Command's ``generations``; any other model's as Llama's); streamed as ``chunk`` events whose
  ``bytes`` are the model's own events (without Anthropic's pings), the last carrying
  ``amazon-bedrock-invocationMetrics``; a body the model does not take is refused before anything
  else, as Bedrock validates it against the model's schema.

Both: request ids are UUIDs (``x-amzn-RequestId``); compact JSON; streams are binary
``application/vnd.amazon.eventstream`` messages with their CRCs, each payload padded; a stream failing
midway ends with an exception message. Errors: ``{"message": …}`` and the code in the
``x-amzn-ErrorType`` header, which botocore turns into a ClientError.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
import zlib
from collections.abc import Mapping
from functools import partial
from typing import Any

from . import anthropic_messages, media
from .tokens import Reading, messages_tokens, read_tokens, schemas_tokens, text_tokens
from .wire import ALNUM, COMPACT, HEX, Event, Events, Exchange, Framing, Headers, WireFormat, phrase, split

#: What the model reads of a Converse message (``tokens.Reading``): not its tool ids, result statuses,
#: reasoning signatures; a ``toolUse`` input is read keys and all.
READING = Reading(unread="toolUseId status signature", media="image", structured="input")


FAILURE_STATUS = 500
# status -> (error code, message).
ERRORS: dict[int, tuple[str, str]] = {
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
_NAMESPACE = "http://internal.amazon.com/coral/com.amazon.bedrock/"
# Converse's stop reasons (``end_turn``, ``tool_use``, ``max_tokens``, ``stop_sequence``,
# ``guardrail_intervened``, ``content_filtered``, ``model_context_window_exceeded``).
_STOP_REASONS: dict[str, str] = {
    "stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
    "content_filter": "content_filtered",
}
_MALFORMED = ("Malformed input request: #: subject must not be valid against schema "
              '{"required":["messages"]}#: required key [messages] not found, '
              "please reformat your input and try again.")
#: An event whose name starts so is an exception message of that type.
_EXCEPTION = "exception:"


def _model_in_path(route: str) -> str:
    return urllib.parse.unquote(route.split("/")[2])


def _request_id(ex: Exchange) -> str:
    raw = ex.ident("request", HEX, 32)
    return f"{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-a{raw[17:20]}-{raw[20:]}"


def error(ex: Exchange, status: int, message: str | None) -> tuple[dict[str, Any], str]:
    code, default = ERRORS.get(status, ("InternalServerException" if status >= 500 else "ValidationException",
                                        phrase(status)))
    return {"message": message or default}, code


def _headers(ex: Exchange, status: int, error_type: str | None) -> Headers:
    headers = [("x-amzn-RequestId", ex.request_id)]
    if error_type is not None:
        headers.append(("x-amzn-ErrorType", f"{error_type}:{_NAMESPACE}"))
    return headers


def _latency_ms(ex: Exchange) -> int:
    """A plausible ``latencyMs``, growing with what is said."""
    return 180 + 12 * ex.output_tokens


def _exception(ex: Exchange) -> Event:
    """A stream's failure: an exception message (``:message-type: exception``) and the end."""
    body, code = error(ex, FAILURE_STATUS, None)
    return _EXCEPTION + code[0].lower() + code[1:], body


def eventstream_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One ``application/vnd.amazon.eventstream`` message: its prelude (total and headers length)
    and the prelude's CRC32, string headers, the payload, and the CRC32 of all of it."""
    encoded = b"".join(
        bytes((len(name),)) + name + b"\x07" + len(value).to_bytes(2, "big") + value
        for name, value in ((k.encode(), v.encode()) for k, v in headers.items())
    )
    prelude = (16 + len(encoded) + len(payload)).to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def _frame(event: str | None, data: Any) -> bytes:
    """An event (its payload padded with ``p``, as Bedrock evens out its sizes) or an exception."""
    name = event or "chunk"
    if name.startswith(_EXCEPTION):
        headers = {":exception-type": name.removeprefix(_EXCEPTION), ":content-type": "application/json",
                   ":message-type": "exception"}
        return eventstream_message(headers, json.dumps(data, separators=(",", ":")).encode())
    size = len(json.dumps(data))
    padded = {**data, "p": ALNUM[: max(1, 48 - size % 48)]}
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return eventstream_message(headers, json.dumps(padded, separators=(",", ":"), ensure_ascii=False).encode())


_EVENTSTREAM = Framing("application/vnd.amazon.eventstream", _frame)

# -- Converse ------------------------------------------------------------------------------------------


def _converse_tokens(ex: Exchange) -> int:
    p = ex.payload
    config = p.get("toolConfig")
    tools = config.get("tools") if isinstance(config, dict) else None
    schemas = schemas_tokens([t for t in tools if "toolSpec" in t] if isinstance(tools, list) else None)
    return anthropic_messages.claude_prompt(ex.requested_model, p.get("system"), p.get("messages"), READING, schemas)


def _converse_stop(ex: Exchange) -> str:
    if ex.reply.refusal:
        return "content_filtered"
    return _STOP_REASONS.get(ex.finish, ex.finish)


def _converse_usage(ex: Exchange) -> dict[str, Any]:
    """``inputTokens`` excludes what was read from the cache and written to it; ``totalTokens``
    counts everything."""
    usage: dict[str, Any] = {
        "inputTokens": ex.input_tokens - ex.reply.cached_tokens - ex.reply.cache_write_tokens,
        "outputTokens": ex.output_tokens,
        "totalTokens": ex.input_tokens + ex.output_tokens,
    }
    if ex.reply.cached_tokens or ex.reply.cache_write_tokens:
        usage["cacheReadInputTokens"] = ex.reply.cached_tokens
        usage["cacheWriteInputTokens"] = ex.reply.cache_write_tokens
    return usage


def _converse_blocks(ex: Exchange) -> list[dict[str, Any]]:
    reply = ex.reply
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:
        signed = {"text": reply.reasoning, "signature": anthropic_messages.signature(ex)}
        blocks.append({"reasoningContent": {"reasoningText": signed}})
    if reply.text or reply.refusal or not ex.calls:
        blocks.append({"text": reply.text or reply.refusal})
    blocks.extend({"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.input}} for c in ex.calls)
    return blocks


def _converse_body(ex: Exchange) -> dict[str, Any]:
    return {
        "metrics": {"latencyMs": _latency_ms(ex)},
        "output": {"message": {"content": _converse_blocks(ex), "role": "assistant"}},
        "stopReason": _converse_stop(ex),
        "usage": _converse_usage(ex),
    }


def _converse_stream(ex: Exchange) -> list[Event | None]:
    """messageStart, per block its deltas (a tool use opened by contentBlockStart) and its stop,
    messageStop with the stop reason, then metadata with the usage."""
    out = Events()
    out.add("messageStart", {"role": "assistant"})
    for index, block in enumerate(_converse_blocks(ex)):
        if "reasoningContent" in block:
            reasoning = block["reasoningContent"]["reasoningText"]
            for piece in split(reasoning["text"]):
                out.add("contentBlockDelta", {"contentBlockIndex": index,
                                              "delta": {"reasoningContent": {"text": piece}}}, delta=True)
            out.add("contentBlockDelta", {"contentBlockIndex": index,
                                          "delta": {"reasoningContent": {"signature": reasoning["signature"]}}})
        elif "text" in block:
            for piece in split(block["text"], ex.reply.deltas):
                out.add("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}, delta=True)
        else:
            use = block["toolUse"]
            out.add("contentBlockStart", {"contentBlockIndex": index,
                                          "start": {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}})
            for piece in split(json.dumps(use["input"]), 2):
                out.add("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}},
                        delta=True)
        out.add("contentBlockStop", {"contentBlockIndex": index})
    out.add("messageStop", {"stopReason": _converse_stop(ex)})
    out.add("metadata", {"usage": _converse_usage(ex), "metrics": {"latencyMs": _latency_ms(ex)}})
    return out.cut(ex, [_exception(ex)])


CONVERSE = WireFormat(
    name="bedrock.converse",
    path=re.compile(r"/model/[^/]+/(converse|converse-stream)"),
    streamed=lambda ex: ex.route.endswith("/converse-stream"),
    prompt_tokens=_converse_tokens,
    response_id=lambda ex: None,
    request_id=_request_id,
    call_id=lambda ex, i, name: "tooluse_" + ex.ident("tool", ALNUM + "-_", 22, i),
    finish=_converse_stop,
    usage=_converse_usage,
    body=_converse_body,
    stream=_converse_stream,
    error=error,
    failure_status=FAILURE_STATUS,
    json=COMPACT,
    framing=_EVENTSTREAM,
    headers=_headers,
    model_in_path=_model_in_path,
    address=("bedrock_endpoint_url", ""),
)

# -- InvokeModel ---------------------------------------------------------------------------------------
#
# The model's own body, answered in the model's own shape: Anthropic's Messages, Amazon Nova's (Converse's
# shape, ``messages-v1``), Titan Text's ``inputText``, Cohere Command R's chat ``message``, or a prompt
# string answered as its vendor does (Meta Llama, Mistral, Cohere Command; any other model as Llama, the
# architecture most imported models have).


def _shape(ex: Exchange) -> str | None:
    """Which model body an ``invoke`` carries (``_BODIES``' keys), or None for one Bedrock refuses."""
    payload, model = ex.payload, ex.requested_model.lower()
    version = payload.get("anthropic_version")
    if isinstance(version, str) and version.startswith("bedrock-") and isinstance(payload.get("messages"), list):
        return "anthropic"
    if "amazon.nova" in model:
        return "nova" if isinstance(payload.get("messages"), list) else None
    if "amazon.titan" in model:
        return "titan" if isinstance(payload.get("inputText"), str) else None
    if "cohere.command-r" in model:
        return "cohere_chat" if isinstance(payload.get("message"), str) else None
    if not isinstance(payload.get("prompt"), str):
        return None
    return "mistral" if "mistral." in model else "cohere" if "cohere." in model else "llama"


def _claude(ex: Exchange) -> bool:
    return _shape(ex) == "anthropic"


def _claude_name(model: str) -> str:
    """The name Anthropic's own answer gives a Bedrock model: ``us.anthropic.claude-x-v1:0`` -> ``claude-x``."""
    name = model.rpartition("anthropic.")[2]
    return re.sub(r"-v\d+(?::\d+)?$", "", name)


def _said(ex: Exchange) -> str:
    return ex.reply.text or ex.reply.refusal


def _nova_tokens(ex: Exchange) -> int:
    p = ex.payload
    config = p.get("toolConfig")
    tools = config.get("tools") if isinstance(config, dict) else None
    return read_tokens(p.get("system"), READING) + messages_tokens(
        p.get("messages"), READING, partial(media.anthropic, ex.model)) \
        + schemas_tokens([t for t in tools if "toolSpec" in t] if isinstance(tools, list) else None)


def _cohere_chat_tokens(ex: Exchange) -> int:
    p = ex.payload
    return text_tokens(str(p.get("preamble") or "")) + read_tokens(p.get("chat_history"), READING) + text_tokens(
        str(p.get("message")))


def _invoke_tokens(ex: Exchange) -> int:
    shape = _shape(ex)
    if shape == "anthropic":
        return anthropic_messages.prompt_tokens(ex)
    if shape == "nova":
        return _nova_tokens(ex)
    if shape == "titan":
        return text_tokens(str(ex.payload.get("inputText")))
    if shape == "cohere_chat":
        return _cohere_chat_tokens(ex)
    return text_tokens(str(ex.payload.get("prompt") or ""))


def _length(ex: Exchange) -> bool:
    return ex.finish == "length"


def _llama_usage(ex: Exchange) -> dict[str, Any]:
    return {"prompt_token_count": ex.input_tokens, "generation_token_count": ex.output_tokens}


def _nova_usage(ex: Exchange) -> dict[str, Any]:
    return {"inputTokens": ex.input_tokens, "outputTokens": ex.output_tokens,
            "totalTokens": ex.input_tokens + ex.output_tokens, "cacheReadInputTokenCount": 0,
            "cacheWriteInputTokenCount": 0}


def _invoke_usage(ex: Exchange) -> dict[str, Any]:
    shape = _shape(ex)
    if shape == "anthropic":
        return anthropic_messages.usage_of(ex, ex.output_tokens, delta=True)
    if shape == "nova":
        return _nova_usage(ex)
    if shape == "titan":
        return {"inputTextTokenCount": ex.input_tokens, "tokenCount": ex.output_tokens}
    return _llama_usage(ex)


def _invoke_finish(ex: Exchange) -> str:
    """The stop reason in the model's own words."""
    shape = _shape(ex)
    if shape == "anthropic":
        return anthropic_messages.stop_reason(ex)
    if shape == "nova":
        return _converse_stop(ex)
    if shape == "titan":
        return "LENGTH" if _length(ex) else "FINISH"
    if shape in ("cohere", "cohere_chat"):
        return "MAX_TOKENS" if _length(ex) else "COMPLETE"
    return "length" if _length(ex) else "stop"


def _invoke_body(ex: Exchange) -> dict[str, Any]:
    shape, said, finish = _shape(ex), _said(ex), _invoke_finish(ex)
    if shape == "anthropic":
        return {**anthropic_messages.message(ex, _claude_name(ex.model)), "usage": _invoke_usage(ex)}
    if shape == "nova":
        return {"output": {"message": {"role": "assistant", "content": _converse_blocks(ex)}},
                "stopReason": finish, "usage": _nova_usage(ex)}
    if shape == "titan":
        return {"inputTextTokenCount": ex.input_tokens, "results": [
            {"tokenCount": ex.output_tokens, "outputText": said, "completionReason": finish}]}
    if shape == "cohere_chat":
        return {"response_id": ex.ident("id", HEX, 32), "text": said, "generation_id": ex.ident("generation", HEX, 32),
                "chat_history": [{"role": "USER", "message": ex.payload["message"]}, {"role": "CHATBOT",
                                                                                      "message": said}],
                "finish_reason": finish}
    if shape == "mistral":
        return {"outputs": [{"text": said, "stop_reason": finish}]}
    if shape == "cohere":
        return {"id": ex.ident("id", HEX, 32), "prompt": ex.payload["prompt"], "generations": [
            {"id": ex.ident("generation", HEX, 32), "text": said, "finish_reason": finish}]}
    return {"generation": said, **_llama_usage(ex), "stop_reason": finish}


def _invocation_metrics(ex: Exchange) -> dict[str, Any]:
    return {"inputTokenCount": ex.input_tokens, "outputTokenCount": ex.output_tokens,
            "invocationLatency": _latency_ms(ex), "firstByteLatency": 150}


def _model_events(ex: Exchange) -> list[dict[str, Any]]:
    """A model's own stream events (not Anthropic's), piece by piece; the last one ends it."""
    shape, finish = _shape(ex), _invoke_finish(ex)
    pieces = split(_said(ex), ex.reply.deltas) or [""]
    if shape == "nova":
        return [{"messageStart": {"role": "assistant"}},
                *({"contentBlockDelta": {"delta": {"text": piece}, "contentBlockIndex": 0}} for piece in pieces),
                {"contentBlockStop": {"contentBlockIndex": 0}}, {"messageStop": {"stopReason": finish}},
                {"metadata": {"usage": {"inputTokens": ex.input_tokens, "outputTokens": ex.output_tokens}}}]
    if shape == "titan":
        return [*({"outputText": piece, "index": 0, "totalOutputTextTokenCount": i + 1, "completionReason": None,
                   "inputTextTokenCount": ex.input_tokens if i == 0 else None} for i, piece in enumerate(pieces)),
                {"outputText": "", "index": 0, "totalOutputTextTokenCount": ex.output_tokens,
                 "completionReason": finish}]
    if shape in ("cohere", "cohere_chat"):
        return [*({"is_finished": False, "event_type": "text-generation", "text": piece} for piece in pieces),
                {"is_finished": True, "event_type": "stream-end", "finish_reason": finish}]
    if shape == "mistral":
        return [*({"outputs": [{"text": piece, "stop_reason": None}]} for piece in pieces),
                {"outputs": [{"text": "", "stop_reason": finish}]}]
    return [*({"generation": piece, "prompt_token_count": ex.input_tokens if i == 0 else None,
               "generation_token_count": i + 1, "stop_reason": None} for i, piece in enumerate(pieces)),
            {"generation": "", "prompt_token_count": None, "generation_token_count": ex.output_tokens,
             "stop_reason": finish}]


def _invoke_stream(ex: Exchange) -> list[Event | None]:
    """``chunk`` events whose ``bytes`` are the model's own stream events (Anthropic's, without its
    pings; any other model's own), the last one carrying ``amazon-bedrock-invocationMetrics``."""
    events: list[Event | None]
    if _claude(ex):
        # Failing midway, an exception message in place of Anthropic's ``error`` event.
        cut = anthropic_messages.events(ex, _claude_name(ex.model)).cut(ex, [("error", None)])
        events = [e for e in cut if e is None or e[0] != "ping"]
    else:
        own: list[Event | None] = [(None, event) for event in _model_events(ex)]
        if ex.reply.stream_failure == "drop":
            events = [own[0], None]
        elif ex.reply.stream_failure == "error":
            events = [own[0], ("error", None)]
        else:
            events = own
    out: list[Event | None] = []
    for index, event in enumerate(events):
        if event is None:
            out.append(event)
        elif event[0] == "error":  # the service failed midway: an exception message, not the model's event
            out.append(_exception(ex))
        else:
            data = dict(event[1])
            if data.get("type") == "message_stop" or (not _claude(ex) and index == len(events) - 1):
                data["amazon-bedrock-invocationMetrics"] = _invocation_metrics(ex)
            raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
            out.append(("chunk", {"bytes": base64.b64encode(raw).decode()}))
    return out


def _invoke_headers(ex: Exchange, status: int, error_type: str | None) -> Headers:
    headers = _headers(ex, status, error_type)
    if error_type is not None:
        return headers
    if ex.stream:
        return [*headers, ("X-Amzn-Bedrock-Content-Type", "application/json")]
    if status == 200:  # the model's own counts, whatever its body
        return [*headers, ("X-Amzn-Bedrock-Invocation-Latency", str(_latency_ms(ex))),
                ("X-Amzn-Bedrock-Output-Token-Count", str(ex.output_tokens)),
                ("X-Amzn-Bedrock-Input-Token-Count", str(ex.input_tokens))]
    return headers


INVOKE = WireFormat(
    name="bedrock.invoke_model",
    path=re.compile(r"/model/[^/]+/(invoke|invoke-with-response-stream)"),
    streamed=lambda ex: ex.route.endswith("/invoke-with-response-stream"),
    prompt_tokens=_invoke_tokens,
    response_id=lambda ex: "msg_bdrk_01" + ex.ident("id", anthropic_messages.BASE62, 22),
    request_id=_request_id,
    call_id=lambda ex, i, name: "toolu_bdrk_01" + ex.ident("tool", anthropic_messages.BASE62, 22, i),
    finish=_invoke_finish,
    usage=_invoke_usage,
    body=_invoke_body,
    stream=_invoke_stream,
    error=error,
    failure_status=FAILURE_STATUS,
    json=COMPACT,
    framing=_EVENTSTREAM,
    headers=_invoke_headers,
    model_in_path=_model_in_path,
    refuse=lambda ex: None if _shape(ex) is not None else error(ex, 400, _MALFORMED),
)
