"""FakeLLM answers the real cohere SDK the way Cohere's v2 Chat API does.

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

pytest.importorskip("cohere.v2.client", reason="cohere is not installed (extra 'cohere')")

import inspect

import cohere

from ctxguard.testing.fake import FakeLLM, Reply

MODEL = "command-a-03-2025"
#: cohere 5.x and 6.x take no ``max_retries`` when a client is made; every release takes it per call.
NO_RETRIES = {"max_retries": 0} if "max_retries" in inspect.signature(cohere.ClientV2.__init__).parameters else {}
ONCE = {"request_options": {"max_retries": 0}}
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
TOOL_CALL_ID = re.compile(r"lookup_[a-z0-9]{12}")
TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look up an order by its id",
                                         "parameters": {"type": "object",
                                                        "properties": {"order": {"type": "string"}}}}}


@pytest.fixture
def co(llm: FakeLLM) -> cohere.ClientV2:
    return cohere.ClientV2(api_key="test", base_url=llm.cohere_base_url, **NO_RETRIES)


def _post(llm: FakeLLM, payload: dict[str, Any]) -> tuple[Any, bytes]:
    req = urllib.request.Request(f"{llm.cohere_base_url}/v2/chat", data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers, resp.read()


def _frames(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name, data) of each SSE frame as it came off the wire (data decoded unless ``[DONE]``)."""
    frames = []
    for block in raw.decode().strip().split("\n\n"):
        lines = block.split("\n")
        event = lines[0].removeprefix("event: ") if lines[0].startswith("event: ") else None
        assert lines[-1].startswith("data: ") and len(lines) == (2 if event else 1)
        data = lines[-1].removeprefix("data: ")
        frames.append((event, data if data == "[DONE]" else json.loads(data)))
    return frames


def test_chat_parses_with_the_sdks_models(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script("Hello there!")
    r = co.chat(model=MODEL, messages=MESSAGES)
    served = llm.responses[0]
    assert isinstance(r, cohere.V2ChatResponse)
    assert UUID4.fullmatch(r.id) and r.id == served.id
    assert r.message.role == "assistant"
    assert [(c.type, c.text) for c in r.message.content] == [("text", "Hello there!")]
    assert r.finish_reason == "COMPLETE" and served.finish_reasons == ("COMPLETE",)
    assert served.usage == {
        "billed_units": {"input_tokens": r.usage.billed_units.input_tokens,
                         "output_tokens": r.usage.billed_units.output_tokens},
        "tokens": {"input_tokens": r.usage.tokens.input_tokens, "output_tokens": r.usage.tokens.output_tokens}}
    assert (r.usage.tokens.input_tokens, r.usage.tokens.output_tokens) == (served.input_tokens, served.output_tokens)
    # What the model read includes Cohere's prompt template; what is billed does not.
    assert r.usage.tokens.input_tokens > r.usage.billed_units.input_tokens > 0
    assert r.usage.billed_units.output_tokens == r.usage.tokens.output_tokens > 0
    assert UUID4.fullmatch(served.request_id)
    assert llm.requests[0].path == "/v2/chat"
    assert llm.requests[0].headers["x-fern-sdk-name"] == "cohere"
    headers, body = _post(llm, {"model": MODEL, "messages": MESSAGES})
    assert headers["Content-Type"] == "application/json"
    assert b'"finish_reason":"COMPLETE"' in body and b": " not in body  # compact JSON


def test_usage_grows_with_what_was_sent(llm: FakeLLM, co: cohere.ClientV2) -> None:
    def read(**kwargs: Any) -> tuple[float, float]:
        usage = co.chat(model=MODEL, **kwargs).usage
        return usage.tokens.input_tokens, usage.billed_units.input_tokens

    short = read(messages=MESSAGES)
    longer = read(messages=[{"role": "system", "content": "You are the order assistant of Acme Shop."}, *MESSAGES])
    with_tool = read(messages=MESSAGES, tools=[TOOL])
    with_documents = read(messages=MESSAGES, documents=[{"data": {"snippet": "Parcel held at the Pune depot"}}])
    for grown in (longer, with_tool, with_documents):
        assert grown[0] > short[0] and grown[1] > short[1]
    # The template, as recorded traffic reports it for the model's line (reported less billed): the
    # tool-use and grounding instructions read with tools and with documents.
    templates = [tokens - billed for tokens, billed in (short, with_tool, with_documents)]
    assert templates == [496, 1_492, 1_705]
    # Without the template, the same estimate as OpenAI's chat completions.
    with openai.OpenAI(base_url=llm.base_url, api_key="test", **NO_RETRIES) as client:
        assert short[1] == client.chat.completions.create(model="gpt-4o", messages=MESSAGES).usage.prompt_tokens
    said = co.chat(model=MODEL, messages=MESSAGES)
    llm.script("a much longer answer, said in many more words than the default one")
    more = co.chat(model=MODEL, messages=MESSAGES)
    assert more.usage.tokens.output_tokens > said.usage.tokens.output_tokens


def test_tool_calls_get_cohere_ids_plan_and_finish_reason(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script(Reply(text="I will look both orders up.",
                     tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}},
                                 {"function": {"name": "lookup", "arguments": '{"order": "A-1042"}'}}]))
    r = co.chat(model=MODEL, messages=MESSAGES, tools=[TOOL])
    calls = r.message.tool_calls
    served = llm.responses[0]
    assert [c.id for c in calls] == list(served.tool_call_ids)
    assert all(TOOL_CALL_ID.fullmatch(c.id) for c in calls) and calls[0].id != calls[1].id
    assert [c.type for c in calls] == ["function", "function"]
    assert [json.loads(c.function.arguments) for c in calls] == [{"order": "A-1041"}, {"order": "A-1042"}]
    assert r.message.tool_plan == "I will look both orders up."
    assert r.message.content is None
    assert r.finish_reason == "TOOL_CALL" == served.finish_reasons[0]


