"""AWS Bedrock Runtime through boto3, driven for real over loopback HTTP: what ctxguard records is what arrived."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("boto3", reason="boto3 is not installed (extra 'bedrock')")

import boto3
import botocore.client
import botocore.httpsession
from botocore.config import Config
from botocore.eventstream import EventStream
from botocore.exceptions import ClientError, EventStreamError
from botocore.model import OperationNotFoundError
from botocore.response import StreamingBody

import ctxguard
from ctxguard import Budget, Policy
from ctxguard.capture import read_capture
from ctxguard.digest import Digester
from ctxguard.offline import CAPTURED_PROVIDERS, Checker
from ctxguard.testing import FakeLLM, Reply, record
from tests.conftest import KEY, guard_spans, message_digest, only_guard_span, prose

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
SYSTEM = "You are the order assistant of Acme Shop."
HISTORY = [{"role": "user", "content": [{"text": "hi"}]}, {"role": "assistant", "content": [{"text": "hello"}]},
           {"role": "user", "content": [{"text": "where is my order A-1041?"}]}]
ANTHROPIC_BODY = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 300, "system": SYSTEM,
                  "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                               {"role": "user", "content": "where is my order A-1041?"}]}
IMPORTED = "arn:aws:bedrock:us-east-1:123456789012:imported-model/k7xo8ypw1vzq"
TOOL = {"toolSpec": {"name": "lookup", "description": "Find an order by its id",
                     "inputSchema": {"json": {"type": "object", "properties": {"order": {"type": "string"}}}}}}


def bedrock_client(llm: FakeLLM):
    return boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                        aws_access_key_id="test", aws_secret_access_key="test",
                        config=Config(retries={"total_max_attempts": 1}))


@pytest.fixture
def bedrock(llm):
    client = bedrock_client(llm)
    yield client
    client.close()


def wire_digest(body: bytes) -> str:
    return Digester(KEY).bytes(body)


def converse_digest(message: dict) -> str:
    return message_digest(message["role"], "\n".join(block["text"] for block in message["content"]))


def test_converse_span_matches_the_body_that_arrived(harness, llm, bedrock):
    harness.start(mode="observe")
    with ctxguard.conversation("order-41"):
        reply = bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}, {"cachePoint": {"type": "default"}}],
                                 messages=HISTORY, inferenceConfig={"maxTokens": 300})
    assert reply["output"]["message"]["content"] == [{"text": "ok 1"}]
    request = llm.requests[0]
    sent = request.json
    served = llm.responses[0]
    assert request.path == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    span = only_guard_span(harness)
    a = span.attributes
    assert span.name == f"chat {MODEL}"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "aws.bedrock"
    assert a["gen_ai.request.model"] == served.model == MODEL
    assert a["gen_ai.request.max_tokens"] == sent["inferenceConfig"]["maxTokens"] == 300
    assert a["gen_ai.conversation.id"] == "order-41"
    assert a["ctxguard.payload.messages"] == len(sent["messages"]) + 1 == 4
    assert list(a["ctxguard.message.roles"]) == ["system"] + [m["role"] for m in sent["messages"]]
    assert list(a["ctxguard.message.hashes"]) == [message_digest("system", sent["system"][0]["text"])] + [
        converse_digest(m) for m in sent["messages"]]
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.wire.hash"] == wire_digest(request.body)
    assert "gen_ai.response.id" not in a and served.id is None  # a Converse answer has no id
    assert list(a["gen_ai.response.finish_reasons"]) == [reply["stopReason"]] == list(served.finish_reasons)
    assert a["gen_ai.usage.input_tokens"] == reply["usage"]["inputTokens"] == served.input_tokens > 0
    assert a["gen_ai.usage.output_tokens"] == reply["usage"]["outputTokens"] == served.output_tokens > 0
    assert list(a["ctxguard.violations"]) == []
    assert harness.metric("ctxguard_calls_total", provider="aws.bedrock", operation="chat") == 1
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


def test_converse_cache_reads_count_as_input(harness, llm, bedrock):
    harness.start(mode="observe")
    llm.script(Reply(text="ok", input_tokens=900, cached_tokens=800))
    reply = bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY)
    assert reply["usage"]["inputTokens"] == 100 and reply["usage"]["cacheReadInputTokens"] == 800
    assert only_guard_span(harness).attributes["gen_ai.usage.input_tokens"] == 900


def _converse_events(client, **kwargs) -> list[dict]:
    response = client.converse_stream(**kwargs)
    stream = response["stream"]
    assert isinstance(stream, EventStream)
    return [event for event in stream]


def test_converse_stream_events_identical_to_uninstrumented_and_span_complete(harness, llm, bedrock):
    kwargs = dict(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY, inferenceConfig={"maxTokens": 64})
    llm.script("the parcel is in Pune")
    plain = _converse_events(bedrock, **kwargs)
    harness.start(mode="observe")
    llm.script("the parcel is in Pune")
    guarded = _converse_events(bedrock, **kwargs)
    assert guarded == plain
    assert next(iter(guarded[0])) == "messageStart" and "metadata" in guarded[-1]
    assert "".join(e["contentBlockDelta"]["delta"]["text"] for e in guarded if "contentBlockDelta" in e) == \
        "the parcel is in Pune"
    served = llm.responses[-1]
    a = only_guard_span(harness).attributes
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[-1].body)
    assert list(a["gen_ai.response.finish_reasons"]) == ["end_turn"] == list(served.finish_reasons)
    assert a["gen_ai.usage.input_tokens"] == served.input_tokens == guarded[-1]["metadata"]["usage"]["inputTokens"]
    assert a["gen_ai.usage.output_tokens"] == served.output_tokens > 0
    assert "ctxguard.stream.abandoned" not in a


@pytest.mark.parametrize("api", ["converse_stream", "invoke_model_with_response_stream"])
def test_a_stream_ends_its_span_as_its_last_event_passes(harness, llm, bedrock, api):
    """Converse's ``metadata`` and Anthropic's ``message_stop`` (with Bedrock's counts) are the last
    events: the call ends as they pass, before the stream is exhausted (botocore's instrumentation,
    above ctxguard, ends the span ctxguard adopted right there)."""
    harness.start(mode="observe")
    if api == "converse_stream":
        stream = bedrock.converse_stream(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY)["stream"]
    else:
        stream = bedrock.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY))["body"]
    for event in stream:
        if "metadata" in event or b'"message_stop"' in event.get("chunk", {}).get("bytes", b""):
            a = only_guard_span(harness).attributes
            break
    served = llm.responses[0]
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        served.input_tokens, served.output_tokens)
    assert "ctxguard.stream.abandoned" not in a


def test_converse_stream_abandoned_after_one_event_ends_its_span_abandoned(harness, llm, bedrock):
    harness.start(mode="observe")
    llm.script("word " * 500, "word " * 500)
    response = bedrock.converse_stream(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY)
    # Counted as the request left: a stream's end may never come.
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1
    for event in response["stream"]:
        assert "messageStart" in event
        break
    assert guard_spans(harness) == []
    del response, event
    gc.collect()
    assert only_guard_span(harness).attributes["ctxguard.stream.abandoned"] is True
    harness.exporter.clear()
    response = bedrock.converse_stream(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY)
    next(iter(response["stream"]))
    response["stream"].close()
    assert only_guard_span(harness).attributes["ctxguard.stream.abandoned"] is True


def test_a_stream_bedrock_breaks_off_raises_the_sdks_error_and_ends_the_span_in_error(harness, llm, bedrock):
    harness.start(mode="observe")
    llm.script(Reply(text="the parcel is in Pune", stream_failure="error"))
    response = bedrock.converse_stream(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY)
    with pytest.raises(EventStreamError) as info:
        list(response["stream"])
    assert info.value.response["Error"]["Code"] == "internalServerException"
    span = only_guard_span(harness)
    assert span.attributes["error.type"] == "EventStreamError"
    assert span.status.status_code.name == "ERROR"


def test_invoke_model_with_an_anthropic_body_is_read_by_the_anthropic_translation(harness, llm, bedrock):
    harness.start(mode="observe")
    llm.script("the parcel is in Pune")
    response = bedrock.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY))
    body = response["body"]
    assert type(body) is StreamingBody  # the SDK's own object, read by the app
    assert guard_spans(harness) == []  # the answer is still unread
    answer = json.loads(body.read())
    assert answer["content"] == [{"type": "text", "text": "the parcel is in Pune"}]
    request, served = llm.requests[0], llm.responses[0]
    assert request.path.endswith("/invoke") and request.json == ANTHROPIC_BODY
    a = only_guard_span(harness).attributes
    assert a["gen_ai.provider.name"] == "aws.bedrock"
    assert a["gen_ai.request.model"] == MODEL
    assert a["gen_ai.request.max_tokens"] == 300
    assert list(a["ctxguard.message.roles"]) == ["system", "user", "assistant", "user"]
    assert list(a["ctxguard.message.hashes"]) == [message_digest("system", SYSTEM)] + [
        message_digest(m["role"], m["content"]) for m in ANTHROPIC_BODY["messages"]]
    assert a["ctxguard.wire.hash"] == wire_digest(request.body)
    assert a["gen_ai.response.id"] == answer["id"] == served.id
    assert a["gen_ai.response.model"] == answer["model"] == "claude-sonnet-4-5-20250929"
    assert list(a["gen_ai.response.finish_reasons"]) == ["end_turn"]
    assert a["gen_ai.usage.input_tokens"] == answer["usage"]["input_tokens"] == served.input_tokens
    assert a["gen_ai.usage.output_tokens"] == answer["usage"]["output_tokens"] == served.output_tokens
    assert list(a["ctxguard.violations"]) == []


def test_invoke_model_body_read_in_chunks_or_never(harness, llm, bedrock):
    harness.start(mode="observe")
    response = bedrock.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY))
    chunks = list(response["body"].iter_chunks(16))
    assert len(chunks) > 2 and json.loads(b"".join(chunks))["id"] == llm.responses[0].id
    assert only_guard_span(harness).attributes["gen_ai.response.id"] == llm.responses[0].id
    harness.exporter.clear()
    response = bedrock.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY))
    length = int(response["ResponseMetadata"]["HTTPHeaders"]["content-length"])
    json.loads(response["body"].read(length))  # exactly the body: nothing left, so it has ended
    assert only_guard_span(harness).attributes["gen_ai.response.id"] == llm.responses[1].id
    harness.exporter.clear()
    response = bedrock.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY).encode())
    del response
    gc.collect()
    a = only_guard_span(harness).attributes
    assert "gen_ai.response.id" not in a  # never read: no answer, but the span ended
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[2].body)


def test_invoke_model_with_response_stream_events_unchanged_and_span_complete(harness, llm, bedrock):
    llm.script("the parcel is in Pune")
    plain = [json.loads(e["chunk"]["bytes"]) for e in
             bedrock.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY))["body"]]
    harness.start(mode="observe")
    llm.script("the parcel is in Pune")
    response = bedrock.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY))
    assert isinstance(response["body"], EventStream)
    guarded = [json.loads(e["chunk"]["bytes"]) for e in response["body"]]
    for events in (plain, guarded):
        events[0]["message"].pop("id")
        events[-1].pop("amazon-bedrock-invocationMetrics")
    assert guarded == plain
    served = llm.responses[-1]
    a = only_guard_span(harness).attributes
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[-1].body)
    assert a["gen_ai.response.id"] == served.id
    assert a["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    assert list(a["gen_ai.response.finish_reasons"]) == ["end_turn"]
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        served.input_tokens, served.output_tokens)


def test_an_invoke_body_of_another_shape_skips_every_check_saying_why(harness, llm, bedrock):
    harness.start(mode="observe")
    # A model imported into Bedrock takes its own architecture's body: ctxguard does not know which.
    body = {"prompt": "where is my order A-1041?", "max_tokens": 128}
    response = bedrock.invoke_model(modelId=IMPORTED, body=json.dumps(body))
    assert json.loads(response["body"].read())["generation"] == "ok 1"
    a = only_guard_span(harness).attributes
    skipped = list(a["ctxguard.checks.skipped"])
    assert skipped and all("whose format is not read here" in s for s in skipped)
    assert {s.split(":")[0] for s in skipped} >= {"system_at_head", "tool_pairs_intact", "payload_under_budget"}
    assert list(a["ctxguard.violations"]) == []
    assert a["ctxguard.payload.messages"] == 0
    # An unread body has no token count (before: 3, its reply priming), nor a sample in the
    # histogram, nor a lesson for the calibration.
    assert "ctxguard.payload.tokens" not in a and "ctxguard.payload.tokens_source" not in a
    assert harness.metric("ctxguard_payload_tokens_count", provider="aws.bedrock") == 0
    for _ in range(5):  # what a model's calibration learns from (it needs 5 reports)
        bedrock.invoke_model(modelId=IMPORTED, body=json.dumps(body))["body"].read()
    assert harness.guard.calibration.factor(IMPORTED) is None
    # Bedrock's own counts (its response headers) serve for any model.
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        llm.responses[0].input_tokens, llm.responses[0].output_tokens)


def _tool_history(cut: bool) -> list[dict]:
    call = {"role": "assistant", "content": [{"text": "Let me look."}, {"toolUse": {
        "toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": "lookup", "input": {"order": "A-1041"}}}]}
    result = {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                                                          "content": [{"json": {"status": "shipped"}}]}}]}
    history = [HISTORY[2], call, result, {"role": "assistant", "content": [{"text": "It shipped."}]},
               {"role": "user", "content": [{"text": "thanks"}]}]
    return [history[0], *history[2:]] if cut else history


def test_tool_exchanges_are_paired_and_a_cut_one_fails_tool_pairs_intact(harness, llm, bedrock):
    harness.start(mode="observe")
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}}]))
    asked = bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=[HISTORY[2]],
                             toolConfig={"tools": [TOOL, {"cachePoint": {"type": "default"}}]})
    assert asked["stopReason"] == "tool_use"
    use = asked["output"]["message"]["content"][0]["toolUse"]
    assert use["toolUseId"] == llm.responses[0].tool_call_ids[0] and use["input"] == {"order": "A-1041"}
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=_tool_history(cut=False),
                     toolConfig={"tools": [TOOL]})
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=_tool_history(cut=True),
                     toolConfig={"tools": [TOOL]})
    first, intact, cut = (s.attributes for s in guard_spans(harness))
    assert list(first["ctxguard.violations"]) == list(intact["ctxguard.violations"]) == []
    assert list(cut["ctxguard.violations"]) == ["tool_pairs_intact"]
    assert intact["ctxguard.message.hashes"][2] == message_digest(
        "assistant", 'Let me look.\nlookup {"order": "A-1041"}', ("id:tool_call=tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",))
    assert intact["ctxguard.message.hashes"][3] == message_digest(
        "user", '{"status": "shipped"}', ("id:tool_result=tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",))
    assert harness.metric("ctxguard_checks_total", check="tool_pairs_intact", outcome="fail") == 1


def test_tool_specs_and_the_reserved_output_are_counted_and_cache_points_are_not(harness, llm, bedrock):
    from ctxguard.providers.anthropic import tool_prompt_tokens

    harness.start(mode="observe", policy=Policy(budget=Budget(window=200_000)))
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY, inferenceConfig={"maxTokens": 512})
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}, {"cachePoint": {"type": "default"}}], messages=HISTORY,
                     toolConfig={"tools": [TOOL, {"cachePoint": {"type": "default"}}]})
    plain, tools = (s.attributes for s in guard_spans(harness))
    assert plain["ctxguard.budget.tools"] == 0 and plain["ctxguard.budget.reserved_output"] == 512
    # The spec, and the tool-use prompt Anthropic adds for a Claude model.
    assert tools["ctxguard.budget.tools"] > tool_prompt_tokens(MODEL, forced=False) > 0
    assert plain["ctxguard.head.hash"] == tools["ctxguard.head.hash"]  # the cache marker is not read


def test_an_evicted_system_prompt_is_detected(harness, llm, bedrock):
    harness.start(mode="observe")
    with ctxguard.conversation("c-1"):
        bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY[:1])
        bedrock.converse(modelId=MODEL, messages=HISTORY)  # the app's trimmer dropped the instruction
    first, second = (s.attributes for s in guard_spans(harness))
    assert list(first["ctxguard.evicted"]) == []
    assert list(second["ctxguard.evicted"]) == ["system"]
    assert list(second["ctxguard.violations"]) == ["system_at_head"]
    assert harness.metric("ctxguard_evictions_total", kind="system") == 1
    assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="aws.bedrock") == 1


def test_an_image_is_counted_by_its_size(harness, llm, bedrock):
    png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")
    harness.start(mode="observe")
    image = {"image": {"format": "png", "source": {"bytes": png}}}
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=[
        {"role": "user", "content": [{"text": "what is this?"}, image]}])
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=[
        {"role": "user", "content": [{"text": "what is this?"}, {"image": {
            "format": "png", "source": {"s3Location": {"uri": "s3://acme/parcel.png"}}}}]}])
    small, remote = (s.attributes for s in guard_spans(harness))
    assert small["ctxguard.payload.tokens"] < remote["ctxguard.payload.tokens"]  # 1x1 vs the bound
    assert png.hex()[:16] not in str(dict(small))
    assert llm.bodies()[0]["messages"][0]["content"][1]["image"]["source"]["bytes"]  # base64 on the wire


def _error(call) -> tuple:
    with pytest.raises(ClientError) as info:
        call()
    e = info.value
    response = json.loads(json.dumps(e.response, default=str))
    response["ResponseMetadata"]["HTTPHeaders"].pop("date")
    return type(e), e.operation_name, response, str(e)


@pytest.mark.parametrize(("status", "code"), [(400, "ValidationException"), (404, "ResourceNotFoundException"),
                                              (429, "ThrottlingException")])
def test_client_errors_pass_through_unchanged(harness, status, code):
    def run() -> list[tuple]:
        with FakeLLM(seed="errors") as llm:
            client = bedrock_client(llm)
            llm.script(*[Reply(status=status)] * 3)
            return [_error(lambda: client.converse(modelId=MODEL, messages=HISTORY)),
                    _error(lambda: client.converse_stream(modelId=MODEL, messages=HISTORY)),
                    _error(lambda: client.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC_BODY)))]

    plain = run()
    harness.start(mode="observe")
    guarded = run()
    assert guarded == plain
    assert all(e[2]["Error"]["Code"] == code and e[2]["ResponseMetadata"]["HTTPStatusCode"] == status
               for e in guarded)
    assert guarded[0][0].__name__ == code  # the client's own exception class
    spans = guard_spans(harness)
    assert [s.attributes["error.type"] for s in spans] == [code] * 3
    assert all(s.status.status_code.name == "ERROR" for s in spans)


def test_a_client_created_before_instrument_is_guarded(harness, llm, bedrock):
    bedrock.converse(modelId=MODEL, messages=HISTORY)  # created and used before instrument()
    harness.start(mode="observe")
    bedrock.converse(modelId=MODEL, messages=HISTORY)
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["system_at_head"]
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[1].body)


def test_other_aws_calls_pass_untouched(harness, llm, bedrock):
    harness.start(mode="observe")
    control = boto3.client("bedrock", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                           aws_access_key_id="test", aws_secret_access_key="test",
                           config=Config(retries={"total_max_attempts": 1}))
    with pytest.raises(ClientError):  # the fake knows no control plane: an error, as without ctxguard
        control.list_foundation_models()
    with pytest.raises(ClientError):  # a bedrock-runtime operation that is no model call
        bedrock.count_tokens(modelId=MODEL, input={"converse": {"messages": HISTORY}})
    with pytest.raises(OperationNotFoundError):  # an operation of that name, on another service
        control._make_api_call("Converse", {"modelId": MODEL, "messages": HISTORY})
    assert guard_spans(harness) == []
    assert harness.metric("ctxguard_calls_total", provider="aws.bedrock", operation="chat") == 0


def test_what_another_aws_call_sends_during_a_model_call_is_not_its_body(harness, llm, bedrock):
    control = boto3.client("bedrock", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                           aws_access_key_id="test", aws_secret_access_key="test",
                           config=Config(retries={"total_max_attempts": 1}))

    def meanwhile(request, **kwargs) -> None:  # an app's hook (or a credential refresh) calling AWS
        with pytest.raises(ClientError):
            control.create_guardrail(name="g", blockedInputMessaging="no", blockedOutputsMessaging="no")

    bedrock.meta.events.register("before-send.bedrock-runtime.Converse", meanwhile)
    harness.start(mode="observe")
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY)
    guardrail, converse = llm.requests
    assert guardrail.json["name"] == "g"
    a = only_guard_span(harness).attributes
    assert a["ctxguard.wire.hash"] == wire_digest(converse.body)
    assert list(a["ctxguard.violations"]) == []


def test_enforce_mode_raises_before_sending_at_every_operation(harness, llm, bedrock):
    harness.start(mode="enforce")
    body = json.dumps({**ANTHROPIC_BODY, "system": None})
    with pytest.raises(ctxguard.ContextViolation):
        bedrock.converse(modelId=MODEL, messages=HISTORY)
    with pytest.raises(ctxguard.ContextViolation):
        bedrock.converse_stream(modelId=MODEL, messages=HISTORY)
    with pytest.raises(ctxguard.ContextViolation):
        bedrock.invoke_model(modelId=MODEL, body=body)
    with pytest.raises(ctxguard.ContextViolation):
        bedrock.invoke_model_with_response_stream(modelId=MODEL, body=body)
    assert llm.requests == []
    assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 4
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY)
    assert len(llm.requests) == 1


def test_a_system_prompt_dropped_below_the_sdk_fails_wire_intact(harness, llm, bedrock):
    def drop_system(request, **kwargs) -> None:  # after signing, as a proxy or middleware might
        body = json.loads(request.body)
        del body["system"]
        request.body = json.dumps(body).encode()
        request.headers["Content-Length"] = str(len(request.body))

    bedrock.meta.events.register("before-send.bedrock-runtime.Converse", drop_system)
    harness.start(mode="enforce")  # judged after sending: recorded, never blocking
    bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=HISTORY)
    assert "system" not in llm.bodies()[0]
    a = only_guard_span(harness).attributes
    assert a["ctxguard.head.role"] == "system"  # what the app gave the SDK
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)  # what was judged is what arrived
    assert list(a["ctxguard.violations"]) == ["wire_intact"]


def test_captured_bodies_are_judged_offline_like_live(tmp_path, harness, llm, bedrock):
    harness.start(mode="observe")
    path = tmp_path / "bedrock.jsonl"
    with record(str(path)), ctxguard.conversation("b-2"):
        ctxguard.record_fact("city", "Lyon")
        bedrock.converse(modelId=MODEL, system=[{"text": SYSTEM}], messages=[
            {"role": "user", "content": [{"text": "ship to Lyon"}]}])
        bedrock.invoke_model(modelId=MODEL, body=json.dumps({**ANTHROPIC_BODY, "system": None}))["body"].read()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    requests = [line for line in lines if "body" in line]
    assert [r["provider"] for r in requests] == ["aws.bedrock"] * 2
    assert [r["body"] for r in requests] == llm.bodies()
    live = [list(s.attributes["ctxguard.violations"]) for s in guard_spans(harness)]
    assert live == [[], ["system_at_head", "fact_present"]]
    with path.open("rb") as f:
        results = [r for _, r in Checker().judge(read_capture(f, CAPTURED_PROVIDERS))]
    assert [sorted(c for c, outcome in r.outcomes.items() if outcome == "fail") for r in results] == [
        sorted(v) for v in live]


def test_uninstrument_restores_identity(harness):
    call = vars(botocore.client.BaseClient)["_make_api_call"]
    send = vars(botocore.httpsession.URLLib3Session)["send"]
    harness.start(mode="observe")
    assert vars(botocore.client.BaseClient)["_make_api_call"] is not call
    assert vars(botocore.httpsession.URLLib3Session)["send"] is not send
    ctxguard.uninstrument()
    assert vars(botocore.client.BaseClient)["_make_api_call"] is call
    assert vars(botocore.httpsession.URLLib3Session)["send"] is send


def test_instrument_before_importing_boto3():
    with FakeLLM() as llm:
        script = textwrap.dedent(f"""
            import sys
            import ctxguard
            from prometheus_client import CollectorRegistry
            registry = CollectorRegistry()
            ctxguard.instrument(registry=registry, digest_key="k")
            assert "botocore" not in sys.modules
            import boto3
            client = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url="{llm.bedrock_endpoint_url}",
                                  aws_access_key_id="x", aws_secret_access_key="x")
            client.converse(modelId="{MODEL}", messages=[{{"role": "user", "content": [{{"text": "hi"}}]}}])
            print(registry.get_sample_value("ctxguard_violations_total",
                                            {{"check": "system_at_head", "provider": "aws.bedrock"}}))
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"


