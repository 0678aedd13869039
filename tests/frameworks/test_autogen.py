"""AutoGen 0.7 (autogen-agentchat over autogen-ext's OpenAI client): an ``AssistantAgent`` with a
tool over two turns of one conversation, run and streamed; and an app on autogen-core's model
context whose ``BufferedChatCompletionContext`` holds the system prompt with the turns, so the
buffer slides it out: ``system_at_head`` fails from the first request whose head is no longer it."""

from __future__ import annotations

import asyncio

import pytest

import ctxguard
from ctxguard.testing import Reply
from tests.frameworks.helpers import framework, play, stable

framework("autogen_agentchat")
framework("autogen_ext.models.openai")

# gpt-4o answers as gpt-4o-2024-08-06, as OpenAI does; autogen-ext warns of the mismatch
pytestmark = pytest.mark.filterwarnings("ignore:Resolved model mismatch:UserWarning")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_core.model_context import BufferedChatCompletionContext  # noqa: E402
from autogen_core.models import AssistantMessage, SystemMessage, UserMessage  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402

SYSTEM = "You are the order assistant of a parcel shop. Answer in one short sentence."


def parcel_city(order: str) -> str:
    """Where the parcel of an order is now."""
    return f"{order} is in Pune"


def client(llm) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(model="gpt-4o", base_url=llm.base_url, api_key="t", max_retries=0)


@pytest.mark.parametrize("how", ["run", "run_stream"])
def test_assistant_agent_with_a_tool_over_two_turns(harness, how):
    def scenario(llm):
        llm.script(Reply(tool_calls=[{"id": "call_city", "function": {"name": "parcel_city",
                                                                      "arguments": {"order": "A-99172"}}}],
                         finish_reason="tool_calls"),
                   "Your parcel is in Pune.", "It should arrive on Tuesday.")

        async def main():
            model = client(llm)
            agent = AssistantAgent("orders", model_client=model, tools=[parcel_city], system_message=SYSTEM,
                                   reflect_on_tool_use=True, model_client_stream=how == "run_stream")
            seen = []
            for task in ("Where is A-99172?", "When will it arrive?"):
                if how == "run":
                    result = await agent.run(task=task)
                else:
                    events = [e async for e in agent.run_stream(task=task)]
                    result = events[-1]
                    seen.append([type(e).__name__ for e in events])
                seen.append([m.model_dump(exclude={"id"}) for m in result.messages])
            await model.close()
            return seen

        with ctxguard.conversation("autogen"):
            return asyncio.run(main())

    def turns(played):
        bodies = played.bodies()
        assert len(bodies) == 3
        assert [m["role"] for m in bodies[1]["messages"]] == ["system", "user", "assistant", "tool"]
        assert bodies[2]["messages"][0] == {"role": "system", "content": SYSTEM}
        assert all(b.get("stream", False) is (how == "run_stream") for b in bodies)
        assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)

    played = play(harness, scenario, then=turns)
    assert stable(played.result)[-1][-1]["content"] == "It should arrive on Tuesday."


def test_buffered_context_slides_the_system_prompt_out(harness):
    """The system prompt kept in a 4-message ``BufferedChatCompletionContext``: the third request
    holds the last four messages, an assistant turn first."""
    questions = ["Hi, my order is A-99172.", "Where is it?", "When will it arrive?", "Thanks!"]

    def scenario(llm):
        llm.script(*(f"Noted, update {n}." for n in range(len(questions))))

        async def main():
            model = client(llm)
            context = BufferedChatCompletionContext(buffer_size=4, initial_messages=[SystemMessage(content=SYSTEM)])
            answers = []
            for question in questions:
                await context.add_message(UserMessage(content=question, source="user"))
                result = await model.create(await context.get_messages())
                await context.add_message(AssistantMessage(content=result.content, source="orders"))
                answers.append(result.content)
            await model.close()
            return answers

        with ctxguard.conversation("buffered"):
            return asyncio.run(main())

    def flagged(played):
        heads = [b["messages"][0]["role"] for b in played.bodies()]
        assert heads == ["system", "system", "assistant", "assistant"]
        assert [list(s.attributes["ctxguard.violations"]) for s in played.spans] == [
            [], [], ["system_at_head"], ["system_at_head"]]
        assert ["system" in s.attributes["ctxguard.evicted"] for s in played.spans] == [False, False, True, False]
        assert harness.metric("ctxguard_evictions_total", kind="system") == 1

    play(harness, scenario, then=flagged)