def test_finish_reasons_are_coheres(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script(Reply(text="the parcel", finish_reason="length"), Reply(text="the", finish_reason="stop_sequence"))
    assert co.chat(model=MODEL, messages=MESSAGES).finish_reason == "MAX_TOKENS"
    assert co.chat(model=MODEL, messages=MESSAGES).finish_reason == "STOP_SEQUENCE"
    assert [r.finish_reasons for r in llm.responses] == [("MAX_TOKENS",), ("STOP_SEQUENCE",)]


def test_documents_are_cited(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script("held in Pune")
    r = co.chat(model=MODEL, messages=MESSAGES, documents=[{"id": "d1", "data": {"snippet": "Pune depot"}}, "other"])
    [citation] = r.message.citations
    assert (citation.start, citation.end, citation.text, citation.type) == (0, 12, "held in Pune", "TEXT_CONTENT")
    assert [(s.type, s.id, s.document) for s in citation.sources] == [
        ("document", "d1", {"id": "d1", "snippet": "Pune depot"})]


def test_stream_frames_and_sdk_events(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script("the parcel is in Pune")
    headers, raw = _post(llm, {"model": MODEL, "messages": MESSAGES, "stream": True})
    served = llm.responses[0]
    assert headers["Content-Type"].startswith("text/event-stream")
    frames = _frames(raw)
    assert frames[-1] == (None, "[DONE]")
    events = frames[:-1]
    assert all(name == data["type"] for name, data in events)  # each event named as its data's type
    assert [name for name, _ in events] == ["message-start", "content-start", "content-delta", "content-delta",
                                            "content-delta", "content-end", "message-end"]
    start, end = events[0][1], events[-1][1]
    assert start["id"] == served.id and UUID4.fullmatch(served.id)
    assert start["delta"] == {"message": {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": [],
                                          "citations": []}}
    assert events[1][1]["delta"] == {"message": {"content": {"type": "text", "text": ""}}}
    assert "".join(d["delta"]["message"]["content"]["text"] for n, d in events if n == "content-delta") == (
        "the parcel is in Pune")
    assert end["delta"] == {"finish_reason": "COMPLETE", "usage": served.usage}
    assert served.usage["tokens"]["input_tokens"] == served.input_tokens > 0

    llm.script("the parcel is in Pune")
    parsed = list(co.chat_stream(model=MODEL, messages=MESSAGES))
    assert [e.type for e in parsed] == [name for name, _ in events]  # the SDK skipped none
    assert isinstance(parsed[0], cohere.MessageStartV2ChatStreamResponse)
    assert parsed[-1].delta.usage.tokens.input_tokens == llm.responses[-1].input_tokens


def test_stream_tool_calls_and_plan(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script(Reply(text="I will look it up.",
                     tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}}]))
    events = list(co.chat_stream(model=MODEL, messages=MESSAGES, tools=[TOOL]))
    kinds = [e.type for e in events]
    assert kinds[0] == "message-start" and kinds[-1] == "message-end"
    assert kinds[1:-1] == ["tool-plan-delta"] * 3 + ["tool-call-start", "tool-call-delta", "tool-call-delta",
                                                      "tool-call-end"]
    assert "".join(e.delta.message.tool_plan for e in events if e.type == "tool-plan-delta") == "I will look it up."
    start = next(e for e in events if e.type == "tool-call-start").delta.message.tool_calls
    assert start.id == llm.responses[0].tool_call_ids[0] and start.function.name == "lookup"
    arguments = "".join(e.delta.message.tool_calls.function.arguments for e in events if e.type == "tool-call-delta")
    assert json.loads(arguments) == {"order": "A-1041"}
    assert events[-1].delta.finish_reason == "TOOL_CALL"


def test_stream_thinking_and_citations(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script(Reply(text="Pune", reasoning="the order says Pune"))
    events = list(co.chat_stream(model=MODEL, messages=MESSAGES, documents=["Parcel held at the Pune depot"]))
    thinking = [e.delta.message.content.thinking for e in events if e.type == "content-delta" and e.index == 0]
    assert "".join(thinking) == "the order says Pune"
    text = [e.delta.message.content.text for e in events if e.type == "content-delta" and e.index == 1]
    assert "".join(text) == "Pune"
    [citation] = [e.delta.message.citations for e in events if e.type == "citation-start"]
    assert (citation.text, citation.content_index, citation.sources[0].id) == ("Pune", 1, "doc_0")
    assert [e.type for e in events].count("citation-end") == 1
    body = co.chat(model=MODEL, messages=MESSAGES)
    assert [c.type for c in body.message.content] == ["text"]


def test_error_bodies_are_coheres(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script(Reply(status=400), Reply(status=401), Reply(status=404), Reply(status=422), Reply(status=429))
    expected = [cohere.BadRequestError, cohere.UnauthorizedError, cohere.NotFoundError,
                cohere.UnprocessableEntityError, cohere.TooManyRequestsError]
    for error in expected:
        with pytest.raises(error) as info:
            co.chat(model=MODEL, messages=MESSAGES, **ONCE)
        served = llm.responses[-1]
        assert info.value.status_code == served.status
        assert info.value.body == {"id": served.request_id, "message": info.value.body["message"]}
    assert llm.responses[1].request.body and [r.status for r in llm.responses] == [400, 401, 404, 422, 429]
    assert llm.responses[2].error_type == "Not Found"
    assert json.loads(llm.requests[1].body)["model"] == MODEL
    with pytest.raises(cohere.UnauthorizedError) as unauthorized:
        llm.script(Reply(status=401))
        list(co.chat_stream(model=MODEL, messages=MESSAGES, **ONCE))  # a stream's error is raised as it starts
    assert unauthorized.value.body["message"] == "invalid api token"


def test_a_broken_stream_ends_with_finish_reason_error(llm: FakeLLM, co: cohere.ClientV2) -> None:
    llm.script(Reply(text="the parcel is in Pune", stream_failure="error"))
    events = list(co.chat_stream(model=MODEL, messages=MESSAGES))
    assert events[-1].type == "message-end"
    assert events[-1].delta.finish_reason == "ERROR" and events[-1].delta.error
    assert events[-1].delta.usage is None
    served = llm.responses[0]
    assert served.finish_reasons == ("ERROR",) and served.failure == "error" and served.error_type == "ERROR"
    assert served.usage is None and served.input_tokens is None


def test_openai_and_cohere_answer_side_by_side(llm: FakeLLM, co: cohere.ClientV2) -> None:
    with openai.OpenAI(base_url=llm.base_url, api_key="test", **NO_RETRIES) as client:
        assert client.chat.completions.create(model="gpt-4o", messages=MESSAGES).id.startswith("chatcmpl-")
    assert UUID4.fullmatch(co.chat(model=MODEL, messages=MESSAGES).id)
    assert [r.request.path for r in llm.responses] == ["/v1/chat/completions", "/v2/chat"]
