"""The fake answers the real openai SDK's Chat Completions as the service does
(ctxguard/testing/fake/openai_chat.py): JSON and streams, the SDK's stream helpers, usage from
what the model reads, the error bodies, a stream failing midway. Values are compared with what the
server recorded having sent (``llm.responses``), never with constants the fake happens to produce.
"""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from ctxguard.testing.fake import FakeLLM, Reply
from tests.testing.fake.helpers import CALL_ID, MESSAGES, TOOL_CALL, WEATHER_TOOL, Order, post_raw, sse

CHAT_ID = re.compile(r"chatcmpl-[A-Za-z0-9]{29}")
FINGERPRINT = re.compile(r"fp_[0-9a-f]{10}")


def test_chat_json(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script("Hello there!")
    r = client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    served = llm.responses[0]

    assert CHAT_ID.fullmatch(r.id) and r.id == served.id
    assert r._request_id == served.request_id
    assert r.system_fingerprint is not None and FINGERPRINT.fullmatch(r.system_fingerprint)
    assert r.object == "chat.completion"
    assert r.model == "gpt-test" == served.model
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "Hello there!"
    assert r.choices[0].message.refusal is None
    assert r.choices[0].finish_reason == "stop"
    assert served.finish_reasons == ("stop",)
    assert r.usage is not None
    assert r.usage.model_dump(exclude_none=True) == served.usage
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (served.input_tokens, served.output_tokens)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_json_explicit_usage_model_and_tool_calls(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(
        Reply(
            tool_calls=[TOOL_CALL],
            finish_reason="tool_calls",
            input_tokens=123,
            output_tokens=7,
            model="served-model",
        )
    )
    r = client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    msg = r.choices[0].message
    assert msg.content is None
    assert msg.tool_calls is not None
    call = msg.tool_calls[0]
    assert call.id == "call_1"
    assert call.type == "function"
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"q": "weather"}
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.model == "served-model"
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (123, 7, 130)


def test_chat_tool_calls_get_real_ids_and_finish_reason(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"city": "Pune"}}},
                                 {"function": {"name": "lookup", "arguments": {"city": "Lyon"}}}]))
    r = client.chat.completions.create(model="m", messages=MESSAGES, tools=[WEATHER_TOOL])
    calls = r.choices[0].message.tool_calls
    assert calls is not None
    ids = tuple(c.id for c in calls)
    assert all(CALL_ID.fullmatch(i) for i in ids) and len(set(ids)) == 2
    assert ids == llm.responses[0].tool_call_ids
    assert r.choices[0].finish_reason == "tool_calls"


