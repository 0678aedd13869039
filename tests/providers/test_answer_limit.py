"""A streamed answer far longer than ``ANSWER_LIMIT``, through every SDK's stream over loopback HTTP:
the app gets every chunk as the server sent it, what ctxguard holds for the call (its stream reader,
and the server-sent events being read) stays within the limit while the stream runs, and the call
ends with ``answer_consistent`` skipped for that reason and the usage the server reported last.
Also: a body read whole past the limit says why; a long body whose text is within the limit is read
to its end; no reader keeps a finish reason a chunk."""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable, Iterator
from types import FunctionType, ModuleType

import pytest

import ctxguard
from ctxguard import payload
from ctxguard.intercept import bodies
from ctxguard.payload import UNREAD
from ctxguard.providers import BY_DISTRIBUTION, PROVIDERS
from ctxguard.testing import FakeLLM, Reply
from tests.conftest import only_guard_span

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as tests/providers/test_litellm.py

#: The limit in these tests: an answer of ``COUNT`` pieces of ``SIZE`` characters is 8 times it.
LIMIT = 8 * 1024
COUNT, SIZE = 1024, 64
#: Beside the text: the answer's id, model, finish reasons and counts, and the objects around them.
SLACK = 4 * 1024

SYSTEM = "Ship to the city on file."
ASKED = "Ship my order to Paris."
#: The answer says the superseded city: read, it would fail ``answer_consistent``.
PIECES = [f"{i:06d} We ship to Lyon, as you asked. ".ljust(SIZE, ".") for i in range(COUNT)]
TEXT = "".join(PIECES)


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    for module in (payload, bodies):
        monkeypatch.setattr(module, "ANSWER_LIMIT", LIMIT)
    return LIMIT


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """``held()``: the bytes of memory ctxguard's stream readers made since, and the server-sent
    event bodies being read, hold now (the objects they reach, as ``sys.getsizeof`` counts them)."""
    made: list[object] = []
    for provider in PROVIDERS:
        adapter = type(provider.adapter)

        def stream_reader(self: object, api: str, made_by: Callable[..., object] = adapter.stream_reader) -> object:
            reader = made_by(self, api)
            made.append(reader)
            return reader

        monkeypatch.setattr(adapter, "stream_reader", stream_reader)

    class Events(bodies.EventBody):
        __slots__ = ()

        def __init__(self, reader: bodies.StreamReader) -> None:
            super().__init__(reader)
            made.append(self)

    monkeypatch.setattr(bodies, "EventBody", Events)  # body_reader makes it

    def weigh() -> int:
        assert made, "no stream reader was made"
        seen: set[int] = set()
        todo, size = list(made), 0
        while todo:
            obj = todo.pop()
            if id(obj) in seen or isinstance(obj, (type, ModuleType, FunctionType)):
                continue
            seen.add(id(obj))
            size += sys.getsizeof(obj)
            todo.extend(gc.get_referents(obj))
        return size

    return weigh


# -- each SDK's stream, read as an app reads it: a chunk at a time, each dropped once read ---------

Stream = Callable[[FakeLLM], Iterator[str]]


def _openai_chat(llm: FakeLLM) -> Iterator[str]:
    import openai

    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        for chunk in client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASKED}],
                stream=True, stream_options={"include_usage": True}):
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content


def _openai_responses(llm: FakeLLM) -> Iterator[str]:
    import openai

    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        for event in client.responses.create(model="gpt-4o", instructions=SYSTEM, input=ASKED, stream=True):
            if event.type == "response.output_text.delta":
                yield event.delta


def _anthropic(llm: FakeLLM) -> Iterator[str]:
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as client:
        for event in client.messages.create(model="claude-sonnet-4-5", max_tokens=100_000, system=SYSTEM,
                                            messages=[{"role": "user", "content": ASKED}], stream=True):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                yield event.delta.text


def _google_genai(llm: FakeLLM) -> Iterator[str]:
    genai = pytest.importorskip("google.genai", reason="google-genai is not installed")
    client = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})
    for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents=ASKED,
                                                       config={"system_instruction": SYSTEM}):
        yield chunk.candidates[0].content.parts[0].text


