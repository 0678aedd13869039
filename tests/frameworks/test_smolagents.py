"""smolagents 1.26: a ``ToolCallingAgent`` on ``OpenAIServerModel`` that calls a tool, then its
``final_answer`` tool, and answers a follow-up in the same memory (``run(..., reset=False)``),
whole and streamed (``stream_outputs``); and a follow-up run with the default ``reset=True``,
which starts a new memory: the order number of the first run is gone from its request, and
``fact_present`` fails there."""

from __future__ import annotations

import pytest

import ctxguard
from ctxguard.testing import Reply, payload_contains
from tests.frameworks.helpers import framework, play

framework("smolagents")

from smolagents import OpenAIServerModel, ToolCallingAgent, tool  # noqa: E402

ORDER = "A-99172"


@tool
def parcel_city(order: str) -> str:
    """Where the parcel of an order is now.

    Args:
        order: the order number
    """
    return f"{order} is in Pune"


def call(name: str, n: int, **arguments) -> Reply:
    return Reply(tool_calls=[{"id": f"call_{name}_{n}", "function": {"name": name, "arguments": arguments}}],
                 finish_reason="tool_calls")


def agent(llm, stream: bool) -> ToolCallingAgent:
    model = OpenAIServerModel(model_id="gpt-4o", api_base=llm.base_url, api_key="t", client_kwargs={"max_retries": 0})
    return ToolCallingAgent(tools=[parcel_city], model=model, stream_outputs=stream, verbosity_level=0, max_steps=4)


def roles(body) -> list[str]:
    return [m["role"] for m in body["messages"]]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tool_calling_agent_over_two_runs_of_one_memory(harness, stream):
    def scenario(llm):
        llm.script(call("parcel_city", 1, order=ORDER), call("final_answer", 2, answer="Your parcel is in Pune."),
                   call("final_answer", 3, answer="It should arrive on Tuesday."))
        orders = agent(llm, stream)
        with ctxguard.conversation("smol"):
            return [orders.run(f"Where is {ORDER}?"), orders.run("When will it arrive?", reset=False)]

    def turns(played):
        bodies = played.bodies()
        assert len(bodies) == 3 and all(b.get("stream", False) is stream for b in bodies)
        # smolagents sends the tool's result back as a user "Observation:" message
        assert roles(bodies[1]) == ["system", "user", "assistant", "user"]
        assert f"{ORDER} is in Pune" in str(bodies[1]["messages"][-1]["content"])
        assert all(payload_contains(b, ORDER) for b in bodies)
        assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)

    played = play(harness, scenario, then=turns)
    assert played.result == ["Your parcel is in Pune.", "It should arrive on Tuesday."]


def test_a_follow_up_run_with_reset_forgets_the_order_number(harness):
    def scenario(llm):
        llm.script(call("final_answer", 1, answer=f"Noted: {ORDER}."),
                   call("final_answer", 2, answer="It should arrive on Tuesday."))
        orders = agent(llm, False)
        with ctxguard.conversation("smol-reset"):
            ctxguard.record_fact("order_number", ORDER)
            return [orders.run(f"My order number is {ORDER}."), orders.run("When will it arrive?")]

    def flagged(played):
        assert [payload_contains(b, ORDER) for b in played.bodies()] == [True, False]
        assert [list(s.attributes["ctxguard.violations"]) for s in played.spans] == [[], ["fact_present"]]
        assert [list(s.attributes["ctxguard.evicted"]) for s in played.spans] == [[], ["fact"]]

    play(harness, scenario, then=flagged)
