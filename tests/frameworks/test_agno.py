"""Agno 3.1: an agent with a tool and a session history (``InMemoryDb``) over two turns, on
``OpenAIChat`` and on ``Claude``, answered whole and streamed; and a history of one run
(``num_history_runs=1``) that drops the turn carrying the order number: ``fact_present`` fails
from the first request lacking it."""

from __future__ import annotations

import asyncio
import os

import pytest

import ctxguard
from ctxguard.testing import Reply, payload_contains
from tests.frameworks.helpers import framework, play

os.environ.setdefault("AGNO_TELEMETRY", "false")  # no run reports to agno's servers
framework("agno")

from agno.agent import Agent  # noqa: E402
from agno.db.in_memory import InMemoryDb  # noqa: E402
from agno.models.anthropic import Claude  # noqa: E402
from agno.models.openai import OpenAIChat  # noqa: E402

SYSTEM = "You are the order assistant of a parcel shop. Answer in one short sentence."
ORDER = "A-99172"


def parcel_city(order: str) -> str:
    """Where the parcel of an order is now."""
    return f"{order} is in Pune"


def model(llm, provider: str):
    if provider == "anthropic":
        return Claude(id="claude-sonnet-4-20250514", max_tokens=200, api_key="t",
                      client_params={"base_url": llm.anthropic_base_url, "max_retries": 0})
    return OpenAIChat(id="gpt-4o", base_url=llm.base_url, api_key="t", max_retries=0)


def converse(agent: Agent, questions: list[str], how: str) -> list[str]:
    """The answers to ``questions``, one turn each: ``run``, ``stream`` (``run(stream=True)``) or
    ``astream`` (``arun(stream=True)``, every turn on one event loop: Agno keeps its async client)."""
    def text(events) -> str:
        return "".join(str(e.content) for e in events if e.event == "RunContent" and e.content)

    if how == "astream":
        async def turns() -> list[str]:
            answers = []
            for q in questions:
                answers.append(text([e async for e in agent.arun(q, stream=True)]))
            return answers
        return asyncio.run(turns())
    if how == "stream":
        return [text(agent.run(q, stream=True)) for q in questions]
    return [str(agent.run(q).content) for q in questions]


@pytest.mark.parametrize("how", ["run", "stream", "astream"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])  # Claude streams through messages.stream
def test_agent_with_a_tool_and_history_over_two_turns(harness, provider, how):
    stream = how != "run"

    def scenario(llm):
        llm.script(Reply(tool_calls=[{"id": "call_city", "function": {"name": "parcel_city",
                                                                      "arguments": {"order": ORDER}}}],
                         finish_reason="tool_calls"),
                   "Your parcel is in Pune.", "It should arrive on Tuesday.")
        agent = Agent(model=model(llm, provider), tools=[parcel_city], instructions=SYSTEM, db=InMemoryDb(),
                      add_history_to_context=True, telemetry=False)
        with ctxguard.conversation("agno"):
            return converse(agent, [f"Where is {ORDER}?", "When will it arrive?"], how)

    def turns(played):
        assert len(played.requests) == 3
        assert all(b.get("stream", False) is stream for b in played.bodies())
        assert all(payload_contains(b, ORDER) for b in played.bodies())  # the history is sent again
        assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)

    played = play(harness, scenario, then=turns)
    assert played.result == ["Your parcel is in Pune.", "It should arrive on Tuesday."]


def test_a_history_of_one_run_drops_the_order_number(harness):
    questions = [f"Hi, my order number is {ORDER}.", "Where is it?", "When will it arrive?"]

    def scenario(llm):
        llm.script(*(f"Noted, update {n}." for n in range(len(questions))))
        agent = Agent(model=model(llm, "openai"), instructions=SYSTEM, db=InMemoryDb(), telemetry=False,
                      add_history_to_context=True, num_history_runs=1)
        with ctxguard.conversation("agno-window"):
            ctxguard.record_fact("order_number", ORDER)
            return converse(agent, questions, "run")

    def flagged(played):
        assert [payload_contains(b, ORDER) for b in played.bodies()] == [True, True, False]
        assert [list(s.attributes["ctxguard.violations"]) for s in played.spans] == [[], [], ["fact_present"]]
        assert [list(s.attributes["ctxguard.evicted"]) for s in played.spans] == [[], [], ["fact"]]

    play(harness, scenario, then=flagged)
