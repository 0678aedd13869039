"""LlamaIndex: a ``SimpleChatEngine`` whose ``ChatMemoryBuffer`` is token-limited, over a growing
conversation. The engine keeps its system prompt and drops the oldest turns: ctxguard counts no
system eviction, and the early fact's eviction once, on the first request lacking it."""

from __future__ import annotations

import pytest

import ctxguard
from ctxguard.testing import payload_contains
from tests.frameworks.helpers import framework, play

framework("llama_index.core")
framework("llama_index.llms.openai")

from llama_index.core.chat_engine import SimpleChatEngine  # noqa: E402
from llama_index.core.memory import ChatMemoryBuffer  # noqa: E402
from llama_index.llms.openai import OpenAI  # noqa: E402

SYSTEM = "You are the order assistant of a parcel shop. Answer in one short sentence."
ORDER = "A-99172"
TURNS = 6


@pytest.mark.parametrize("how", ["chat", "stream_chat"])
def test_simple_chat_engine_with_a_token_limited_memory(harness, how):
    counted: list[tuple[float, float]] = []

    def scenario(llm):
        llm.script(*(f"Your parcel is on its way, tracking update number {t}." for t in range(TURNS)))
        model = OpenAI(model="gpt-4o", api_base=llm.base_url, api_key="t", max_retries=0)
        memory = ChatMemoryBuffer.from_defaults(token_limit=90, llm=model)
        engine = SimpleChatEngine.from_defaults(llm=model, memory=memory, system_prompt=SYSTEM)
        answers = []
        with ctxguard.conversation("llama"):
            ctxguard.record_fact("order_number", ORDER)
            for turn in range(TURNS):
                question = f"Hi, my order number is {ORDER}." if turn == 0 else f"Where is it now, after update {turn}?"
                if how == "chat":
                    answers.append(engine.chat(question).response)
                else:
                    answers.append("".join(engine.stream_chat(question).response_gen))
                if harness.guard is not None:
                    counted.append((harness.metric("ctxguard_evictions_total", kind="system"),
                                    harness.metric("ctxguard_evictions_total", kind="fact")))
        return answers, [(m.role.value, m.content) for m in memory.get_all()]

    def memory(played):
        bodies = played.bodies()
        assert all(b["messages"][0] == {"role": "system", "content": SYSTEM} for b in bodies)
        gone = [i for i, b in enumerate(bodies) if not payload_contains(b, ORDER)]
        assert gone, "the memory never dropped the first turn: the scenario proves nothing"
        assert counted == [(0.0, float(i >= gone[0])) for i in range(TURNS)]
        dropped = [s.attributes.get("ctxguard.messages.dropped", 0) for s in played.spans]
        assert sum(dropped) > 0 and dropped[0] == 0

    played = play(harness, scenario, then=memory)
    assert played.result[0] == [f"Your parcel is on its way, tracking update number {t}." for t in range(TURNS)]