def _mistral(llm: FakeLLM) -> Iterator[str]:
    mistralai = pytest.importorskip("mistralai.client", reason="mistralai is not installed")
    with mistralai.Mistral(api_key="t", server_url=llm.mistral_base_url) as client:
        for event in client.chat.stream(model="mistral-small-latest", messages=[
                {"role": "system", "content": SYSTEM}, {"role": "user", "content": ASKED}]):
            if event.data.choices and event.data.choices[0].delta.content:
                yield event.data.choices[0].delta.content


def _cohere(llm: FakeLLM) -> Iterator[str]:
    cohere = pytest.importorskip("cohere")
    client = cohere.ClientV2(api_key="t", base_url=llm.cohere_base_url)  # made after instrument(): guarded
    for event in client.chat_stream(model="command-a-03-2025", messages=[
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": ASKED}]):
        if event.type == "content-delta":
            yield event.delta.message.content.text


def _ollama(llm: FakeLLM) -> Iterator[str]:
    ollama = pytest.importorskip("ollama")
    with ollama.Client(host=llm.ollama_host) as client:
        for chunk in client.chat(model="llama3.2", messages=[
                {"role": "system", "content": SYSTEM}, {"role": "user", "content": ASKED}], stream=True):
            if chunk.message.content:
                yield chunk.message.content


def _huggingface(llm: FakeLLM) -> Iterator[str]:
    hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed")
    with hub.InferenceClient(base_url=llm.base_url, api_key="t") as client:
        for chunk in client.chat_completion([{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASKED}],
                                            model="meta-llama/Llama-3.1-8B-Instruct", stream=True,
                                            stream_options={"include_usage": True}):
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content


BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def _bedrock(llm: FakeLLM):  # type: ignore[no-untyped-def]
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    return boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                        aws_access_key_id="t", aws_secret_access_key="t",
                        config=Config(retries={"total_max_attempts": 1}))


def _bedrock_converse(llm: FakeLLM) -> Iterator[str]:
    client = _bedrock(llm)
    result = client.converse_stream(modelId=BEDROCK_MODEL, system=[{"text": SYSTEM}],
                                    messages=[{"role": "user", "content": [{"text": ASKED}]}])
    for event in result["stream"]:
        if "contentBlockDelta" in event:
            yield event["contentBlockDelta"]["delta"]["text"]
    client.close()


def _bedrock_invoke(llm: FakeLLM) -> Iterator[str]:
    client = _bedrock(llm)
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100_000, "system": SYSTEM,
            "messages": [{"role": "user", "content": ASKED}]}
    result = client.invoke_model_with_response_stream(modelId=BEDROCK_MODEL, body=json.dumps(body))
    for event in result["body"]:
        data = json.loads(event["chunk"]["bytes"])
        if data["type"] == "content_block_delta":
            yield data["delta"]["text"]
    client.close()


def _litellm(route: str) -> Stream:
    def stream(llm: FakeLLM) -> Iterator[str]:
        litellm = pytest.importorskip("litellm", reason="litellm is not installed")
        base = llm.base_url if route == "openai" else llm.anthropic_base_url
        model = "openai/gpt-4o" if route == "openai" else "anthropic/claude-sonnet-4-5"
        for chunk in litellm.completion(model=model, messages=[{"role": "system", "content": SYSTEM},
                                                               {"role": "user", "content": ASKED}],
                                        stream=True, stream_options={"include_usage": True}, max_tokens=100_000,
                                        api_base=base, api_key="t"):
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    return stream


STREAMS: dict[str, Stream] = {
    "openai chat": _openai_chat,
    "openai responses": _openai_responses,
    "anthropic": _anthropic,
    "google-genai": _google_genai,
    "mistral": _mistral,
    "cohere": _cohere,
    "ollama": _ollama,
    "huggingface_hub": _huggingface,
    "bedrock converse_stream": _bedrock_converse,
    "bedrock invoke_model_with_response_stream": _bedrock_invoke,
    "litellm openai": _litellm("openai"),
    "litellm anthropic": _litellm("anthropic"),
}


