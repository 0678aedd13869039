"""FakeLLM answers the real ollama SDK the way Ollama's server does (``POST /api/chat``).

Values are compared with what the server recorded having sent (``llm.responses``), and parsed
with the SDK's own models, never with constants the fake happens to produce.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest

pytest.importorskip("ollama", reason="ollama is not installed (extra 'ollama')")

from ollama import ChatResponse, Client, ResponseError

from ctxguard.testing.fake import FakeLLM, Reply

MODEL = "llama3.2"
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
CREATED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look up an order by its id",
                                         "parameters": {"type": "object",
                                                        "properties": {"order": {"type": "string"}}}}}
METRICS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
           "eval_duration")


@pytest.fixture
def client(llm: FakeLLM):
    with Client(host=llm.ollama_host) as c:
        yield c


def _post(llm: FakeLLM, payload: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"{llm.ollama_host}/api/chat", data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_chat_parses_with_the_sdks_model(llm: FakeLLM, client: Client) -> None:
    llm.script("Hello <there> & welcome")
    r = client.chat(model=MODEL, messages=MESSAGES)
    served = llm.responses[0]
    assert type(r) is ChatResponse
    assert r.model == MODEL == served.model
    assert CREATED.fullmatch(r.created_at)
    assert r.message.role == "assistant" and r.message.content == "Hello <there> & welcome"
    assert r.done is True and r.done_reason == "stop" == served.finish_reasons[0]
    assert (r.prompt_eval_count, r.eval_count) == (served.input_tokens, served.output_tokens)
    assert served.usage == {k: getattr(r, k) for k in METRICS}
    assert r.total_duration > r.prompt_eval_duration + r.eval_duration > 0
    assert served.id is None and served.tool_call_ids == ()  # Ollama's answers carry no ids
    # What the SDK sent: stream false, said explicitly; what came back: Go's compact, HTML-escaped JSON.
    assert llm.bodies("/api/chat")[0]["stream"] is False
    assert llm.requests[0].headers["user-agent"].startswith("ollama-python/")
    status, headers, body = _post(llm, {"model": MODEL, "messages": [{"role": "user", "content": "<b>"}],
                                        "stream": False})
    assert status == 200 and headers["Content-Type"] == "application/json; charset=utf-8"
    assert "x-request-id" not in {k.lower() for k in headers}
    assert b'"done":true' in body and b": " not in body
    assert list(json.loads(body)) == ["model", "created_at", "message", "done_reason", "done", *METRICS]


def test_usage_grows_with_what_was_sent(llm: FakeLLM, client: Client) -> None:
    short = client.chat(model=MODEL, messages=MESSAGES).prompt_eval_count
    longer = client.chat(model=MODEL, messages=[
        {"role": "system", "content": "You are the order assistant of Acme Shop."}, *MESSAGES]).prompt_eval_count
    with_tool = client.chat(model=MODEL, messages=MESSAGES, tools=[TOOL]).prompt_eval_count
    formatted = client.chat(model=MODEL, messages=MESSAGES, format=TOOL["function"]["parameters"]).prompt_eval_count
    assert 0 < short < longer and short < with_tool
    assert formatted == short  # a format constrains the sampling; it is not in the prompt
    # An image costs the same whatever its size (never its base64 as text).
    small, large = (client.chat(model=MODEL, messages=[{**MESSAGES[0], "images": [base64.b64encode(data).decode()]}])
                    .prompt_eval_count for data in (b"\x89PNG" * 4, b"\x89PNG" * 4000))
    assert small == large > short
    said = client.chat(model=MODEL, messages=MESSAGES)
    llm.script("a much longer answer, said in many more words than the default one")
    more = client.chat(model=MODEL, messages=MESSAGES)
    assert more.eval_count > said.eval_count and more.eval_duration > said.eval_duration


def test_ollama_streams_ndjson_unless_told_not_to(llm: FakeLLM, client: Client) -> None:
    llm.script("the parcel is in Pune")
    status, headers, body = _post(llm, {"model": MODEL, "messages": MESSAGES})  # no "stream": it streams
    assert status == 200 and headers["Content-Type"] == "application/x-ndjson"
    assert headers["Transfer-Encoding"] == "chunked"
    lines = [json.loads(line) for line in body.decode().splitlines()]
    served = llm.responses[0]
    assert served.stream is True
    assert "".join(line["message"]["content"] for line in lines) == "the parcel is in Pune"
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert all("done_reason" not in line and "eval_count" not in line for line in lines[:-1])
    last = lines[-1]
    assert last["message"] == {"role": "assistant", "content": ""} and last["done_reason"] == "stop"
    assert {k: last[k] for k in METRICS} == served.usage and last["prompt_eval_count"] == served.input_tokens
    llm.script("the parcel is in Pune")
    chunks = list(client.chat(model=MODEL, messages=MESSAGES, stream=True))
    assert all(type(c) is ChatResponse for c in chunks)
    assert "".join(c.message.content for c in chunks) == "the parcel is in Pune"
    assert chunks[-1].prompt_eval_count == llm.responses[-1].input_tokens


def test_a_prompt_over_the_window_is_truncated_as_the_server_does(llm: FakeLLM, client: Client) -> None:
    system = {"role": "system", "content": "You are the order assistant of Acme Shop."}
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "words " * 100}
             for i in range(60)]
    whole = client.chat(model=MODEL, messages=[system, *turns], options={"num_ctx": 1 << 20}).prompt_eval_count
    assert llm.responses[0].truncated_tokens == 0
    kept = client.chat(model=MODEL, messages=[system, *turns], options={"num_ctx": 1024})
    served = llm.responses[1]
    assert kept.prompt_eval_count == served.input_tokens <= 1024 < whole
    assert served.truncated_tokens == whole - kept.prompt_eval_count
    # The oldest turns went, the system message stayed: the same count as sending only what was kept.
    tail = len(turns)
    while client.chat(model=MODEL, messages=[system, *turns[-tail:]],
                      options={"num_ctx": 1 << 20}).prompt_eval_count > 1024:
        tail -= 1
    assert llm.responses[-1].input_tokens == kept.prompt_eval_count
    # No num_ctx: the server's default window (FakeLLM.ollama_num_ctx, 4096 like Ollama's own).
    assert client.chat(model=MODEL, messages=[system, *turns]).prompt_eval_count <= 4096 < whole
    assert llm.responses[-1].truncated_tokens > 0
    llm.ollama_num_ctx = 2048
    assert client.chat(model=MODEL, messages=[system, *turns]).prompt_eval_count <= 2048
    # A last message that alone is over the window is cut to it.
    huge = [{"role": "user", "content": "words " * 5000}]
    assert client.chat(model=MODEL, messages=huge, options={"num_ctx": 512}).prompt_eval_count == 512


def test_tool_calls_have_names_and_object_arguments_no_ids(llm: FakeLLM, client: Client) -> None:
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}},
                                 {"function": {"name": "lookup", "arguments": '{"order": "A-1042"}'}}]))
    r = client.chat(model=MODEL, messages=MESSAGES, tools=[TOOL])
    calls = r.message.tool_calls
    assert [c.function.name for c in calls] == ["lookup", "lookup"]
    assert [c.function.arguments for c in calls] == [{"order": "A-1041"}, {"order": "A-1042"}]
    assert r.done_reason == "stop"  # Ollama has no finish reason of its own for tool calls
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}}]))
    chunks = list(client.chat(model=MODEL, messages=MESSAGES, tools=[TOOL], stream=True))
    streamed = [c for chunk in chunks for c in (chunk.message.tool_calls or [])]
    assert [c.function.arguments for c in streamed] == [{"order": "A-1041"}]  # whole, in one chunk
    status, _, body = _post(llm, {"model": MODEL, "messages": MESSAGES, "stream": False})
    assert status == 200 and "tool_calls" not in json.loads(body)["message"]


def test_thinking_and_length(llm: FakeLLM, client: Client) -> None:
    llm.script(Reply(text="Pune", reasoning="the order says Pune", finish_reason="length"))
    r = client.chat(model=MODEL, messages=MESSAGES, think=True)
    assert (r.message.thinking, r.message.content, r.done_reason) == ("the order says Pune", "Pune", "length")
    llm.script(Reply(text="Pune", reasoning="the order says Pune"))
    chunks = list(client.chat(model=MODEL, messages=MESSAGES, think=True, stream=True))
    assert "".join(c.message.thinking or "" for c in chunks) == "the order says Pune"
    assert "".join(c.message.content for c in chunks) == "Pune"


def test_errors_are_ollamas(llm: FakeLLM, client: Client) -> None:
    llm.script(Reply(status=404))
    with pytest.raises(ResponseError) as info:
        client.chat(model="llama9", messages=MESSAGES)
    assert (info.value.status_code, info.value.error) == (404, 'model "llama9" not found, try pulling it first')
    assert llm.responses[0].status == 404
    llm.script(Reply(status=500))  # a request refused for its missing model leaves it to the next
    status, _, body = _post(llm, {"messages": MESSAGES, "stream": False})
    assert (status, json.loads(body)) == (400, {"error": "model is required"})
    with pytest.raises(ResponseError) as info:
        list(client.chat(model=MODEL, messages=MESSAGES, stream=True))
    assert info.value.status_code == 500 and info.value.error
    # Failing midway, the stream's last line is the error; the SDK raises it without a status.
    llm.script(Reply(text="the parcel is in Pune", stream_failure="error"))
    status, _, body = _post(llm, {"model": MODEL, "messages": MESSAGES})
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert status == 200 and list(lines[-1]) == ["error"] and lines[0]["done"] is False
    assert llm.responses[-1].usage is None
