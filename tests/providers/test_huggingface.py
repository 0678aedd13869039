"""The Hugging Face Hub SDK (huggingface_hub's InferenceClient), driven for real over loopback HTTP: what
ctxguard records is what arrived. The fake answers it as OpenAI Chat Completions, the format the Hugging
Face router and TGI speak at ``/v1/chat/completions``."""

from __future__ import annotations

import gc
import importlib
import inspect
import json
import types
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub.inference._client", reason="huggingface_hub is not installed ('huggingface')")

import huggingface_hub
from huggingface_hub import (
    AsyncInferenceClient,
    ChatCompletionInputMessage,
    ChatCompletionOutput,
    ChatCompletionStreamOutput,
    InferenceClient,
)
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import _http

import ctxguard
from ctxguard import Budget, Policy
from ctxguard.capture import read_capture
from ctxguard.digest import Digester
from ctxguard.offline import CAPTURED_PROVIDERS, Checker
from ctxguard.testing import FakeLLM, Reply, record
from tests.conftest import KEY, guard_spans, message_digest, only_guard_span, replace_body
from tests.providers.test_call_sites import _documented, _ours, _status

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SYSTEM = {"role": "system", "content": "You are the order assistant of Acme Shop."}
HISTORY = [SYSTEM, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
           {"role": "user", "content": "where is my order A-1041?"}]
SYNC = "huggingface_hub.inference._client"
ASYNC = "huggingface_hub.inference._generated._async_client"
#: Its HTTP library (httpx2 from huggingface_hub 2.x, httpx in 1.x), whose client the SDK shares.
HTTP = importlib.import_module(type(huggingface_hub.get_session()).__module__.partition(".")[0])
TOOL = {"type": "function", "function": {"name": "lookup", "description": "Find an order by its id",
                                         "parameters": {"type": "object",
                                                        "properties": {"order": {"type": "string"}}}}}


def make(llm: FakeLLM) -> InferenceClient:
    """A client of the fake, as of any OpenAI-compatible server: ``base_url`` ending in ``/v1``."""
    return InferenceClient(base_url=llm.base_url, api_key="test")


def make_async(llm: FakeLLM) -> AsyncInferenceClient:
    return AsyncInferenceClient(base_url=llm.base_url, api_key="test")


def wire_digest(body: bytes) -> str:
    return Digester(KEY).bytes(body)


def _chunks(chunks: list) -> list[dict]:
    out = [dict(c) for c in chunks]
    for chunk in out:  # what differs between two answers of the server: id, time, padding
        for key in ("id", "created", "obfuscation"):
            chunk.pop(key, None)
    return out


def test_chat_completion_span_matches_the_body_that_arrived(harness, llm):
    harness.start(mode="observe")
    with make(llm) as client, ctxguard.conversation("order-41"):
        reply = client.chat_completion(HISTORY, model=MODEL, max_tokens=300)  # messages positionally
    assert type(reply) is ChatCompletionOutput
    assert reply.choices[0].message.content == "ok 1"
    request = llm.requests[0]
    assert request.path == "/v1/chat/completions"
    sent = llm.bodies("/chat/completions")[0]
    served = llm.responses[0]
    span = only_guard_span(harness)
    a = span.attributes
    assert span.name == f"chat {MODEL}"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "huggingface"
    assert (a["server.address"], a["server.port"]) == ("127.0.0.1", llm.port)
    assert a["gen_ai.request.model"] == sent["model"] == MODEL
    assert a["gen_ai.request.max_tokens"] == sent["max_tokens"] == 300
    assert a["gen_ai.conversation.id"] == "order-41"
    assert a["ctxguard.payload.messages"] == len(sent["messages"]) == 4
    assert list(a["ctxguard.message.roles"]) == [m["role"] for m in sent["messages"]]
    assert list(a["ctxguard.message.hashes"]) == [message_digest(m["role"], m["content"]) for m in sent["messages"]]
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.wire.hash"] == wire_digest(request.body)
    assert a["gen_ai.response.id"] == reply.id == served.id
    assert a["gen_ai.response.model"] == reply.model == served.model
    assert list(a["gen_ai.response.finish_reasons"]) == list(served.finish_reasons) == ["stop"]
    assert a["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens == served.input_tokens > 0
    assert a["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens == served.output_tokens > 0
    assert list(a["ctxguard.violations"]) == []
    assert harness.metric("ctxguard_calls_total", provider="huggingface", operation="chat") == 1
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


def test_without_a_system_message_system_at_head_fails(harness, llm):
    harness.start(mode="observe")
    with make(llm) as client:
        client.chat_completion(messages=HISTORY[1:], model=MODEL)
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["system_at_head"]
    assert a["ctxguard.head.role"] == "user"
    assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="huggingface") == 1


def test_the_openai_style_alias_is_the_guarded_call_site_itself(harness, llm):
    harness.start(mode="observe")
    proxy = importlib.import_module(SYNC).ProxyClientChatCompletions
    assert isinstance(vars(proxy)["create"], property)  # nothing of its own to wrap ...
    with make(llm) as client:
        create = client.chat.completions.create
        assert type(create) is type(client.chat_completion)  # ... it hands out the wrapped method, bound
        reply = create(model=MODEL, messages=HISTORY)
    a = only_guard_span(harness).attributes
    assert a["gen_ai.response.id"] == reply.id == llm.responses[0].id
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)