@pytest.mark.parametrize("path", STREAMS)
def test_a_stream_far_past_the_limit_is_read_through_holding_no_more(harness, llm, small_limit, held, path):
    harness.start(mode="observe")
    llm.script(Reply(text=TEXT, deltas=COUNT))
    read, peak = 0, 0
    with ctxguard.conversation("order-7"):
        ctxguard.record_fact("city", "Lyon")
        ctxguard.record_fact("city", "Paris")  # Lyon is stale: an answer read that says it fails
        for piece in STREAMS[path](llm):
            assert piece == PIECES[read]  # every chunk, as the server sent it
            read += 1
            if read % 16 == 0:
                peak = max(peak, held())
        peak = max(peak, held())  # and once the events after the text (usage, a final copy) were read
    assert read == COUNT
    # A LiteLLM call reads its answer twice: LiteLLM's translation, and the provider's own off the wire
    # (what the span records). Each reader holds no more than the limit.
    readers = 2 if path.startswith("litellm") else 1
    assert peak < readers * small_limit + SLACK, f"{peak:,} bytes held"
    a = only_guard_span(harness).attributes
    assert f"answer_consistent: {UNREAD}" in a["ctxguard.checks.skipped"]
    assert "answer_consistent" not in a["ctxguard.violations"]
    assert "ctxguard.stream.abandoned" not in a and "error.type" not in a
    if path == "openai responses":
        # Its usage arrives in the last event, which carries the whole answer: past the limit, unread.
        assert "gen_ai.usage.output_tokens" not in a
    else:
        assert a["gen_ai.usage.output_tokens"] == llm.responses[-1].output_tokens > COUNT
        assert a["gen_ai.usage.input_tokens"] > 0


@pytest.mark.parametrize("path", ["openai chat", "anthropic", "mistral", "litellm anthropic"])
def test_a_stream_whose_body_passes_the_limit_is_read_to_its_end_when_its_text_does_not(
        harness, llm, monkeypatch, path):
    """What is held is one answer's text and one event, however many events: a body of some 300 KB
    carrying 8 KB of text, read with a limit of 32 KiB, is judged, and its usage recorded."""
    for module in (payload, bodies):
        monkeypatch.setattr(module, "ANSWER_LIMIT", 32 * 1024)
    harness.start(mode="observe")
    text = "Lyon" + "".join(f"{i:03x} " for i in range(1, 2048))  # 2048 tokens, each its own chunk
    llm.script(Reply(text=text, deltas=2048))
    with ctxguard.conversation("order-7"):
        ctxguard.record_fact("city", "Lyon")
        ctxguard.record_fact("city", "Paris")
        assert "".join(STREAMS[path](llm)) == text
    a = only_guard_span(harness).attributes
    assert "answer_consistent" in a["ctxguard.violations"]  # read, it states the stale city
    assert a["gen_ai.usage.output_tokens"] == llm.responses[-1].output_tokens > 0


def test_an_ollama_stream_past_the_real_limit_holds_no_more(harness, llm, held):
    """The issue's case at the limit ctxguard ships with: Ollama's stream past 16 MiB, read by an app
    that keeps nothing."""
    harness.start(mode="observe")
    piece = "We ship to Lyon. " * 4096  # 68 KiB a chunk
    count = payload.ANSWER_LIMIT // len(piece) + 16
    llm.script(Reply(text=piece * count, deltas=count))
    read, peak = 0, 0
    with ctxguard.conversation("order-7"):
        ctxguard.record_fact("city", "Lyon")
        ctxguard.record_fact("city", "Paris")
        for got in _ollama(llm):
            assert got == piece
            read += 1
            peak = max(peak, held())
    assert read == count
    assert peak < payload.ANSWER_LIMIT + SLACK, f"{peak:,} bytes held"
    a = only_guard_span(harness).attributes
    assert f"answer_consistent: {UNREAD}" in a["ctxguard.checks.skipped"]
    assert a["gen_ai.usage.output_tokens"] == llm.responses[-1].output_tokens > 0


def _openai_raw(llm: FakeLLM) -> str:
    import openai

    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASKED}])
        return raw.parse().choices[0].message.content


def _bedrock_invoke_body(llm: FakeLLM) -> str:
    client = _bedrock(llm)
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100_000, "system": SYSTEM,
            "messages": [{"role": "user", "content": ASKED}]}
    result = client.invoke_model(modelId=BEDROCK_MODEL, body=json.dumps(body))
    text = json.loads(result["body"].read())["content"][0]["text"]
    client.close()
    return text


