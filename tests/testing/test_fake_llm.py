"""Drive the real openai/anthropic/google-genai SDKs against FakeLLM over loopback HTTP.

These tests are the contract that FakeLLM speaks the wire formats closely
enough for the SDKs' own parsers and streaming helpers, which is the whole
reason it exists instead of SDK-level mocks, and that it answers the way the
providers answer: usage from content, real-shaped ids, each provider's stream
framing and errors.  Values are compared with what the server recorded having
sent (``llm.responses``), never with constants the fake happens to produce.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pydantic
import pytest
from openai.types.chat import ChatCompletionMessageParam

from ctxguard.testing.fake_llm import FakeLLM, RecordedRequest, Reply

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup", "arguments": '{"q": "weather"}'},
}
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up the weather forecast for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]},
    },
}
CHAT_ID = re.compile(r"chatcmpl-[A-Za-z0-9]{29}")
FINGERPRINT = re.compile(r"fp_[0-9a-f]{10}")
CALL_ID = re.compile(r"call_[A-Za-z0-9]{24}")
RESPONSE_ID = re.compile(r"resp_[0-9a-f]{48}")
ANTHROPIC_ID = re.compile(r"msg_01[0-9A-Za-z]{22}")
TOOLU_ID = re.compile(r"toolu_01[0-9A-Za-z]{22}")
GEMINI_ID = re.compile(r"[A-Za-z0-9_-]{22}")


class Order(pydantic.BaseModel):
    city: str
    days: int


# ``llm`` (the plugin's ``fake_llm``) and ``client`` come from tests/conftest.py.


def _post_raw(url: str, body: bytes) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def _sse(url: str, payload: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """The frames of an SSE answer as they came off the wire (``data`` decoded unless ``[DONE]``)."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert resp.headers["Transfer-Encoding"] == "chunked"
        raw = resp.read().decode()
    frames: list[tuple[str | None, Any]] = []
    for block in raw.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        data = fields["data"]
        frames.append((fields.get("event"), data if data == "[DONE]" else json.loads(data)))
    return frames


def _anthropic(llm: FakeLLM) -> Any:
    anthropic = pytest.importorskip("anthropic")
    return anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0)


def _gemini(llm: FakeLLM) -> Any:
    genai = pytest.importorskip("google.genai", reason="google-genai is not installed")
    return genai.Client(api_key="test", http_options={"base_url": llm.gemini_base_url})


# -- chat completions -----------------------------------------------------------


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


def test_a_streamed_text_comes_in_as_many_deltas_as_scripted(llm: FakeLLM, client: openai.OpenAI) -> None:
    text = "word " * 200
    llm.script(Reply(text=text, deltas=100), Reply(text=text, deltas=100))
    chunks = list(client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == text
    assert len(pieces) == 100
    with (
        _anthropic(llm) as c,
        c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream,
    ):
        pieces = list(stream.text_stream)
    assert "".join(pieces) == text
    assert len(pieces) == 100


def test_chat_stream_wire_framing(llm: FakeLLM) -> None:
    """Every chunk: the same id, fingerprint, ``usage: null`` and ``obfuscation`` padding; the
    first delta opens the assistant turn with empty content; then a usage-only chunk and [DONE]."""
    llm.script("streamed on the wire")
    url = llm.base_url + "/chat/completions"
    frames = _sse(url, {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}})
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
    frames = _sse(url, {"model": "m", "messages": MESSAGES, "stream": True,
                        "stream_options": {"include_obfuscation": False}})
    assert frames[-1] == (None, "[DONE]")
    assert all("obfuscation" not in data and "usage" not in data for _, data in frames[:-1])