# -- Each model family's prompt format (bedrock_families), through the real SDK ------------------------

LLAMA = "us.meta.llama3-3-70b-instruct-v1:0"
NOVA = "us.amazon.nova-micro-v1:0"
WINDOW = 128_000  # both models' window in the table


def _llama_prompt() -> str:
    """What Llama 3.3's chat template makes of ``SYSTEM`` and ``HISTORY``."""
    from ctxguard.providers.bedrock_families import LLAMA_DATE_TEXT

    header = "<|start_header_id|>{}<|end_header_id|>\n\n"
    turns = "".join(header.format(m["role"]) + m["content"][0]["text"] + "<|eot_id|>" for m in HISTORY)
    return ("<|begin_of_text|>" + header.format("system") + LLAMA_DATE_TEXT + SYSTEM + "<|eot_id|>" + turns
            + header.format("assistant"))


def _template_tokens(model: str) -> int:
    """The request's tokens as the model's prompt format has them: Llama's template rendered (its
    special tokens one each), Nova's text (a digit a token), tool spec and tool prompt (measured: Nova
    publishes none)."""
    import re

    from ctxguard.providers.bedrock_families import NOVA_TOOL_PROMPT, NOVA_TURN
    from ctxguard.tokens import default_counter, digit_surplus

    counter = default_counter()
    if model == LLAMA:
        special = re.compile(r"<\|[a-z_]+\|>")
        prompt = _llama_prompt()
        return sum(counter.count(piece) for piece in special.split(prompt) if piece) + len(special.findall(prompt))
    texts = [SYSTEM] + [m["content"][0]["text"] for m in HISTORY]
    assistants = sum(m["role"] == "assistant" for m in HISTORY)
    return (sum(counter.count(text) + digit_surplus(text) for text in texts)
            + counter.count(json.dumps(TOOL["toolSpec"], sort_keys=True))
            + NOVA_TOOL_PROMPT + NOVA_TURN * assistants)


