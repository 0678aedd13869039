"""The OpenAI SDK, driven for real over loopback HTTP: what ctxguard records is what arrived."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import openai
import openai._base_client as _openai_base
import pytest
from openai.resources.chat.completions.completions import AsyncCompletions, Completions
from openai.resources.responses.responses import AsyncResponses, Responses
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

import ctxguard
from ctxguard.testing import FakeLLM, Reply
from ctxguard.testing.plugin import GuardHarness
from tests.conftest import guard_spans, message_digest, prose, redirected
from tests.events import violation_events

SYSTEM = {"role": "system", "content": "You are terse."}
HISTORY = [SYSTEM, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
           {"role": "user", "content": "where is my order?"}]


def only_span(harness: GuardHarness):
    spans = harness.spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def test_chat_span_matches_the_body_that_arrived(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("order-41"):
        reply = client.chat.completions.create(model="gpt-4o", messages=HISTORY, max_tokens=300)
    sent = llm.bodies("/chat/completions")[0]
    span = only_span(harness)
    a = span.attributes
    assert span.name == "chat gpt-4o"
    assert span.kind.name == "CLIENT"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == sent["model"]
    assert a["gen_ai.request.max_tokens"] == sent["max_tokens"] == 300
    assert a["gen_ai.conversation.id"] == "order-41"
    assert a["ctxguard.payload.messages"] == len(sent["messages"])
    assert list(a["ctxguard.message.roles"]) == [m["role"] for m in sent["messages"]]
    assert list(a["ctxguard.message.hashes"]) == [message_digest(m["role"], m["content"]) for m in sent["messages"]]
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.head.hash"] == message_digest("system", sent["messages"][0]["content"])
    assert a["ctxguard.payload.tokens_source"] in ("tiktoken", "estimate")
    assert a["ctxguard.payload.tokens"] > 0
    assert a["ctxguard.budget.window"] == 128_000
    assert a["ctxguard.budget.reserved_output"] == 300
    assert a["gen_ai.response.id"] == reply.id == llm.responses[0].id
    assert a["gen_ai.response.model"] == "gpt-4o"
    assert list(a["gen_ai.response.finish_reasons"]) == ["stop"]
    assert a["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens == llm.responses[0].input_tokens > 0
    assert a["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens == llm.responses[0].output_tokens > 0
    assert list(a["ctxguard.violations"]) == []
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 1


@pytest.mark.asyncio
async def test_async_chat_is_guarded(harness, llm, aclient):
    harness.start(mode="observe")
    reply = await aclient.chat.completions.create(model="gpt-4o", messages=HISTORY[1:])
    assert reply.choices[0].message.content == "ok 1"
    span = only_span(harness)
    assert list(span.attributes["ctxguard.violations"]) == ["system_at_head"]
    assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="openai") == 1


def _chunks(client, **kwargs):
    return [c.model_dump() for c in client.chat.completions.create(stream=True, **kwargs)]


def test_stream_output_identical_to_uninstrumented(harness, llm, client):
    kwargs = dict(model="gpt-4o", messages=HISTORY, stream_options={"include_usage": True})
    llm.script("the parcel is in Pune")
    plain = _chunks(client, **kwargs)
    harness.start(mode="observe")
    llm.script("the parcel is in Pune")
    guarded = _chunks(client, **kwargs)
    for chunks in (plain, guarded):
        for chunk in chunks:  # what differs between two answers of the service: id, time, random padding
            chunk.pop("id"), chunk.pop("created"), chunk.pop("obfuscation")
    assert guarded == plain
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in guarded if c["choices"]) == (
        "the parcel is in Pune"
    )
    span = only_span(harness)
    assert span.attributes["gen_ai.usage.input_tokens"] > 0
    assert list(span.attributes["gen_ai.response.finish_reasons"]) == ["stop"]
    assert isinstance(client.chat.completions.create(model="gpt-4o", messages=HISTORY, stream=True), openai.Stream)


@pytest.mark.asyncio
async def test_async_stream_output_unchanged_and_span_ends(harness, llm, aclient):
    harness.start(mode="observe")
    llm.script("streamed answer")
    stream = await aclient.chat.completions.create(model="gpt-4o", messages=HISTORY, stream=True)
    assert isinstance(stream, openai.AsyncStream)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "streamed answer"
    assert only_span(harness).attributes["gen_ai.response.id"] == llm.responses[0].id


def test_stream_helper_and_context_manager(harness, llm, client):
    harness.start(mode="observe")
    llm.script("helper text")
    with client.chat.completions.stream(model="gpt-4o", messages=HISTORY) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "helper text"
    assert only_span(harness).attributes["ctxguard.head.role"] == "system"
    harness.exporter.clear()
    with client.chat.completions.create(model="gpt-4o", messages=HISTORY, stream=True) as stream:
        next(iter(stream))
    assert len(harness.spans()) == 1, "closing a stream early still ends its span"


def test_responses_instructions_count_as_system(harness, llm, client):
    harness.start(mode="observe")
    reply = client.responses.create(model="gpt-4o", instructions="You are terse.", input="hi", max_output_tokens=50)
    assert reply.output_text == "ok 1"
    a = only_span(harness).attributes
    sent = llm.bodies("/responses")[0]
    assert sent["instructions"] == "You are terse."
    assert list(a["ctxguard.message.roles"]) == ["system", "user"]
    assert a["ctxguard.head.hash"] == message_digest("system", "You are terse.")
    assert a["gen_ai.request.max_tokens"] == 50
    assert list(a["ctxguard.violations"]) == []
    assert list(a["gen_ai.response.finish_reasons"]) == ["completed"]

    harness.exporter.clear()
    client.responses.create(model="gpt-4o", input=[{"role": "user", "content": "hi"}])
    assert list(only_span(harness).attributes["ctxguard.violations"]) == ["system_at_head"]

    harness.exporter.clear()
    client.responses.create(
        model="gpt-4o", input=[{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}]
    )
    assert list(only_span(harness).attributes["ctxguard.violations"]) == []


def test_responses_stream_and_helper(harness, llm, client):
    harness.start(mode="observe")
    llm.script("one", "two")
    events = list(client.responses.create(model="gpt-4o", instructions="sys", input="hi", stream=True))
    assert any(e.type == "response.completed" for e in events)
    with client.responses.stream(model="gpt-4o", instructions="sys", input="hi") as stream:
        assert stream.get_final_response().output_text == "two"
    spans = harness.spans()
    assert len(spans) == 2
    assert all(s.attributes["gen_ai.usage.input_tokens"] > 0 for s in spans)


class Answer(BaseModel):
    city: str


def test_parse_is_guarded_once(harness, llm, client):
    harness.start(mode="observe")
    llm.script('{"city": "Pune"}', '{"city": "Pune"}')
    parsed = client.chat.completions.parse(model="gpt-4o", messages=HISTORY, response_format=Answer)
    assert parsed.choices[0].message.parsed == Answer(city="Pune")
    resp = client.responses.parse(model="gpt-4o", instructions="sys", input="hi", text_format=Answer)
    assert resp.output_parsed == Answer(city="Pune")
    assert len(harness.spans()) == 2
    assert len(llm.requests) == 2


def test_provider_managed_history_is_skipped_not_guessed(harness, llm, client):
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
    with ctxguard.conversation("c"):
        client.responses.create(model="gpt-4o", instructions="sys", input="next", previous_response_id="resp_1")
    a = only_span(harness).attributes
    assert a["ctxguard.history.elsewhere"] == "history is provider-managed (previous_response_id)"
    assert "pinned_present: history is provider-managed (previous_response_id)" in a["ctxguard.checks.skipped"]
    assert "ctxguard.messages.dropped" not in a


def test_history_arguments_given_as_sentinels_are_not_given(harness, llm, client):
    """Wrappers forward optional arguments as the SDK's "not given" sentinels: those are absent,
    not a provider-managed history."""
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
    with ctxguard.conversation("c"):
        client.responses.create(model="gpt-4o", instructions="sys", input="next",
                                previous_response_id=openai.NOT_GIVEN, conversation=openai.omit)
    a = only_span(harness).attributes
    assert "ctxguard.history.elsewhere" not in a
    assert a["ctxguard.head.role"] == "system"
    assert "pinned_present" in a["ctxguard.violations"]  # judged, not skipped: there is no pinned block


def test_enforce_mode_sends_nothing(harness, llm, client):
    harness.start(mode="enforce")
    with pytest.raises(ctxguard.ContextViolation) as info:
        client.chat.completions.create(model="gpt-4o", messages=HISTORY[1:])
    assert [v.check for v in info.value.violations] == ["system_at_head"]
    assert llm.requests == []
    assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 1
    span = only_span(harness)
    assert span.attributes["error.type"] == "ContextViolation"
    client.chat.completions.create(model="gpt-4o", messages=HISTORY)
    assert len(llm.requests) == 1


def test_observe_mode_never_raises_on_violation(harness, llm, client):
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
    reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert reply.choices[0].message.content == "ok 1"
    assert harness.metric("ctxguard_violations_total", check="pinned_present", provider="openai") == 1


def test_sdk_errors_pass_through_unchanged(harness, llm, client):
    harness.start(mode="observe")
    llm.script(Reply(status=429, text="slow down"))
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="gpt-4o", messages=HISTORY)
    assert info.value.status_code == 429
    span = only_span(harness)
    assert span.attributes["error.type"] == "RateLimitError"
    assert span.status.status_code == StatusCode.ERROR


def test_a_tool_result_the_service_refuses_passes_its_error_through_and_fails_the_call(harness, llm, client):
    """A history trimmed through a tool exchange, sent anyway (observe): OpenAI refuses the orphan
    tool result (400). The SDK's ``BadRequestError`` reaches the app as the SDK raised it, and the
    call is recorded failed, the orphan named by ``tool_pairs_intact``."""
    harness.start(mode="observe")
    messages = [SYSTEM, {"role": "user", "content": "where is order A-1041?"},
                {"role": "tool", "tool_call_id": "call_trimmed", "content": "shipped"},
                {"role": "user", "content": "and when will it arrive?"}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4o", messages=messages)
    served = llm.responses[0]
    assert (info.value.status_code, served.status) == (400, 400)
    assert info.value.request_id == served.request_id
    assert isinstance(info.value.body, dict) and info.value.body["param"] == "messages.[2].role"
    span = only_span(harness)
    assert span.attributes["error.type"] == "BadRequestError"
    assert span.status.status_code == StatusCode.ERROR
    assert "tool_pairs_intact" in span.attributes["ctxguard.violations"]


def test_raw_response_wrapper_still_works(harness, llm, client):
    harness.start(mode="observe")
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=HISTORY)
    assert raw.http_response.status_code == 200
    assert raw.parse().choices[0].message.content == "ok 1"
    assert len(harness.spans()) == 1


ORIGINALS = {
    (cls, name): cls.__dict__[name]
    for cls in (Completions, AsyncCompletions, Responses, AsyncResponses)
    for name in ("create", "parse")
}


def test_uninstrument_restores_identity_and_instrument_is_idempotent(harness, llm, client):
    first = harness.start(mode="observe")
    assert all(cls.__dict__[name] is not fn for (cls, name), fn in ORIGINALS.items())
    assert ctxguard.instrument() is first
    client.chat.completions.create(model="gpt-4o", messages=HISTORY)
    assert len(harness.spans()) == 1, "a second instrument() must not double-wrap"
    ctxguard.uninstrument()
    assert all(cls.__dict__[name] is fn for (cls, name), fn in ORIGINALS.items())
    client.chat.completions.create(model="gpt-4o", messages=HISTORY)
    assert len(harness.spans()) == 1
    ctxguard.uninstrument()  # twice is harmless too


def test_instrument_before_importing_openai(tmp_path):
    with FakeLLM() as llm:
        script = textwrap.dedent(f"""
            import sys
            import ctxguard
            from prometheus_client import CollectorRegistry
            registry = CollectorRegistry()
            assert "openai" not in sys.modules, "importing ctxguard must not import an SDK"
            ctxguard.instrument(registry=registry, digest_key="k")
            import openai
            client = openai.OpenAI(base_url="{llm.base_url}", api_key="x", max_retries=0)
            client.chat.completions.create(model="gpt-4o", messages=[{{"role": "user", "content": "hi"}}])
            print(registry.get_sample_value("ctxguard_violations_total",
                                            {{"check": "system_at_head", "provider": "openai"}}))
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"


