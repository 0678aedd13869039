"""Model requests sent by HTTP clients of the app's own (urllib, requests, aiohttp: no SDK, no call
site) are guarded from the wire: known by what they are, one span each, observed only, and
nothing the app sends or gets changes. Anything else passes untouched."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp
import pytest
import requests

import ctxguard
from ctxguard.testing import FakeLLM
from tests.conftest import guard_spans
from tests.frameworks.helpers import play

#: The defect planted in every request: the system prompt is not the first message.
MESSAGES = [{"role": "user", "content": "Where is my parcel?"},
            {"role": "system", "content": "You are the order assistant."}]


def chat(stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "gpt-4o", "messages": MESSAGES}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def events(lines: list[bytes]) -> list[Any]:
    """A stream as the app sees it, each event's data parsed (the fake's ``created`` is the clock's)."""
    data = [line.decode().removeprefix("data: ").strip() for line in lines if line.startswith(b"data:")]
    return [d if d == "[DONE]" else json.loads(d) for d in data]


def by_urllib(llm: FakeLLM, stream: bool) -> Any:
    request = urllib.request.Request(f"{llm.base_url}/chat/completions", data=json.dumps(chat(stream)).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return events(list(response)) if stream else json.loads(response.read())


def by_requests(llm: FakeLLM, stream: bool) -> Any:
    with requests.Session() as session:  # two requests on one kept-alive connection
        results = []
        for _ in range(2):
            response = session.post(f"{llm.base_url}/chat/completions", json=chat(stream), stream=stream)
            results.append(events(list(response.iter_lines(chunk_size=7))) if stream else response.json())
        return results


def by_aiohttp(llm: FakeLLM, stream: bool) -> Any:
    async def send() -> Any:
        async with aiohttp.ClientSession() as session, \
                session.post(f"{llm.base_url}/chat/completions", json=chat(stream)) as response:
            return events([line async for line in response.content]) if stream else await response.json()

    return asyncio.run(send())


CLIENTS = {"urllib": by_urllib, "requests": by_requests, "aiohttp": by_aiohttp}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_model_request_an_app_sends_itself_is_guarded_from_the_wire(harness, client, stream):
    """Played without then with ctxguard: the same bodies arrive and the app gets the same answers;
    one span per request, guarded from the wire, the planted defect flagged, and the span's reply
    attributes are what the server sent (so the answer was read as the app read it)."""
    send: Callable[[FakeLLM, bool], Any] = CLIENTS[client]

    def flagged(played) -> None:  # type: ignore[no-untyped-def]
        assert [s.attributes["ctxguard.guarded_at"] for s in played.spans] == ["wire"] * len(played.requests)
        assert all(list(s.attributes["ctxguard.violations"]) == ["system_at_head"] for s in played.spans)
        assert all("wire_intact: the body sent was not observed" not in s.attributes["ctxguard.checks.skipped"]
                   for s in played.spans)

    play(harness, lambda llm: send(llm, stream), then=flagged)
    assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="openai") >= 1


@pytest.mark.parametrize("client", list(CLIENTS))
def test_in_enforce_mode_a_request_from_the_wire_is_observed_never_refused(harness, llm, client):
    harness.start(mode="enforce")
    CLIENTS[client](llm, False)
    assert len(llm.requests) == len(guard_spans(harness)) >= 1
    assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 0


# -- anything else passes untouched ------------------------------------------------------------


