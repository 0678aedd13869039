"""The Mistral AI SDK (mistralai), driven for real over loopback HTTP: what ctxguard records is what arrived."""

from __future__ import annotations

import base64
import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mistralai.client", reason="mistralai is not installed (extra 'mistral')")

import httpx2  # mistralai 3.x is built on it
import pydantic
from mistralai.client import Mistral, errors, models
from mistralai.client.chat import Chat
from mistralai.client.utils.eventstreaming import EventStream, EventStreamAsync

import ctxguard
from ctxguard.capture import read_capture
from ctxguard.digest import Digester
from ctxguard.offline import CAPTURED_PROVIDERS, Checker
from ctxguard.testing import FakeLLM, Reply, record
from tests.conftest import KEY, guard_spans, message_digest, only_guard_span, replace_body

MODEL = "mistral-small-latest"
SYSTEM = {"role": "system", "content": "You are the order assistant of Acme Shop."}
HISTORY = [SYSTEM, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
           {"role": "user", "content": "where is my order A-1041?"}]
CALL_SITES = ("complete", "complete_async", "stream", "stream_async")
# A 1x1 PNG, as a data URL: an image whose size ctxguard reads from its header.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()


@pytest.fixture
def mistral(llm):
    with Mistral(api_key="test", server_url=llm.mistral_base_url) as client:
        yield client


def wire_digest(body: bytes) -> str:
    return Digester(KEY).bytes(body)


def test_complete_span_matches_the_body_that_arrived(harness, llm, mistral):
    harness.start(mode="observe")
    with ctxguard.conversation("order-41"):
        reply = mistral.chat.complete(model=MODEL, messages=HISTORY, max_tokens=300)
    assert isinstance(reply, models.ChatCompletionResponse)
    assert reply.choices[0].message.content == "ok 1"
    sent = llm.bodies("/chat/completions")[0]
    served = llm.responses[0]
    span = only_guard_span(harness)
    a = span.attributes
    assert span.name == f"chat {MODEL}"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "mistral_ai"
    assert a["gen_ai.request.model"] == sent["model"] == MODEL
    assert a["gen_ai.request.max_tokens"] == sent["max_tokens"] == 300
    assert a["gen_ai.conversation.id"] == "order-41"
    assert a["ctxguard.payload.messages"] == len(sent["messages"]) == 4
    assert list(a["ctxguard.message.roles"]) == [m["role"] for m in sent["messages"]]
    assert list(a["ctxguard.message.hashes"]) == [message_digest(m["role"], m["content"]) for m in sent["messages"]]
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.head.hash"] == message_digest("system", SYSTEM["content"])
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert a["gen_ai.response.id"] == reply.id == served.id
    assert a["gen_ai.response.model"] == reply.model == served.model
    assert list(a["gen_ai.response.finish_reasons"]) == list(served.finish_reasons) == ["stop"]
    assert a["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens == served.input_tokens > 0
    assert a["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens == served.output_tokens > 0
    assert list(a["ctxguard.violations"]) == []
    assert harness.metric("ctxguard_calls_total", provider="mistral_ai", operation="chat") == 1
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


@pytest.mark.asyncio
async def test_complete_async_is_guarded(harness, llm):
    harness.start(mode="observe")
    async with Mistral(api_key="test", server_url=llm.mistral_base_url) as client:
        reply = await client.chat.complete_async(model=MODEL, messages=HISTORY[1:])
    assert isinstance(reply, models.ChatCompletionResponse)
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["system_at_head"]
    assert a["ctxguard.head.role"] == "user"
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert a["gen_ai.response.id"] == reply.id == llm.responses[0].id
    assert a["gen_ai.usage.input_tokens"] == llm.responses[0].input_tokens
    assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="mistral_ai") == 1


def _events(client: Mistral, **kwargs) -> list[dict]:
    stream = client.chat.stream(**kwargs)
    assert type(stream) is EventStream  # the SDK's own object, not a proxy
    events = [e.model_dump() for e in stream]
    for event in events:  # what differs between two answers of the service: id and time
        event["data"].pop("id"), event["data"].pop("created")
    return events


def test_stream_events_identical_to_uninstrumented_and_span_complete(harness, llm, mistral):
    kwargs = dict(model=MODEL, messages=HISTORY, max_tokens=64)
    llm.script("the parcel is in Pune")
    plain = _events(mistral, **kwargs)
    harness.start(mode="observe")
    llm.script("the parcel is in Pune")
    guarded = _events(mistral, **kwargs)
    assert guarded == plain
    assert "".join(e["data"]["choices"][0]["delta"]["content"] or "" for e in guarded) == "the parcel is in Pune"
    served = llm.responses[-1]
    a = only_guard_span(harness).attributes
    assert a["gen_ai.provider.name"] == "mistral_ai"
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[-1].body)
    assert json.loads(llm.requests[-1].body)["stream"] is True
    assert a["gen_ai.response.id"] == served.id
    assert a["gen_ai.response.model"] == served.model
    assert list(a["gen_ai.response.finish_reasons"]) == ["stop"]
    assert a["gen_ai.usage.input_tokens"] == served.input_tokens == plain[-1]["data"]["usage"]["prompt_tokens"]
    assert a["gen_ai.usage.output_tokens"] == served.output_tokens > 0
    assert "ctxguard.stream.abandoned" not in a


