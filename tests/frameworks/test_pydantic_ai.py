"""pydantic-ai: an Agent with a tool on the OpenAI chat model and on the OpenAI Responses model."""

from __future__ import annotations

import pytest

import ctxguard
from ctxguard.testing import Reply
from tests.frameworks.helpers import framework, play

framework("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402


def parcel_city(order: str) -> str:
    """Where the parcel of an order is now."""
    return f"{order} is in Pune"


def scenario_for(model_class):
    def scenario(llm):
        llm.script(Reply(tool_calls=[{"id": "call_city", "function": {"name": "parcel_city",
                                                                      "arguments": {"order": "A-99172"}}}],
                         finish_reason="tool_calls"),
                   "Your parcel is in Pune.")
        model = model_class("gpt-4o", provider=OpenAIProvider(base_url=llm.base_url, api_key="t"))
        orders = Agent(model, instructions="You are the order assistant.", tools=[parcel_city])
        with ctxguard.conversation("agent"):
            result = orders.run_sync("Where is A-99172?")
        return {"output": result.output, "messages": result.all_messages(), "usage": result.usage}

    return scenario


@pytest.mark.parametrize("model_class", [OpenAIChatModel, OpenAIResponsesModel])
def test_agent_with_a_tool(harness, model_class):
    def tool_exchange(played):
        assert len(played.requests) == 2
        assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)

    played = play(harness, scenario_for(model_class), then=tool_exchange)
    assert played.result["output"] == "Your parcel is in Pune."
    route = "/v1/chat/completions" if model_class is OpenAIChatModel else "/v1/responses"
    assert {r.path for r in played.requests} == {route}