class _Plain(BaseHTTPRequestHandler):
    """Answers every request with what it was sent: not a model server."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = json.dumps({"method": self.command, "path": self.path, "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def plain() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Plain)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


#: Requests that are no model call: a GET, a POST elsewhere, and POSTs to a model path whose body
#: is not the API's (not JSON, not an object, not of its shape, another API's shape).
NOT_MODEL_CALLS = [
    ("GET", "/v1/chat/completions", None),
    ("POST", "/v1/orders", json.dumps({"model": "gpt-4o", "messages": MESSAGES})),
    ("POST", "/v1/chat/completions", "model=gpt-4o&messages=hi"),
    ("POST", "/v1/chat/completions", json.dumps([{"model": "gpt-4o", "messages": MESSAGES}])),
    ("POST", "/v1/chat/completions", json.dumps({"model": "gpt-4o", "prompt": "hi"})),
    ("POST", "/v1/messages", json.dumps({"model": "claude", "messages": MESSAGES})),  # no max_tokens
]


def test_requests_that_are_no_model_call_pass_untouched_by_every_client(harness, plain):
    harness.start(mode="observe")
    answers = []
    for method, path, body in NOT_MODEL_CALLS:
        data = body.encode() if body is not None else None
        with urllib.request.urlopen(urllib.request.Request(plain + path, data=data, method=method)) as r:
            answers.append(json.loads(r.read()))
        answers.append(requests.request(method, plain + path, data=data).json())

        async def by_aiohttp(method: str = method, path: str = path, data: bytes | None = data) -> Any:
            async with aiohttp.ClientSession() as session, session.request(method, plain + path, data=data) as r:
                return await r.json()

        answers.append(asyncio.run(by_aiohttp()))
    assert [(a["method"], a["path"], a["body"]) for a in answers] == [
        (m, p, b or "") for m, p, b in NOT_MODEL_CALLS for _ in range(3)]
    assert guard_spans(harness) == []
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 0


def _bytes_target_post(plain: str) -> tuple[str, Any]:
    """What ``http.client`` makes of a POST whose target is bytes: its answer, or its error."""
    connection = http.client.HTTPConnection(plain.removeprefix("http://"))
    try:
        connection.request("POST", b"/v1/chat/completions", body=json.dumps({"model": "gpt-4o", "messages": MESSAGES}))
        return "answered", connection.getresponse().status
    except Exception as exc:
        return "raised", (type(exc), str(exc))
    finally:
        connection.close()


def test_a_request_target_of_another_type_is_the_client_s_to_judge(harness, plain):
    """A target that is not a string (bytes, which ``http.client`` takes or refuses as it does
    without ctxguard) is no model request ctxguard can read: no error of ctxguard's, no span."""
    without = _bytes_target_post(plain)
    harness.start(mode="observe")
    assert _bytes_target_post(plain) == without
    assert guard_spans(harness) == []


def test_a_model_request_that_fails_to_connect_ends_its_span_failed(harness):
    from tests.servers import free_port

    harness.start(mode="observe")
    with pytest.raises(urllib.error.URLError):
        by_urllib(type("Gone", (), {"base_url": f"http://127.0.0.1:{free_port()}/v1"})(), False)  # type: ignore[arg-type]
    (span,) = guard_spans(harness)
    assert span.attributes["error.type"] == "ConnectionRefusedError"


def test_a_model_server_refusing_the_request_ends_its_span_with_the_status(harness, llm):
    from ctxguard.testing import Reply

    harness.start(mode="observe")
    llm.script(Reply(status=429))
    with pytest.raises(urllib.error.HTTPError):
        by_urllib(llm, False)
    (span,) = guard_spans(harness)
    assert span.attributes["error.type"] == "429"


def test_a_stream_the_app_stops_reading_ends_abandoned(harness, llm):
    harness.start(mode="observe")
    connection = http.client.HTTPConnection("127.0.0.1", llm.port)
    connection.request("POST", "/v1/chat/completions", json.dumps(chat(True)), {"Content-Type": "application/json"})
    response = connection.getresponse()
    response.readline()
    response.close()
    connection.close()
    (span,) = guard_spans(harness)
    assert span.attributes["ctxguard.stream.abandoned"] is True


def test_ctxguard_uninstrumented_leaves_the_clients_as_they_were(harness, llm):
    harness.start(mode="observe")
    ctxguard.uninstrument()
    for send in CLIENTS.values():
        send(llm, False)
    assert guard_spans(harness) == []
    assert "request" not in {k for k, v in vars(http.client.HTTPConnection).items() if hasattr(v, "__wrapped__")}


# -- a client stacked on another is observed once ---------------------------------------------


