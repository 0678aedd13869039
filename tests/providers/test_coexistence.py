"""Beside another LLM instrumentation, in either order: ctxguard guards every call, uninstrumenting
either one leaves the other working, and exactly one span of a call carries the GenAI usage.

The other instrumentation here is a stand-in written the way OpenTelemetry's openai instrumentation
is (a wrapt wrapper on the same call site that makes its CLIENT span current, ``unwrap()`` by
peeling the outermost layer), the way OpenInference's is (a wrapper on the client's ``request``,
beneath ctxguard), and the way a restoring one is (it puts back the function it saved). The real
packages are driven in tests/coexistence.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys

import openai
import pytest
import wrapt
from openai.resources.chat.completions.completions import Completions
from opentelemetry import trace

import ctxguard
from ctxguard.digest import Digester
from tests.conftest import KEY, guard_spans, only_guard_span
from tests.events import violation_events

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


class Other:
    """A GenAI instrumentation of ``Completions.create``: one CLIENT span per call, current while
    the SDK runs, carrying the semantic conventions' request and usage attributes."""

    def __init__(self, tracer_provider) -> None:
        self.tracer = tracer_provider.get_tracer("other.instrumentation")

    def wrapper(self, wrapped, instance, args, kwargs):
        model = kwargs.get("model")
        with self.tracer.start_as_current_span(f"chat {model}", kind=trace.SpanKind.CLIENT,
                                               attributes={"gen_ai.operation.name": "chat",
                                                           "gen_ai.request.model": model}) as span:
            result = wrapped(*args, **kwargs)
            span.set_attribute("gen_ai.usage.input_tokens", result.usage.prompt_tokens)
            return result

    def instrument(self) -> None:
        wrapt.wrap_function_wrapper(Completions, "create", self.wrapper)

    def uninstrument(self) -> None:
        """As opentelemetry.instrumentation.utils.unwrap does: peel the outermost layer."""
        current = Completions.__dict__["create"]
        if hasattr(current, "__wrapped__"):
            Completions.create = current.__wrapped__


@pytest.fixture
def other(harness):
    other = Other(harness.tracer_provider)
    try:
        yield other
    finally:
        other.uninstrument()
        while isinstance(Completions.__dict__["create"], wrapt.FunctionWrapper):  # whatever is left
            Completions.create = Completions.__dict__["create"].__wrapped__


def _install(harness, other: Other, first: str) -> None:
    """ctxguard and the other instrumentation, ``first`` first."""
    for which in (first, "ctxguard" if first == "other" else "other"):
        if which == "ctxguard":
            harness.start(mode="observe")
        else:
            other.instrument()


def _call(client):
    return client.chat.completions.create(model="gpt-4o", messages=MESSAGES)


def _usage_spans(harness) -> list:
    return [s for s in harness.spans() if "gen_ai.usage.input_tokens" in (s.attributes or {})]


@pytest.mark.parametrize("first", ["other", "ctxguard"])
def test_either_order_one_span_per_call_with_ctxguards_attributes_and_one_usage(harness, llm, client, other, first):
    _install(harness, other, first)
    _call(client)
    spans = harness.spans()
    assert [s.instrumentation_scope.name for s in spans] == ["other.instrumentation"]  # one span for the call
    a = spans[0].attributes
    assert a["ctxguard.head.role"] == "system" and "ctxguard.payload.hash" in a  # ctxguard's, on theirs
    assert a["gen_ai.usage.input_tokens"] == llm.responses[0].input_tokens  # set by its owner, once
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 1
    assert len(_usage_spans(harness)) == 1


def test_span_own_keeps_ctxguards_span_and_leaves_usage_to_the_other(harness, llm, client, other):
    other.instrument()
    harness.start(mode="observe", span="own")
    _call(client)
    ours = guard_spans(harness)
    assert len(ours) == 1 and ours[0].instrumentation_scope.name == "ctxguard"
    assert ours[0].parent.span_id == next(s for s in harness.spans() if s is not ours[0]).context.span_id
    assert "gen_ai.usage.input_tokens" not in ours[0].attributes
    assert ours[0].attributes["gen_ai.response.id"] == llm.responses[0].id
    assert len(_usage_spans(harness)) == 1


