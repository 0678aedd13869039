"""Haystack 3.4: an ``Agent`` over ``OpenAIChatGenerator`` with a tool, over two turns (the app
hands the agent its earlier messages), answered whole and streamed; and an app that keeps a window
of the last two messages, which cuts the tool call from its result: ``tool_pairs_intact`` fails
on that request, which the fake refuses as OpenAI does (400)."""

from __future__ import annotations

import os

import openai
import pytest

import ctxguard
from ctxguard.testing import Reply
from tests.frameworks.helpers import framework, play

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no usage reports to deepset
framework("haystack")

from haystack.components.agents import Agent  # noqa: E402
from haystack.components.generators.chat import OpenAIChatGenerator  # noqa: E402
from haystack.dataclasses import ChatMessage  # noqa: E402
from haystack.tools import tool  # noqa: E402
from haystack.utils import Secret  # noqa: E402

SYSTEM = "You are the order assistant of a parcel shop. Answer in one short sentence."
ORDER = "A-99172"


@tool
def parcel_city(order: str) -> str:
    """Where the parcel of an order is now."""
    return f"{order} is in Pune"


def converse(llm, stream: bool, window: int | None) -> list:
    """Two turns; before the second, the app's history (``window``: its last messages only)."""
    llm.script(Reply(tool_calls=[{"id": "call_city", "function": {"name": "parcel_city",
                                                                  "arguments": {"order": ORDER}}}],
                     finish_reason="tool_calls"),
               "Your parcel is in Pune.", "It should arrive on Tuesday.")
    chunks: list[str] = []
    generator = OpenAIChatGenerator(api_key=Secret.from_token("t"), model="gpt-4o", api_base_url=llm.base_url,
                                    max_retries=0)
    agent = Agent(chat_generator=generator, tools=[parcel_city], system_prompt=SYSTEM,
                  streaming_callback=(lambda chunk: chunks.append(chunk.content)) if stream else None)
    history: list[ChatMessage] = []
    answers = []
    for question in (f"Where is {ORDER}?", "When will it arrive?"):
        sent = history if window is None else history[-window:]
        result = agent.run(messages=[*sent, ChatMessage.from_user(question)])
        history = [m for m in result["messages"] if m.role.value != "system"]
        answers.append(result["last_message"].text)
    return [answers, "".join(chunks), [(m.role.value, m.text) for m in history]]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_agent_with_a_tool_over_two_turns(harness, stream):
    def scenario(llm):
        with ctxguard.conversation("haystack"):
            return converse(llm, stream, None)

    def turns(played):
        bodies = played.bodies()
        assert len(bodies) == 3 and all(b.get("stream", False) is stream for b in bodies)
        assert [m["role"] for m in bodies[2]["messages"]] == ["system", "user", "assistant", "tool", "assistant",
                                                              "user"]
        assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)

    played = play(harness, scenario, then=turns)
    assert played.result[0] == ["Your parcel is in Pune.", "It should arrive on Tuesday."]


def test_a_window_that_cuts_the_tool_call_from_its_result(harness):
    def scenario(llm):
        with ctxguard.conversation("haystack-window"):
            try:
                return converse(llm, False, 2)
            except openai.BadRequestError as refused:  # the SDK's error, through Haystack unchanged
                return [refused.status_code, refused.body]

    def flagged(played):
        assert [m["role"] for m in played.bodies()[2]["messages"]] == ["system", "tool", "assistant", "user"]
        assert [list(s.attributes["ctxguard.violations"]) for s in played.spans] == [[], [], ["tool_pairs_intact"]]

    played = play(harness, scenario, then=flagged)
    assert played.result[0] == 400 and played.result[1]["param"] == "messages.[1].role"