def _httpx():  # type: ignore[no-untyped-def]
    import httpx

    class OverRequests(httpx.BaseTransport):
        """httpx sending through requests (then urllib3, then http.client)."""

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            sent = requests.request(request.method, str(request.url), data=request.read(),
                                    headers={"Content-Type": "application/json"})
            return httpx.Response(sent.status_code, headers=dict(sent.headers), content=sent.content)

    class OverAiohttp(httpx.AsyncBaseTransport):
        """httpx sending through aiohttp (as LiteLLM's aiohttp transport does)."""

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            async with aiohttp.ClientSession() as session, session.request(
                    request.method, str(request.url), data=request.read(),
                    headers={"Content-Type": "application/json"}) as sent:
                return httpx.Response(sent.status, headers=dict(sent.headers), content=await sent.read())

    return httpx, OverRequests, OverAiohttp


def test_a_client_stacked_on_another_is_observed_once(harness):
    httpx, over_requests, over_aiohttp = _httpx()

    def scenario(llm: FakeLLM) -> Any:
        with httpx.Client(transport=over_requests()) as client:
            first = client.post(f"{llm.base_url}/chat/completions", json=chat(False)).json()

        async def through_aiohttp() -> Any:
            async with httpx.AsyncClient(transport=over_aiohttp()) as client:
                return (await client.post(f"{llm.base_url}/chat/completions", json=chat(False))).json()

        return [first, asyncio.run(through_aiohttp())]

    play(harness, scenario)  # one span per request that arrived


# -- every declared API, by what its requests are --------------------------------------------

SYSTEM = "You are the order assistant."

#: (API, its URL on the fake, the request body, the ``provider`` label): each with its system
#: instruction missing, so ``system_at_head`` fails on each.
APIS: dict[str, tuple[Callable[[FakeLLM], str], Callable[[bool], dict[str, Any]], str]] = {
    "responses": (lambda llm: f"{llm.base_url}/responses",
                  lambda stream: {"model": "gpt-4o", "input": "Where is my parcel?", "stream": stream}, "openai"),
    "anthropic": (lambda llm: f"{llm.anthropic_base_url}/v1/messages",
                  lambda stream: {"model": "claude-sonnet-4-20250514", "max_tokens": 50, "stream": stream,
                                  "messages": [{"role": "user", "content": "Where is my parcel?"}]}, "anthropic"),
    "gemini": (lambda llm: f"{llm.gemini_base_url}/v1beta/models/gemini-2.5-flash:generateContent",
               lambda stream: {"contents": [{"role": "user", "parts": [{"text": "Where is my parcel?"}]}]},
               "gcp.gen_ai"),
    "gemini-stream": (lambda llm: f"{llm.gemini_base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                      lambda stream: {"contents": [{"role": "user", "parts": [{"text": "Where is my parcel?"}]}]},
                      "gcp.gen_ai"),
    "ollama": (lambda llm: f"{llm.ollama_host}/api/chat",
               lambda stream: {"model": "qwen3:8b", "stream": stream,
                               "messages": [{"role": "user", "content": "Where is my parcel?"}]}, "ollama"),
    "cohere": (lambda llm: f"{llm.cohere_base_url}/v2/chat",
               lambda stream: {"model": "command-a-03-2025", "stream": stream,
                               "messages": [{"role": "user", "content": "Where is my parcel?"}]}, "cohere"),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", list(APIS))
def test_every_declared_api_is_recognised_and_its_answer_read(harness, llm, api, stream):
    from tests.frameworks.helpers import REPLY_KEYS, served

    url, body, label = APIS[api]
    if api.startswith("gemini") and stream != api.endswith("stream"):
        pytest.skip("Gemini's path says whether it streams")
    harness.start(mode="observe")
    response = requests.post(url(llm), json=body(stream), stream=stream)
    got = list(response.iter_lines()) if stream else response.json()
    assert got
    (span,) = guard_spans(harness)
    a = span.attributes
    assert (a["ctxguard.guarded_at"], a["gen_ai.provider.name"]) == ("wire", label)
    assert "system_at_head" in a["ctxguard.violations"]
    recorded = {k: tuple(a[k]) if k.endswith("finish_reasons") else a[k] for k in REPLY_KEYS if k in a}
    expected = served(llm.responses[0])
    if api == "cohere":
        del expected["gen_ai.response.model"]  # Cohere's answers do not name their model
    assert recorded == expected
    assert recorded.get("gen_ai.response.finish_reasons")