def test_stream_chunks_identical_to_uninstrumented_and_span_complete(harness, llm):
    kwargs = dict(model=MODEL, max_tokens=64, stream=True, stream_options={"include_usage": True})
    llm.script("the parcel is in Pune")
    with make(llm) as client:
        plain = list(client.chat_completion(HISTORY, **kwargs))
    harness.start(mode="observe")
    llm.script("the parcel is in Pune")
    with make(llm) as client:
        stream = client.chat_completion(HISTORY, **kwargs)
        assert isinstance(stream, types.GeneratorType)  # a transparent stand-in for the SDK's generator
        guarded = list(stream)
    assert [type(c) for c in guarded] == [ChatCompletionStreamOutput] * len(plain)
    assert _chunks(guarded) == _chunks(plain)
    assert "".join(c.choices[0].delta.content or "" for c in guarded if c.choices) == "the parcel is in Pune"
    served = llm.responses[-1]
    a = only_guard_span(harness).attributes
    assert a["gen_ai.provider.name"] == "huggingface"
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[-1].body)
    assert json.loads(llm.requests[-1].body)["stream"] is True
    assert a["gen_ai.response.id"] == served.id == guarded[0].id
    assert list(a["gen_ai.response.finish_reasons"]) == ["stop"]
    # The usage chunk (asked for with ``include_usage``) is the last one: it has no choices.
    assert guarded[-1].choices == [] and guarded[-1].usage.prompt_tokens == served.input_tokens
    assert a["gen_ai.usage.input_tokens"] == served.input_tokens > 0
    assert a["gen_ai.usage.output_tokens"] == served.output_tokens > 0
    assert "ctxguard.stream.abandoned" not in a


def test_a_stream_without_a_usage_chunk_ends_complete_without_usage(harness, llm):
    harness.start(mode="observe")
    with make(llm) as client:
        chunks = list(client.chat_completion(HISTORY, model=MODEL, stream=True))
    assert all(c.usage is None for c in chunks)  # the server sends usage only when asked
    a = only_guard_span(harness).attributes
    assert list(a["gen_ai.response.finish_reasons"]) == ["stop"]
    assert "gen_ai.usage.input_tokens" not in a
    assert "ctxguard.stream.abandoned" not in a


@pytest.mark.asyncio
async def test_async_chat_completion_is_guarded(harness, llm):
    harness.start(mode="observe")
    async with make_async(llm) as client:
        reply = await client.chat_completion(HISTORY[1:], model=MODEL)
    assert type(reply) is ChatCompletionOutput
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["system_at_head"]
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert a["gen_ai.response.id"] == reply.id == llm.responses[0].id
    assert a["gen_ai.usage.input_tokens"] == llm.responses[0].input_tokens
    assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="huggingface") == 1