def test_chat_stream_tool_call_deltas(llm: FakeLLM, client: openai.OpenAI) -> None:
    """A pure tool-call turn opens with content null and the first call's header; each call's
    first delta carries index, id, type and name, the rest only index and argument pieces."""
    calls = [{"function": {"name": "lookup", "arguments": {"city": "Pune"}}},
             {"function": {"name": "forecast", "arguments": {"days": 3}}}]
    llm.script(Reply(tool_calls=calls))
    frames = _sse(llm.base_url + "/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True})
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


# -- usage ----------------------------------------------------------------------------


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
    status, body = _post_raw(llm.base_url + "/chat/completions", spaced)
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


def test_output_usage_grows_with_the_reply_text_and_tool_arguments(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script("Pune.", "It left the Pune warehouse on Monday and should reach you by Thursday afternoon.",
               Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"q": "a"}}}]),
               Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"q": "a longer query " * 10}}}]))
    outputs = []
    for _ in range(4):
        r = client.chat.completions.create(model="m", messages=MESSAGES)
        assert r.usage is not None
        outputs.append(r.usage.completion_tokens)
    assert [s.output_tokens for s in llm.responses] == outputs
    assert outputs[0] < outputs[1] and outputs[2] < outputs[3]
    assert outputs[1] > 12


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


def test_anthropic_prompt_usage_counts_system_tool_results_and_tools(llm: FakeLLM) -> None:
    with _anthropic(llm) as c:
        def prompt(**kwargs: Any) -> int:
            m = c.messages.create(model="claude-test", max_tokens=50, **kwargs)
            assert m.usage.input_tokens == llm.responses[-1].input_tokens
            return int(m.usage.input_tokens)

        user = [{"role": "user", "content": "where is my parcel"}]
        base = prompt(messages=user)
        assert prompt(messages=user, metadata={"user_id": "u" * 200}) == base
        assert prompt(messages=user, system="You are the order assistant of Acme Shop.") > base + 5
        assert prompt(messages=[{"role": "user", "content": [{"type": "text", "text": "where is my parcel"}]}]) == base
        turn = [*user, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"order": "A-1041"}}]}]
        with_call = prompt(messages=turn)
        assert with_call > base + 5
        result = [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Shipped from Pune on Monday."}]}]
        assert prompt(messages=turn + result) > with_call + 8
        tool = {"name": "lookup", "description": "Look up an order", "input_schema": {
            "type": "object", "properties": {"order": {"type": "string"}}}}
        assert prompt(messages=user, tools=[tool]) > base + 8


def test_gemini_prompt_usage_counts_instruction_contents_and_tools(llm: FakeLLM) -> None:
    gemini = _gemini(llm)

    def prompt(contents: Any, **config: Any) -> int:
        r = gemini.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config or None)
        assert r.usage_metadata.prompt_token_count == llm.responses[-1].input_tokens
        return int(r.usage_metadata.prompt_token_count)

    base = prompt("where is my parcel")
    assert prompt("where is my parcel", system_instruction="You are the order assistant of Acme.") > base + 5
    assert prompt("where is my parcel", tools=[{"function_declarations": [{
        "name": "lookup", "description": "Look up an order",
        "parameters": {"type": "OBJECT", "properties": {"order": {"type": "STRING"}}}}]}]) > base + 8
    assert prompt("where is my parcel", response_mime_type="application/json", response_schema=Order) > base + 5
    reply = {"role": "user", "parts": [{"function_response": {"name": "lookup",
                                                              "response": {"status": "shipped from Pune"}}}]}
    assert prompt(["where is my parcel", reply]) > base + 8


# -- cached and reasoning tokens ------------------------------------------------------------


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


def test_anthropic_input_tokens_exclude_the_cached_part(llm: FakeLLM) -> None:
    llm.script(Reply(text="cached answer", input_tokens=1200, cached_tokens=1024),
               Reply(text="cached answer", input_tokens=1200, cached_tokens=1024))
    with _anthropic(llm) as c:
        m = c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
        assert (m.usage.input_tokens, m.usage.cache_read_input_tokens, m.usage.cache_creation_input_tokens) == (
            176, 1024, 0)
        events = list(c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES, stream=True))
    start = next(e for e in events if e.type == "message_start")
    delta = next(e for e in events if e.type == "message_delta")
    assert (start.message.usage.input_tokens, start.message.usage.cache_read_input_tokens) == (176, 1024)
    assert (delta.usage.input_tokens, delta.usage.cache_read_input_tokens) == (176, 1024)
    assert llm.responses[1].input_tokens == 1200 and llm.responses[1].usage == delta.usage.model_dump(
        exclude_none=True)