def test_disabled_by_environment(monkeypatch, client):
    monkeypatch.setenv("CTXGUARD_DISABLED", "1")
    assert ctxguard.instrument() is None
    assert Completions.__dict__["create"] is ORIGINALS[(Completions, "create")]


def test_per_message_lists_stop_at_128_and_say_so(harness, client):
    harness.start(mode="observe")
    for n in (128, 129):
        messages = [{"role": "user", "content": f"m{i}"} for i in range(n)]
        client.chat.completions.create(model="gpt-4o", messages=messages)
        a = harness.spans()[-1].attributes
        assert a["ctxguard.payload.messages"] == n
        assert len(a["ctxguard.message.roles"]) == len(a["ctxguard.message.hashes"]) == 128
        assert a.get("ctxguard.message.truncated", False) is (n > 128)


def test_the_span_is_current_while_sending_and_the_apps_span_is_current_again_after(harness, llm):
    """HTTP-level spans nest under ctxguard's; once the call returns (or raises, or hands back a
    stream) the app's own span is current again, as it was before."""
    http = getattr(_openai_base, "httpx2", None) or _openai_base.httpx
    harness.start(mode="observe")
    during: list[trace.Span] = []
    hooks = {"request": [lambda request: during.append(trace.get_current_span())]}
    app = harness.tracer_provider.get_tracer("app")
    llm.script("one", Reply(status=429, text="slow down"), "three")
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks=hooks)) as client, \
            app.start_as_current_span("app request") as outer:
        client.chat.completions.create(model="gpt-4o", messages=HISTORY)
        assert trace.get_current_span() is outer
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="gpt-4o", messages=HISTORY)
        assert trace.get_current_span() is outer
        stream = client.chat.completions.create(model="gpt-4o", messages=HISTORY, stream=True)
        assert trace.get_current_span() is outer
        for _ in stream:
            assert trace.get_current_span() is outer
        assert trace.get_current_span() is outer
    ours = [s for s in harness.spans() if s.name == "chat gpt-4o"]
    assert [s.context.span_id for s in during] == [s.context.span_id for s in ours]
    assert all(s.parent is not None and s.parent.span_id == outer.get_span_context().span_id for s in ours)


