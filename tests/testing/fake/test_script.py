"""One ``Reply`` plays in every wire format (ctxguard/testing/fake/script.py): mistakes rejected when
it is written, its deltas, structured output and refusals as each SDK parses them.
"""

from __future__ import annotations

import openai
import pytest

from ctxguard.testing.fake import FakeLLM, Reply
from tests.testing.fake.helpers import MESSAGES, Order, anthropic_client


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


def test_a_streamed_text_comes_in_as_many_deltas_as_scripted(llm: FakeLLM, client: openai.OpenAI) -> None:
    text = "word " * 200
    llm.script(Reply(text=text, deltas=100), Reply(text=text, deltas=100))
    chunks = list(client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == text
    assert len(pieces) == 100
    with (
        anthropic_client(llm) as c,
        c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream,
    ):
        pieces = list(stream.text_stream)
    assert "".join(pieces) == text
    assert len(pieces) == 100


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
    with anthropic_client(llm) as c:
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
    with anthropic_client(llm) as c:
        m = c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert m.stop_reason == "refusal" and llm.responses[-1].finish_reasons == ("refusal",)
