"""A LangGraph ReAct agent (``create_react_agent``) over ChatOpenAI: the model asks for two tools
at once, the graph runs both and sends their results back, the model answers. Two requests, two
spans, the tool exchange intact in the second body."""

from __future__ import annotations

import pytest

import ctxguard
from ctxguard.testing import Reply
from tests.frameworks.helpers import framework, play

framework("langgraph.prebuilt")
framework("langchain_openai")

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402


@tool
def parcel_city(order: str) -> str:
    """Where the parcel of an order is now."""
    return f"{order} is in Pune"


@tool
def delivery_day(order: str) -> str:
    """The day the parcel of an order is due."""
    return f"{order} arrives on Tuesday"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # create_react_agent moves to langchain.agents
def test_react_agent_with_two_parallel_tool_calls(harness):
    def scenario(llm):
        llm.script(
            Reply(tool_calls=[
                {"id": "call_city", "function": {"name": "parcel_city", "arguments": {"order": "A-99172"}}},
                {"id": "call_day", "function": {"name": "delivery_day", "arguments": {"order": "A-99172"}}},
            ], finish_reason="tool_calls"),
            "Your parcel is in Pune and arrives on Tuesday.",
        )
        model = ChatOpenAI(model="gpt-4o", base_url=llm.base_url, api_key="t", max_retries=0)
        agent = create_react_agent(model, [parcel_city, delivery_day], prompt="You are the order assistant.")
        with ctxguard.conversation("agent"):
            state = agent.invoke({"messages": [("user", "Where is A-99172 and when does it come?")]})
        return [(m.type, m.content, getattr(m, "tool_calls", None), getattr(m, "tool_call_id", None))
                for m in state["messages"]]

    def tool_exchange(played):
        first, second = played.bodies()
        assert {t["function"]["name"] for t in first["tools"]} == {"parcel_city", "delivery_day"}
        assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool", "tool"]
        assert {m["tool_call_id"] for m in second["messages"][3:]} == {"call_city", "call_day"}
        assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)
        assert [s.attributes["ctxguard.payload.messages"] for s in played.spans] == [2, 5]

    played = play(harness, scenario, then=tool_exchange)
    assert played.result[-1][1] == "Your parcel is in Pune and arrives on Tuesday."
    assert [m[0] for m in played.result] == ["human", "ai", "tool", "tool", "ai"]