def test_empty_responses_instructions_are_no_instruction(harness, llm, client):
    harness.start(mode="observe")
    client.responses.create(model="gpt-4o", instructions="", input="hi")
    a = harness.spans()[-1].attributes
    assert a["ctxguard.head.role"] == "user"
    assert list(a["ctxguard.violations"]) == ["system_at_head"]


#: About 280 tokens of English.
PROSE = "The parcel left the depot in Lyon on Monday and reached the sorting centre in Pune on Friday. " * 14
TURNS = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + PROSE} for i in range(12)]


def kept_all(harness: GuardHarness) -> list[str]:
    """Each call's ``provider_kept_all`` outcome, read off its span."""
    outcomes = []
    for span in harness.spans():
        if any(e.attributes.get("check") == "provider_kept_all" for e in violation_events(span)):
            outcomes.append("fail")
        elif any(s.startswith("provider_kept_all: ") for s in span.attributes.get("ctxguard.checks.skipped", ())):
            outcomes.append("skip")
        else:
            outcomes.append("pass")
    return outcomes


def test_responses_truncation_auto_that_drops_the_oldest_items_fails_provider_kept_all(harness, llm, client):
    """The Responses API with ``truncation="auto"`` drops the oldest input items of a request over the
    model's window and answers 200, its ``usage.input_tokens`` what it kept. Judged on the answer, so
    even in enforce mode the request went (nothing to block: it was sent); the next call, trimmed
    by the app, fits and passes. With ``previous_response_id`` the server adds history: not judged."""
    llm.windows["openai.responses"] = 1000  # the model's window, played small
    harness.start(mode="enforce")
    with ctxguard.conversation("order-41"):
        cut = client.responses.create(model="gpt-4o", instructions="You are terse.", input=TURNS, truncation="auto")
        assert cut.usage is not None and cut.usage.input_tokens == llm.responses[0].input_tokens <= 1000
        assert llm.responses[0].truncated_tokens > 0
        client.responses.create(model="gpt-4o", instructions="You are terse.", input=TURNS[-2:], truncation="auto")
        client.responses.create(model="gpt-4o", instructions="You are terse.", input="and now?",
                                previous_response_id=cut.id, truncation="auto")
    assert len(llm.requests) == 3 and llm.responses[1].truncated_tokens == 0
    assert kept_all(harness) == ["fail", "pass", "skip"]
    first, _, elsewhere = harness.spans()
    assert list(first.attributes["ctxguard.violations"]) == ["provider_kept_all"]
    detail = next(e.attributes["detail"] for e in violation_events(first)
                  if e.attributes["check"] == "provider_kept_all")
    assert detail.startswith(f"{cut.usage.input_tokens:,} input tokens reported for ")
    assert "provider_kept_all: history is provider-managed (previous_response_id)" in elsewhere.attributes[
        "ctxguard.checks.skipped"]
    assert harness.metric("ctxguard_violations_total", check="provider_kept_all", provider="openai") == 1
    assert harness.metric("ctxguard_blocked_total", check="provider_kept_all") == 0


