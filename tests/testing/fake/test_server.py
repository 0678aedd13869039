"""The server (ctxguard/testing/fake/server.py): every request recorded byte for byte, replies
scripted, called back or defaulted, concurrency, unknown routes, HTTP errors before the first byte
and connections cut midway, the lifecycle and its addresses.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from typing import Any

import openai
import pytest

from ctxguard._nesting import MAX_NESTING
from ctxguard.testing.fake import FakeLLM, RecordedRequest, Reply
from tests.testing.fake.helpers import MESSAGES, anthropic_client, gemini_client, post_raw


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
    status, body = post_raw(llm.base_url + "/chat/completions", raw)
    assert status == 200
    assert llm.requests[0].body == raw
    assert body["usage"] == llm.responses[0].usage
    compact = json.dumps({"model": "m", "messages": [{"role": "user", "content": "y" * 10_000_000}]}).encode()
    assert post_raw(llm.base_url + "/chat/completions", compact)[1]["usage"]["prompt_tokens"] == (
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


def test_unknown_path_is_404(llm: FakeLLM) -> None:
    status, body = post_raw(llm.base_url + "/embeddings", b"{}")
    assert status == 404
    assert body["error"] == {"message": "Invalid URL (POST /v1/embeddings)", "type": "invalid_request_error",
                             "param": None, "code": None}
    assert llm.requests[0].path == "/v1/embeddings"
    assert (llm.responses[0].request, llm.responses[0].status) == (llm.requests[0], 404)


@pytest.mark.parametrize("nesting", ["[]", "{}"])
def test_a_body_nested_too_deep_is_refused_the_same_on_every_python(llm: FakeLLM, nesting: str) -> None:
    """Up to MAX_NESTING levels a body is answered; one more is a 400 in the provider's shape, not
    a dropped connection, whatever depth this Python's own JSON reader would go to."""
    def body(depth: int) -> bytes:  # the message, its list and object, and ``extra`` reach ``depth`` levels
        opening, closing = ('{"k": ', "}") if nesting == "{}" else ("[", "]")
        extra = opening * (depth - 5) + "1" + closing * (depth - 5)
        return ('{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", '
                f'"extra": {extra}}}]}}]}}').encode()

    status, answer = post_raw(llm.base_url + "/chat/completions", body(MAX_NESTING))
    assert status == 200 and answer["usage"]["prompt_tokens"] > 0
    status, answer = post_raw(llm.base_url + "/chat/completions", body(MAX_NESTING + 1))
    assert status == 400
    assert answer["error"]["message"] == f"Invalid JSON body: nested more than {MAX_NESTING} levels deep"
    assert [r.status for r in llm.responses] == [200, 400]


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


def test_error_status_on_stream_requests(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(status=429), Reply(status=503))
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(model="m", input="x", stream=True)
    assert info.value.status_code == 503


def test_failure_before_the_first_byte_is_an_http_error(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(Reply(text="x", stream_failure="error"), Reply(text="x", stream_failure="error"))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    anthropic = pytest.importorskip("anthropic")
    with anthropic_client(llm) as c, pytest.raises(anthropic.OverloadedError):
        c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert [(s.status, s.error_type) for s in llm.responses] == [(500, "server_error"), (529, "overloaded_error")]


def _http_library(http_client: Any) -> Any:
    """The module (httpx or httpx2) whose client an SDK sends with."""
    base = next(c for c in type(http_client).__mro__ if c.__module__.startswith("httpx"))
    return sys.modules[base.__module__.split(".")[0]]


def _broken(client: Any) -> tuple[type[BaseException], ...]:
    """What an SDK client raises when the connection dies mid-body: its SDK's connection error,
    or (where the SDK does not wrap stream reads) its HTTP library's protocol error."""
    sdk = sys.modules[type(client).__module__.split(".")[0]]
    return (sdk.APIConnectionError, _http_library(client._client).RemoteProtocolError)


def test_dropped_connection_breaks_the_stream(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.script(*[Reply(text="It left the warehouse", stream_failure="drop")] * 5)
    with pytest.raises(_broken(client)):
        list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    with pytest.raises(_broken(client)):
        list(client.responses.create(model="m", input="x", stream=True))
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    with anthropic_client(llm) as c, pytest.raises(_broken(c)):
        list(c.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES, stream=True))
    gemini = gemini_client(llm)
    # google-genai 2.x imports both httpx and httpx2 and sends with httpx; 3.x sends with httpx2.
    with pytest.raises(_http_library(gemini._api_client._httpx_client).RemoteProtocolError):
        list(gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="x"))
    assert [(s.failure, s.usage) for s in llm.responses] == [("drop", None)] * 5


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