@pytest.mark.asyncio
async def test_async_stream_chunks_unchanged_and_span_complete(harness, llm):
    kwargs = dict(model=MODEL, stream=True, stream_options={"include_usage": True})
    llm.script("streamed answer")
    async with make_async(llm) as client:
        plain = [c async for c in await client.chat_completion(HISTORY, **kwargs)]
    harness.start(mode="observe")
    llm.script("streamed answer")
    async with make_async(llm) as client:
        stream = await client.chat_completion(HISTORY, **kwargs)
        assert isinstance(stream, types.AsyncGeneratorType)
        guarded = [c async for c in stream]
    assert _chunks(guarded) == _chunks(plain)
    assert "".join(c.choices[0].delta.content or "" for c in guarded if c.choices) == "streamed answer"
    served = llm.responses[-1]
    a = only_guard_span(harness).attributes
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[-1].body)
    assert a["gen_ai.response.id"] == served.id
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        served.input_tokens, served.output_tokens)
    assert "ctxguard.stream.abandoned" not in a


def test_a_stream_abandoned_early_ends_its_span_abandoned(harness, llm):
    harness.start(mode="observe")
    llm.script("word " * 500, "word " * 500)
    with make(llm) as client:
        stream = client.chat_completion(HISTORY, model=MODEL, stream=True)
        assert len(llm.requests) == 1  # not a generator function: the request left with the call
        for _ in stream:
            break
        assert guard_spans(harness) == []
        del stream
        gc.collect()
        a = only_guard_span(harness).attributes
        assert a["ctxguard.stream.abandoned"] is True
        assert a["gen_ai.response.id"] == llm.responses[0].id  # what it said before it was left
        assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
        harness.exporter.clear()
        stream = client.chat_completion(HISTORY, model=MODEL, stream=True)
        next(stream)
        stream.close()
        assert only_guard_span(harness).attributes["ctxguard.stream.abandoned"] is True


@pytest.mark.asyncio
async def test_an_async_stream_closed_early_ends_its_span_abandoned(harness, llm):
    harness.start(mode="observe")
    llm.script("word " * 500)
    async with make_async(llm) as client:
        stream = await client.chat_completion(HISTORY, model=MODEL, stream=True)
        await stream.__anext__()
        await stream.aclose()
    a = only_guard_span(harness).attributes
    assert a["ctxguard.stream.abandoned"] is True
    assert a["gen_ai.response.id"] == llm.responses[0].id


def _error(call) -> tuple:
    with pytest.raises(HfHubHTTPError) as info:
        call()
    e = info.value
    return type(e), e.response.status_code, e.response.json(), e.server_message


async def _async_error(call) -> tuple:
    with pytest.raises(HfHubHTTPError) as info:
        await call()
    e = info.value
    return type(e), e.response.status_code, e.response.json(), e.server_message


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [400, 401, 404, 429, 500])
async def test_sdk_errors_pass_through_unchanged(harness, status):
    async def run() -> list[tuple]:
        with FakeLLM(seed="errors") as llm:
            llm.script(*[Reply(status=status)] * 4)
            with make(llm) as client:
                found = [_error(lambda: client.chat_completion(HISTORY, model=MODEL)),
                         _error(lambda: client.chat_completion(HISTORY, model=MODEL, stream=True))]
            async with make_async(llm) as aclient:
                found += [await _async_error(lambda: aclient.chat_completion(HISTORY, model=MODEL)),
                          await _async_error(lambda: aclient.chat_completion(HISTORY, model=MODEL, stream=True))]
            return found

    plain = await run()
    harness.start(mode="observe")
    guarded = await run()
    assert guarded == plain
    assert {e[1] for e in guarded} == {status}
    spans = guard_spans(harness)
    assert len(spans) == 4
    assert [s.attributes["error.type"] for s in spans] == [e[0].__name__ for e in guarded]
    assert all(s.status.status_code.name == "ERROR" for s in spans)
    assert all("gen_ai.response.id" not in s.attributes for s in spans)