def test_an_openai_compatible_server_that_keeps_the_last_tokens_fails_provider_kept_all(harness, llm, client):
    """A vLLM- or TGI-style server at its maximum length keeps the last tokens of a longer prompt (the
    system prompt and the task at its front go) and reports that count, here in a stream's usage
    chunk; the next call, which fits, passes. The model is one the window table does not know, so
    the budget could not say it before sending."""
    llm.windows["openai.chat"] = 1024
    harness.start(mode="observe")
    messages = [SYSTEM, *TURNS, {"role": "user", "content": "where is my order?"}]
    stream = client.chat.completions.create(model="acme/llama-3.1-8b-ft", messages=messages, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"truncate_prompt_tokens": 1024})
    usage = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert usage[0].prompt_tokens == llm.responses[0].input_tokens == 1024
    client.chat.completions.create(model="acme/llama-3.1-8b-ft", messages=[SYSTEM, messages[-1]])
    assert kept_all(harness) == ["fail", "pass"]
    cut = harness.spans()[0].attributes
    assert "payload_under_budget: unknown context window" in " ".join(cut["ctxguard.checks.skipped"])
    assert list(cut["ctxguard.violations"]) == ["provider_kept_all"]
    assert harness.metric("ctxguard_checks_total", check="provider_kept_all", outcome="fail") == 1


