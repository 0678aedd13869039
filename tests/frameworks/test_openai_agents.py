"""The OpenAI Agents SDK, with its own tracing off (nothing leaves the machine): an agent calls a
function tool, then answers; run with ``Runner.run_sync``, ``Runner.run`` and ``Runner.run_streamed``
on its Responses model and on ``OpenAIChatCompletionsModel``."""

from __future__ import annotations

import asyncio

import openai
import pytest

import ctxguard
from ctxguard.testing import Reply
from tests.frameworks.helpers import framework, play, stable

agents = framework("agents")

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool  # noqa: E402
from agents.models.openai_responses import OpenAIResponsesModel  # noqa: E402

agents.set_tracing_disabled(True)

@function_tool
def parcel_city(order: str) -> str:
    """Where the parcel of an order is now."""
    return f"{order} is in Pune"


def agent(client: openai.AsyncOpenAI, model_class) -> Agent:
    return Agent(name="orders", instructions="You are the order assistant.",
                 model=model_class(model="gpt-4o", openai_client=client), tools=[parcel_city])


async def run_async(llm, model_class, how: str) -> tuple:
    """``Runner.run`` or ``Runner.run_streamed`` (every event consumed), with a client closed on the
    loop that used it."""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        if how == "run":
            return await Runner.run(agent(client, model_class), "Where is A-99172?"), None
        result = Runner.run_streamed(agent(client, model_class), "Where is A-99172?")
        events = [(e.type, getattr(e, "name", None), stable(getattr(e, "data", None)))
                  async for e in result.stream_events()]
        return result, events


def scenario_for(model_class, how: str):
    def scenario(llm):
        llm.script(Reply(tool_calls=[{"id": "call_city", "function": {"name": "parcel_city",
                                                                      "arguments": {"order": "A-99172"}}}],
                         finish_reason="tool_calls"),
                   "Your parcel is in Pune.")
        with ctxguard.conversation("agent"):
            if how == "run_sync":
                client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="t", max_retries=0)
                result, events = Runner.run_sync(agent(client, model_class), "Where is A-99172?"), None
                # run_sync keeps running on the thread's default loop: close the client there
                asyncio.get_event_loop_policy().get_event_loop().run_until_complete(client.close())
            else:
                result, events = asyncio.run(run_async(llm, model_class, how))
        usage = result.context_wrapper.usage
        return {"final": result.final_output, "items": [i.raw_item for i in result.new_items], "events": events,
                "usage": (usage.requests, usage.input_tokens, usage.output_tokens)}

    return scenario


def tool_exchange(played):
    assert len(played.requests) == 2
    assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)
    assert [s.attributes["ctxguard.head.role"] for s in played.spans] == ["system", "system"]


@pytest.mark.parametrize("how", ["run_sync", "run", "run_streamed"])
def test_responses_model(harness, how):
    played = play(harness, scenario_for(OpenAIResponsesModel, how), then=tool_exchange)
    assert played.result["final"] == "Your parcel is in Pune."
    assert {r.path for r in played.requests} == {"/v1/responses"}
    assert [i.get("type") for i in played.bodies()[1]["input"]] == [None, "function_call", "function_call_output"]


@pytest.mark.parametrize("how", ["run_sync", "run", "run_streamed"])
def test_chat_completions_model(harness, how):
    played = play(harness, scenario_for(OpenAIChatCompletionsModel, how), then=tool_exchange)
    assert played.result["final"] == "Your parcel is in Pune."
    assert {r.path for r in played.requests} == {"/v1/chat/completions"}
    assert [m["role"] for m in played.bodies()[1]["messages"]] == ["system", "user", "assistant", "tool"]
