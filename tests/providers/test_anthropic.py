"""The Anthropic SDK, driven for real over loopback HTTP."""

from __future__ import annotations

import inspect

import anthropic
import pytest
from anthropic.resources.messages.messages import AsyncMessages, Messages

import ctxguard
from ctxguard.digest import Digester
from ctxguard.testing import Reply
from tests.conftest import KEY, message_digest, prose

SYSTEM = "You are the order assistant."
MESSAGES = [{"role": "user", "content": "where is my parcel?"}]


@pytest.fixture
def claude(llm):
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


def only(harness, name_prefix="chat"):
    spans = [s for s in harness.spans() if s.attributes.get("ctxguard.payload.hash")]
    assert len(spans) == 1, [s.name for s in harness.spans()]
    return spans[0]


def test_system_parameter_is_the_head_and_span_matches_the_body(harness, llm, claude):
    harness.start(mode="observe")
    with ctxguard.conversation("c1"):
        reply = claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=300, system=SYSTEM,
                                       messages=MESSAGES)
    assert reply.content[0].text == "ok 1"
    sent = llm.bodies("/messages")[0]
    a = only(harness).attributes
    assert a["gen_ai.provider.name"] == "anthropic"
    assert a["gen_ai.request.model"] == sent["model"]
    assert list(a["ctxguard.message.roles"]) == ["system", "user"]
    assert list(a["ctxguard.message.hashes"]) == [
        message_digest("system", sent["system"]), message_digest("user", sent["messages"][0]["content"])]
    assert a["ctxguard.budget.window"] == 200_000
    assert a["ctxguard.budget.reserved_output"] == 300
    assert a["gen_ai.response.id"] == reply.id == llm.responses[0].id
    assert list(a["gen_ai.response.finish_reasons"]) == ["end_turn"]
    assert a["gen_ai.usage.input_tokens"] == reply.usage.input_tokens == llm.responses[0].input_tokens > 0
    assert list(a["ctxguard.violations"]) == []
    assert harness.metric("ctxguard_calls_total", provider="anthropic", operation="chat") == 1


def test_missing_system_fails_and_enforce_sends_nothing(harness, llm, claude):
    harness.start(mode="enforce")
    with pytest.raises(ctxguard.ContextViolation):
        claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=100, messages=MESSAGES)
    assert llm.requests == []
    assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 1
    claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=100, messages=MESSAGES,
                           system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}])
    assert len(llm.requests) == 1


def test_content_blocks_tools_and_images_are_read(harness, llm, claude):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("order_id", "A-1041")
        claude.messages.create(
            model="claude-sonnet-4-20250514", max_tokens=200, system=SYSTEM,
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                             {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                          "data": "iVBORw0KGgo" * 50}}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "lookup",
                                                   "input": {"order": "A-1041"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                              "content": '{"status": "shipped"}'}]},
            ],
        )
    a = only(harness).attributes
    assert list(a["ctxguard.message.roles"]) == ["system", "user", "assistant", "user"]
    assert list(a["ctxguard.facts.present"]) == ["order_id@1"]  # found in the tool_use input
    assert "iVBORw0KGgo" not in str(dict(a))


def test_thinking_is_drawn_from_max_tokens_and_reply_room_is_reported(harness, llm, claude):
    harness.start(mode="observe")
    claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=4000, system=SYSTEM, messages=MESSAGES,
                           thinking={"type": "enabled", "budget_tokens": 3500})
    a = only(harness).attributes
    assert a["ctxguard.budget.reserved_output"] == 4000
    assert a["ctxguard.budget.reserved_reasoning"] == 0
    assert a["ctxguard.budget.reply_room"] == 500
    assert a["ctxguard.budget.reply_room_low"] is True


@pytest.mark.parametrize(("thinking", "low"), [(3000, False), (3001, True)])
def test_reply_room_is_low_under_a_quarter_of_max_tokens(harness, llm, claude, thinking, low):
    harness.start(mode="observe")
    claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=4000, system=SYSTEM, messages=MESSAGES,
                           thinking={"type": "enabled", "budget_tokens": thinking})
    a = only(harness).attributes
    assert a["ctxguard.budget.reply_room"] == 4000 - thinking
    assert a["ctxguard.budget.reply_room_low"] is low


def test_stream_true_output_identical_to_uninstrumented(harness, llm, claude):
    kwargs = dict(model="claude-sonnet-4-20250514", max_tokens=100, system=SYSTEM, messages=MESSAGES, stream=True)
    llm.script("parcel in Pune")
    plain = [e.model_dump() for e in claude.messages.create(**kwargs)]
    harness.start(mode="observe")
    llm.script("parcel in Pune")
    guarded = [e.model_dump() for e in claude.messages.create(**kwargs)]
    for events in (plain, guarded):
        for e in events:
            if e["type"] == "message_start":
                e["message"].pop("id")
    assert guarded == plain
    a = only(harness).attributes
    assert a["gen_ai.usage.input_tokens"] > 0
    assert list(a["gen_ai.response.finish_reasons"]) == ["end_turn"]


