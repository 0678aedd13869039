"""Drive the real openai/anthropic SDKs against FakeLLM over loopback HTTP.

These tests are the contract that FakeLLM speaks the wire formats closely
enough for the SDKs' own parsers and streaming helpers, which is the whole
reason it exists instead of SDK-level mocks.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from ctxguard.testing.fake_llm import FakeLLM, RecordedRequest, Reply

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup", "arguments": '{"q": "weather"}'},
}


# ``llm`` (the plugin's ``fake_llm``) and ``client`` come from tests/conftest.py.


def _post_raw(url: str, body: bytes) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


# -- chat completions -----------------------------------------------------------


def test_chat_json(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script("Hello there!")
    r = client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    assert r.id == "chatcmpl-fake-1"
    assert r.object == "chat.completion"
    assert r.model == "gpt-test"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "Hello there!"
    assert r.choices[0].message.refusal is None
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None
    assert r.usage.prompt_tokens == len(llm.requests[0].body) // 4
    assert r.usage.completion_tokens == len("Hello there!") // 4
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
        assert usage is not None and usage.completion_tokens == len("async streamed") // 4


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


# -- responses ---------------------------------------------------------------------


def test_responses_json(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="responses says hi", input_tokens=40, output_tokens=4))
    r = client.responses.create(model="gpt-resp", input="hello", instructions="be brief")

    assert r.id == "resp_fake_1"
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
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    assert "response.output_text.done" in types
    seqs = [e.sequence_number for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == text
    assert 2 <= len(deltas) <= 3
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == text
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == text
    assert completed.response.usage is not None
    assert completed.response.usage.output_tokens == 6


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


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "exc_type"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
    ],
)
def test_error_status_raises_sdk_error(
    llm: FakeLLM, client: openai.OpenAI, status: int, exc_type: type[openai.APIStatusError]
) -> None:
    llm.script(Reply(status=status, text="scripted failure"))
    with pytest.raises(exc_type) as info:
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.status_code == status
    body = info.value.body
    assert isinstance(body, dict)
    assert body["message"] == "scripted failure"
    assert isinstance(body["type"], str)


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
    assert "error" in body and body["error"]["message"]
    assert llm.requests[0].path == "/v1/embeddings"


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


def test_raw_body_bytes_preserved_10mb(llm: FakeLLM) -> None:
    # Deliberately odd spacing: the fake must keep bytes, not re-serialise JSON.
    raw = b'{"model":  "m",   "messages": [{"role":"user","content":"' + b"y" * 10_000_000 + b'"}]}'
    status, body = _post_raw(llm.base_url + "/chat/completions", raw)
    assert status == 200
    assert llm.requests[0].body == raw
    assert body["usage"]["prompt_tokens"] == len(raw) // 4


def test_script_order_callable_fallback_default_and_clear(llm: FakeLLM, client: openai.OpenAI) -> None:
    def ask(prompt: str) -> str | None:
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
        return r.choices[0].message.content

    assert ask("a") == "ok 1"
    llm.script("first", Reply(text="second"))
    assert [ask("b"), ask("c"), ask("d")] == ["first", "second", "ok 4"]

    llm.script("pending")
    llm.clear()
    assert llm.requests == []
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
    assert len(llm.requests) == 64


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
    anthropic = pytest.importorskip("anthropic")
    llm.script(Reply(text="claude says hi", input_tokens=9, output_tokens=3))
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0) as c:
        m = c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert m.id == "msg_fake_1"
    assert m.type == "message"
    assert m.role == "assistant"
    assert m.model == "claude-test"
    assert m.content[0].type == "text"
    assert m.content[0].text == "claude says hi"
    assert m.stop_reason == "end_turn"
    assert m.stop_sequence is None
    assert (m.usage.input_tokens, m.usage.output_tokens) == (9, 3)
    assert llm.requests[0].path == "/v1/messages"
    assert llm.bodies("/messages")[0]["max_tokens"] == 50


def test_anthropic_messages_stream(llm: FakeLLM) -> None:
    anthropic = pytest.importorskip("anthropic")
    llm.script(Reply(text="streaming from claude", output_tokens=5))
    with (
        anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0) as c,
        c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream,
    ):
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "streaming from claude"
    assert 2 <= len(pieces) <= 3
    assert final.content[0].text == "streaming from claude"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5


def test_anthropic_tool_use_and_error(llm: FakeLLM) -> None:
    anthropic = pytest.importorskip("anthropic")
    llm.script(Reply(tool_calls=[TOOL_CALL], finish_reason="tool_calls"), Reply(status=529, text="busy"))
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0) as c:
        with c.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream:
            final = stream.get_final_message()
        block = final.content[0]
        assert block.type == "tool_use"
        assert (block.id, block.name, block.input) == ("call_1", "lookup", {"q": "weather"})
        assert final.stop_reason == "tool_use"

        with pytest.raises(anthropic.APIStatusError) as info:
            c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert info.value.status_code == 529
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}


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