@pytest.mark.asyncio
async def test_enforce_mode_raises_before_sending_at_every_call_site(harness, llm):
    harness.start(mode="enforce")
    messages = HISTORY[1:]
    with make(llm) as client:
        with pytest.raises(ctxguard.ContextViolation):
            client.chat_completion(messages, model=MODEL)
        with pytest.raises(ctxguard.ContextViolation):
            client.chat_completion(messages, model=MODEL, stream=True)
        with pytest.raises(ctxguard.ContextViolation):
            client.chat.completions.create(model=MODEL, messages=messages)
    async with make_async(llm) as aclient:
        with pytest.raises(ctxguard.ContextViolation):
            await aclient.chat_completion(messages, model=MODEL)
        with pytest.raises(ctxguard.ContextViolation):
            await aclient.chat_completion(messages, model=MODEL, stream=True)
    assert llm.requests == []
    assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 5
    with make(llm) as client:
        client.chat_completion(HISTORY, model=MODEL)
    assert len(llm.requests) == 1


def drop_system_message(request) -> None:
    """A transport hook that loses the system message after the SDK built the body."""
    body = json.loads(request.content)
    body["messages"] = body["messages"][1:]
    replace_body(request, body)


@pytest.fixture
def lossy_session():
    """The SDK's shared HTTP client, made with a request hook that drops the system message."""
    kept = _http._GLOBAL_CLIENT_FACTORY
    huggingface_hub.close_session()
    huggingface_hub.set_client_factory(lambda: HTTP.Client(event_hooks={"request": [drop_system_message]}))
    try:
        yield
    finally:
        huggingface_hub.set_client_factory(kept)
        huggingface_hub.close_session()


def test_system_message_dropped_below_the_sdk_fails_wire_intact(harness, llm, lossy_session):
    harness.start(mode="enforce")  # judged after sending: recorded, never blocking
    with make(llm) as client:
        client.chat_completion(HISTORY, model=MODEL)
    assert [m["role"] for m in llm.bodies()[0]["messages"]] == ["user", "assistant", "user"]
    a = only_guard_span(harness).attributes
    assert a["ctxguard.head.role"] == "system"  # what the app gave the SDK
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)  # what was judged is what arrived
    assert list(a["ctxguard.violations"]) == ["wire_intact"]


def _tool_exchange(call_id: str = "call_Xq1tB9") -> list:
    return [SYSTEM, {"role": "user", "content": "where is A-1041?"},
            {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": "lookup", "arguments": '{"order": "A-1041"}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "shipped"}]


def test_a_tool_exchange_intact_passes_and_one_cut_fails(harness, llm):
    harness.start(mode="observe")
    exchange = _tool_exchange()
    with make(llm) as client:
        client.chat_completion(exchange, model=MODEL, tools=[TOOL])
        with pytest.raises(HfHubHTTPError) as info:  # a trimmer cut the call: the server refuses its result
            client.chat_completion([*exchange[:2], exchange[3]], model=MODEL, tools=[TOOL])
        assert info.value.response.status_code == 400
        client.chat_completion(exchange[:3], model=MODEL, tools=[TOOL])  # ... or the result
    assert [list(s.attributes["ctxguard.violations"]) for s in guard_spans(harness)] == [
        [], ["tool_pairs_intact"], ["tool_pairs_intact"]]


def test_the_sdks_messages_read_like_dicts_in_an_agent_loop(harness, llm):
    """The SDK's input messages, and the assistant message it returned (with its tool call) sent back, read as
    the same messages written as dicts. (The SDK's input types cannot say a tool result: that one is a dict.)"""
    harness.start(mode="observe")
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}}]))
    with make(llm) as client, ctxguard.conversation("agent"):
        ctxguard.record_fact("order_id", "A-1041")
        asked = [ChatCompletionInputMessage(role="system", content=SYSTEM["content"]),
                 ChatCompletionInputMessage(role="user", content="where is A-1041?")]
        called = client.chat_completion(asked, model=MODEL, tools=[TOOL]).choices[0].message
        call = called.tool_calls[0]
        result = {"role": "tool", "tool_call_id": call.id, "content": "shipped"}
        client.chat_completion([*asked, called, result], model=MODEL, tools=[TOOL])
        as_dicts = [SYSTEM, {"role": "user", "content": "where is A-1041?"},
                    {"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function",
                     "function": {"name": call.function.name, "arguments": call.function.arguments}}]}, result]
        client.chat_completion(as_dicts, model=MODEL, tools=[TOOL])
    first, sdk, dicts = (s.attributes for s in guard_spans(harness))
    assert list(first["ctxguard.message.hashes"]) == [message_digest("system", SYSTEM["content"]),
                                                      message_digest("user", "where is A-1041?")]
    assert list(sdk["ctxguard.message.roles"]) == ["system", "user", "assistant", "tool"]
    assert list(sdk["ctxguard.message.hashes"]) == list(dicts["ctxguard.message.hashes"])
    assert sdk["ctxguard.payload.tokens"] == dicts["ctxguard.payload.tokens"]
    assert list(sdk["ctxguard.facts.present"]) == ["order_id@1"]
    assert [list(a["ctxguard.violations"]) for a in (first, sdk, dicts)] == [[], [], []]