def test_gemini_cached_and_thought_tokens(llm: FakeLLM) -> None:
    llm.script(Reply(text="ok", reasoning="Check the order ledger first.", input_tokens=900, cached_tokens=512,
                     output_tokens=120, reasoning_tokens=100))
    gemini = _gemini(llm)  # a client closes its connections when collected: keep it
    r = gemini.models.generate_content(model="gemini-2.5-flash", contents="where is my parcel")
    u = r.usage_metadata
    assert (u.prompt_token_count, u.cached_content_token_count) == (900, 512)
    assert (u.candidates_token_count, u.thoughts_token_count, u.total_token_count) == (20, 100, 1020)
    parts = r.candidates[0].content.parts
    assert [(p.thought, p.text) for p in parts] == [(True, "Check the order ledger first."), (None, "ok")]
    assert llm.responses[0].output_tokens == 120


def test_reasoning_token_estimate_comes_from_the_reasoning_text(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="ok", reasoning="short"), Reply(text="ok", reasoning="a much longer chain of thought " * 8))
    short = client.responses.create(model="m", input="x").usage
    long = client.responses.create(model="m", input="x").usage
    assert short is not None and long is not None
    assert 0 < short.output_tokens_details.reasoning_tokens < long.output_tokens_details.reasoning_tokens
    assert long.output_tokens > long.output_tokens_details.reasoning_tokens


# -- ids -----------------------------------------------------------------------------------------


def test_ids_are_real_shaped_and_unique_per_server_and_request(llm: FakeLLM, client: openai.OpenAI) -> None:
    first = client.chat.completions.create(model="m", messages=MESSAGES).id
    second = client.chat.completions.create(model="m", messages=MESSAGES).id
    assert first != second and [s.id for s in llm.responses] == [first, second]
    llm.clear()
    # The request count restarts with clear(); the ids never repeat.
    assert client.chat.completions.create(model="m", messages=MESSAGES).id not in (first, second)
    with FakeLLM() as other, openai.OpenAI(base_url=other.base_url, api_key="x", max_retries=0) as c2:
        assert c2.chat.completions.create(model="m", messages=MESSAGES).id != first

    resp = client.responses.create(model="m", input="x")
    assert RESPONSE_ID.fullmatch(resp.id) and resp.id == llm.responses[-1].id
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": "{}"}}], text="calling"))
    resp = client.responses.create(model="m", input="x")
    message, call = resp.output
    assert re.fullmatch(r"msg_[0-9a-f]{48}", message.id) and call.type == "function_call"
    assert re.fullmatch(r"fc_[0-9a-f]{48}", call.id or "") and CALL_ID.fullmatch(call.call_id)
    assert (call.call_id,) == llm.responses[-1].tool_call_ids

    with _anthropic(llm) as c:
        llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"q": "x"}}}]))
        m = c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert ANTHROPIC_ID.fullmatch(m.id) and m.id == llm.responses[-1].id
    assert m._request_id == llm.responses[-1].request_id and m._request_id.startswith("req_")
    assert TOOLU_ID.fullmatch(m.content[0].id) and (m.content[0].id,) == llm.responses[-1].tool_call_ids

    gemini = _gemini(llm)
    g = gemini.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert g.response_id is not None and GEMINI_ID.fullmatch(g.response_id)
    assert g.response_id == llm.responses[-1].id


# -- responses ---------------------------------------------------------------------


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
    frames = _sse(llm.base_url + "/responses", {"model": "m", "input": "x", "stream": True})
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


# -- structured output and refusals -------------------------------------------------------------