def test_a_stream_ends_its_span_as_message_stop_passes(harness, llm, claude):
    """``message_stop`` is the answer's last event: the call ends as it passes, before the stream is
    exhausted (an instrumentation above ctxguard may end the span ctxguard adopted right there)."""
    harness.start(mode="observe")
    for event in claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=100, system=SYSTEM,
                                        messages=MESSAGES, stream=True):
        if event.type == "message_stop":
            a = only(harness).attributes
            break
    assert a["gen_ai.response.id"] == llm.responses[0].id and a["gen_ai.usage.output_tokens"] > 0
    assert "ctxguard.stream.abandoned" not in a


def test_stream_helper_text_unchanged_and_span_completed(harness, llm, claude):
    harness.start(mode="observe")
    llm.script("it ships to Mumbai")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("city", "Mumbai")
        ctxguard.record_fact("city", "Pune")
        with claude.messages.stream(model="claude-sonnet-4-20250514", max_tokens=100, system=SYSTEM,
                                    messages=[{"role": "user", "content": "to Pune please"}]) as stream:
            text = "".join(stream.text_stream)
    assert text == "it ships to Mumbai"
    # The helper sends on __enter__, after the wrapped call returned: the manager proxy keeps
    # the call in flight there, so the body sent is judged.
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1
    a = only(harness).attributes
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[0].body)
    assert a["gen_ai.response.id"] == llm.responses[0].id
    assert list(a["ctxguard.violations"]) == ["answer_consistent"]


@pytest.mark.parametrize("read", [0, 2], ids=["unread", "two-events"])
def test_a_stream_helper_left_before_its_end_is_abandoned_not_an_internal_error(harness, llm, claude, read):
    """``with claude.messages.stream(...)`` left without reading (or after two events): the SDK's
    snapshot property asserts it has one; the call ends abandoned with what it said so far, and
    no internal error is counted (every app that cancels a stream would page the operator)."""
    harness.start(mode="observe")
    llm.script("it ships to Mumbai tomorrow")
    with claude.messages.stream(model="claude-sonnet-4-20250514", max_tokens=100, system=SYSTEM,
                                messages=MESSAGES) as stream:
        for _, _event in zip(range(read), stream, strict=False):
            pass
    a = only(harness).attributes
    assert a["ctxguard.stream.abandoned"] is True, dict(a)
    assert harness.metric("ctxguard_guard_errors_total", where="stream") == 0


def test_stream_helper_blocked_before_sending_in_enforce_mode(harness, llm, claude):
    harness.start(mode="enforce")
    with pytest.raises(ctxguard.ContextViolation):
        claude.messages.stream(model="claude-sonnet-4-20250514", max_tokens=100, messages=MESSAGES)
    assert llm.requests == []


@pytest.mark.asyncio
async def test_async_create_and_stream_helper(harness, llm):
    harness.start(mode="observe")
    llm.script("one", "two")
    async with anthropic.AsyncAnthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        reply = await c.messages.create(model="claude-sonnet-4-20250514", max_tokens=50, messages=MESSAGES)
        async with c.messages.stream(model="claude-sonnet-4-20250514", max_tokens=50, system=SYSTEM,
                                     messages=MESSAGES) as stream:
            final = await stream.get_final_message()
    assert reply.content[0].text == "one"
    assert final.content[0].text == "two"
    spans = [s for s in harness.spans() if s.attributes.get("ctxguard.payload.hash")]
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [["system_at_head"], []]
    assert [s.attributes["ctxguard.wire.hash"] for s in spans] == [Digester(KEY).bytes(r.body) for r in llm.requests]


def test_sdk_errors_pass_through(harness, llm, claude):
    harness.start(mode="observe")
    llm.script(Reply(status=529, text="overloaded"))
    with pytest.raises(anthropic.APIStatusError) as info:
        claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=10, system=SYSTEM, messages=MESSAGES)
    assert info.value.status_code == 529


@pytest.mark.skipif("open_telemetry" not in inspect.signature(anthropic.Anthropic.__init__).parameters,
                    reason="this anthropic release records no spans of its own (0.x)")
