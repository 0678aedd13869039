"""What every exchange shares (ctxguard/testing/fake/wire.py): ids real-shaped in each format, unique
per request and server, reproducible with a seed; what is said counted from the reply's text,
tool arguments and reasoning.
"""

from __future__ import annotations

import re

import openai

from ctxguard.testing.fake import FakeLLM, Reply
from tests.testing.fake.helpers import CALL_ID, MESSAGES, anthropic_client, gemini_client

RESPONSE_ID = re.compile(r"resp_[0-9a-f]{48}")
ANTHROPIC_ID = re.compile(r"msg_01[0-9A-Za-z]{22}")
TOOLU_ID = re.compile(r"toolu_01[0-9A-Za-z]{22}")
GEMINI_ID = re.compile(r"[A-Za-z0-9_-]{22}")


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

    with anthropic_client(llm) as c:
        llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"q": "x"}}}]))
        m = c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert ANTHROPIC_ID.fullmatch(m.id) and m.id == llm.responses[-1].id
    assert m._request_id == llm.responses[-1].request_id and m._request_id.startswith("req_")
    assert TOOLU_ID.fullmatch(m.content[0].id) and (m.content[0].id,) == llm.responses[-1].tool_call_ids

    gemini = gemini_client(llm)
    g = gemini.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert g.response_id is not None and GEMINI_ID.fullmatch(g.response_id)
    assert g.response_id == llm.responses[-1].id


def test_servers_seeded_alike_answer_alike_and_unseeded_ones_never_do():
    import openai

    def ids(seed):
        with FakeLLM(seed=seed) as llm, openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as c:
            return [c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).id
                    for _ in range(2)]

    assert ids("s") == ids("s")
    assert ids("s") != ids("t")
    assert ids(None) != ids(None)


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


def test_reasoning_token_estimate_comes_from_the_reasoning_text(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="ok", reasoning="short"), Reply(text="ok", reasoning="a much longer chain of thought " * 8))
    short = client.responses.create(model="m", input="x").usage
    long = client.responses.create(model="m", input="x").usage
    assert short is not None and long is not None
    assert 0 < short.output_tokens_details.reasoning_tokens < long.output_tokens_details.reasoning_tokens
    assert long.output_tokens > long.output_tokens_details.reasoning_tokens