def test_tools_tool_prompt_and_a_response_format_are_counted(harness, llm):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    harness.start(mode="observe")
    with make(llm) as client:
        client.chat_completion(HISTORY, model=MODEL)
        client.chat_completion(HISTORY, model=MODEL, tools=[TOOL])
        client.chat_completion(HISTORY, model=MODEL, tools=[TOOL], tool_prompt="You may call these tools:")
        client.chat_completion(HISTORY, model=MODEL, response_format={"type": "json", "value": schema})
        client.chat_completion(HISTORY, model=MODEL, response_format={
            "type": "json_schema", "json_schema": {"name": "weather", "schema": schema}})
    counted = [s.attributes["ctxguard.payload.tokens"] for s in guard_spans(harness)]
    plain, tools, prompted, grammar, json_schema = counted
    assert plain < tools < prompted
    assert grammar == json_schema > plain  # the same schema, said TGI's way or OpenAI's
    # The SDK sends an OpenAI ``json_schema`` format to a URL endpoint as TGI's grammar.
    assert llm.bodies()[4]["response_format"] == {"type": "json_object", "value": schema}
    served = [r.input_tokens for r in llm.responses]
    assert served[1] > served[0] and served[3] > served[0]  # the fake counts them too


def test_the_budget_reserves_max_tokens(harness, llm):
    harness.start(mode="observe", policy=Policy(budget=Budget(window=2_000)))
    with make(llm) as client:
        client.chat_completion(HISTORY, model=MODEL, max_tokens=1_000)
        client.chat_completion(HISTORY, model=MODEL, max_tokens=1_990)
    fits, over = (s.attributes for s in guard_spans(harness))
    assert (fits["ctxguard.budget.window"], fits["ctxguard.budget.reserved_output"]) == (2_000, 1_000)
    assert over["ctxguard.budget.headroom"] < 0 < fits["ctxguard.budget.headroom"]
    assert [list(s["ctxguard.violations"]) for s in (fits, over)] == [[], ["payload_under_budget"]]


def test_a_model_set_on_the_client_is_not_read(harness, llm):
    """A known limit: a request is read from the call site's arguments alone, and the client's model is not
    among them (docs/supported.md)."""
    harness.start(mode="observe")
    with InferenceClient(model=llm.base_url, api_key="test") as client:  # a URL model: an endpoint
        client.chat_completion(HISTORY)
    a = only_guard_span(harness).attributes
    assert llm.bodies()[0]["model"] == "dummy"  # what the SDK sends to an endpoint named by its URL
    assert "gen_ai.request.model" not in a
    assert a["gen_ai.response.model"] == "dummy"
    assert (a["server.address"], a["server.port"]) == ("127.0.0.1", llm.port)


def test_a_call_past_the_call_site_is_guarded_from_the_wire_as_the_chat_completions_it_sends(harness, llm, caplog):
    """A bound method looked up before ``instrument()`` bypasses the wrapper; its request is still a
    model request by what it is (a POST to ``/v1/chat/completions`` of that API's shape), so it is
    guarded from the wire, read as the OpenAI-compatible request it is (label ``openai``: the
    router's host is not one the provider table names)."""
    with make(llm) as client:
        early = client.chat_completion
        with caplog.at_level("WARNING", logger="ctxguard"):
            harness.start(mode="observe")
            early(HISTORY, model=MODEL)
    span = only_guard_span(harness)
    assert span.attributes["ctxguard.guarded_at"] == "wire"
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert span.attributes["gen_ai.response.id"] == llm.responses[0].id
    assert any("bypassed its call site" in r.getMessage() for r in caplog.records)