def test_anthropics_own_span_is_a_child_of_ctxguards(harness, llm):
    """The chosen behaviour: one ctxguard CLIENT span per call; the SDK's span nests under it."""
    harness.start(mode="observe")
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0,
                             open_telemetry={"tracer_provider": harness.tracer_provider}) as c:
        c.messages.create(model="claude-sonnet-4-20250514", max_tokens=10, system=SYSTEM, messages=MESSAGES)
    spans = harness.spans()
    ours = [s for s in spans if s.attributes.get("ctxguard.payload.hash")]
    theirs = [s for s in spans if not s.attributes.get("ctxguard.payload.hash")]
    assert len(ours) == 1
    assert theirs, "the anthropic SDK records its own span"
    assert all(s.parent is not None and s.parent.span_id == ours[0].context.span_id for s in theirs)
    # The SDK's span, beneath ctxguard's, records the usage: ctxguard's leaves it out.
    assert [s.instrumentation_scope.name for s in spans if "gen_ai.usage.output_tokens" in s.attributes] == [
        "com.anthropic.sdk.python"]


@pytest.mark.skipif("open_telemetry" not in inspect.signature(anthropic.Anthropic.__init__).parameters,
                    reason="this anthropic release records no spans of its own (0.x)")
def test_a_stream_managers_usage_stays_on_ctxguards_span(harness, llm):
    """``messages.stream`` returns a manager, and ctxguard's span stops being current then; the SDK
    sends in ``__enter__``, where its own span opens as the root of another trace. That span is
    not beneath ctxguard's, so ctxguard's keeps the usage: each trace has one span with it
    (before, ctxguard's span left it to the SDK's and its trace had none)."""
    harness.start(mode="observe")
    c = anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0,
                            open_telemetry={"tracer_provider": harness.tracer_provider})
    with c, c.messages.stream(model="claude-sonnet-4-20250514", max_tokens=10, system=SYSTEM,
                              messages=MESSAGES) as stream:
        stream.get_final_message()
    (ours,) = [s for s in harness.spans() if s.attributes.get("ctxguard.payload.hash")]
    (theirs,) = [s for s in harness.spans() if s.instrumentation_scope.name == "com.anthropic.sdk.python"]
    assert theirs.parent is None and theirs.context.trace_id != ours.context.trace_id
    assert ours.attributes["gen_ai.usage.input_tokens"] == llm.responses[0].input_tokens
    assert ours.attributes["gen_ai.usage.output_tokens"] == llm.responses[0].output_tokens


def test_bad_input_never_crashes(harness, llm, claude):
    harness.start(mode="observe")
    claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=10, system=SYSTEM, messages=[])
    assert list(harness.spans()[-1].attributes["ctxguard.message.roles"]) == ["system"]
    claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=10, system=[], messages=MESSAGES)
    assert list(harness.spans()[-1].attributes["ctxguard.violations"]) == ["system_at_head"]


def test_uninstrument_restores_anthropic_identity(harness):
    originals = {(cls, n): cls.__dict__[n] for cls in (Messages, AsyncMessages) for n in ("create", "stream")}
    harness.start(mode="observe")
    assert all(cls.__dict__[n] is not fn for (cls, n), fn in originals.items())
    ctxguard.uninstrument()
    assert all(cls.__dict__[n] is fn for (cls, n), fn in originals.items())


def test_a_request_over_its_window_by_claudes_newer_tokenizer_fails_on_its_first_call(harness, llm, claude):
    """Claude Sonnet 5 reads text at ~1.3 times cl100k's count (``anthropic.text_scale``): a prompt of
    85% of the window by cl100k's count is over it on Sonnet 5, and ``payload_under_budget`` says so on
    the first call, before any answer has calibrated the model; the fake, answering as Anthropic does,
    reports ~1.3 times as many tokens as for Sonnet 4.6. The same prompt to Sonnet 4.6 (cl100k's
    reading) fits. Before, the count was cl100k's on every Claude: the over-window request passed."""
    from ctxguard.budget import Budget
    from ctxguard.policy import Policy
    from ctxguard.tokens import default_counter
    from tests.conftest import guard_spans

    window = 20_000
    text = prose(int(window * 0.85))
    assert 0.8 * window < default_counter().count(text) < 0.9 * window
    harness.start(mode="observe", policy=Policy(budget=Budget(window=window)))
    for model in ("claude-sonnet-5", "claude-sonnet-4-6"):
        claude.messages.create(model=model, max_tokens=100, system=SYSTEM, messages=[{"role": "user", "content": text}])
    newer, older = (s.attributes for s in guard_spans(harness))
    assert list(newer["ctxguard.violations"]) == ["payload_under_budget"]
    assert newer["ctxguard.payload.tokens"] > window
    assert newer["ctxguard.payload.tokens_source"] == default_counter().name  # at the ratio, not learnt
    assert list(older["ctxguard.violations"]) == []
    assert older["ctxguard.payload.tokens"] < window
    # The fake reads the same text at 1.3 on Sonnet 5, as Anthropic reports it.
    assert newer["gen_ai.usage.input_tokens"] > 1.25 * older["gen_ai.usage.input_tokens"]