def test_structured_output_parses_in_every_sdk(llm: FakeLLM, client: openai.OpenAI) -> None:
    order = {"city": "Pune", "days": 2}
    llm.script(*[Reply(parsed=order)] * 4)
    chat = client.chat.completions.parse(model="m", messages=MESSAGES, response_format=Order)
    assert chat.choices[0].message.parsed == Order(city="Pune", days=2)
    assert chat.choices[0].message.content == '{"city":"Pune","days":2}'
    assert llm.bodies("/chat/completions")[0]["response_format"]["type"] == "json_schema"
    resp = client.responses.parse(model="m", input="x", text_format=Order)
    assert resp.output_parsed == Order(city="Pune", days=2)
    with client.responses.stream(model="m", input="x", text_format=Order) as stream:
        assert stream.get_final_response().output_parsed == Order(city="Pune", days=2)
    with _anthropic(llm) as c:
        m = c.messages.parse(model="claude-test", max_tokens=50, messages=MESSAGES, output_format=Order)
    assert m.parsed_output == Order(city="Pune", days=2)


def test_refusals_in_each_api(llm: FakeLLM, client: openai.OpenAI) -> None:
    no = "I can't help with that."
    llm.script(*[Reply(refusal=no)] * 5)
    chat = client.chat.completions.parse(model="m", messages=MESSAGES, response_format=Order)
    message = chat.choices[0].message
    assert (message.refusal, message.content, message.parsed) == (no, None, None)
    with client.chat.completions.stream(model="m", messages=MESSAGES) as stream:
        pieces = [e.delta for e in stream if e.type == "refusal.delta"]
        final = stream.get_final_completion()
    assert "".join(pieces) == no and final.choices[0].message.refusal == no
    resp = client.responses.create(model="m", input="x")
    part = resp.output[0].content[0]
    assert part.type == "refusal" and part.refusal == no and resp.output_text == ""
    events = list(client.responses.create(model="m", input="x", stream=True))
    assert "".join(e.delta for e in events if e.type == "response.refusal.delta") == no
    assert next(e for e in events if e.type == "response.refusal.done").refusal == no
    with _anthropic(llm) as c:
        m = c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert m.stop_reason == "refusal" and llm.responses[-1].finish_reasons == ("refusal",)


def test_reply_rejects_contradictions_when_written() -> None:
    with pytest.raises(ValueError, match="parsed"):
        Reply(text="x", parsed={"a": 1})
    with pytest.raises(ValueError, match="refusal"):
        Reply(text="x", refusal="no")
    with pytest.raises(ValueError, match="stream_failure"):
        Reply(stream_failure="timeout")
    with pytest.raises(ValueError, match="cached_tokens"):
        Reply(input_tokens=10, cached_tokens=11)
    with pytest.raises(ValueError, match="reasoning_tokens"):
        Reply(output_tokens=10, reasoning_tokens=11)
    with pytest.raises(ValueError, match="one delta or more"):
        Reply(text="x", deltas=0)
    assert Reply(parsed=[1, "é"]).text == '[1,"é"]'


# -- errors ---------------------------------------------------------------------------


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


def test_error_status_on_stream_requests(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(status=429), Reply(status=503))
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(model="m", input="x", stream=True)
    assert info.value.status_code == 503


def test_unknown_path_is_404(llm: FakeLLM) -> None:
    status, body = _post_raw(llm.base_url + "/embeddings", b"{}")
    assert status == 404
    assert body["error"] == {"message": "Invalid URL (POST /v1/embeddings)", "type": "invalid_request_error",
                             "param": None, "code": None}
    assert llm.requests[0].path == "/v1/embeddings"
    assert (llm.responses[0].request, llm.responses[0].status) == (llm.requests[0], 404)


def test_reply_callable_exception_becomes_500() -> None:
    def boom(req: RecordedRequest) -> Reply:
        raise ValueError("bad callable")

    fake = FakeLLM(reply=boom)
    with (
        fake,
        openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as c,
        pytest.raises(openai.InternalServerError) as info,
    ):
        c.chat.completions.create(model="m", messages=MESSAGES)
    assert "bad callable" in str(info.value)