@pytest.mark.parametrize("read", [_openai_raw, _bedrock_invoke_body],
                         ids=["openai raw response", "bedrock invoke_model"])
def test_an_answer_body_past_the_limit_is_not_read_and_says_why(harness, llm, small_limit, read):
    """A body read whole at its end (a raw response, ``invoke_model``'s): past the limit it is not
    read (nor kept while it arrives); the app reads it whole."""
    harness.start(mode="observe")
    llm.script(TEXT)
    with ctxguard.conversation("order-7"):
        ctxguard.record_fact("city", "Lyon")
        ctxguard.record_fact("city", "Paris")
        assert read(llm) == TEXT
    a = only_guard_span(harness).attributes
    assert f"answer_consistent: {UNREAD}" in a["ctxguard.checks.skipped"]
    assert "error.type" not in a


#: distribution -> (api, a chunk that reports the stream's end)
FINISHING = {
    "openai": ("chat.completions", {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    "mistralai": ("chat.stream", {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    "ollama": ("chat", {"message": {"content": ""}, "done": True, "done_reason": "stop"}),
    "cohere": ("chat_stream", {"type": "message-end", "delta": {"finish_reason": "COMPLETE"}}),
    "anthropic": ("messages", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
    "google-genai": ("generate_content_stream", {"candidates": [{"finish_reason": "STOP"}]}),
    "botocore": ("converse_stream", {"messageStop": {"stopReason": "end_turn"}}),
    "huggingface_hub": ("chat_completion", {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
}


@pytest.mark.parametrize("provider", FINISHING)
def test_a_stream_that_keeps_reporting_its_end_keeps_few_finish_reasons(provider):
    """One finish reason a choice: a stream that reports one in every chunk does not grow the list."""
    api, finishing = FINISHING[provider]
    reader = BY_DISTRIBUTION[provider].adapter.stream_reader(api)
    for _ in range(10_000):
        reader.feed(finishing)
    assert 1 <= len(reader.reply().finish_reasons) <= payload.CHOICES_KEPT


class Fed:
    """A stream reader that keeps the events it is fed."""

    complete = False

    def __init__(self) -> None:
        self.events: list[object] = []

    def feed(self, event: object) -> None:
        self.events.append(event)


def test_an_event_past_the_limit_is_not_read_even_when_it_arrives_whole_in_one_chunk(small_limit):
    """The event past ``ANSWER_LIMIT`` is refused as its data line arrives, not when the chunk is
    done: a transport handing over the whole event and its blank line at once (httpx reads what the
    socket holds, 64 KiB on a busy machine) would have had it parsed and fed to the reader. Before,
    ``test_a_stream_far_past_the_limit_is_read_through_holding_no_more[openai responses]`` saw
    67,123 bytes held now and then: Responses' last event, the whole answer, read."""
    reader = Fed()
    body = bodies.EventBody(reader)  # type: ignore[arg-type]
    small = b'data: {"type":"response.output_text.delta","delta":"x"}\n\n'
    whole = b'data: {"type":"response.completed","text":"' + b"x" * (2 * small_limit) + b'"}\n\n'
    body.feed(small + whole + small)
    assert body.unread and reader.events == [{"type": "response.output_text.delta", "delta": "x"}]


def test_a_json_line_past_the_limit_is_not_read_even_when_it_arrives_whole_in_one_chunk(small_limit):
    """JSON lines (Ollama's streams) are held to ``ANSWER_LIMIT`` as server-sent events are: a line
    past it is refused as it arrives, whether it arrives whole in one chunk or across many. Before,
    only the part of a line left waiting for its newline was measured: a long line handed over
    whole with its newline was parsed and fed to the reader."""
    reader = Fed()
    body = bodies.LinesBody(reader)  # type: ignore[arg-type]
    small = b'{"message": {"content": "x"}, "done": false}\n'
    whole = b'{"message": {"content": "' + b"x" * (2 * small_limit) + b'"}, "done": true}\n'
    body.feed(small + whole + small)
    assert body.unread and reader.events == [{"message": {"content": "x"}, "done": False}]
