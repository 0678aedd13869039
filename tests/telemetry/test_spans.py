"""The span attributes: the fast path into the SDK's container and the public, validating
``set_attributes`` give the same span (docs/performance.md says what the fast path saves)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ctxguard
from ctxguard.telemetry import spans

HISTORY = [{"role": "system", "content": "You are the order assistant."}, {"role": "user", "content": "Where is it?"}]


def _span_of_a_call(harness: Any, client: Any, limits: SpanLimits | None) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits) if limits is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    harness.tracer_provider = provider
    harness.start(mode="observe")
    with ctxguard.conversation("spans"):
        client.chat.completions.create(model="gpt-4o", messages=HISTORY)
    (span,) = exporter.get_finished_spans()
    return dict(span.attributes or {})


def test_the_public_attribute_path_records_what_the_fast_path_does(harness, llm, client, monkeypatch):
    """A length limit on attribute values sends every attribute through the SDK's public
    ``set_attributes`` (the fast path could break the limit): the span is the same."""
    public: list[int] = []
    original = spans.set_attributes

    def counted(span: Any, attributes: dict[str, Any]) -> None:
        bounded = getattr(span, "_attributes", None)
        if bounded is not None and bounded.max_value_len is not None:
            public.append(len(attributes))
        original(span, attributes)

    monkeypatch.setattr(spans, "set_attributes", counted)
    fast = _span_of_a_call(harness, client, None)
    assert not public
    limited = _span_of_a_call(harness, client, SpanLimits(max_attribute_length=10_000))
    assert public, "the public path was not taken"

    per_call = ("ctxguard.prev.hash", "ctxguard.messages.added", "gen_ai.response.id")

    def comparable(attributes: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in attributes.items() if k not in per_call}

    assert comparable(limited) == comparable(fast)
