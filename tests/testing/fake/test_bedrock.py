"""FakeLLM answers the real boto3 ``bedrock-runtime`` client the way Bedrock Runtime does.

Values are compared with what the server recorded having sent (``llm.responses``) and parsed by
botocore itself (which checks every event-stream message's CRCs), never with constants the fake
happens to produce.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.request
import zlib
from typing import Any

import pytest

pytest.importorskip("boto3", reason="boto3 is not installed (extra 'bedrock')")

import boto3
from botocore.config import Config
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from botocore.exceptions import ClientError

from ctxguard.testing.fake import FakeLLM, Reply

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
MESSAGES: list[Any] = [{"role": "user", "content": [{"text": "hi"}]}]
ANTHROPIC_BODY = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
                  "messages": [{"role": "user", "content": "hi"}]}
REQUEST_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-a[0-9a-f]{3}-[0-9a-f]{12}")
TOOL = {"toolSpec": {"name": "lookup", "description": "Look up an order by its id",
                     "inputSchema": {"json": {"type": "object", "properties": {"order": {"type": "string"}}}}}}


@pytest.fixture
def bedrock(llm: FakeLLM):
    client = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                          aws_access_key_id="test", aws_secret_access_key="test",
                          config=Config(retries={"total_max_attempts": 1}))
    yield client
    client.close()


def _raw(llm: FakeLLM, operation: str, payload: dict[str, Any], model: str = MODEL) -> tuple[Any, bytes]:
    url = f"{llm.bedrock_endpoint_url}/model/{urllib.request.quote(model, safe='')}/{operation}"
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers, resp.read()


def _messages(raw: bytes) -> list[tuple[dict[str, str], bytes]]:
    """An event stream decoded by hand: prelude, its CRC, headers, payload, the message CRC."""
    out, at = [], 0
    while at < len(raw):
        total, headers_length = int.from_bytes(raw[at:at + 4], "big"), int.from_bytes(raw[at + 4:at + 8], "big")
        message = raw[at:at + total]
        assert int.from_bytes(message[8:12], "big") == zlib.crc32(message[:8])
        assert int.from_bytes(message[-4:], "big") == zlib.crc32(message[:-4])
        headers, i = {}, 12
        while i < 12 + headers_length:
            name = message[i + 1:i + 1 + message[i]].decode()
            i += 1 + message[i]
            assert message[i] == 7  # a string value
            length = int.from_bytes(message[i + 1:i + 3], "big")
            headers[name] = message[i + 3:i + 3 + length].decode()
            i += 3 + length
        out.append((headers, message[12 + headers_length:-4]))
        at += total
    return out


def test_converse_parses_with_botocore(llm: FakeLLM, bedrock) -> None:
    llm.script("Hello there!")
    r = bedrock.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 64})
    served = llm.responses[0]
    assert r["output"]["message"] == {"role": "assistant", "content": [{"text": "Hello there!"}]}
    assert r["stopReason"] == "end_turn" and served.finish_reasons == ("end_turn",)
    assert r["usage"] == served.usage
    assert (r["usage"]["inputTokens"], r["usage"]["outputTokens"]) == (served.input_tokens, served.output_tokens)
    assert r["usage"]["totalTokens"] == served.input_tokens + served.output_tokens
    assert r["metrics"]["latencyMs"] > 0
    assert r["ResponseMetadata"]["RequestId"] == served.request_id and REQUEST_ID.fullmatch(served.request_id)
    assert served.model == MODEL  # from the path, URL-decoded
    assert llm.requests[0].path == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    assert llm.requests[0].headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=test/")


def test_usage_grows_with_the_input(llm: FakeLLM, bedrock) -> None:
    short = bedrock.converse(modelId=MODEL, messages=MESSAGES)["usage"]["inputTokens"]
    long = bedrock.converse(modelId=MODEL, system=[{"text": "You are the order assistant of Acme Shop."}],
                            messages=MESSAGES)["usage"]["inputTokens"]
    tools = bedrock.converse(modelId=MODEL, messages=MESSAGES, toolConfig={"tools": [TOOL]})["usage"]["inputTokens"]
    assert short < long and short < tools


@pytest.mark.parametrize(("finish", "stop"), [("stop", "end_turn"), ("length", "max_tokens"),
                                              ("content_filter", "content_filtered")])
def test_stop_reasons_are_converses(llm: FakeLLM, bedrock, finish: str, stop: str) -> None:
    llm.script(Reply(text="x", finish_reason=finish))
    assert bedrock.converse(modelId=MODEL, messages=MESSAGES)["stopReason"] == stop


def test_a_scripted_tool_call_is_a_tool_use_block(llm: FakeLLM, bedrock) -> None:
    llm.script(Reply(text="Let me look.", tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1"}}}]))
    r = bedrock.converse(modelId=MODEL, messages=MESSAGES, toolConfig={"tools": [TOOL]})
    text, use = r["output"]["message"]["content"]
    assert text == {"text": "Let me look."}
    assert use["toolUse"]["name"] == "lookup" and use["toolUse"]["input"] == {"order": "A-1"}
    assert re.fullmatch(r"tooluse_[A-Za-z0-9_-]{22}", use["toolUse"]["toolUseId"])
    assert (use["toolUse"]["toolUseId"],) == llm.responses[0].tool_call_ids
    assert r["stopReason"] == "tool_use"


def test_converse_stream_is_an_event_stream_botocore_reads(llm: FakeLLM, bedrock) -> None:
    llm.script(Reply(text="Hello there!", reasoning="The user greets.",
                     tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1"}}}]))
    events = list(bedrock.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"])
    served = llm.responses[0]
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    assert "contentBlockStart" in kinds  # a tool use opens its block
    deltas = [e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e]
    assert "".join(d.get("text", "") for d in deltas) == "Hello there!"
    assert "".join(d["reasoningContent"].get("text", "") for d in deltas if "reasoningContent" in d) == \
        "The user greets."
    assert json.loads("".join(d["toolUse"]["input"] for d in deltas if "toolUse" in d)) == {"order": "A-1"}
    assert events[-2]["messageStop"]["stopReason"] == "tool_use"
    assert events[-1]["metadata"]["usage"] == served.usage
    assert served.stream and served.output_tokens == events[-1]["metadata"]["usage"]["outputTokens"]


def test_the_event_stream_framing_and_its_crcs(llm: FakeLLM) -> None:
    llm.script("Hello there!")
    headers, raw = _raw(llm, "converse-stream", {"messages": MESSAGES})
    assert headers["Content-Type"] == "application/vnd.amazon.eventstream"
    assert headers["x-amzn-RequestId"] == llm.responses[0].request_id
    messages = _messages(raw)
    assert messages[0][0][":event-type"] == "messageStart"
    assert all(h[":content-type"] == "application/json" and h[":message-type"] == "event" for h, _ in messages)
    payloads = [json.loads(p) for _, p in messages]
    assert all(isinstance(p.pop("p"), str) for p in payloads)  # Bedrock's padding
    assert payloads[-1]["usage"] == llm.responses[0].usage
    # botocore checks the CRCs: a flipped byte in a payload fails the message CRC.
    broken = bytearray(raw)
    broken[len(raw) - 6] ^= 0xFF
    buffer = EventStreamBuffer()
    buffer.add_data(bytes(broken))
    with pytest.raises(ChecksumMismatch):
        list(buffer)


def test_a_stream_that_fails_midway_ends_with_an_exception_message(llm: FakeLLM) -> None:
    llm.script(Reply(text="Hello there!", stream_failure="error"))
    _, raw = _raw(llm, "converse-stream", {"messages": MESSAGES})
    headers, payload = _messages(raw)[-1]
    assert headers[":message-type"] == "exception"
    assert headers[":exception-type"] == "internalServerException"
    assert json.loads(payload)["message"]
    assert llm.responses[0].error_type == "InternalServerException" and llm.responses[0].usage is None


def test_invoke_answers_an_anthropic_body_as_anthropic_on_bedrock(llm: FakeLLM, bedrock) -> None:
    llm.script("Hello there!")
    r = bedrock.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY))
    answer = json.loads(r["body"].read())
    served = llm.responses[0]
    assert re.fullmatch(r"msg_bdrk_01[0-9A-Za-z]{22}", answer["id"]) and answer["id"] == served.id
    assert answer["model"] == "claude-sonnet-4-5-20250929"
    assert answer["content"] == [{"type": "text", "text": "Hello there!"}]
    assert answer["stop_reason"] == "end_turn" and answer["usage"] == served.usage
    headers = r["ResponseMetadata"]["HTTPHeaders"]
    assert int(headers["x-amzn-bedrock-input-token-count"]) == served.input_tokens == answer["usage"]["input_tokens"]
    assert int(headers["x-amzn-bedrock-output-token-count"]) == served.output_tokens
    assert r["contentType"] == "application/json"


def test_invoke_with_response_stream_chunks_carry_anthropic_events(llm: FakeLLM, bedrock) -> None:
    llm.script("Hello there!")
    r = bedrock.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY))
    events = [json.loads(e["chunk"]["bytes"]) for e in r["body"]]
    served = llm.responses[0]
    types = [e["type"] for e in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert "ping" not in types
    assert events[-2]["usage"]["output_tokens"] == served.output_tokens
    metrics = events[-1]["amazon-bedrock-invocationMetrics"]
    assert (metrics["inputTokenCount"], metrics["outputTokenCount"]) == (served.input_tokens, served.output_tokens)
    _, raw = _raw(llm, "invoke-with-response-stream", ANTHROPIC_BODY)
    headers, payload = _messages(raw)[0]
    assert headers[":event-type"] == "chunk"
    assert json.loads(base64.b64decode(json.loads(payload)["bytes"]))["type"] == "message_start"


def test_invoke_answers_a_llama_prompt_and_rejects_an_unknown_body(llm: FakeLLM, bedrock) -> None:
    r = bedrock.invoke_model(modelId="meta.llama3-3-70b-instruct-v1:0", body=json.dumps({"prompt": "hi"}))
    answer = json.loads(r["body"].read())
    assert answer["generation"] == "ok 1" and answer["stop_reason"] == "stop"
    assert answer["prompt_token_count"] == llm.responses[0].input_tokens
    with pytest.raises(ClientError) as info:
        bedrock.invoke_model(modelId=MODEL, body=json.dumps({"inputs": "hi"}))
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert info.value.response["Error"]["Message"].startswith("Malformed input request")


#: Each model body the fake takes besides Anthropic's and Llama's: model id, body, the answer's text and
#: stop reason, and where the answer holds them; where a stream's events hold the text.
BODIES = [
    ("amazon.nova-micro-v1:0", {"schemaVersion": "messages-v1", "messages": MESSAGES,
                                "inferenceConfig": {"max_new_tokens": 64}},
     lambda a: (a["output"]["message"]["content"][0]["text"], a["stopReason"]), "end_turn",
     lambda e: e.get("contentBlockDelta", {}).get("delta", {}).get("text", "")),
    ("amazon.titan-text-express-v1", {"inputText": "hi", "textGenerationConfig": {"maxTokenCount": 64}},
     lambda a: (a["results"][0]["outputText"], a["results"][0]["completionReason"]), "FINISH",
     lambda e: e["outputText"]),
    ("cohere.command-r-v1:0", {"message": "hi", "chat_history": [{"role": "USER", "message": "hello"}]},
     lambda a: (a["text"], a["finish_reason"]), "COMPLETE", lambda e: e.get("text", "")),
    ("mistral.mistral-7b-instruct-v0:2", {"prompt": "<s>[INST] hi [/INST]", "max_tokens": 64},
     lambda a: (a["outputs"][0]["text"], a["outputs"][0]["stop_reason"]), "stop", lambda e: e["outputs"][0]["text"]),
    ("cohere.command-text-v14", {"prompt": "hi", "max_tokens": 64},
     lambda a: (a["generations"][0]["text"], a["generations"][0]["finish_reason"]), "COMPLETE",
     lambda e: e.get("text", "")),
]


@pytest.mark.parametrize(("model", "body", "said", "stop", "streamed"), BODIES, ids=[b[0] for b in BODIES])
def test_invoke_answers_each_model_in_its_own_shape(llm: FakeLLM, bedrock, model, body, said, stop,
                                                    streamed) -> None:
    llm.script("Hello there!")
    r = bedrock.invoke_model(modelId=model, body=json.dumps(body))
    answer = json.loads(r["body"].read())
    served = llm.responses[0]
    assert said(answer) == ("Hello there!", stop)
    headers = r["ResponseMetadata"]["HTTPHeaders"]
    assert int(headers["x-amzn-bedrock-input-token-count"]) == served.input_tokens > 0
    assert int(headers["x-amzn-bedrock-output-token-count"]) == served.output_tokens > 0
    if "usage" in answer:
        assert answer["usage"]["inputTokens"] == served.input_tokens
    if "inputTextTokenCount" in answer:
        assert answer["inputTextTokenCount"] == served.input_tokens
    llm.script("Hello there!")
    events = [json.loads(e["chunk"]["bytes"]) for e in
              bedrock.invoke_model_with_response_stream(modelId=model, body=json.dumps(body))["body"]]
    metrics = events[-1].pop("amazon-bedrock-invocationMetrics")
    assert (metrics["inputTokenCount"], metrics["outputTokenCount"]) == (llm.responses[1].input_tokens,
                                                                        llm.responses[1].output_tokens)
    assert all("amazon-bedrock-invocationMetrics" not in e for e in events)
    assert "".join(streamed(e) for e in events) == "Hello there!"


@pytest.mark.parametrize(("model", "body"), [("amazon.titan-text-express-v1", {"prompt": "hi"}),
                                             ("amazon.nova-micro-v1:0", {"inputText": "hi"}),
                                             ("cohere.command-r-v1:0", {"prompt": "hi"})])
def test_a_body_the_model_does_not_take_is_refused(llm: FakeLLM, bedrock, model, body) -> None:
    with pytest.raises(ClientError) as info:
        bedrock.invoke_model(modelId=model, body=json.dumps(body))
    assert info.value.response["Error"]["Code"] == "ValidationException"


@pytest.mark.parametrize(("status", "code"), [(400, "ValidationException"), (404, "ResourceNotFoundException"),
                                              (429, "ThrottlingException"), (500, "InternalServerException")])
def test_errors_are_bedrocks_and_botocore_raises_its_client_error(llm: FakeLLM, bedrock, status, code) -> None:
    llm.script(Reply(status=status))
    with pytest.raises(ClientError) as info:
        bedrock.converse(modelId=MODEL, messages=MESSAGES)
    e = info.value
    assert type(e) is getattr(bedrock.exceptions, code)
    assert e.response["Error"]["Code"] == code == llm.responses[0].error_type
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert e.response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"].startswith(code + ":")
    assert e.response["Error"]["Message"]
