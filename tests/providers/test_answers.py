"""Every call path is read to its end: raw and streaming responses (LangChain's, the Agents
SDK's path), streams read through, abandoned or failing. Each call ends its span once, with
what the server answered on it and one outcome per check."""

from __future__ import annotations

import gc
import json

import anthropic
import openai
import pytest
import pytest_asyncio
from pydantic import BaseModel

import ctxguard
from ctxguard.checks import CHECK_NAMES
from ctxguard.testing import Reply
from tests.conftest import guard_spans, only_guard_span

SYSTEM = "Ship to the city on file."
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Ship my order to Paris."}]
STALE = "We ship to Lyon."  # the superseded value: answer_consistent fails when the answer says it
CLAUDE = "claude-sonnet-4-5"


class City(BaseModel):
    city: str


@pytest.fixture
def claude(llm):
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


@pytest_asyncio.fixture
async def aclaude(llm):
    async with anthropic.AsyncAnthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


def _facts() -> None:
    ctxguard.record_fact("city", "Lyon")
    ctxguard.record_fact("city", "Paris")  # revised: Lyon is stale from now on


def _chat_answer(completion) -> dict:
    return {"id": completion.id, "model": completion.model, "finish": [c.finish_reason for c in completion.choices],
            "input": completion.usage.prompt_tokens, "output": completion.usage.completion_tokens}


def _response_answer(response) -> dict:
    return {"id": response.id, "model": response.model, "finish": [response.status],
            "input": response.usage.input_tokens, "output": response.usage.output_tokens}


def _message_answer(message) -> dict:
    return {"id": message.id, "model": message.model, "finish": [message.stop_reason],
            "input": message.usage.input_tokens, "output": message.usage.output_tokens}


def _chat_chunks(chunks) -> dict:
    usage = chunks[-1].usage
    return {"id": chunks[0].id, "model": chunks[0].model,
            "finish": [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason],
            "input": usage.prompt_tokens, "output": usage.completion_tokens}


def _response_events(events) -> dict:
    return _response_answer(next(e.response for e in events if e.type == "response.completed"))


def _message_events(events) -> dict:
    start = next(e.message for e in events if e.type == "message_start")
    delta = next(e for e in events if e.type == "message_delta")
    return {"id": start.id, "model": start.model, "finish": [delta.delta.stop_reason],
            "input": start.usage.input_tokens, "output": delta.usage.output_tokens}


CHAT = {"model": "gpt-4o", "messages": MESSAGES}
CHAT_STREAM = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
RESPONSES = {"model": "gpt-4o", "instructions": SYSTEM, "input": MESSAGES[1:]}
MESSAGES_API = {"model": CLAUDE, "max_tokens": 200, "system": SYSTEM, "messages": MESSAGES[1:]}


def _sync_paths(client, claude) -> dict:
    def streaming(resource, read, **kwargs):
        with resource.with_streaming_response.create(**kwargs) as response:
            return read(response.parse())

    return {
        "chat raw": lambda: _chat_answer(client.chat.completions.with_raw_response.create(**CHAT).parse()),
        "chat raw parse": lambda: _chat_answer(
            client.chat.completions.with_raw_response.parse(**CHAT, response_format=City).parse()),
        "chat raw stream": lambda: _chat_chunks(list(
            client.chat.completions.with_raw_response.create(**CHAT_STREAM).parse())),
        "chat streaming response": lambda: streaming(client.chat.completions, _chat_answer, **CHAT),
        "chat streaming response stream": lambda: streaming(
            client.chat.completions, lambda s: _chat_chunks(list(s)), **CHAT_STREAM),
        "client raw chat": lambda: _chat_answer(client.with_raw_response.chat.completions.create(**CHAT).parse()),
        "responses raw": lambda: _response_answer(client.responses.with_raw_response.create(**RESPONSES).parse()),
        "responses raw stream": lambda: _response_events(list(
            client.responses.with_raw_response.create(**RESPONSES, stream=True).parse())),
        "responses streaming response stream": lambda: streaming(
            client.responses, lambda s: _response_events(list(s)), **RESPONSES, stream=True),
        "messages raw": lambda: _message_answer(claude.messages.with_raw_response.create(**MESSAGES_API).parse()),
        "beta messages raw": lambda: _message_answer(
            claude.beta.messages.with_raw_response.create(**MESSAGES_API).parse()),
        "messages raw stream": lambda: _message_events(list(
            claude.messages.with_raw_response.create(**MESSAGES_API, stream=True).parse())),
        "messages streaming response stream": lambda: streaming(
            claude.messages, lambda s: _message_events(list(s)), **MESSAGES_API, stream=True),
        "chat stream": lambda: _chat_chunks(list(client.chat.completions.create(**CHAT_STREAM))),
        "messages stream": lambda: _message_events(list(claude.messages.create(**MESSAGES_API, stream=True))),
    }