def test_a_claude_model_on_an_openai_compatible_route_is_counted_by_its_own_tokenizer(harness, llm, client):
    """A tokenizer is the model's, not its API's: Claude Sonnet 5 through the openai SDK (Anthropic's
    OpenAI SDK compatibility, ``claude-sonnet-5``; OpenRouter's id, ``anthropic/claude-sonnet-5``, on
    Chat Completions and on Responses) is counted at its tokenizer's ratio on its first call, as through
    the anthropic SDK: a prompt of 85% of the window by cl100k's count is over it, and
    ``payload_under_budget`` says so. The fake reports Claude's own count, ~1.3 times Sonnet 4.5's, as
    the compatibility layer does. Sonnet 4.5 on the same route is counted as before, as gpt-4o's
    request is (cl100k's reading): it fits. Before, only the anthropic, Bedrock and LiteLLM adapters
    read Claude's ratio: this route was ~23% low, and the over-window request passed."""
    from ctxguard.tokens import default_counter

    window = 20_000
    text = prose(int(window * 0.85))
    assert 0.8 * window < default_counter().count(text) < 0.9 * window
    harness.start(mode="observe", policy=ctxguard.Policy(budget=ctxguard.Budget(window=window)))
    messages = [SYSTEM, {"role": "user", "content": text}]
    for model in ("claude-sonnet-5", "anthropic/claude-sonnet-5", "claude-sonnet-4-5", "gpt-4o"):
        client.chat.completions.create(model=model, messages=messages, max_tokens=100)
    client.responses.create(model="anthropic/claude-sonnet-5", instructions=SYSTEM["content"], input=text,
                            max_output_tokens=100)
    newer, openrouter, older, gpt, responses = (s.attributes for s in guard_spans(harness))
    for a in (newer, openrouter, responses):
        assert list(a["ctxguard.violations"]) == ["payload_under_budget"], a["gen_ai.request.model"]
        assert a["ctxguard.payload.tokens"] > window
        assert a["ctxguard.payload.tokens_source"] == default_counter().name  # at the ratio, not learnt
        assert a["gen_ai.usage.input_tokens"] > 1.25 * older["gen_ai.usage.input_tokens"]  # Claude's own count
    assert list(older["ctxguard.violations"]) == [] == list(gpt["ctxguard.violations"])
    assert older["ctxguard.payload.tokens"] == gpt["ctxguard.payload.tokens"] < window
    assert older["gen_ai.usage.input_tokens"] == gpt["gen_ai.usage.input_tokens"]


