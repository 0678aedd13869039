"""CrewAI 1.15 on its native OpenAI provider: a crew of one agent with a tool and two sequential
tasks (the second reads the first's output), answered whole and streamed; and a follow-up asked as
a second ``kickoff`` of the same crew, which starts from nothing: the order number given in the
first kickoff is gone from its request, and ``fact_present`` fails there."""

from __future__ import annotations

import os

import pytest

import ctxguard
from ctxguard.testing import Reply, payload_contains
from tests.frameworks.helpers import framework, play

# Nothing leaves the machine: no telemetry, no trace upload (and no prompt asking for one).
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
framework("crewai")

from crewai import LLM, Agent, Crew, Task  # noqa: E402
from crewai.tools import tool  # noqa: E402

ORDER = "A-99172"


@tool("parcel_city")
def parcel_city(order: str) -> str:
    """Where the parcel of an order is now."""
    return f"{order} is in Pune"


def crew(llm, stream: bool, tasks: list[str]) -> Crew:
    model = LLM(model="openai/gpt-4o", base_url=llm.base_url, api_key="t", stream=stream, max_retries=0)
    agent = Agent(role="Order assistant", goal="Tell customers where their parcels are",
                  backstory="You work at the help desk of a parcel shop.", llm=model, tools=[parcel_city],
                  verbose=False)
    return Crew(agents=[agent], tasks=[Task(description=d, expected_output="One sentence.", agent=agent)
                                       for d in tasks], verbose=False)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_crew_with_a_tool_and_two_tasks(harness, stream):
    def scenario(llm):
        llm.script(Reply(tool_calls=[{"id": "call_city", "function": {"name": "parcel_city",
                                                                      "arguments": {"order": ORDER}}}],
                         finish_reason="tool_calls"),
                   "The parcel is in Pune.", "Dear customer, your parcel is in Pune.")
        with ctxguard.conversation("crew"):
            output = crew(llm, stream, [f"Find where the parcel of order {ORDER} is.",
                                        "Write the customer a one-sentence reply about the parcel."]).kickoff()
        return {"raw": output.raw, "tasks": [t.raw for t in output.tasks_output]}

    def tasks(played):
        bodies = played.bodies()
        assert len(bodies) == 3 and all(b.get("stream", False) is stream for b in bodies)
        assert [m["role"] for m in bodies[1]["messages"]][-2:] == ["assistant", "tool"]
        assert "The parcel is in Pune." in str(bodies[2]["messages"])  # the first task's output as context
        assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)

    played = play(harness, scenario, then=tasks)
    assert played.result["raw"] == "Dear customer, your parcel is in Pune."


def test_a_follow_up_kickoff_starts_from_nothing(harness):
    def scenario(llm):
        llm.script("Noted: order A-99172.", "It should arrive on Tuesday.")
        with ctxguard.conversation("crew-follow-up"):
            ctxguard.record_fact("order_number", ORDER)
            first = crew(llm, False, [f"The customer says: my order number is {ORDER}. Acknowledge it."]).kickoff()
            second = crew(llm, False, ["The customer asks: when will it arrive?"]).kickoff()
        return [first.raw, second.raw]

    def flagged(played):
        assert [payload_contains(b, ORDER) for b in played.bodies()] == [True, False]
        assert [list(s.attributes["ctxguard.violations"]) for s in played.spans] == [[], ["fact_present"]]
        assert [list(s.attributes["ctxguard.evicted"]) for s in played.spans] == [[], ["fact"]]

    play(harness, scenario, then=flagged)