PATHS = list(_sync_paths(None, None))


def _scripted(llm, path: str) -> None:
    llm.script(json.dumps({"city": "Lyon"}) if "parse" in path else STALE)


def _assert_answered(harness, answer: dict) -> None:
    a = only_guard_span(harness).attributes
    assert a["gen_ai.response.id"] == answer["id"]
    assert a["gen_ai.response.model"] == answer["model"]
    assert list(a["gen_ai.response.finish_reasons"]) == answer["finish"]
    assert a["gen_ai.usage.input_tokens"] == answer["input"] > 0
    assert a["gen_ai.usage.output_tokens"] == answer["output"] > 0
    assert "ctxguard.stream.abandoned" not in a
    # The answer was read: it states the stale city, a model-level miss.
    assert "answer_consistent" in a["ctxguard.violations"]
    assert harness.metric("ctxguard_checks_total", check="answer_consistent", outcome="fail") == 1
    for check in CHECK_NAMES:
        assert sum(harness.metric("ctxguard_checks_total", check=check, outcome=o)
                   for o in ("pass", "fail", "skip")) == 1, check


@pytest.mark.parametrize("path", PATHS)
def test_every_path_records_what_the_server_answered(harness, llm, client, claude, path):
    harness.start(mode="observe")
    _scripted(llm, path)
    with ctxguard.conversation("order-7"):
        _facts()
        answer = _sync_paths(client, claude)[path]()
    assert len(llm.requests) == 1
    _assert_answered(harness, answer)


def test_a_raw_response_teaches_calibration(harness, llm, client):
    """The usage a raw response reports reaches calibration, as a parsed one does (a question long
    enough to teach it: docs/budget.md, "What teaches calibration")."""
    harness.start(mode="observe")
    asked = {**CHAT, "messages": [*MESSAGES[:-1], {"role": "user", "content": "Where is my parcel? " * 40}]}
    for _ in range(6):
        client.chat.completions.with_raw_response.create(**asked).parse()
    sources = [s.attributes["ctxguard.payload.tokens_source"] for s in harness.spans()]
    assert sources[-1] == "calibrated" and "calibrated" not in sources[:5]  # five reports, then calibrated


@pytest.mark.asyncio
async def test_async_raw_and_streaming_responses_are_read(harness, llm, aclient, aclaude):
    harness.start(mode="observe")

    async def agents_sdk_stream() -> dict:
        # How the OpenAI Agents SDK streams: enter the streaming response, parse, iterate.
        manager = aclient.responses.with_streaming_response.create(**RESPONSES, stream=True)
        response = await manager.__aenter__()
        try:
            return _response_events([event async for event in await response.parse()])
        finally:
            await manager.__aexit__(None, None, None)

    async def messages_raw() -> dict:
        raw = await aclaude.messages.with_raw_response.create(**MESSAGES_API)
        parsed = raw.parse()
        return _message_answer(await parsed if hasattr(parsed, "__await__") else parsed)

    async def chat_raw_stream() -> dict:
        raw = await aclient.chat.completions.with_raw_response.create(**CHAT_STREAM)
        stream = raw.parse()
        stream = await stream if hasattr(stream, "__await__") else stream
        return _chat_chunks([chunk async for chunk in stream])

    for run in (agents_sdk_stream, messages_raw, chat_raw_stream):
        harness.exporter.clear()
        llm.script(STALE)
        with ctxguard.conversation(run.__name__):
            _facts()
            answer = await run()
        a = only_guard_span(harness).attributes
        assert (a["gen_ai.response.id"], a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
            answer["id"], answer["input"], answer["output"]), run.__name__
        assert "answer_consistent" in a["ctxguard.violations"], run.__name__
    assert harness.metric("ctxguard_checks_total", check="answer_consistent", outcome="fail") == 3


def test_a_streamed_raw_response_ends_with_its_body_not_its_headers(harness, llm, client):
    harness.start(mode="observe")
    raw = client.chat.completions.with_raw_response.create(**CHAT_STREAM)
    assert guard_spans(harness) == []  # headers only: the answer is still to come
    chunks = list(raw.parse())
    assert _chat_chunks(chunks)["id"] == only_guard_span(harness).attributes["gen_ai.response.id"]