@pytest.mark.parametrize(("model", "tools"), [(LLAMA, None), (NOVA, {"tools": [TOOL]})], ids=["llama", "nova"])
def test_a_converse_request_just_over_its_window_fails_on_its_first_call(harness, llm, bedrock, model, tools):
    """Counted as the model's own prompt format has it (Llama's template, Nova's tool prompt), a
    request whose reserved output takes it one token over the model's window fails
    ``payload_under_budget`` on its first call, before anything is learnt from an answer; counted
    with OpenAI Chat's framing, as before, it passed."""
    pytest.importorskip("tiktoken")
    from ctxguard.tokens import default_counter

    tokens = _template_tokens(model)
    counter = default_counter()
    openai_framed = sum(counter.count(t) + 3 for t in [SYSTEM] + [m["content"][0]["text"] for m in HISTORY]) + 3 + (
        counter.count(json.dumps(TOOL["toolSpec"], sort_keys=True)) if tools else 0)
    over = WINDOW - tokens + 1
    assert openai_framed + over <= WINDOW < tokens + over  # what the template adds is what tips it over
    harness.start(mode="enforce")
    kwargs = dict(modelId=model, system=[{"text": SYSTEM}], messages=HISTORY,
                  **({"toolConfig": tools} if tools else {}))
    with pytest.raises(ctxguard.ContextViolation) as info:
        bedrock.converse(**kwargs, inferenceConfig={"maxTokens": over})
    assert [v.check for v in info.value.violations] == ["payload_under_budget"]
    assert llm.requests == []
    bedrock.converse(**kwargs, inferenceConfig={"maxTokens": over - 1})  # one token less fits
    assert len(llm.requests) == 1
    blocked, sent = (s.attributes for s in guard_spans(harness))
    assert blocked["ctxguard.payload.tokens"] == sent["ctxguard.payload.tokens"] == tokens
    assert (blocked["ctxguard.budget.headroom"], sent["ctxguard.budget.headroom"]) == (-1, 0)