def test_chat_stream_with_usage(llm: FakeLLM, client: openai.OpenAI) -> None:
    text = "The quick brown fox jumps."
    llm.script(Reply(text=text, input_tokens=11, output_tokens=5))
    stream = client.chat.completions.create(
        model="gpt-test",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert {c.id for c in chunks} == {llm.responses[0].id}
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == text
    assert 2 <= len(pieces) <= 3
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (11, 5, 16)
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_wire_framing(llm: FakeLLM) -> None:
    """Every chunk: the same id, fingerprint, ``usage: null`` and ``obfuscation`` padding; the
    first delta opens the assistant turn with empty content; then a usage-only chunk and [DONE]."""
    llm.script("streamed on the wire")
    url = llm.base_url + "/chat/completions"
    frames = sse(url, {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}})
    served = llm.responses[0]
    assert frames[-1] == (None, "[DONE]")
    chunks = [data for _, data in frames[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert {c["id"] for c in chunks} == {served.id}
    assert all(FINGERPRINT.fullmatch(c["system_fingerprint"]) for c in chunks)
    assert all(isinstance(c["obfuscation"], str) and c["obfuscation"] for c in chunks)
    assert [c["usage"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == served.usage
    assert chunks[-2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}

    llm.script("plain")
    frames = sse(url, {"model": "m", "messages": MESSAGES, "stream": True,
                        "stream_options": {"include_obfuscation": False}})
    assert frames[-1] == (None, "[DONE]")
    assert all("obfuscation" not in data and "usage" not in data for _, data in frames[:-1])


def test_chat_stream_tool_call_deltas(llm: FakeLLM, client: openai.OpenAI) -> None:
    """A pure tool-call turn opens with content null and the first call's header; each call's
    first delta carries index, id, type and name, the rest only index and argument pieces."""
    calls = [{"function": {"name": "lookup", "arguments": {"city": "Pune"}}},
             {"function": {"name": "forecast", "arguments": {"days": 3}}}]
    llm.script(Reply(tool_calls=calls))
    frames = sse(llm.base_url + "/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True})
    served = llm.responses[0]
    deltas = [data["choices"][0]["delta"] for _, data in frames[:-1]]
    first = deltas[0]
    assert (first["role"], first["content"], first["refusal"]) == ("assistant", None, None)
    headers = [d["tool_calls"][0] for d in deltas if "tool_calls" in d and "id" in d["tool_calls"][0]]
    assert headers == [
        {"index": i, "id": served.tool_call_ids[i], "type": "function", "function": {"name": n, "arguments": ""}}
        for i, n in enumerate(["lookup", "forecast"])
    ]
    pieces = [d["tool_calls"][0] for d in deltas if "tool_calls" in d and "id" not in d["tool_calls"][0]]
    assert all(set(p) == {"index", "function"} and set(p["function"]) == {"arguments"} for p in pieces)
    assert "".join(p["function"]["arguments"] for p in pieces if p["index"] == 1) == '{"days": 3}'
    assert frames[-2][1]["choices"][0]["finish_reason"] == "tool_calls"

    llm.script(Reply(tool_calls=calls))
    with client.chat.completions.stream(model="m", messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    got = final.choices[0].message.tool_calls
    assert got is not None
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in got] == [
        (llm.responses[1].tool_call_ids[0], "lookup", {"city": "Pune"}),
        (llm.responses[1].tool_call_ids[1], "forecast", {"days": 3}),
    ]


def test_chat_stream_without_usage(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script("abcdef")
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "abcdef"


def test_chat_stream_helper(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script("streamed via helper")
    deltas: list[str] = []
    with client.chat.completions.stream(model="gpt-test", messages=MESSAGES) as stream:
        for event in stream:
            if event.type == "content.delta":
                deltas.append(event.delta)
        final = stream.get_final_completion()

    assert "".join(deltas) == "streamed via helper"
    assert final.choices[0].message.content == "streamed via helper"
    assert final.choices[0].finish_reason == "stop"


def test_chat_stream_helper_tool_calls(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(tool_calls=[TOOL_CALL], finish_reason="tool_calls"))
    with client.chat.completions.stream(model="m", messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].id == "call_1"
    assert calls[0].function.name == "lookup"
    assert calls[0].function.arguments == '{"q": "weather"}'
    assert final.choices[0].finish_reason == "tool_calls"


@pytest.mark.asyncio
async def test_async_chat_json_and_stream(llm: FakeLLM) -> None:
    llm.script("async one", "async streamed")
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as aclient:
        r = await aclient.chat.completions.create(model="m", messages=MESSAGES)
        assert r.choices[0].message.content == "async one"

        stream = await aclient.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        text = ""
        usage = None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage is not None:
                usage = chunk.usage
        assert text == "async streamed"
        assert usage is not None and usage.completion_tokens == llm.responses[1].output_tokens


@pytest.mark.asyncio
async def test_async_chat_stream_helper(llm: FakeLLM) -> None:
    llm.script("async helper text")
    async with (
        openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as aclient,
        aclient.chat.completions.stream(model="m", messages=MESSAGES) as stream,
    ):
        deltas = [e.delta async for e in stream if e.type == "content.delta"]
        final = await stream.get_final_completion()
    assert "".join(deltas) == "async helper text"
    assert final.choices[0].message.content == "async helper text"


def _prompt(client: openai.OpenAI, llm: FakeLLM, **kwargs: Any) -> int:
    r = client.chat.completions.create(model="m", **kwargs)
    assert r.usage is not None and r.usage.prompt_tokens == llm.responses[-1].input_tokens
    return r.usage.prompt_tokens


def test_chat_prompt_usage_counts_what_the_model_reads_not_json_bytes(llm: FakeLLM, client: openai.OpenAI) -> None:
    base = _prompt(client, llm, messages=[{"role": "user", "content": "where is my parcel"}])
    # Parameters the model never reads, and JSON whitespace, cost nothing.
    assert _prompt(client, llm, messages=[{"role": "user", "content": "where is my parcel"}],
                   user="customer-4711-" + "x" * 500, metadata={"ticket": "T" * 300}, store=False) == base
    spaced = b'{ "model" :  "m" ,\n   "messages" : [ { "role" : "user",  "content" : "where is my parcel" } ] }'
    status, body = post_raw(llm.base_url + "/chat/completions", spaced)
    assert status == 200 and body["usage"]["prompt_tokens"] == base
    # Everything the model reads does cost.
    longer = _prompt(client, llm, messages=[{"role": "user", "content": "where is my parcel " * 20}])
    assert longer > base + 40
    framed = _prompt(client, llm, messages=[{"role": "user", "content": "where is"},
                                            {"role": "user", "content": "my parcel"}])
    assert framed >= base + 3  # each message carries its own framing
    with_system = _prompt(client, llm, messages=[{"role": "system", "content": "Answer briefly."},
                                                 {"role": "user", "content": "where is my parcel"}])
    assert with_system > base + 3
    with_tools = _prompt(client, llm, messages=[{"role": "user", "content": "where is my parcel"}],
                         tools=[WEATHER_TOOL])
    assert with_tools > base + 10
    schema = {"type": "json_schema", "json_schema": {"name": "order", "schema": Order.model_json_schema()}}
    assert _prompt(client, llm, messages=[{"role": "user", "content": "where is my parcel"}],
                   response_format=schema) > base + 5  # type: ignore[arg-type]
    turn: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "where is my parcel"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"order": "A-1041"}'}}]},
    ]
    with_call = _prompt(client, llm, messages=turn)
    assert with_call > base + 5
    result = _prompt(client, llm, messages=[*turn, {"role": "tool", "tool_call_id": "call_1",
                                                    "content": "Shipped from Pune on Monday, arriving Thursday."}])
    assert result > with_call + 8


def test_cached_and_reasoning_tokens_in_openai_fields(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="ok", input_tokens=1200, cached_tokens=1024, output_tokens=300, reasoning_tokens=256),
               Reply(text="ok", input_tokens=1200, cached_tokens=1024, output_tokens=300, reasoning_tokens=256),
               Reply(text="ok", input_tokens=1200, cached_tokens=1024, output_tokens=300, reasoning_tokens=256))
    r = client.chat.completions.create(model="m", messages=MESSAGES)
    assert r.usage is not None and r.usage.prompt_tokens_details and r.usage.completion_tokens_details
    assert (r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens) == (1200, 1024)
    assert (r.usage.completion_tokens, r.usage.completion_tokens_details.reasoning_tokens) == (300, 256)
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True,
                                                 stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details and usage.completion_tokens_details
    assert (usage.prompt_tokens_details.cached_tokens, usage.completion_tokens_details.reasoning_tokens) == (1024, 256)
    resp = client.responses.create(model="m", input="x")
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.input_tokens_details.cached_tokens) == (1200, 1024)
    assert (resp.usage.output_tokens, resp.usage.output_tokens_details.reasoning_tokens) == (300, 256)
    assert [(s.cached_tokens, s.reasoning_tokens) for s in llm.responses] == [(1024, 256)] * 3


@pytest.mark.parametrize(
    ("status", "exc_type", "err_type", "code"),
    [
        (400, openai.BadRequestError, "invalid_request_error", None),
        (401, openai.AuthenticationError, "invalid_request_error", "invalid_api_key"),
        (404, openai.NotFoundError, "invalid_request_error", "model_not_found"),
        (429, openai.RateLimitError, "requests", "rate_limit_exceeded"),
        (500, openai.InternalServerError, "server_error", None),
        (503, openai.InternalServerError, "server_error", None),
    ],
)
def test_error_status_raises_sdk_error(
    llm: FakeLLM, client: openai.OpenAI, status: int, exc_type: type[openai.APIStatusError], err_type: str,
    code: str | None,
) -> None:
    llm.script(Reply(status=status, text="scripted failure"), Reply(status=status))
    with pytest.raises(exc_type) as info:
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.status_code == status
    assert info.value.request_id == llm.responses[0].request_id
    body = info.value.body
    assert isinstance(body, dict)
    assert body == {"message": "scripted failure", "type": err_type, "param": None, "code": code}
    assert (llm.responses[0].status, llm.responses[0].error_type, llm.responses[0].id) == (status, err_type, None)
    with pytest.raises(exc_type) as info:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert isinstance(info.value.body, dict) and info.value.body["message"]  # the service's own wording


def test_a_tool_result_answering_no_earlier_tool_call_is_refused_as_openai_refuses_it(
    llm: FakeLLM, client: openai.OpenAI
) -> None:
    """OpenAI answers 400 to a ``role: "tool"`` message whose ``tool_call_id`` no earlier assistant
    message called (a history trimmed through a tool exchange), naming the message; one that
    answers a call made before it is answered."""
    asked = {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}
    orphan = {"role": "tool", "tool_call_id": "call_gone", "content": "sunny"}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4o", messages=[*MESSAGES, asked, orphan])
    assert info.value.status_code == 400
    assert info.value.body == {
        "message": "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                   "'tool_calls'.",
        "type": "invalid_request_error", "param": "messages.[2].role", "code": None}
    assert (llm.responses[0].status, llm.responses[0].error_type) == (400, "invalid_request_error")

    answered = {"role": "tool", "tool_call_id": TOOL_CALL["id"], "content": "sunny"}
    r = client.chat.completions.create(model="gpt-4o", messages=[*MESSAGES, asked, answered])
    assert r.choices[0].message.content and llm.responses[1].status == 200


def test_chat_stream_failure_is_an_error_object_and_no_done(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="It left the warehouse", stream_failure="error"))
    seen = ""
    with pytest.raises(openai.APIError) as info:
        for chunk in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            seen += chunk.choices[0].delta.content or ""
    assert not isinstance(info.value, openai.APIStatusError)  # the status was 200 long ago
    assert isinstance(info.value.body, dict) and info.value.body["type"] == "server_error"
    assert seen and "It left the warehouse".startswith(seen) and seen != "It left the warehouse"
    assert (llm.responses[0].error_type, llm.responses[0].usage, llm.responses[0].finish_reasons) == (
        "server_error", None, ())

    llm.script(Reply(text="It left the warehouse", stream_failure="error"))
    frames = sse(llm.base_url + "/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True})
    assert frames[-1][1]["error"]["type"] == "server_error"
    assert (None, "[DONE]") not in frames


def test_an_openai_compatible_server_at_its_max_length_keeps_the_last_tokens(
    llm: FakeLLM, client: openai.OpenAI
) -> None:
    """``FakeLLM.windows["openai.chat"]`` plays vLLM's ``truncate_prompt_tokens``, TGI's ``truncate``,
    llama.cpp's server at its context size: a longer prompt keeps its last N tokens and reports N."""
    messages: Any = [{"role": "system", "content": "You are the order assistant of Acme Shop."},
                     {"role": "user", "content": "words " * 3000}]
    whole = client.chat.completions.create(model="m", messages=messages).usage
    assert whole is not None and llm.responses[-1].truncated_tokens == 0
    llm.windows["openai.chat"] = 512
    kept = client.chat.completions.create(model="m", messages=messages).usage
    served = llm.responses[-1]
    assert kept is not None and kept.prompt_tokens == served.input_tokens == 512
    assert served.truncated_tokens == whole.prompt_tokens - 512
    short = client.chat.completions.create(model="m", messages=messages[:1]).usage
    assert short is not None and short.prompt_tokens < 512 and llm.responses[-1].truncated_tokens == 0