@pytest.mark.asyncio
async def test_stream_async_events_unchanged_and_span_complete(harness, llm):
    harness.start(mode="observe")
    llm.script("streamed answer")
    async with Mistral(api_key="test", server_url=llm.mistral_base_url) as client:
        stream = await client.chat.stream_async(model=MODEL, messages=HISTORY)
        assert type(stream) is EventStreamAsync
        async with stream:
            text = "".join([e.data.choices[0].delta.content or "" async for e in stream])
    assert text == "streamed answer"
    served = llm.responses[0]
    a = only_guard_span(harness).attributes
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert a["gen_ai.response.id"] == served.id
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        served.input_tokens, served.output_tokens)
    assert "ctxguard.stream.abandoned" not in a


def test_system_message_not_at_the_head_fails(harness, llm, mistral):
    harness.start(mode="observe")
    mistral.chat.complete(model=MODEL, messages=[HISTORY[1], SYSTEM, HISTORY[3]])
    mistral.chat.complete(model=MODEL, messages=HISTORY)
    spans = guard_spans(harness)
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [["system_at_head"], []]
    assert [s.attributes["ctxguard.head.role"] for s in spans] == ["user", "system"]
    assert len(llm.requests) == 2  # observe mode: both sent


def test_a_fact_dropped_from_the_history_fails_fact_present(harness, llm, mistral):
    harness.start(mode="observe")
    history = [SYSTEM, {"role": "user", "content": "please ship order A-1041 to Pune"}]
    with ctxguard.conversation("m-1"):
        ctxguard.record_fact("city", "Pune")
        reply = mistral.chat.complete(model=MODEL, messages=history)
        history += [{"role": "assistant", "content": reply.choices[0].message.content},
                    {"role": "user", "content": "thanks"}]
        mistral.chat.complete(model=MODEL, messages=[SYSTEM, *history[-2:]])  # the app trimmed its history
    spans = guard_spans(harness)
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [[], ["fact_present"]]
    assert list(spans[0].attributes["ctxguard.facts.present"]) == ["city@1"]
    assert list(spans[1].attributes["ctxguard.facts.missing"]) == ["city@1"]
    assert "Pune" not in str(dict(spans[1].attributes))
    assert harness.metric("ctxguard_violations_total", check="fact_present", provider="mistral_ai") == 1


