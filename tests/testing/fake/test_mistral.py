"""FakeLLM answers the real mistralai SDK the way Mistral's chat API does.

Values are compared with what the server recorded having sent (``llm.responses``), and parsed
with the SDK's own models, never with constants the fake happens to produce.
"""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import openai
import pytest

pytest.importorskip("mistralai.client", reason="mistralai is not installed (extra 'mistral')")

from mistralai.client import Mistral, errors, models

from ctxguard.testing.fake import FakeLLM, Reply

MODEL = "mistral-small-latest"
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
MISTRAL_ID = re.compile(r"[0-9a-f]{32}")
TOOL_CALL_ID = re.compile(r"[A-Za-z0-9]{9}")
TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look up an order by its id",
                                         "parameters": {"type": "object",
                                                        "properties": {"order": {"type": "string"}}}}}


@pytest.fixture
def mistral(llm: FakeLLM):
    with Mistral(api_key="test", server_url=llm.mistral_base_url) as client:
        yield client


def _sse(url: str, payload: dict[str, Any]) -> list[Any]:
    """The ``data`` of each frame of an SSE answer as it came off the wire (decoded unless ``[DONE]``)."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = resp.read().decode()
    frames = []
    for block in raw.strip().split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block  # data-only events, one line each
        data = block.removeprefix("data: ")
        frames.append(data if data == "[DONE]" else json.loads(data))
    return frames


def test_complete_parses_with_the_sdks_models(llm: FakeLLM, mistral: Mistral) -> None:
    llm.script("Hello there!")
    r = mistral.chat.complete(model=MODEL, messages=MESSAGES)
    served = llm.responses[0]
    assert isinstance(r, models.ChatCompletionResponse)
    assert MISTRAL_ID.fullmatch(r.id) and r.id == served.id
    assert r.object == "chat.completion"
    assert isinstance(r.created, int) and r.created > 0
    assert r.model == MODEL == served.model
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "Hello there!"
    assert r.choices[0].finish_reason == "stop" and served.finish_reasons == ("stop",)
    assert served.usage == {"prompt_tokens": r.usage.prompt_tokens, "total_tokens": r.usage.total_tokens,
                            "completion_tokens": r.usage.completion_tokens}
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (served.input_tokens, served.output_tokens)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert served.request_id and MISTRAL_ID.fullmatch(served.request_id)
    # Mistral's JSON has no spaces; the request arrived under the Mistral prefix, from the SDK.
    raw = urllib.request.urlopen(urllib.request.Request(
        f"{llm.mistral_base_url}/v1/chat/completions", data=json.dumps({"model": MODEL, "messages": MESSAGES}).encode(),
        headers={"Content-Type": "application/json"}), timeout=10)
    with raw:
        assert raw.headers["x-kong-request-id"] == llm.responses[-1].request_id
        body = raw.read()
    assert b'"object":"chat.completion"' in body and b": " not in body
    assert llm.requests[0].path == "/mistral/v1/chat/completions"
    assert llm.requests[0].headers["user-agent"].startswith("mistral-client-python/")


def test_usage_grows_with_what_was_sent(llm: FakeLLM, mistral: Mistral) -> None:
    short = mistral.chat.complete(model=MODEL, messages=MESSAGES).usage.prompt_tokens
    longer = mistral.chat.complete(model=MODEL, messages=[
        {"role": "system", "content": "You are the order assistant of Acme Shop."}, *MESSAGES]).usage.prompt_tokens
    with_tool = mistral.chat.complete(model=MODEL, messages=MESSAGES, tools=[TOOL]).usage.prompt_tokens
    assert 0 < short < longer and short < with_tool
    # The same estimate as OpenAI's chat completions: the same messages cost the same there.
    with openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as client:
        assert client.chat.completions.create(model="gpt-4o", messages=MESSAGES).usage.prompt_tokens == short
    # But for digits, which Mistral's tokenizers take one a token (OpenAI's, up to three).
    dated = [{"role": "user", "content": "order 5551234567 ships on 2024-08-27"}]
    with openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as client:
        assert client.chat.completions.create(model="gpt-4o", messages=dated).usage.prompt_tokens + 10 == \
            mistral.chat.complete(model=MODEL, messages=dated).usage.prompt_tokens
    said = mistral.chat.complete(model=MODEL, messages=MESSAGES)
    llm.script("a much longer answer, said in many more words than the default one")
    more = mistral.chat.complete(model=MODEL, messages=MESSAGES)
    assert more.usage.completion_tokens > said.usage.completion_tokens


def test_tool_calls_get_mistral_ids_and_finish_reason(llm: FakeLLM, mistral: Mistral) -> None:
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}},
                                 {"function": {"name": "lookup", "arguments": '{"order": "A-1042"}'}}]))
    r = mistral.chat.complete(model=MODEL, messages=MESSAGES, tools=[TOOL])
    calls = r.choices[0].message.tool_calls
    served = llm.responses[0]
    assert [c.id for c in calls] == list(served.tool_call_ids)
    assert all(TOOL_CALL_ID.fullmatch(c.id) for c in calls) and calls[0].id != calls[1].id
    assert [json.loads(c.function.arguments) for c in calls] == [{"order": "A-1041"}, {"order": "A-1042"}]
    assert [c.index for c in calls] == [0, 1]
    assert r.choices[0].finish_reason == "tool_calls" == served.finish_reasons[0]


def test_stream_frames_and_sdk_events(llm: FakeLLM, mistral: Mistral) -> None:
    llm.script("the parcel is in Pune")
    frames = _sse(f"{llm.mistral_base_url}/v1/chat/completions", {"model": MODEL, "messages": MESSAGES,
                                                                   "stream": True})
    served = llm.responses[0]
    assert frames[-1] == "[DONE]"
    chunks = frames[:-1]
    assert {c["id"] for c in chunks} == {served.id} and MISTRAL_ID.fullmatch(served.id)
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "the parcel is in Pune"
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert [c.get("usage") for c in chunks[:-1]] == [None] * (len(chunks) - 1)  # usage on the last chunk only
    assert chunks[-1]["usage"] == served.usage
    assert served.usage["prompt_tokens"] == served.input_tokens > 0

    llm.script("the parcel is in Pune")
    events = list(mistral.chat.stream(model=MODEL, messages=MESSAGES))
    assert all(isinstance(e, models.CompletionEvent) for e in events)
    assert "".join(e.data.choices[0].delta.content or "" for e in events) == "the parcel is in Pune"
    assert events[-1].data.usage.prompt_tokens == llm.responses[-1].input_tokens


def test_stream_tool_calls_arrive_whole(llm: FakeLLM, mistral: Mistral) -> None:
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}}]))
    events = list(mistral.chat.stream(model=MODEL, messages=MESSAGES, tools=[TOOL]))
    calls = [c for e in events for c in (e.data.choices[0].delta.tool_calls or [])]
    assert [c.id for c in calls] == list(llm.responses[0].tool_call_ids)
    assert json.loads(calls[0].function.arguments) == {"order": "A-1041"}
    assert events[-1].data.choices[0].finish_reason == "tool_calls"


def test_thinking_is_a_content_chunk(llm: FakeLLM, mistral: Mistral) -> None:
    llm.script(Reply(text="Pune", reasoning="the order says Pune"))
    content = mistral.chat.complete(model=MODEL, messages=MESSAGES).choices[0].message.content
    assert isinstance(content[0], models.ThinkChunk) and content[0].thinking[0].text == "the order says Pune"
    assert isinstance(content[1], models.TextChunk) and content[1].text == "Pune"


def test_error_bodies_are_mistrals(llm: FakeLLM, mistral: Mistral) -> None:
    llm.script(Reply(status=401), Reply(status=422, text="Extra inputs are not permitted"), Reply(status=429),
               Reply(status=404))
    with pytest.raises(errors.SDKError) as unauthorized:
        mistral.chat.complete(model=MODEL, messages=MESSAGES)
    assert unauthorized.value.status_code == 401
    assert json.loads(unauthorized.value.body) == {"message": "Unauthorized", "request_id": llm.responses[0].request_id}
    with pytest.raises(errors.HTTPValidationError) as invalid:
        mistral.chat.complete(model=MODEL, messages=MESSAGES)
    assert invalid.value.status_code == 422
    assert [(d.loc, d.msg) for d in invalid.value.data.detail] == [(["body"], "Extra inputs are not permitted")]
    with pytest.raises(errors.SDKError) as limited:
        mistral.chat.complete(model=MODEL, messages=MESSAGES)
    assert json.loads(limited.value.body) == {"object": "error", "message": "Rate limit exceeded",
                                              "type": "rate_limited", "param": None, "code": "1300"}
    with pytest.raises(errors.SDKError) as unknown:
        mistral.chat.complete(model=MODEL, messages=MESSAGES)
    assert json.loads(unknown.value.body)["message"] == f"Invalid model: {MODEL}"
    assert [r.error_type for r in llm.responses] == ["Unauthorized", "value_error", "rate_limited", "invalid_model"]


def test_a_broken_stream_ends_with_finish_reason_error(llm: FakeLLM, mistral: Mistral) -> None:
    llm.script(Reply(text="the parcel is in Pune", stream_failure="error"))
    events = list(mistral.chat.stream(model=MODEL, messages=MESSAGES))
    assert events[-1].data.choices[0].finish_reason == "error"
    assert events[-1].data.usage is None
    served = llm.responses[0]
    assert served.finish_reasons == ("error",) and served.failure == "error"
    assert served.usage is None and served.input_tokens is None


def test_openai_and_mistral_answer_side_by_side(llm: FakeLLM, mistral: Mistral) -> None:
    with openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as client:
        assert client.chat.completions.create(model="gpt-4o", messages=MESSAGES).id.startswith("chatcmpl-")
    assert MISTRAL_ID.fullmatch(mistral.chat.complete(model=MODEL, messages=MESSAGES).id)
    assert [r.request.path for r in llm.responses] == ["/v1/chat/completions", "/mistral/v1/chat/completions"]
    assert len(llm.bodies("/chat/completions")) == 2
