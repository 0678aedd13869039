"""The fake answers the real openai SDK's Responses API as the service does
(ctxguard/testing/fake/openai_responses.py): the Response object, the whole streamed event
sequence the SDK's helper rebuilds its snapshot from, reasoning items, incomplete and failed
responses. Values are compared with what the server recorded having sent (``llm.responses``).
"""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest

from ctxguard.testing.fake import FakeLLM, Reply
from tests.testing.fake.helpers import TOOL_CALL, WEATHER_TOOL, Order, sse


def test_responses_prompt_usage_counts_instructions_items_tools_and_format(
    llm: FakeLLM, client: openai.OpenAI
) -> None:
    def prompt(**kwargs: Any) -> int:
        r = client.responses.create(model="m", **kwargs)
        assert r.usage is not None and r.usage.input_tokens == llm.responses[-1].input_tokens
        return r.usage.input_tokens

    base = prompt(input="where is my parcel")
    assert prompt(input="where is my parcel", user="u" * 400, metadata={"k": "v" * 300}) == base
    assert prompt(input="where is my parcel", instructions="You are the order assistant of Acme.") > base + 5
    assert prompt(input=[{"role": "user", "content": [{"type": "input_text", "text": "where is my parcel"}]}]) == base
    items: Any = [{"role": "user", "content": "where is my parcel"},
                  {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"order": "A-1"}'}]
    with_call = prompt(input=items)
    assert with_call > base + 5
    items.append({"type": "function_call_output", "call_id": "call_1", "output": "Shipped from Pune on Monday."})
    assert prompt(input=items) > with_call + 5
    tool = {"type": "function", **WEATHER_TOOL["function"]}
    assert prompt(input="where is my parcel", tools=[tool]) > base + 10
    fmt = {"format": {"type": "json_schema", "name": "order", "schema": Order.model_json_schema()}}
    assert prompt(input="where is my parcel", text=fmt) > base + 5


def test_responses_json(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="responses says hi", input_tokens=40, output_tokens=4))
    r = client.responses.create(model="gpt-resp", input="hello", instructions="be brief")

    assert r.id == llm.responses[0].id
    assert r._request_id == llm.responses[0].request_id
    assert r.object == "response"
    assert r.status == "completed"
    assert r.model == "gpt-resp"
    assert r.instructions == "be brief"
    assert r.output_text == "responses says hi"
    assert r.error is None
    assert r.usage is not None
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (40, 4, 44)
    assert r.usage.input_tokens_details.cached_tokens == 0
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert llm.responses[0].finish_reasons == ("completed",)


def test_responses_json_function_call(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(tool_calls=[TOOL_CALL]))
    r = client.responses.create(model="m", input="hello")
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1
    assert calls[0].call_id == "call_1"
    assert calls[0].name == "lookup"
    assert calls[0].arguments == '{"q": "weather"}'
    assert r.output_text == ""


def test_responses_stream_create(llm: FakeLLM, client: openai.OpenAI) -> None:
    text = "streaming responses text"
    llm.script(Reply(text=text, output_tokens=6))
    events = list(client.responses.create(model="m", input="hello", stream=True))

    types = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert types == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * len(deltas),
        "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(deltas) == text
    assert 2 <= len(deltas) <= 3
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == text
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.id == events[0].response.id == llm.responses[0].id
    assert completed.response.output_text == text
    assert completed.response.usage is not None
    assert completed.response.usage.output_tokens == 6


def test_responses_stream_deltas_carry_obfuscation(llm: FakeLLM) -> None:
    llm.script(Reply(text="padded deltas", tool_calls=[TOOL_CALL]))
    frames = sse(llm.base_url + "/responses", {"model": "m", "input": "x", "stream": True})
    assert all(event == data["type"] for event, data in frames)
    deltas = [data for _, data in frames if data["type"].endswith(".delta")]
    assert {d["type"] for d in deltas} == {"response.output_text.delta", "response.function_call_arguments.delta"}
    assert all(isinstance(d["obfuscation"], str) and d["obfuscation"] for d in deltas)
    assert all("obfuscation" not in data for _, data in frames if not data["type"].endswith(".delta"))