def test_a_streaming_response_left_unread_ends_its_call(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("order-9"):
        _facts()
        with client.chat.completions.with_streaming_response.create(**CHAT):
            pass  # the app looked at the headers only
    a = only_guard_span(harness).attributes
    assert "gen_ai.response.id" not in a
    assert "answer_consistent: the answer was not read" in a["ctxguard.checks.skipped"]
    assert harness.metric("ctxguard_checks_total", check="answer_consistent", outcome="skip") == 1


# -- streams the app stops reading ------------------------------------------------

LONG = "word " * 60_000  # more than one network read: the body is still arriving when the app stops


def _assert_abandoned(harness) -> None:
    a = only_guard_span(harness).attributes
    assert a["ctxguard.stream.abandoned"] is True
    assert "error.type" not in a
    for check in CHECK_NAMES:
        assert sum(harness.metric("ctxguard_checks_total", check=check, outcome=o)
                   for o in ("pass", "fail", "skip")) == 1, check
    assert harness.metric("ctxguard_guard_duration_seconds_count") == 1


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_stream_broken_off_and_dropped_still_ends_its_span(harness, llm, client, claude, sdk):
    harness.start(mode="observe")
    llm.script(LONG)
    if sdk == "openai":
        stream = client.chat.completions.create(**CHAT_STREAM)
    else:
        stream = claude.messages.create(**MESSAGES_API, stream=True)
    for _ in stream:
        break
    assert guard_spans(harness) == []
    del stream
    gc.collect()  # an SDK stream and its generator form a cycle: only the collector frees them
    _assert_abandoned(harness)


def test_a_stream_closed_early_ends_its_span_at_close(harness, llm, client):
    harness.start(mode="observe")
    llm.script(LONG)
    stream = client.chat.completions.create(**CHAT_STREAM)
    next(iter(stream))
    stream.close()
    _assert_abandoned(harness)
    assert stream is not None  # still referenced: the close, not the collector, ended the span


def test_what_an_abandoned_stream_said_is_judged(harness, llm, client):
    harness.start(mode="observe")
    llm.script(STALE + " " + LONG)
    with ctxguard.conversation("order-8"):
        _facts()
        with client.chat.completions.create(**CHAT_STREAM) as stream:
            for chunk in stream:
                if chunk.choices and "Lyon" in (chunk.choices[0].delta.content or ""):
                    break  # the app read the stale city, then stopped
    a = only_guard_span(harness).attributes
    assert a["ctxguard.stream.abandoned"] is True
    assert "answer_consistent" in a["ctxguard.violations"]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_streams_keep_the_sdks_exact_type(harness, llm, client, claude, sdk):
    """No proxy: ``isinstance`` holds even where the SDK's metaclass accepts only exact instances
    (anthropic 0.x's ``Stream``)."""
    harness.start(mode="observe")
    if sdk == "openai":
        stream, cls = client.chat.completions.create(**CHAT_STREAM), openai.Stream
    else:
        stream, cls = claude.messages.create(**MESSAGES_API, stream=True), anthropic.Stream
    assert type(stream) is cls
    assert isinstance(stream, cls)
    list(stream)
    assert len(guard_spans(harness)) == 1


# -- failed calls --------------------------------------------------------------------


def _assert_one_outcome_per_check(harness, calls: int) -> None:
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == calls
    for check in CHECK_NAMES:
        counted = sum(harness.metric("ctxguard_checks_total", check=check, outcome=o) for o in ("pass", "fail", "skip"))
        assert counted == calls, check


def test_every_failed_call_counts_one_outcome_per_check(harness, llm, client):
    harness.start(mode="observe")
    llm.script(Reply(status=429), Reply(status=500), Reply(status=400))
    with ctxguard.conversation("c"):
        _facts()
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(**CHAT)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(**CHAT_STREAM)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.with_raw_response.create(**CHAT)
    _assert_one_outcome_per_check(harness, 3)
    skipped = [s.attributes["ctxguard.checks.skipped"] for s in guard_spans(harness)]
    assert all("answer_consistent: the call failed" in s for s in skipped)


def test_a_call_that_never_reached_a_server_counts_one_outcome_per_check(harness, llm):
    harness.start(mode="observe")
    base_url = llm.base_url
    llm.stop()
    with openai.OpenAI(base_url=base_url, api_key="t", max_retries=0) as dead, \
            pytest.raises(openai.APIConnectionError):
        dead.chat.completions.create(**CHAT)
    _assert_one_outcome_per_check(harness, 1)
    assert only_guard_span(harness).attributes["error.type"] == "APIConnectionError"


def test_a_blocked_call_counts_one_outcome_per_check(harness, llm, client):
    harness.start(mode="enforce")
    with pytest.raises(ctxguard.ContextViolation):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES[1:])
    assert llm.requests == []
    _assert_one_outcome_per_check(harness, 1)
    assert "wire_intact: not sent (enforce mode)" in only_guard_span(harness).attributes["ctxguard.checks.skipped"]


