"""The fake answers the real anthropic SDK as Anthropic's Messages API does
(ctxguard/testing/fake/anthropic_messages.py): usage without the cache reads, the stream's framing
(``ping``, cumulative ``message_delta`` usage), signed thinking blocks, tool use, the error bodies
and events. Values are compared with what the server recorded having sent (``llm.responses``).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ctxguard.testing.fake import FakeLLM, Reply
from tests.testing.fake.helpers import MESSAGES, TOOL_CALL, anthropic_client, sse


def test_anthropic_prompt_usage_counts_system_tool_results_and_tools(llm: FakeLLM) -> None:
    with anthropic_client(llm) as c:
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


def test_anthropic_input_tokens_exclude_the_cached_part(llm: FakeLLM) -> None:
    llm.script(Reply(text="cached answer", input_tokens=1200, cached_tokens=1024),
               Reply(text="cached answer", input_tokens=1200, cached_tokens=1024))
    with anthropic_client(llm) as c:
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


def test_anthropic_messages_json(llm: FakeLLM) -> None:
    llm.script(Reply(text="claude says hi", input_tokens=9, output_tokens=3))
    with anthropic_client(llm) as c:
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
        anthropic_client(llm) as c,
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
    frames = sse(llm.anthropic_base_url + "/v1/messages",
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
    with anthropic_client(llm) as c:
        m = c.messages.create(model="claude-test", max_tokens=2000, messages=MESSAGES)
        with c.messages.stream(model="claude-test", max_tokens=2000, messages=MESSAGES) as stream:
            thinking = "".join(e.thinking for e in stream if e.type == "thinking")
            final = stream.get_final_message()
        frames = sse(llm.anthropic_base_url + "/v1/messages",
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
    with anthropic_client(llm) as c:
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
    with anthropic_client(llm) as c, pytest.raises(anthropic.APIStatusError) as info:
        c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    served = llm.responses[0]
    assert type(info.value) is getattr(anthropic, exc_name)
    assert info.value.status_code == status and info.value.request_id == served.request_id
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error" and body["request_id"] == served.request_id
    assert body["error"]["type"] == err_type == served.error_type and body["error"]["message"]


def test_anthropic_stream_failure_is_an_overloaded_error_event(llm: FakeLLM) -> None:
    anthropic = pytest.importorskip("anthropic")
    llm.script(Reply(text="It left the warehouse", stream_failure="error"),
               Reply(text="It left the warehouse", stream_failure="error"))
    seen: list[str] = []
    with anthropic_client(llm) as c:
        with (
            pytest.raises(anthropic.APIStatusError) as info,
            c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream,
        ):
            seen.extend(stream.text_stream)
        frames = sse(llm.anthropic_base_url + "/v1/messages",
                      {"model": "claude-test", "max_tokens": 50, "messages": MESSAGES, "stream": True})
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert len(seen) == 1 and "It left the warehouse".startswith(seen[0])
    assert frames[-1] == ("error", info.value.body)
    assert "message_stop" not in [event for event, _ in frames]