def test_captured_bodies_are_judged_offline_like_live(tmp_path: Path, harness, llm):
    harness.start(mode="observe")
    path = tmp_path / "huggingface.jsonl"
    with make(llm) as client, record(str(path)), ctxguard.conversation("c-2"):
        ctxguard.record_fact("depot", "Pune depot")
        client.chat_completion([SYSTEM, {"role": "user", "content": "is it at the Pune depot?"}], model=MODEL)
        list(client.chat_completion([{"role": "user", "content": "and again"}], model=MODEL, stream=True))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    requests = [line for line in lines if "body" in line]
    assert [(r["provider"], r["sdk"]) for r in requests] == [("huggingface", "huggingface_hub")] * 2
    assert [r["body"] for r in requests] == llm.bodies()
    live = [list(s.attributes["ctxguard.violations"]) for s in guard_spans(harness)]
    assert live == [[], ["system_at_head", "fact_present"]]
    with path.open("rb") as f:
        results = [r for _, r in Checker().judge(read_capture(f, CAPTURED_PROVIDERS))]
    assert [sorted(c for c, outcome in r.outcomes.items() if outcome == "fail") for r in results] == [
        sorted(v) for v in live]


def _sites() -> dict[str, type]:
    return {f"{SYNC}.InferenceClient.chat_completion": InferenceClient,
            f"{ASYNC}.AsyncInferenceClient.chat_completion": AsyncInferenceClient}


def test_uninstall_restores_identity(harness):
    originals = {cls: vars(cls)["chat_completion"] for cls in _sites().values()}
    harness.start(mode="observe")
    assert all(vars(cls)["chat_completion"] is not fn for cls, fn in originals.items())
    ctxguard.uninstrument()
    assert all(vars(cls)["chat_completion"] is fn for cls, fn in originals.items())


def test_unsupported_version_logs_one_warning_and_is_left_untouched(harness, monkeypatch, caplog):
    from ctxguard import intercept

    monkeypatch.setattr(intercept, "_major", lambda distribution: 3 if distribution == "huggingface_hub" else 1)
    originals = {cls: vars(cls)["chat_completion"] for cls in _sites().values()}
    with caplog.at_level("WARNING", logger="ctxguard"):
        harness.start(mode="observe", providers=["huggingface_hub"])
    assert all(vars(cls)["chat_completion"] is fn for cls, fn in originals.items())
    warnings = [r for r in caplog.records if "huggingface_hub" in r.getMessage()]
    assert len(warnings) == 1 and "not supported" in warnings[0].getMessage()


def _call_sites() -> dict[str, object]:
    """Every public method of the two clients, and the OpenAI-style alias of each: what the audit decides."""
    found: dict[str, object] = {}
    for cls in (InferenceClient, AsyncInferenceClient):
        module = inspect.getmodule(cls)
        for name, value in vars(cls).items():
            if not name.startswith("_") and callable(value):
                found[f"{cls.__module__}.{cls.__qualname__}.{name}"] = value
        found[f"{cls.__module__}.ProxyClientChatCompletions.create"] = vars(module.ProxyClientChatCompletions)["create"]
    return found


def test_every_call_site_is_guarded_or_left_out_with_a_reason(harness):
    """The call-site audit of tests/providers/test_call_sites.py, for this SDK (docs/supported.md)."""
    harness.start(mode="observe")
    rows = _documented()
    sites = _call_sites()
    assert len(sites) > 10, "no call sites found: the introspection is broken"
    undocumented = [site for site in sites if _status(site, rows) is None]
    assert undocumented == [], "call sites of huggingface_hub neither guarded nor listed in docs/supported.md"
    for site, value in sites.items():
        status = _status(site, rows)
        if status == "guarded":
            assert _ours(value), f"{site} is documented as guarded but is not wrapped"
        elif status.startswith("through"):
            assert _status(status.split("`")[1], rows) == "guarded", site
        else:
            assert not _ours(value), f"{site} is wrapped but documented as {status!r}"
