"""The rotating-buffer chat app of ``test_retention.py``, rebuilt on ``ContextBuilder``.

    pytest examples/test_context_builder.py

Instead of "keep the last six messages", each request is built from token budgets:
the system prompt, the pinned facts (from ``record_fact``), the verbatim tail and,
once the conversation outgrows the tail, excerpts of earlier turns that share words
with the new question. ``ctxguard_guard`` runs in enforce mode with the same
``Pinned`` and ``Budget``: any call whose payload broke a check would raise
``ContextViolation`` instead of being sent.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

import ctxguard

SYSTEM = "You are the order assistant. Use the pinned facts; they are current."
PINNED = ctxguard.Pinned(max_tokens=300)
BUDGET = ctxguard.Budget(window=8_000, reserved_output=1_000)  # a small window, so trimming really happens


class Chat:
    """The app under test: history is kept whole; the builder decides what each request carries."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client
        self.history: list[dict[str, Any]] = []
        self.builder = ctxguard.ContextBuilder(
            "gpt-4o", system=SYSTEM, budget=BUDGET, pinned=PINNED, tail_tokens=1_500, retrieved_tokens=600
        )

    def ask(self, text: str) -> str:
        messages = self.builder.build(self.history, text)
        reply = self.client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=1_000)
        answer = reply.choices[0].message.content or ""
        self.history += [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
        return answer


@pytest.fixture
def guard(ctxguard_guard: Any) -> Any:
    ctxguard_guard.start(mode="enforce", policy=ctxguard.Policy(pinned=PINNED, budget=BUDGET))
    return ctxguard_guard


@pytest.mark.parametrize("turns", [4, 8, 16, 32, 200])
def test_every_check_passes_on_long_conversations(fake_llm: Any, guard: Any, turns: int) -> None:
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="test", max_retries=0) as client:
        chat = Chat(client)
        with ctxguard.conversation(f"builder-{turns}"):
            ctxguard.record_fact("order_id", "A-1041")
            for turn in range(turns):
                if turn == turns // 2:
                    ctxguard.record_fact("shipping_city", "Pune")  # the correction arrives mid-conversation
                chat.ask(f"question {turn}: " + "what about my parcel and its delivery window? " * 8)
    assert len(fake_llm.requests) == turns
    assert guard.metric("ctxguard_violations_total", check="fact_present", provider="openai") == 0
    assert guard.metric("ctxguard_evictions_total", kind="pinned") == 0
    assert "shipping_city: Pune" in fake_llm.bodies()[-1]["messages"][1]["content"]