#: An ``invoke_model`` body of each model family ctxguard reads: model, body, the roles read, the
#: output reserved.
INVOKED = [
    ("meta.llama3-70b-instruct-v1:0", {"prompt": "where is my order A-1041?", "max_gen_len": 128}, ["user"], 128),
    ("mistral.mistral-7b-instruct-v0:2", {"prompt": "<s>[INST] where is my order A-1041? [/INST]",
                                          "max_tokens": 64}, ["user"], 64),
    ("cohere.command-text-v14", {"prompt": "where is my order A-1041?", "max_tokens": 200}, ["user"], 200),
    ("amazon.titan-text-express-v1", {"inputText": "where is my order A-1041?",
                                      "textGenerationConfig": {"maxTokenCount": 512}}, ["user"], 512),
    ("cohere.command-r-v1:0", {"preamble": SYSTEM, "message": "where is my order A-1041?", "max_tokens": 300,
                               "chat_history": [{"role": "USER", "message": "hi"},
                                                {"role": "CHATBOT", "message": "hello"}]},
     ["system", "user", "assistant", "user"], 300),
    ("amazon.nova-micro-v1:0", {"schemaVersion": "messages-v1", "system": [{"text": SYSTEM}], "messages": HISTORY,
                                "inferenceConfig": {"max_new_tokens": 300}},
     ["system", "user", "assistant", "user"], 300),
]