@pytest.mark.asyncio
async def test_enforce_mode_raises_before_sending_at_every_call_site(harness, llm):
    harness.start(mode="enforce")
    messages = HISTORY[1:]
    async with Mistral(api_key="test", server_url=llm.mistral_base_url) as client:
        with pytest.raises(ctxguard.ContextViolation):
            client.chat.complete(model=MODEL, messages=messages)
        with pytest.raises(ctxguard.ContextViolation):
            client.chat.stream(model=MODEL, messages=messages)
        with pytest.raises(ctxguard.ContextViolation):
            await client.chat.complete_async(model=MODEL, messages=messages)
        with pytest.raises(ctxguard.ContextViolation):
            await client.chat.stream_async(model=MODEL, messages=messages)
        assert llm.requests == []
        assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 4
        client.chat.complete(model=MODEL, messages=HISTORY)
    assert len(llm.requests) == 1


def _error(call) -> tuple:
    with pytest.raises(errors.MistralError) as info:
        call()
    e = info.value
    return type(e), e.status_code, e.body, str(e), getattr(e, "data", None)


@pytest.mark.parametrize(("status", "error"), [(401, errors.SDKError), (422, errors.HTTPValidationError),
                                               (429, errors.SDKError)])
def test_sdk_errors_pass_through_unchanged(harness, status, error):
    def run() -> list[tuple]:
        with FakeLLM(seed="errors") as llm, Mistral(api_key="test", server_url=llm.mistral_base_url) as client:
            llm.script(Reply(status=status), Reply(status=status))
            return [_error(lambda: client.chat.complete(model=MODEL, messages=HISTORY)),
                    _error(lambda: client.chat.stream(model=MODEL, messages=HISTORY))]

    plain = run()
    harness.start(mode="observe")
    guarded = run()
    assert guarded == plain
    assert [e[0] for e in guarded] == [error, error] and guarded[0][1] == status
    spans = guard_spans(harness)
    assert [s.attributes["error.type"] for s in spans] == [error.__name__] * 2
    assert all(s.status.status_code.name == "ERROR" for s in spans)
    assert all("gen_ai.response.id" not in s.attributes for s in spans)


def test_a_stream_abandoned_early_ends_its_span_abandoned(harness, llm, mistral):
    harness.start(mode="observe")
    llm.script("word " * 500, "word " * 500)
    stream = mistral.chat.stream(model=MODEL, messages=HISTORY)
    # Counted as the request left: a stream's end may never come.
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1
    for _ in stream:
        break
    assert guard_spans(harness) == []
    del stream
    gc.collect()
    a = only_guard_span(harness).attributes
    assert a["ctxguard.stream.abandoned"] is True
    assert a["gen_ai.response.id"] == llm.responses[0].id  # what it said before it was left
    harness.exporter.clear()
    with mistral.chat.stream(model=MODEL, messages=HISTORY) as stream:
        next(stream)
    assert only_guard_span(harness).attributes["ctxguard.stream.abandoned"] is True


@pytest.mark.asyncio
async def test_an_async_stream_closed_early_ends_its_span_abandoned(harness, llm):
    harness.start(mode="observe")
    llm.script("word " * 500)
    async with Mistral(api_key="test", server_url=llm.mistral_base_url) as client:
        stream = await client.chat.stream_async(model=MODEL, messages=HISTORY)
        async with stream:
            await stream.__anext__()
    assert only_guard_span(harness).attributes["ctxguard.stream.abandoned"] is True


def test_an_answer_mistral_broke_off_ends_the_call_in_error(harness, llm, mistral):
    harness.start(mode="observe")
    llm.script(Reply(text="the parcel is in", stream_failure="error"), Reply(text="the parcel", finish_reason="error"))
    events = list(mistral.chat.stream(model=MODEL, messages=HISTORY))  # the app sees the SDK's events as sent
    assert events[-1].data.choices[0].finish_reason == "error"
    reply = mistral.chat.complete(model=MODEL, messages=HISTORY)
    assert reply.choices[0].finish_reason == "error"
    for span in guard_spans(harness):
        assert list(span.attributes["gen_ai.response.finish_reasons"]) == ["error"]
        assert span.attributes["error.type"] == "error"
        assert span.status.status_code.name == "ERROR"


