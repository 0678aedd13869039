"""The real openai and anthropic SDKs send built payloads to the fake server, in enforce mode:
any failed check would raise ContextViolation before the request left."""

from __future__ import annotations

import anthropic
import pytest

import ctxguard
from tests.builder.helpers import anthropic_problems, openai_orphans

SYSTEM = "You are the order assistant."
BUDGET = ctxguard.Budget(reserved_output=300)
PINNED = ctxguard.Pinned(max_tokens=150)


@pytest.fixture
def claude(llm):
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


def start(harness):
    return harness.start(mode="enforce", policy=ctxguard.Policy(pinned=PINNED, budget=BUDGET))


def test_openai_sdk_sends_every_built_payload(harness, llm, client):
    start(harness)
    builder = ctxguard.ContextBuilder("gpt-4o", system=SYSTEM, budget=BUDGET, pinned=PINNED, tail_tokens=250,
                                      retrieved_tokens=120)
    history: list[dict] = []
    with ctxguard.conversation("sdk-openai"):
        ctxguard.record_fact("order_id", "A-1041")
        for turn in range(25):
            if turn == 7:
                ctxguard.record_fact("shipping_city", "Pune")
            text = f"turn {turn}: where is order A-1041, the one going to the warehouse?"
            messages = builder.build(history, text, summary="Order A-1041 is being tracked.")
            reply = client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=300)
            call_id = f"call_{turn}"
            history += [
                {"role": "user", "content": text},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "track", "arguments": '{"o": 1}'}}]},
                {"role": "tool", "tool_call_id": call_id, "content": "in transit " * 5},
                {"role": "assistant", "content": reply.choices[0].message.content},
            ]
    bodies = llm.bodies("/chat/completions")
    assert len(bodies) == 25
    assert all(openai_orphans(body["messages"]) == [] for body in bodies)
    assert "shipping_city: Pune" in bodies[-1]["messages"][1]["content"]
    assert harness.metric("ctxguard_checks_total", check="payload_under_budget", outcome="pass") == 25


def test_anthropic_sdk_sends_every_built_payload(harness, llm, claude):
    start(harness)
    builder = ctxguard.ContextBuilder("claude-sonnet-4", system=SYSTEM, budget=BUDGET, pinned=PINNED,
                                      tail_tokens=250, retrieved_tokens=120)
    history: list[dict] = []
    with ctxguard.conversation("sdk-anthropic"):
        ctxguard.record_fact("order_id", "A-1041")
        for turn in range(25):
            text = f"turn {turn}: where is order A-1041?"
            request = builder.build_anthropic(history, text, memory={"language": "English"})
            reply = claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=300, **request._asdict())
            tool_id = f"toolu_{turn}"
            history += [
                {"role": "user", "content": text},
                {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                                  {"type": "tool_use", "id": tool_id, "name": "track", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "in transit"}]},
                {"role": "assistant", "content": reply.content[0].text},
            ]
    bodies = llm.bodies("/messages")
    assert len(bodies) == 25
    assert all(anthropic_problems(body["messages"]) == [] for body in bodies)
    assert all(body["system"] == SYSTEM for body in bodies)
    assert harness.metric("ctxguard_checks_total", check="pinned_intact", outcome="pass") == 25