@pytest.mark.parametrize(
    ("status", "exc_name", "err_type"),
    [
        (400, "BadRequestError", "invalid_request_error"),
        (401, "AuthenticationError", "authentication_error"),
        (429, "RateLimitError", "rate_limit_error"),
        (500, "InternalServerError", "api_error"),
        (529, "OverloadedError", "overloaded_error"),
    ],
)
def test_anthropic_error_bodies(llm: FakeLLM, status: int, exc_name: str, err_type: str) -> None:
    anthropic = pytest.importorskip("anthropic")
    llm.script(Reply(status=status))
    with _anthropic(llm) as c, pytest.raises(anthropic.APIStatusError) as info:
        c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    served = llm.responses[0]
    assert type(info.value) is getattr(anthropic, exc_name)
    assert info.value.status_code == status and info.value.request_id == served.request_id
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error" and body["request_id"] == served.request_id
    assert body["error"]["type"] == err_type == served.error_type and body["error"]["message"]


@pytest.mark.parametrize(("status", "code_name"), [(400, "INVALID_ARGUMENT"), (429, "RESOURCE_EXHAUSTED"),
                                                   (500, "INTERNAL"), (503, "UNAVAILABLE")])
def test_gemini_error_bodies(llm: FakeLLM, status: int, code_name: str) -> None:
    gemini = _gemini(llm)
    from google.genai import errors

    llm.script(Reply(status=status))
    with pytest.raises(errors.APIError) as info:
        gemini.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert isinstance(info.value, errors.ServerError if status >= 500 else errors.ClientError)
    assert (info.value.code, info.value.status) == (status, code_name) == (status, llm.responses[0].error_type)
    assert info.value.message


# -- failing streams ------------------------------------------------------------------------


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
    frames = _sse(llm.base_url + "/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True})
    assert frames[-1][1]["error"]["type"] == "server_error"
    assert (None, "[DONE]") not in frames


def test_anthropic_stream_failure_is_an_overloaded_error_event(llm: FakeLLM) -> None:
    anthropic = pytest.importorskip("anthropic")
    llm.script(Reply(text="It left the warehouse", stream_failure="error"),
               Reply(text="It left the warehouse", stream_failure="error"))
    seen: list[str] = []
    with _anthropic(llm) as c:
        with (
            pytest.raises(anthropic.APIStatusError) as info,
            c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream,
        ):
            seen.extend(stream.text_stream)
        frames = _sse(llm.anthropic_base_url + "/v1/messages",
                      {"model": "claude-test", "max_tokens": 50, "messages": MESSAGES, "stream": True})
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert len(seen) == 1 and "It left the warehouse".startswith(seen[0])
    assert frames[-1] == ("error", info.value.body)
    assert "message_stop" not in [event for event, _ in frames]


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


def test_gemini_stream_failure_raises_server_error(llm: FakeLLM) -> None:
    gemini = _gemini(llm)
    from google.genai import errors

    llm.script(Reply(text="It left the warehouse", stream_failure="error"))
    seen = []
    with pytest.raises(errors.ServerError) as info:
        for chunk in gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="x"):
            seen.append(chunk.text)
    assert (info.value.code, info.value.status) == (503, "UNAVAILABLE")
    assert len(seen) == 1


def _broken(client: Any) -> tuple[type[BaseException], ...]:
    """What an SDK client raises when the connection dies mid-body: its SDK's connection error,
    or (where the SDK does not wrap stream reads) its HTTP library's protocol error."""
    sdk = sys.modules[type(client).__module__.split(".")[0]]
    base = next(c for c in type(client._client).__mro__ if c.__module__.startswith("httpx"))  # httpx or httpx2
    http = sys.modules[base.__module__.split(".")[0]]
    return (sdk.APIConnectionError, http.RemoteProtocolError)


def test_dropped_connection_breaks_the_stream(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(*[Reply(text="It left the warehouse", stream_failure="drop")] * 5)
    with pytest.raises(_broken(client)):
        list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    with pytest.raises(_broken(client)):
        list(client.responses.create(model="m", input="x", stream=True))
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    with _anthropic(llm) as c, pytest.raises(_broken(c)):
        list(c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES, stream=True))
    gemini = _gemini(llm)
    from google.genai import _api_client

    http = getattr(_api_client, "httpx2", None) or _api_client.httpx
    with pytest.raises(http.RemoteProtocolError):
        list(gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="x"))
    assert [(s.failure, s.usage) for s in llm.responses] == [("drop", None)] * 5