COMPAT_TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name.capitalize()} an order by its number.",
    "parameters": {"type": "object", "properties": {"order": {"type": "string", "description": "the order number"}},
                   "required": ["order"]}}} for name in ("lookup", "track")]
COMPAT_EXCHANGE = [
    {"role": "system", "content": "You are the order assistant.\nAnswer in English."},
    {"role": "user", "content": "where is my parcel?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"order": "A-1041"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "in the Pune depot since Monday"},
    {"role": "user", "content": "and when will it reach Mumbai?"},
]


def compat_client(llm: FakeLLM, base_url: str) -> openai.OpenAI:
    """An openai client whose base URL is a provider's OpenAI-compatible endpoint, answered by the fake."""
    return openai.OpenAI(base_url=base_url, api_key="t", max_retries=0, http_client=redirected(llm))


@pytest.mark.parametrize("role", ["system", "developer"])
def test_a_claude_chat_call_to_anthropics_openai_endpoint_is_counted_as_the_anthropic_sdks_call(harness, llm, role):
    """Anthropic's OpenAI SDK compatibility reads the Chat Completions request as a Messages request to
    Claude: the system (or developer) messages in ``system``, the tool's result in a user turn, the
    function tools as Claude's, which its tool-use system prompt renders. Counted as the anthropic SDK's
    call of those messages and tools is, not with OpenAI Chat's accounting; label and server as before."""
    anthropic = pytest.importorskip("anthropic")
    harness.start(mode="observe")
    messages = [{**COMPAT_EXCHANGE[0], "role": role}, *COMPAT_EXCHANGE[1:]]
    with compat_client(llm, "https://api.anthropic.com/v1/") as client:
        client.chat.completions.create(model="claude-sonnet-4-5", messages=messages, tools=COMPAT_TOOLS,
                                       max_tokens=50)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"], "type": "custom"} for t in COMPAT_TOOLS]
    native = anthropic.Anthropic(api_key="t", base_url=llm.anthropic_base_url)
    native.messages.create(model="claude-sonnet-4-5", max_tokens=50, tools=tools,
                           system=[{"type": "text", "text": COMPAT_EXCHANGE[0]["content"]}], messages=[
                               {"role": "user", "content": [{"type": "text", "text": "where is my parcel?"}]},
                               {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1",
                                                                  "name": "lookup", "input": {"order": "A-1041"}}]},
                               {"role": "user", "content": [
                                   {"type": "tool_result", "tool_use_id": "call_1",
                                    "content": "in the Pune depot since Monday"},
                                   {"type": "text", "text": "and when will it reach Mumbai?"}]}])
    routed, sdk = (s.attributes for s in guard_spans(harness))
    assert routed["ctxguard.payload.tokens"] == sdk["ctxguard.payload.tokens"]
    assert list(routed["ctxguard.message.roles"]) == list(sdk["ctxguard.message.roles"])
    assert list(routed["ctxguard.message.hashes"]) == list(sdk["ctxguard.message.hashes"])
    assert (routed["gen_ai.provider.name"], routed["server.address"]) == ("anthropic", "api.anthropic.com")
    assert list(routed["ctxguard.violations"]) == []  # wire_intact among them: the body sent is the app's