def test_with_hash_ids_the_ids_ctxguard_adds_to_the_others_span_are_digests(harness, llm, client, other):
    other.instrument()
    guard = harness.start(mode="observe", hash_ids=True)
    with ctxguard.conversation("alice@example.com"):
        ctxguard.record_fact("phone-of-alice", "+91 98200 12345")
        _call(client)  # the phone number is not sent: fact_present
    (span,) = harness.spans()
    assert span.instrumentation_scope.name == "other.instrumentation"  # adopted
    assert span.attributes["gen_ai.conversation.id"] == guard.ids.id("alice@example.com") != "alice@example.com"
    assert list(span.attributes["ctxguard.facts.missing"]) == [f"{guard.ids.id('phone-of-alice')}@1"]
    assert [e.attributes["fact_id"] for e in violation_events(span)] == [guard.ids.id("phone-of-alice")]
    assert "alice" not in span.to_json()


def test_ctxguard_sits_beneath_the_others_wrapper_so_its_unwrap_leaves_ctxguard(harness, llm, client, other):
    other.instrument()
    harness.start(mode="observe")
    other.uninstrument()  # peels the outermost layer: theirs
    _call(client)
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 1
    assert [s.instrumentation_scope.name for s in harness.spans()] == ["ctxguard"]
    assert len(_usage_spans(harness)) == 1  # ctxguard's own span carries the usage now


@pytest.mark.parametrize("first", ["other", "ctxguard"])
def test_uninstrumenting_ctxguard_leaves_the_other_working(harness, llm, client, other, first):
    _install(harness, other, first)
    ctxguard.uninstrument()
    _call(client)
    assert [s.instrumentation_scope.name for s in harness.spans()] == ["other.instrumentation"]
    assert "ctxguard.payload.hash" not in harness.spans()[0].attributes
    harness.start(mode="observe")  # and ctxguard comes back where it was, once
    _call(client)
    assert "ctxguard.payload.hash" in harness.spans()[-1].attributes
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 1


def test_a_genai_span_beneath_ctxguard_keeps_the_usage(harness, llm, client):
    """An instrumentation of the client's ``request`` (beneath the call site, as OpenInference's
    and Logfire's are) has its GenAI span open when the body leaves: ctxguard's span, its
    parent, leaves the usage to it."""
    tracer = harness.tracer_provider.get_tracer("beneath")

    def request(wrapped, instance, args, kwargs):
        with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}) as span:
            result = wrapped(*args, **kwargs)
            span.set_attribute("gen_ai.usage.input_tokens", 1)
            return result

    original = openai.OpenAI.__dict__.get("request")
    wrapt.wrap_function_wrapper(openai.OpenAI, "request", request)
    try:
        harness.start(mode="observe")
        _call(client)
    finally:
        if original is None:
            del openai.OpenAI.request
        else:
            openai.OpenAI.request = original
    ours = guard_spans(harness)
    assert len(ours) == 1 and "gen_ai.usage.input_tokens" not in ours[0].attributes
    assert ours[0].attributes["gen_ai.response.id"] == llm.responses[0].id
    assert len(_usage_spans(harness)) == 1