@pytest.mark.parametrize(("model", "body", "roles", "reserved"), INVOKED, ids=[i[0] for i in INVOKED])
def test_an_invoke_model_body_of_each_family_read_is_counted(harness, llm, bedrock, model, body, roles, reserved):
    """Through the real SDK to the fake, which answers each in the model's own shape: the body's
    messages are read and counted with the family's tokens, the checks run on them, and Bedrock's
    own counts (its response headers) are the answer's usage."""
    from ctxguard.digest import Digester
    from ctxguard.measure import Measurer
    from ctxguard.providers.bedrock import ADAPTER
    from ctxguard.tokens import Calibration, default_counter

    harness.start(mode="observe", tokenizer="eager")
    response = bedrock.invoke_model(modelId=model, body=json.dumps(body))
    response["body"].read()
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.message.roles"]) == roles and a["ctxguard.payload.messages"] == len(roles)
    assert a["gen_ai.request.max_tokens"] == reserved
    assert not any("not read" in s or "invoke_model:" in s for s in a["ctxguard.checks.skipped"])
    expected = Measurer(Digester(b"k"), default_counter(), Calibration()).measure(
        ADAPTER.normalise("invoke_model", {"modelId": model, "body": json.dumps(body)})).raw_tokens
    assert a["ctxguard.payload.tokens"] == expected > 0
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        llm.responses[0].input_tokens, llm.responses[0].output_tokens)


