"""A retention test for your app, with the ctxguard pytest plugin.

    pytest examples/test_retention.py

``ctxguard_guard`` instruments in enforce mode: any call whose payload breaks a
check raises ``ContextViolation`` instead of being sent.
"""

from __future__ import annotations

from collections import deque

import openai
import pytest

import ctxguard

SYSTEM = {"role": "system", "content": "You are the order assistant."}


class Chat:
    """The app under test: the system prompt is kept outside the history buffer."""

    def __init__(self, client: openai.OpenAI, keep: int = 6) -> None:
        self.client = client
        self.history: deque[dict[str, str]] = deque(maxlen=keep)

    def ask(self, text: str) -> str:
        self.history.append({"role": "user", "content": text})
        reply = self.client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, *self.history])
        answer = reply.choices[0].message.content or ""
        self.history.append({"role": "assistant", "content": answer})
        return answer


@pytest.mark.parametrize("turns", [4, 8, 16, 32])
def test_system_prompt_survives_long_conversations(fake_llm, ctxguard_guard, turns):
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="test", max_retries=0) as client:
        chat = Chat(client)
        with ctxguard.conversation(f"retention-{turns}"):
            for turn in range(turns):
                chat.ask(f"question {turn}")
    assert len(fake_llm.requests) == turns
    assert ctxguard_guard.metric("ctxguard_evictions_total", kind="system") == 0


def test_the_buggy_buffer_is_caught(fake_llm, ctxguard_guard):
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="test", max_retries=0) as client:
        history: deque[dict[str, str]] = deque([SYSTEM], maxlen=4)
        with ctxguard.conversation("buggy"), pytest.raises(ctxguard.ContextViolation) as info:
            for turn in range(10):
                history.append({"role": "user", "content": f"q{turn}"})
                client.chat.completions.create(model="gpt-4o", messages=list(history))
                history.append({"role": "assistant", "content": "a"})
    assert [v.check for v in info.value.violations] == ["system_at_head"]
    assert len(fake_llm.requests) == 2  # the third call was blocked before sending