@pytest.mark.parametrize("first", ["other", "ctxguard"])
def test_an_adopted_span_ended_at_the_streams_last_event_carries_ctxguards_record(harness, llm, client, first):
    """OpenTelemetry's genai-openai (and botocore's Bedrock extension) ends its span when the last
    event of the answer passes (``response.completed``), before the stream is exhausted: ctxguard,
    beneath it, ends its observation at that event too, so what it records at the end (``ctxguard.wire.hash``,
    the answer's attributes and checks) lands on the span while it is open (before: lost, the span had ended)."""
    from openai.resources.responses.responses import Responses

    tracer = harness.tracer_provider.get_tracer("other.instrumentation")

    def create(wrapped, instance, args, kwargs):
        span = tracer.start_span("chat gpt-4o", kind=trace.SpanKind.CLIENT,
                                 attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"})
        with trace.use_span(span, end_on_exit=False):
            stream = wrapped(*args, **kwargs)

        def events():
            for event in stream:
                if event.type == "response.completed":
                    span.set_attribute("gen_ai.usage.input_tokens", event.response.usage.input_tokens)
                    span.end()
                yield event

        return events()

    for which in (first, "ctxguard" if first == "other" else "other"):
        if which == "ctxguard":
            harness.start(mode="observe")
        else:
            wrapt.wrap_function_wrapper(Responses, "create", create)
    try:
        events = list(client.responses.create(model="gpt-4o", instructions="Be brief.", input="hi", stream=True))
    finally:
        while isinstance(Responses.__dict__["create"], wrapt.FunctionWrapper):
            Responses.create = Responses.__dict__["create"].__wrapped__
    assert events[-1].type == "response.completed"
    (span,) = harness.spans()
    assert span.instrumentation_scope.name == "other.instrumentation"  # adopted
    assert span.attributes["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[0].body)
    assert span.attributes["gen_ai.response.id"] == llm.responses[0].id  # the answer, which the owner left out
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 1


@pytest.mark.parametrize("span", ["auto", "own"])
def test_a_frameworks_genai_span_around_the_call_keeps_the_usage(harness, llm, client, span):
    """A framework's instrumentation (OpenTelemetry's LangChain one) makes its GenAI span of the
    model run current around the SDK call without wrapping the call site, and records the usage
    on it: ctxguard's span, its child, leaves the usage to it (before: both spans carried it)."""
    tracer = harness.tracer_provider.get_tracer("framework")
    harness.start(mode="observe", span=span)
    with tracer.start_as_current_span("chat gpt-4o", kind=trace.SpanKind.CLIENT,
                                      attributes={"gen_ai.operation.name": "chat",
                                                  "gen_ai.request.model": "gpt-4o"}) as theirs:
        result = _call(client)
        theirs.set_attribute("gen_ai.usage.input_tokens", result.usage.prompt_tokens)
    ours = only_guard_span(harness)
    assert ours.parent.span_id == theirs.get_span_context().span_id
    assert "gen_ai.usage.input_tokens" not in ours.attributes
    assert ours.attributes["gen_ai.response.id"] == llm.responses[0].id
    assert len(_usage_spans(harness)) == 1


def test_a_wrapper_removed_by_another_librarys_restore_comes_back(harness, llm, client, caplog):
    """A library that saved the SDK's function and puts it back on uninstrument (OpenInference's
    anthropic instrumentation does) removes ctxguard's wrapper with its own: the next model
    request is guarded from the wire, and ctxguard wraps the call site again for the calls after."""
    harness.start(mode="observe")
    saved = Completions.__dict__["create"].__wrapped__
    Completions.create = saved  # the other library's restore
    caplog.set_level(logging.WARNING, logger="ctxguard")
    for _ in range(3):
        _call(client)
    spans = guard_spans(harness)
    assert [s.attributes.get("ctxguard.guarded_at") for s in spans] == ["wire", None, None]
    assert [s.attributes["gen_ai.response.id"] for s in spans] == [r.id for r in llm.responses]
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 3
    assert sum("went out unguarded" in r.getMessage() for r in caplog.records) == 1


def test_a_method_looked_up_before_instrument_is_guarded_from_the_wire(harness, llm, client, caplog):
    """The app (a framework client set up at import, instructor's patched create) holds the SDK
    method it looked up before ``instrument()``: every request it sends is guarded from its
    body and answer, observed only (enforce cannot refuse a request already leaving)."""
    create = client.chat.completions.create  # bound before instrument(): never ctxguard's
    harness.start(mode="enforce")
    caplog.set_level(logging.WARNING, logger="ctxguard")
    with ctxguard.conversation("early"):
        create(model="gpt-4o", messages=MESSAGES)
        create(model="gpt-4o", messages=MESSAGES[1:])  # no system message: observed, not refused
        for _ in create(model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}):
            pass
    spans = guard_spans(harness)
    assert len(spans) == len(llm.requests) == 3
    assert all(s.attributes["ctxguard.guarded_at"] == "wire" for s in spans)
    assert list(spans[1].attributes["ctxguard.violations"]) == ["system_at_head"]
    assert [s.attributes["gen_ai.response.id"] for s in spans] == [r.id for r in llm.responses]
    assert spans[2].attributes["gen_ai.usage.output_tokens"] == llm.responses[2].output_tokens
    assert spans[0].attributes["gen_ai.conversation.id"] == "early"
    assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 0
    assert sum("bypassed its call site" in r.getMessage() for r in caplog.records) == 1


def test_a_model_request_is_known_by_its_path_and_body_not_by_who_sent_it(harness, llm, client):
    """An app's own HTTP call of the API's shape is a model call, guarded from the wire; a body not
    of its shape to the same path, and the SDK's listing of stored completions (a GET on the same
    path), are not."""
    # The HTTP library the SDK sends with (httpx, or httpx2 for openai 3.x): a venv may have only it.
    http = next(importlib.import_module(c.__module__.split(".")[0]) for c in type(client._client).__mro__
                if c.__module__.startswith("httpx"))
    harness.start(mode="observe")
    http.post(f"{llm.base_url}/chat/completions", json={"model": "gpt-4o", "prompt": "not a chat"})
    with pytest.raises(openai.NotFoundError):  # the fake serves no listing
        client.chat.completions.list()
    assert guard_spans(harness) == []
    assert [r.method for r in llm.requests] == ["POST", "GET"]
    http.post(f"{llm.base_url}/chat/completions", json={"model": "gpt-4o", "messages": MESSAGES})
    assert only_guard_span(harness).attributes["ctxguard.guarded_at"] == "wire"


def test_a_non_model_endpoint_whose_path_ends_like_one_is_not_guarded(harness, llm, client, caplog):
    """openai's Assistants ``POST /threads/{id}/messages`` reaches no call site ctxguard holds; its
    path ends in ``/messages`` but is not Anthropic's ``/v1/messages``: no span, no count, no
    advice about a bypassed call site (before: 1 span labelled anthropic, system_at_head)."""
    harness.start(mode="observe")
    caplog.set_level(logging.WARNING, logger="ctxguard")
    with contextlib.suppress(openai.APIError):  # whatever the fake answers: it is not a model call
        client.beta.threads.messages.create("thread_abc123", role="user", content="Where is my parcel?")
    assert [r.path for r in llm.requests] == ["/v1/threads/thread_abc123/messages"]
    assert guard_spans(harness) == []
    assert harness.metric("ctxguard_calls_total", provider="anthropic", operation="chat") == 0
    assert [r.getMessage() for r in caplog.records] == []


def test_a_one_shot_request_body_is_left_unread_and_is_no_internal_error(harness, llm, client):
    """A body the app streams (a generator as ``content``) is sent unread by httpx; ctxguard does
    not read it either (reading would consume it), and that is not an error of ctxguard's: sent
    past the call site to a model path, and under a guarded call (a hook swapping the body)."""
    import json

    harness.start(mode="observe")
    body = json.dumps({"model": "gpt-4o", "messages": MESSAGES}).encode()
    # As the SDK would send it (its header), past its call site, the body a generator.
    client._client.post(f"{llm.base_url}/chat/completions", content=iter([body]),
                        headers={"Content-Type": "application/json", "x-stainless-lang": "python"})
    assert guard_spans(harness) == []  # not judged from the wire: its body was never in memory

    def one_shot(request):  # type: ignore[no-untyped-def]
        http = sys.modules[type(request).__module__.split(".")[0]]
        request.stream = http._content.IteratorByteStream(iter([request.read()]))
        del request._content

    client._client.event_hooks["request"].append(one_shot)
    try:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    finally:
        client._client.event_hooks["request"].remove(one_shot)
    skipped = only_guard_span(harness).attributes["ctxguard.checks.skipped"]
    assert any(s.startswith("wire_intact: the body sent was not observed") for s in skipped)
    assert len(llm.requests) == 2