def test_failure_before_the_first_byte_is_an_http_error(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="x", stream_failure="error"), Reply(text="x", stream_failure="error"))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    anthropic = pytest.importorskip("anthropic")
    with _anthropic(llm) as c, pytest.raises(anthropic.OverloadedError):
        c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert [(s.status, s.error_type) for s in llm.responses] == [(500, "server_error"), (529, "overloaded_error")]


# -- recording, scripting ----------------------------------------------------------------


def test_requests_recorded_with_exact_bodies(llm: FakeLLM, client: openai.OpenAI) -> None:
    big = "x" * 1_000_000
    client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": big}],
    )
    client.responses.create(model="m2", input="hello")

    assert [r.path for r in llm.requests] == ["/v1/chat/completions", "/v1/responses"]
    first = llm.requests[0]
    assert first.method == "POST"
    assert first.headers["authorization"] == "Bearer test"
    assert first.headers["content-type"] == "application/json"
    assert int(first.headers["content-length"]) == len(first.body)
    assert first.json["messages"][1]["content"] == big
    assert llm.bodies("/chat/completions") == [first.json]
    assert [b["model"] for b in llm.bodies()] == ["m", "m2"]
    assert llm.bodies("/responses")[0]["input"] == "hello"
    assert [s.request for s in llm.responses] == llm.requests


def test_raw_body_bytes_preserved_10mb(llm: FakeLLM) -> None:
    # Deliberately odd spacing: the fake must keep bytes, not re-serialise JSON.
    raw = b'{"model":  "m",   "messages": [{"role":"user","content":"' + b"y" * 10_000_000 + b'"}]}'
    status, body = _post_raw(llm.base_url + "/chat/completions", raw)
    assert status == 200
    assert llm.requests[0].body == raw
    assert body["usage"] == llm.responses[0].usage
    compact = json.dumps({"model": "m", "messages": [{"role": "user", "content": "y" * 10_000_000}]}).encode()
    assert _post_raw(llm.base_url + "/chat/completions", compact)[1]["usage"]["prompt_tokens"] == (
        body["usage"]["prompt_tokens"])


def test_script_order_callable_fallback_default_and_clear(llm: FakeLLM, client: openai.OpenAI) -> None:
    def ask(prompt: str) -> str | None:
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
        return r.choices[0].message.content

    assert ask("a") == "ok 1"
    llm.script("first", Reply(text="second"))
    assert [ask("b"), ask("c"), ask("d")] == ["first", "second", "ok 4"]

    llm.script("pending")
    llm.clear()
    assert llm.requests == [] and llm.responses == []
    assert ask("e") == "ok 1"

    seen: list[RecordedRequest] = []

    def echo(req: RecordedRequest) -> str:
        seen.append(req)
        return "echo:" + str(req.json["messages"][0]["content"])

    fake = FakeLLM(reply=echo)
    with fake, openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as c2:
        fake.script("scripted wins")
        first = c2.chat.completions.create(model="m", messages=[{"role": "user", "content": "p"}])
        second = c2.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert first.choices[0].message.content == "scripted wins"
    assert second.choices[0].message.content == "echo:q"
    assert [r.json["messages"][0]["content"] for r in seen] == ["q"]


def test_concurrent_requests_are_all_recorded(llm: FakeLLM) -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as c:
                for _ in range(5):
                    c.chat.completions.create(model="m", messages=MESSAGES)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(llm.requests) == 40
    assert len({s.id for s in llm.responses}) == 40


def test_64_simultaneous_connections_are_all_accepted(llm: FakeLLM) -> None:
    """The listen backlog holds a burst of connections: with the default of 5 the kernel drops
    the excess SYNs and those clients wait a second for the retry (here: time out)."""
    body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    barrier = threading.Barrier(64)
    answers: list[bytes] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            with socket.create_connection(("127.0.0.1", llm.port), timeout=0.5) as s:
                s.settimeout(30)
                s.sendall(request)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            answers.append(data)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(answers) == 64 and all(a.startswith(b"HTTP/1.1 200") for a in answers)
    assert len(llm.responses) == 64


