"""LangChain's ChatOpenAI and ChatAnthropic, driven for real over loopback HTTP: every call path
keeps the app's output and bodies unchanged, one ctxguard span per request that arrived, its
head role and reply attributes those of that request (tests/frameworks/helpers.py)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from tests.frameworks.helpers import Played, framework, matched_spans, play

framework("langchain_openai")
framework("langchain_anthropic")

from langchain_anthropic import ChatAnthropic  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from ctxguard.testing import FakeLLM, Reply  # noqa: E402

SYSTEM = ("system", "You are the order assistant of a parcel shop. Answer in one sentence.")
ASK = [SYSTEM, ("user", "Where is my parcel?")]

def chat(llm, **kwargs) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o", base_url=llm.base_url, api_key="t", max_retries=0, **kwargs)


def message(m) -> dict:
    """What the app reads of an AI message (its run id is random)."""
    return {"content": m.content, "tool_calls": m.tool_calls, "response_metadata": m.response_metadata,
            "usage_metadata": m.usage_metadata}


def test_invoke(harness):
    def scenario(llm):
        llm.script("It is in Pune.")
        return message(chat(llm).invoke(ASK))

    played = play(harness, scenario)
    assert played.result["content"] == "It is in Pune."


def test_ainvoke(harness):
    def scenario(llm):
        llm.script("It is in Pune.")
        return message(asyncio.run(chat(llm).ainvoke(ASK)))

    play(harness, scenario)


def test_stream(harness):
    def scenario(llm):
        llm.script("It is in Pune, out for delivery.")
        return [message(c) for c in chat(llm).stream(ASK)]

    played = play(harness, scenario)
    assert "".join(c["content"] for c in played.result) == "It is in Pune, out for delivery."
    assert played.bodies()[0]["stream"] is True


def test_stream_with_usage(harness):
    def scenario(llm):
        return [message(c) for c in chat(llm, stream_usage=True).stream(ASK)]

    played = play(harness, scenario)
    assert played.bodies()[0]["stream_options"] == {"include_usage": True}
    assert played.result[-2]["usage_metadata"]["input_tokens"] > 0


def test_batch(harness):
    """Four requests at once from LangChain's thread pool: spans matched to bodies one to one."""
    def scenario(llm):
        questions = [[SYSTEM, ("user", f"Where is parcel {n}?")] for n in range(4)]
        return sorted(m.content for m in chat(llm).batch(questions))

    played = play(harness, scenario, concurrent=True)
    assert len(played.requests) == 4


def test_responses_api_invoke(harness):
    def scenario(llm):
        llm.script("It is in Pune.")
        return message(chat(llm, use_responses_api=True).invoke(ASK))

    played = play(harness, scenario)
    assert played.requests[0].path == "/v1/responses"


def test_responses_api_stream(harness):
    def scenario(llm):
        llm.script("It is in Pune.")
        return [message(c) for c in chat(llm, use_responses_api=True).stream(ASK)]

    played = play(harness, scenario)
    assert played.requests[0].path == "/v1/responses" and played.bodies()[0]["stream"] is True


class Parcel(BaseModel):
    city: str
    days: int


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_structured_output(harness, method):
    def scenario(llm):
        if method == "function_calling":
            llm.script(Reply(tool_calls=[{"function": {"name": "Parcel", "arguments": {"city": "Pune", "days": 2}}}],
                             finish_reason="tool_calls"))
        else:
            llm.script('{"city": "Pune", "days": 2}')
        return chat(llm).with_structured_output(Parcel, method=method).invoke(ASK)

    played = play(harness, scenario)
    assert played.result == {"city": "Pune", "days": 2}
    body = played.bodies()[0]
    assert ("response_format" in body) is (method == "json_schema")
    assert ("tools" in body) is (method == "function_calling")


def anthropic(llm) -> ChatAnthropic:
    return ChatAnthropic(model="claude-sonnet-4-20250514", base_url=llm.anthropic_base_url, api_key="t",
                         max_retries=0, max_tokens=200)


def test_anthropic_invoke(harness):
    def scenario(llm):
        llm.script("It is in Pune.")
        return message(anthropic(llm).invoke(ASK))

    played = play(harness, scenario)
    assert played.bodies()[0]["system"] == SYSTEM[1]


def test_anthropic_stream(harness):
    def scenario(llm):
        llm.script("It is in Pune, out for delivery.")
        return [message(c) for c in anthropic(llm).stream(ASK)]

    played = play(harness, scenario)
    assert played.bodies()[0]["stream"] is True


def test_a_model_called_before_instrument_is_guarded_after_it(harness):
    """A warm-up call at start-up, then ``ctxguard.instrument()``: the SDK cached the
    ``with_raw_response`` it made with the ``create`` it saw then, so later calls bypass the call
    site; they are guarded from the wire, one span per request."""
    with FakeLLM() as llm:
        model = chat(llm)
        model.invoke(ASK)
        harness.start(mode="observe")
        model.invoke(ASK)
        matched_spans(harness, Played(None, llm.requests[1:]))