def drop_system_message(request) -> None:
    """A transport hook that loses the system message after the SDK built the body."""
    body = json.loads(request.content)
    body["messages"] = body["messages"][1:]
    replace_body(request, body)


def test_system_message_dropped_below_the_sdk_fails_wire_intact(harness, llm):
    harness.start(mode="enforce")  # judged after sending: recorded, never blocking
    with httpx2.Client(event_hooks={"request": [drop_system_message]}) as http:
        client = Mistral(api_key="test", server_url=llm.mistral_base_url, client=http)
        client.chat.complete(model=MODEL, messages=HISTORY)
    assert [m["role"] for m in llm.bodies()[0]["messages"]] == ["user", "assistant", "user"]
    a = only_guard_span(harness).attributes
    assert a["ctxguard.head.role"] == "system"  # what the app gave the SDK
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)  # what was judged is what arrived
    assert list(a["ctxguard.violations"]) == ["wire_intact"]
    assert harness.metric("ctxguard_violations_total", check="wire_intact", provider="mistral_ai") == 1


def _structured(objects: bool) -> list:
    """One history of every shape Mistral takes, as TypedDicts or as the SDK's own models."""
    call = {"id": "D681PevKs", "type": "function", "function": {"name": "lookup", "arguments": {"order": "A-1041"}}}
    parts = [{"type": "text", "text": "what is in this parcel?"},
             {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
             {"type": "document_url", "document_url": "https://example.com/invoice.pdf"}]
    if not objects:
        return [SYSTEM, {"role": "user", "content": parts},
                {"role": "assistant", "tool_calls": [call]},
                {"role": "tool", "content": "shipped", "tool_call_id": "D681PevKs", "name": "lookup"},
                {"role": "assistant", "content": "Your parcel", "prefix": True}]
    return [models.SystemMessage(content=SYSTEM["content"]),
            models.UserMessage(content=[models.TextChunk(text=parts[0]["text"]),
                                        models.ImageURLChunk(image_url=models.ImageURL(url=parts[1]["image_url"]["url"])),
                                        models.DocumentURLChunk(document_url=parts[2]["document_url"])]),
            models.AssistantMessage(tool_calls=[models.ToolCall(
                id=call["id"], type="function",
                function=models.FunctionCall(name="lookup", arguments={"order": "A-1041"}))]),
            models.ToolMessage(content="shipped", tool_call_id="D681PevKs", name="lookup"),
            models.AssistantMessage(content="Your parcel", prefix=True)]


def test_chunks_tool_calls_and_prefix_read_alike_as_dicts_and_sdk_models(harness, llm, mistral):
    harness.start(mode="observe")
    with ctxguard.conversation("parts"):
        ctxguard.record_fact("order_id", "A-1041")
        mistral.chat.complete(model=MODEL, messages=_structured(objects=False))
        mistral.chat.complete(model=MODEL, messages=_structured(objects=True))
    dicts, objects = (s.attributes for s in guard_spans(harness))
    assert list(dicts["ctxguard.message.roles"]) == ["system", "user", "assistant", "tool", "assistant"]
    assert list(dicts["ctxguard.message.hashes"]) == list(objects["ctxguard.message.hashes"])
    assert dicts["ctxguard.payload.tokens"] == objects["ctxguard.payload.tokens"]
    assert list(dicts["ctxguard.facts.present"]) == ["order_id@1"]  # found in the tool call's arguments
    # The user message: its text, and references for the image and the document (their digest only).
    image = f"data:image/png;base64,{PNG}"
    assert dicts["ctxguard.message.hashes"][1] == message_digest(
        "user", "what is in this parcel?", (image, "https://example.com/invoice.pdf"))
    assert dicts["ctxguard.message.hashes"][2] == message_digest(
        "assistant", 'lookup\n{"order": "A-1041"}', ("id:tool_call=D681PevKs",))  # UNSET content: none
    assert dicts["ctxguard.message.hashes"][4] == message_digest("assistant", "Your parcel", ("id:prefix",))
    assert PNG[:24] not in str(dict(dicts))
    assert PNG in llm.requests[0].body.decode()  # the SDK did send it
    assert llm.bodies()[0]["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"order": "A-1041"}


@pytest.mark.parametrize("arguments", ['{"order": "A-1041"}', {"order": "A-1041"}], ids=["string", "object"])
def test_a_fact_carried_by_tool_call_arguments_is_found_on_the_wire(harness, llm, mistral, arguments):
    harness.start(mode="observe")
    with ctxguard.conversation("args"):
        ctxguard.record_fact("order_id", "A-1041")
        mistral.chat.complete(model=MODEL, messages=[
            SYSTEM, {"role": "user", "content": "where is it?"},
            {"role": "assistant", "tool_calls": [{"id": "D681PevKs", "function": {
                "name": "lookup", "arguments": arguments}}]},
            {"role": "tool", "content": "shipped", "tool_call_id": "D681PevKs"}])
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.facts.present"]) == ["order_id@1"]
    assert list(a["ctxguard.violations"]) == []


def test_an_image_costs_what_pixtral_encodes_it_as():
    from ctxguard.providers.mistral import ADAPTER, image_tokens

    assert image_tokens((1, 1)) == 1 + 1  # one patch, and its row's break
    assert image_tokens((1024, 512)) == 64 * 32 + 32
    assert image_tokens((4096, 1024)) == image_tokens((1024, 256)) == 64 * 16 + 16  # scaled down to fit 1024
    assert image_tokens(None) == image_tokens((1024, 1024)) == 64 * 64 + 64  # not known: the most it can cost

    def cost(url: str) -> int:
        view = ADAPTER.normalise("chat.complete", {"model": MODEL, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": url}]}]})
        return view.items[0][4]

    assert cost(f"data:image/png;base64,{PNG}") == 2
    assert cost("https://example.com/parcel.png") == 64 * 64 + 64


def test_tools_and_a_response_format_are_counted(harness, llm, mistral):
    class Order(pydantic.BaseModel):
        city: str
        days: int

    tool = {"type": "function", "function": {"name": "lookup", "description": "Find an order by its id",
                                             "parameters": {"type": "object",
                                                            "properties": {"order": {"type": "string"}}}}}
    harness.start(mode="observe")
    llm.script("plain", "tool", Reply(parsed={"city": "Pune", "days": 2}))
    mistral.chat.complete(model=MODEL, messages=HISTORY)
    mistral.chat.complete(model=MODEL, messages=HISTORY, tools=[tool])
    parsed = mistral.chat.parse(response_format=Order, model=MODEL, messages=HISTORY)
    assert parsed.choices[0].message.parsed == Order(city="Pune", days=2)
    plain, with_tool, with_format = (s.attributes["ctxguard.payload.tokens"] for s in guard_spans(harness))
    assert with_tool > plain and with_format > plain  # parse goes through complete: one span, schema counted
    assert "schema" in llm.bodies()[2]["response_format"]["json_schema"]


def test_captured_bodies_are_judged_offline_like_live(tmp_path: Path, harness, llm, mistral):
    harness.start(mode="observe")
    path = tmp_path / "mistral.jsonl"
    with record(str(path)), ctxguard.conversation("m-2"):
        ctxguard.record_fact("city", "Lyon")
        mistral.chat.complete(model=MODEL, messages=[SYSTEM, {"role": "user", "content": "ship to Lyon"}])
        mistral.chat.stream(model=MODEL, messages=[{"role": "user", "content": "and again"}]).response.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    requests = [line for line in lines if "body" in line]
    assert [r["provider"] for r in requests] == ["mistral_ai"] * 2
    assert [r["body"] for r in requests] == llm.bodies()
    live = [list(s.attributes["ctxguard.violations"]) for s in guard_spans(harness)]
    assert live == [[], ["system_at_head", "fact_present"]]
    with path.open("rb") as f:
        results = [r for _, r in Checker().judge(read_capture(f, CAPTURED_PROVIDERS))]
    assert [sorted(c for c, outcome in r.outcomes.items() if outcome == "fail") for r in results] == [
        sorted(v) for v in live]


def test_uninstrument_restores_identity(harness):
    originals = {name: Chat.__dict__[name] for name in CALL_SITES}
    harness.start(mode="observe")
    assert all(Chat.__dict__[name] is not fn for name, fn in originals.items())
    ctxguard.uninstrument()
    assert all(Chat.__dict__[name] is fn for name, fn in originals.items())


def test_instrument_before_importing_mistralai():
    """``mistralai`` is a namespace package: patching hangs on ``mistralai.client``'s import."""
    with FakeLLM() as llm:
        script = textwrap.dedent(f"""
            import sys
            import ctxguard
            from prometheus_client import CollectorRegistry
            registry = CollectorRegistry()
            ctxguard.instrument(registry=registry, digest_key="k")
            assert not any(name.startswith("mistralai") for name in sys.modules)
            from mistralai.client import Mistral
            client = Mistral(api_key="x", server_url="{llm.mistral_base_url}")
            client.chat.complete(model="mistral-small-latest", messages=[{{"role": "user", "content": "hi"}}])
            print(registry.get_sample_value("ctxguard_violations_total",
                                            {{"check": "system_at_head", "provider": "mistral_ai"}}))
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"


def test_unsupported_version_logs_one_warning_and_is_left_untouched(harness, monkeypatch, caplog):
    from ctxguard import intercept

    monkeypatch.setattr(intercept, "_major", lambda distribution: 4 if distribution == "mistralai" else 1)
    originals = {name: Chat.__dict__[name] for name in CALL_SITES}
    with caplog.at_level("WARNING", logger="ctxguard"):
        harness.start(mode="observe", providers=["mistralai"])
    assert all(Chat.__dict__[name] is fn for name, fn in originals.items())
    warnings = [r for r in caplog.records if "mistralai" in r.getMessage()]
    assert len(warnings) == 1 and "not supported" in warnings[0].getMessage()


def test_a_tool_result_whose_call_was_trimmed_fails_tool_pairs_intact(harness, llm, mistral):
    """Mistral writes its tool exchanges in the neutral form: a trimmer's cut is caught."""
    harness.start(mode="observe")
    mistral.chat.complete(model=MODEL, messages=[
        SYSTEM, {"role": "user", "content": "where is it?"},
        {"role": "tool", "content": "shipped", "tool_call_id": "D681PevKs"}])
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["tool_pairs_intact"]


def test_the_prompt_is_counted_as_mistral_frames_it(harness, llm, mistral, monkeypatch):
    """``<s>[INST]hello[/INST]``: 4 tokens, what the API reported for that request (recorded in
    tests/data/recorded/pydantic-ai.jsonl); before, OpenAI's framing made it 7. Tools are their
    ``Tool`` JSON between ``[AVAILABLE_TOOLS]`` tokens, a tool call two control tokens beyond its name
    and arguments, and a ``reasoning_effort`` the model settings of tokenizer v15."""
    from ctxguard.providers import mistral as provider
    from ctxguard.tokens import default_counter

    monkeypatch.setenv("CTXGUARD_TOKENIZER", "eager")  # exact counts, not byte bounds
    count = default_counter().count
    tool = {"type": "function", "function": {"name": "lookup", "description": "Find an order by its id",
                                             "parameters": {"type": "object",
                                                            "properties": {"order": {"type": "string"}}}}}
    call = [{"role": "assistant", "tool_calls": [{"id": "D681PevKs", "function": {
        "name": "lookup", "arguments": '{"order": "A-1041"}'}}]}]
    harness.start(mode="observe")
    hello = [{"role": "user", "content": "hello"}]
    mistral.chat.complete(model="mistral-large-latest", messages=hello)
    mistral.chat.complete(model="mistral-large-latest", messages=hello, tools=[tool])
    mistral.chat.complete(model="mistral-large-latest", messages=[*hello, *call])
    mistral.chat.complete(model="mistral-large-latest", messages=hello, reasoning_effort="high")
    plain, tools, called, effort = (s.attributes for s in guard_spans(harness))
    assert plain["ctxguard.payload.tokens"] == 4
    assert tools["ctxguard.budget.tools"] == count(json.dumps(tool)) + provider.TOOLS_FRAMING
    # The call's two control tokens, and 1041's digits one a token (2 to cl100k, 4 to Tekken).
    assert called["ctxguard.payload.tokens"] == 4 + count('lookup\n{"order": "A-1041"}') + 2 + 2 + 2
    assert effort["ctxguard.payload.tokens"] == 4 + provider.MODEL_SETTINGS


def test_all_caps_text_is_counted_as_mistrals_tokenizers_read_it(harness, llm, mistral, monkeypatch):
    """Mistral's tokenizers split upper-case words that cl100k keeps whole (" SIGN" is " S" + "IGN" to
    Tekken): each capital of a run of two or more costs ``CAPITALS_PER_LETTER`` more (measured on
    general text: docs/budget.md, "All-caps text"), the same words in lower case what cl100k counts.
    The surcharge is the message's cost: its text, and so its digest, is the text as sent."""
    from ctxguard.tokens import default_counter

    monkeypatch.setenv("CTXGUARD_TOKENIZER", "eager")  # exact counts, not byte bounds
    count = default_counter().count
    shout = "ONLY SINGLE NUMBER IN RESPONSE"  # 26 capitals: round(26 x 0.12) = 3 tokens more
    harness.start(mode="observe")
    mistral.chat.complete(model="mistral-large-latest", messages=[{"role": "user", "content": shout}])
    mistral.chat.complete(model="mistral-large-latest", messages=[{"role": "user", "content": shout.lower()}])
    mistral.chat.complete(model="mistral-large-latest",
                          messages=[{"role": "user", "content": [{"type": "text", "text": shout}]}])
    caps, lower, chunks = (s.attributes for s in guard_spans(harness))
    assert caps["ctxguard.payload.tokens"] == chunks["ctxguard.payload.tokens"] == 3 + count(shout) + 3  # <s>[INST]…
    assert lower["ctxguard.payload.tokens"] == 3 + count(shout.lower())
    assert [m["content"] for m in llm.bodies("/chat/completions")[0]["messages"]] == [shout]
    assert list(caps["ctxguard.message.hashes"]) == [message_digest("user", shout)]


def test_digits_are_counted_one_a_token_as_mistrals_tokenizers_read_them(harness, llm, mistral, monkeypatch):
    """Every Mistral tokenizer (Tekken, and the SentencePiece of v1 to v7) takes each digit as a token,
    where cl100k takes up to three: ``2024-08-27``'s eight digits are 8 tokens to Tekken, 4 to cl100k. The difference
    is the message's cost, its text as sent; a plain message and a chunked one alike."""
    from ctxguard.tokens import default_counter, digit_surplus

    monkeypatch.setenv("CTXGUARD_TOKENIZER", "eager")  # exact counts, not byte bounds
    count = default_counter().count
    dated = "order 5551234567 ships on 2024-08-27"
    assert digit_surplus(dated) == 6 + 4
    harness.start(mode="observe")
    mistral.chat.complete(model="mistral-large-latest", messages=[{"role": "user", "content": dated}])
    mistral.chat.complete(model="mistral-large-latest",
                          messages=[{"role": "user", "content": [{"type": "text", "text": dated}]}])
    plain, chunks = (s.attributes for s in guard_spans(harness))
    assert plain["ctxguard.payload.tokens"] == chunks["ctxguard.payload.tokens"] == 3 + count(dated) + 10
    assert [m["content"] for m in llm.bodies("/chat/completions")[0]["messages"]] == [dated]