def test_responses_stream_helper(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script("helper for responses")
    with client.responses.stream(model="m", input="hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "helper for responses"
    assert final.output_text == "helper for responses"
    assert final.usage is not None


def test_responses_stream_helper_function_call(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="calling", tool_calls=[TOOL_CALL]))
    with client.responses.stream(model="m", input="hello") as stream:
        final = stream.get_final_response()
    assert final.output_text == "calling"
    calls = [item for item in final.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["lookup"]


def test_responses_reasoning_item_when_scripted(llm: FakeLLM, client: openai.OpenAI) -> None:
    thought = "The user wants the parcel status; check the ledger."
    llm.script(Reply(text="It ships today.", reasoning=thought), Reply(text="It ships today.", reasoning=thought))
    r = client.responses.create(model="m", input="x")
    reasoning, message = r.output
    assert reasoning.type == "reasoning" and re.fullmatch(r"rs_[0-9a-f]{48}", reasoning.id)
    assert [s.text for s in reasoning.summary] == [thought]
    assert message.type == "message" and r.output_text == "It ships today."
    assert r.usage is not None
    assert r.usage.output_tokens_details.reasoning_tokens == llm.responses[0].reasoning_tokens > 0

    with client.responses.stream(model="m", input="x") as stream:
        events = list(stream)
        final = stream.get_final_response()
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert summary == thought
    assert next(e.type for e in events if "reasoning_summary" in e.type) == "response.reasoning_summary_part.added"
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.output_text == "It ships today."


def test_responses_incomplete_when_cut_by_length(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="It left the ware", finish_reason="length"),
               Reply(text="It left the ware", finish_reason="length"))
    r = client.responses.create(model="m", input="x", max_output_tokens=5)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and r.output_text == "It left the ware"
    events = list(client.responses.create(model="m", input="x", max_output_tokens=5, stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.usage is not None
    assert [s.finish_reasons for s in llm.responses] == [("incomplete",), ("incomplete",)]


@pytest.mark.asyncio
async def test_async_responses(llm: FakeLLM) -> None:
    llm.script("async resp", "async resp stream", "async resp helper")
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as aclient:
        r = await aclient.responses.create(model="m", input="x")
        assert r.output_text == "async resp"

        text = ""
        async for event in await aclient.responses.create(model="m", input="x", stream=True):
            if event.type == "response.output_text.delta":
                text += event.delta
        assert text == "async resp stream"

        async with aclient.responses.stream(model="m", input="x") as stream:
            final = await stream.get_final_response()
        assert final.output_text == "async resp helper"


def test_responses_stream_failure_is_response_failed(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="It left the warehouse", stream_failure="error"),
               Reply(text="It left the warehouse", stream_failure="error"))
    events = list(client.responses.create(model="m", input="x", stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.status == "failed" and events[-1].response.error is not None
    assert events[-1].response.error.code == "server_error"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.completed" not in [e.type for e in events]
    with pytest.raises(RuntimeError, match=r"response\.completed"), client.responses.stream(model="m", input="x") as s:
        s.get_final_response()


def test_a_prompt_over_the_model_window_is_refused_unless_truncation_auto_drops_its_oldest_items(
    llm: FakeLLM, client: openai.OpenAI
) -> None:
    """The API reference: ``auto`` "will truncate the response to fit the context window by dropping
    items from the beginning of the conversation"; ``disabled`` (the default) fails with a 400."""
    turns: Any = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "words " * 100}
                  for i in range(20)]
    whole = client.responses.create(model="gpt-4o", instructions="Be brief.", input=turns).usage
    assert whole is not None and llm.responses[-1].truncated_tokens == 0
    llm.windows["openai.responses"] = 1000
    with pytest.raises(openai.BadRequestError, match="exceeds the context window"):
        client.responses.create(model="gpt-4o", instructions="Be brief.", input=turns)
    kept = client.responses.create(model="gpt-4o", instructions="Be brief.", input=turns, truncation="auto").usage
    served = llm.responses[-1]
    assert kept is not None and kept.input_tokens == served.input_tokens <= 1000 < whole.input_tokens
    assert served.truncated_tokens == whole.input_tokens - kept.input_tokens
    # What fits is answered whole, whatever the truncation setting; an item alone past the window is refused.
    fits = client.responses.create(model="gpt-4o", input="hi").usage
    assert fits is not None and fits.input_tokens < 20 and llm.responses[-1].truncated_tokens == 0
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="gpt-4o", input="words " * 2000, truncation="auto")
    # The oldest items went, the instructions stayed: the same count as sending only the newest.
    del llm.windows["openai.responses"]
    for tail in range(len(turns), 0, -1):
        client.responses.create(model="gpt-4o", instructions="Be brief.", input=turns[-tail:])
        if (llm.responses[-1].input_tokens or 0) <= 1000:
            break
    assert llm.responses[-1].input_tokens == kept.input_tokens and tail < len(turns)