# -- lifecycle -------------------------------------------------------------------------------


def test_urls() -> None:
    with FakeLLM() as fake:
        assert fake.base_url == f"http://127.0.0.1:{fake.port}/v1"
        assert fake.anthropic_base_url == f"http://127.0.0.1:{fake.port}"


def test_stop_frees_port_and_is_idempotent() -> None:
    fake = FakeLLM().start()
    port = fake.port
    with openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as c:
        # Leave a pooled keep-alive connection open; stop() must not hang on it.
        c.chat.completions.create(model="m", messages=MESSAGES)
        started = time.monotonic()
        fake.stop()
        assert time.monotonic() - started < 5
        fake.stop()

        with pytest.raises(openai.APIConnectionError):
            c.chat.completions.create(model="m", messages=MESSAGES)

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))

    with FakeLLM(port=port) as again:
        assert again.port == port


def test_non_loopback_host_rejected() -> None:
    with pytest.raises(ValueError):
        FakeLLM(host="0.0.0.0")


# -- anthropic ---------------------------------------------------------------------------------


def test_anthropic_messages_json(llm: FakeLLM) -> None:
    llm.script(Reply(text="claude says hi", input_tokens=9, output_tokens=3))
    with _anthropic(llm) as c:
        m = c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert m.id == llm.responses[0].id
    assert m.type == "message"
    assert m.role == "assistant"
    assert m.model == "claude-test"
    assert m.content[0].type == "text"
    assert m.content[0].text == "claude says hi"
    assert m.stop_reason == "end_turn"
    assert m.stop_sequence is None
    assert (m.usage.input_tokens, m.usage.output_tokens) == (9, 3)
    assert m.usage.model_dump(exclude_none=True) == llm.responses[0].usage
    assert llm.requests[0].path == "/v1/messages"
    assert llm.bodies("/messages")[0]["max_tokens"] == 50


def test_anthropic_messages_stream(llm: FakeLLM) -> None:
    llm.script(Reply(text="streaming from claude", output_tokens=5))
    with (
        _anthropic(llm) as c,
        c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream,
    ):
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "streaming from claude"
    assert 2 <= len(pieces) <= 3
    assert final.content[0].text == "streaming from claude"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5
    assert final.usage.input_tokens == llm.responses[0].input_tokens