def test_a_request_over_its_window_by_claudes_newer_tokenizer_fails_on_its_first_call(harness, llm, bedrock):
    """Claude Sonnet 5 on Bedrock, on Converse and on ``invoke_model``'s Messages body: a prompt of 85%
    of the window by cl100k's count is over it in Sonnet 5's tokens (~1.3 times), and
    ``payload_under_budget`` says so on the first call; the fake reports ~1.3 times as many tokens
    as for Sonnet 4.5, as Bedrock would. Sonnet 4.5 (cl100k's reading) fits."""
    from ctxguard.tokens import default_counter

    window = 20_000
    text = prose(int(window * 0.85))
    assert 0.8 * window < default_counter().count(text) < 0.9 * window
    harness.start(mode="observe", policy=Policy(budget=Budget(window=window)))
    for model in ("us.anthropic.claude-sonnet-5-v1:0", MODEL):
        bedrock.converse(modelId=model, system=[{"text": SYSTEM}], inferenceConfig={"maxTokens": 100},
                         messages=[{"role": "user", "content": [{"text": text}]}])
        body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100, "system": SYSTEM,
                "messages": [{"role": "user", "content": text}]}
        bedrock.invoke_model(modelId=model, body=json.dumps(body))["body"].read()
    spans = [s.attributes for s in guard_spans(harness)]
    assert len(spans) == 4
    for newer, older in zip(spans[:2], spans[2:], strict=True):
        assert list(newer["ctxguard.violations"]) == ["payload_under_budget"]
        assert newer["ctxguard.payload.tokens"] > window
        assert list(older["ctxguard.violations"]) == []
        assert older["ctxguard.payload.tokens"] < window
        assert newer["gen_ai.usage.input_tokens"] > 1.25 * older["gen_ai.usage.input_tokens"]  # the fake's Sonnet 5