def test_a_chat_call_to_mistrals_endpoint_is_counted_as_the_mistralai_sdks_call(harness, llm):
    """Mistral's chat completions read OpenAI's messages and tools as they are, rendered by Mistral's
    own template: counted as the mistralai SDK's call of the same messages and tools is."""
    mistral = pytest.importorskip("mistralai.client")
    harness.start(mode="observe")
    with compat_client(llm, "https://api.mistral.ai/v1") as client:
        client.chat.completions.create(model="mistral-large-latest", messages=COMPAT_EXCHANGE, tools=COMPAT_TOOLS,
                                       max_tokens=50, seed=3)
    with mistral.Mistral(api_key="t", server_url=llm.mistral_base_url) as native:
        native.chat.complete(model="mistral-large-latest", messages=COMPAT_EXCHANGE, tools=COMPAT_TOOLS,
                             max_tokens=50, random_seed=3)
    routed, sdk = (s.attributes for s in guard_spans(harness))
    for key in ("ctxguard.payload.tokens", "ctxguard.budget.reserved_output", "gen_ai.request.seed"):
        assert routed[key] == sdk[key], key
    assert list(routed["ctxguard.message.hashes"]) == list(sdk["ctxguard.message.hashes"])
    assert (routed["gen_ai.provider.name"], routed["server.address"]) == ("mistral_ai", "api.mistral.ai")
    assert list(routed["ctxguard.violations"]) == []


def test_a_cohere_request_over_its_window_by_coheres_accounting_fails_on_its_first_call(harness, llm):
    """Cohere's Compatibility API serves its Command models' chat: Cohere renders a preamble, its tool-use
    instructions and the tools into the prompt, some 1,000 tokens here where OpenAI Chat's accounting
    counts ~100. A request that leaves room by OpenAI's count and none by Cohere's fails
    ``payload_under_budget`` on its first call, and enforce mode refuses it unsent."""
    harness.start(mode="enforce")
    with compat_client(llm, "https://api.cohere.ai/compatibility/v1") as client, \
            pytest.raises(ctxguard.ContextViolation):
        client.chat.completions.create(model="command-r-plus-08-2024", messages=COMPAT_EXCHANGE[:2],
                                       tools=COMPAT_TOOLS, max_tokens=128_000 - 500)
    assert llm.requests == []
    a = guard_spans(harness)[0].attributes
    assert list(a["ctxguard.violations"]) == ["payload_under_budget"]
    assert a["ctxguard.budget.window"] == 128_000 and a["ctxguard.payload.tokens"] > 500
    assert (a["gen_ai.provider.name"], a["server.address"]) == ("cohere", "api.cohere.ai")


def test_a_plain_openai_call_and_responses_anywhere_keep_openais_accounting(harness, llm):
    """api.openai.com, a server of no known provider, and the Responses API on any route: OpenAI's own
    accounting, as before."""
    from ctxguard.providers.openai import ADAPTER

    harness.start(mode="observe")
    for base_url in ("https://api.openai.com/v1", llm.base_url):
        with compat_client(llm, base_url) as client:
            client.chat.completions.create(model="gpt-4o", messages=COMPAT_EXCHANGE, tools=COMPAT_TOOLS,
                                           max_tokens=50)
    known, unknown = (s.attributes for s in guard_spans(harness))
    assert known["gen_ai.provider.name"] == "openai"
    for key in ("ctxguard.payload.tokens", "ctxguard.message.hashes", "ctxguard.message.roles"):
        assert known[key] == unknown[key], key
    assert ADAPTER.for_route("openai") is ADAPTER and ADAPTER.for_route("groq") is ADAPTER
    # Bedrock's OpenAI endpoint (``openai.BedrockOpenAI``: aws.bedrock) serves OpenAI Chat Completions
    # itself: not read as the Converse request LiteLLM's bedrock route writes, though both are aws.bedrock.
    assert ADAPTER.for_route("aws.bedrock") is ADAPTER
    kwargs = {"model": "some-model", "instructions": "Be brief.", "input": "hi", "tools": COMPAT_TOOLS}
    own = ADAPTER.normalise("responses", kwargs)
    for label in ("anthropic", "mistral_ai", "cohere"):
        routed = ADAPTER.for_route(label).normalise("responses", kwargs)
        assert (routed.items, routed.tools, routed.prompt_overhead, routed.message_framing) == (
            own.items, own.tools, own.prompt_overhead, own.message_framing), label