def test_anthropic_stream_wire_framing(llm: FakeLLM) -> None:
    """message_start (input counted, one output token), a ping once the first block opened,
    start/delta/stop per block, message_delta with the cumulative usage, message_stop."""
    llm.script(Reply(text="it ships today", tool_calls=[{"function": {"name": "lookup", "arguments": {"q": "A1"}}}]))
    frames = _sse(llm.anthropic_base_url + "/v1/messages",
                  {"model": "claude-test", "max_tokens": 50, "messages": MESSAGES, "stream": True})
    served = llm.responses[0]
    names = [event for event, _ in frames]
    assert all(event == data["type"] for event, data in frames)
    texts = names.count("content_block_delta") - 2
    assert names == ["message_start", "content_block_start", "ping", *["content_block_delta"] * texts,
                     "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]
    start = frames[0][1]["message"]
    assert (start["id"], start["content"], start["stop_reason"]) == (served.id, [], None)
    assert start["usage"]["output_tokens"] == 1 and start["usage"]["input_tokens"] == served.input_tokens
    tool_start = frames[names.index("content_block_start", 2)][1]["content_block"]
    assert tool_start == {"type": "tool_use", "id": served.tool_call_ids[0], "name": "lookup", "input": {}}
    partial = "".join(d["delta"]["partial_json"] for e, d in frames if e == "content_block_delta"
                      and d["delta"]["type"] == "input_json_delta")
    assert json.loads(partial) == {"q": "A1"}
    delta = frames[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"] == served.usage == {"input_tokens": served.input_tokens, "cache_creation_input_tokens": 0,
                                              "cache_read_input_tokens": 0, "output_tokens": served.output_tokens}


def test_anthropic_thinking_blocks_are_signed(llm: FakeLLM) -> None:
    thought = "The user asks about order A-1041; the ledger says Pune."
    llm.script(Reply(text="It ships from Pune.", reasoning=thought),
               Reply(text="It ships from Pune.", reasoning=thought),
               Reply(text="It ships from Pune.", reasoning=thought))
    with _anthropic(llm) as c:
        m = c.messages.create(model="claude-test", max_tokens=2000, messages=MESSAGES)
        with c.messages.stream(model="claude-test", max_tokens=2000, messages=MESSAGES) as stream:
            thinking = "".join(e.thinking for e in stream if e.type == "thinking")
            final = stream.get_final_message()
        frames = _sse(llm.anthropic_base_url + "/v1/messages",
                      {"model": "claude-test", "max_tokens": 2000, "messages": MESSAGES, "stream": True})
    block, text = m.content
    assert (block.type, block.thinking, text.text) == ("thinking", thought, "It ships from Pune.")
    assert len(base64.b64decode(block.signature, validate=True)) > 100
    assert m.usage.output_tokens == llm.responses[0].output_tokens > llm.responses[0].reasoning_tokens > 0
    assert thinking == thought
    assert final.content[0].type == "thinking" and final.content[0].thinking == thought
    assert final.content[0].signature and final.content[0].signature != block.signature
    assert frames[1][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [d["delta"]["type"] for e, d in frames if e == "content_block_delta" and d["index"] == 0]
    assert deltas[-1] == "signature_delta" and set(deltas[:-1]) == {"thinking_delta"}


def test_anthropic_tool_use_and_error(llm: FakeLLM) -> None:
    anthropic = pytest.importorskip("anthropic")
    llm.script(Reply(tool_calls=[TOOL_CALL], finish_reason="tool_calls"), Reply(status=529, text="busy"))
    with _anthropic(llm) as c:
        with c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream:
            final = stream.get_final_message()
        block = final.content[0]
        assert block.type == "tool_use"
        assert (block.id, block.name, block.input) == ("call_1", "lookup", {"q": "weather"})
        assert final.stop_reason == "tool_use"

        with pytest.raises(anthropic.APIStatusError) as info:
            c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert info.value.status_code == 529
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"},
                               "request_id": llm.responses[1].request_id}


@pytest.mark.asyncio
async def test_anthropic_async_stream(llm: FakeLLM) -> None:
    anthropic = pytest.importorskip("anthropic")
    llm.script("async claude")
    async with (
        anthropic.AsyncAnthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0) as c,
        c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream,
    ):
        text = "".join([t async for t in stream.text_stream])
    assert text == "async claude"


# -- gemini ---------------------------------------------------------------------------------


def test_gemini_stream_chunks_and_usage_metadata(llm: FakeLLM) -> None:
    gemini = _gemini(llm)
    llm.script(Reply(text="It left the Pune warehouse."))
    chunks = list(gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="where is it"))
    served = llm.responses[0]
    assert "".join(c.text for c in chunks) == "It left the Pune warehouse."
    assert {c.response_id for c in chunks} == {served.id}
    assert all(c.usage_metadata.prompt_token_count == served.input_tokens for c in chunks)
    assert [c.usage_metadata.candidates_token_count for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert [c.candidates[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    last = chunks[-1]
    assert last.candidates[0].finish_reason == "STOP" and served.finish_reasons == ("STOP",)
    assert last.usage_metadata.candidates_token_count == served.output_tokens
    assert last.usage_metadata.model_dump(exclude_none=True, by_alias=True, mode="json") == served.usage


def test_servers_seeded_alike_answer_alike_and_unseeded_ones_never_do():
    import openai

    def ids(seed):
        with FakeLLM(seed=seed) as llm, openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as c:
            return [c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).id
                    for _ in range(2)]

    assert ids("s") == ids("s")
    assert ids("s") != ids("t")
    assert ids(None) != ids(None)