def test_a_streamed_raw_response_never_parsed_ends_when_dropped(harness, llm, client):
    harness.start(mode="observe")
    raw = client.chat.completions.with_raw_response.create(**CHAT_STREAM)
    assert raw.headers["content-type"].startswith("text/event-stream")  # the app read the headers only
    del raw
    gc.collect()
    _assert_abandoned(harness)


# -- call sites that post themselves -------------------------------------------------


@pytest.mark.parametrize("beta", [False, True], ids=["messages", "beta.messages"])
def test_anthropic_structured_output_parse_is_guarded(harness, llm, claude, beta):
    harness.start(mode="observe")
    llm.script(json.dumps({"city": "Lyon"}))
    resource = claude.beta.messages if beta else claude.messages
    parsed = resource.parse(**MESSAGES_API, output_format=City)
    assert llm.bodies("/messages")[0]["system"] == SYSTEM
    assert _message_answer(parsed) == _assert_span_answer(harness)


def test_openai_beta_responses_is_guarded(harness, llm, client):
    if not hasattr(client.beta, "responses"):
        pytest.skip("this openai release has no beta Responses API")
    harness.start(mode="observe")
    response = client.beta.responses.create(**RESPONSES)
    assert llm.requests[0].path.startswith("/v1/responses")
    assert _response_answer(response) == _assert_span_answer(harness)
    assert only_guard_span(harness).attributes["ctxguard.head.role"] == "system"


def _assert_span_answer(harness) -> dict:
    a = only_guard_span(harness).attributes
    return {"id": a["gen_ai.response.id"], "model": a["gen_ai.response.model"],
            "finish": list(a["gen_ai.response.finish_reasons"]),
            "input": a["gen_ai.usage.input_tokens"], "output": a["gen_ai.usage.output_tokens"]}


# -- streams that fail midway --------------------------------------------------------


def _consume(path: str, client, claude) -> None:
    if path == "chat":
        list(client.chat.completions.create(**CHAT_STREAM))
    elif path == "responses":
        list(client.responses.create(**RESPONSES, stream=True))
    else:
        list(claude.messages.create(**MESSAGES_API, stream=True))


@pytest.mark.parametrize("failure", ["error", "drop"])
@pytest.mark.parametrize("path", ["chat", "responses", "messages"])
def test_a_stream_failing_midway_ends_in_error_keeping_what_it_said(harness, llm, client, claude, path, failure):
    harness.start(mode="observe")
    llm.script(Reply(text=STALE, stream_failure=failure))
    raised = None
    with ctxguard.conversation("order-10"):
        _facts()
        try:
            _consume(path, client, claude)
        except Exception as exc:  # what the SDK raises for it is the SDK's business
            raised = exc
    served = llm.responses[0]
    a = only_guard_span(harness).attributes
    assert a["gen_ai.response.id"] == served.id  # the stream said who it was before it failed
    if failure == "drop":  # the transport's error, which the SDK raises or wraps
        chain = [raised, raised.__cause__, raised.__context__]
        assert a["error.type"] in {type(e).__name__ for e in chain if e is not None}
    else:
        assert a["error.type"] == served.error_type  # the provider's own word for the failure
    assert raised is not None or (path, failure) == ("responses", "error")  # response.failed ends normally
    assert "ctxguard.stream.abandoned" not in a
    assert only_guard_span(harness).status.status_code.name == "ERROR"
    for check in CHECK_NAMES:
        assert sum(harness.metric("ctxguard_checks_total", check=check, outcome=o)
                   for o in ("pass", "fail", "skip")) == 1, check


def test_reasoning_is_not_read_as_the_answer():
    """A reasoning item's text (``reasoning_text`` content, as reasoning models return it) is not
    what the model answered: only the message items' output text is."""
    from ctxguard.providers.openai import ADAPTER

    response = {"id": "resp_1", "status": "completed", "output": [
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "It was Lyon."}]},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Paris it is."}, {"type": "refusal", "refusal": "no"}]},
    ]}
    assert ADAPTER.read_response("responses", response).text == "Paris it is."
