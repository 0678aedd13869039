"""The span attributes: the fast path into the SDK's container and the public, validating
``set_attributes`` give the same span (docs/performance.md says what the fast path saves); the
fast path is taken only on an SDK release it was written for, whose container it checked.

The installed release is checked too: this file also runs on the oldest opentelemetry-sdk that
pyproject.toml accepts (scripts/test), and the dev venv has the newest tested."""

from __future__ import annotations

from typing import Any

import opentelemetry.sdk.trace
import opentelemetry.sdk.version
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Span, SpanLimits, TracerProvider
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


def test_the_installed_sdk_is_a_release_the_fast_path_was_written_for():
    """Fails on an opentelemetry-sdk release outside ``WRITTEN_FOR`` (a new one: read its
    ``BoundedAttributes`` and ``Span.set_attributes``, run this file, then widen the range), or
    one whose container the import-time check found changed."""
    release = tuple(int(p) for p in opentelemetry.sdk.version.__version__.split(".")[:2])
    assert spans.WRITTEN_FOR[0] <= release <= spans.WRITTEN_FOR[1], f"opentelemetry-sdk {release} not checked"
    assert spans.STORE_AS_WRITTEN_FOR


def test_a_release_it_was_not_written_for_takes_the_public_path_and_records_the_same_span(
    harness, llm, client, monkeypatch
):
    public: list[int] = []
    sdk_set_attributes = Span.set_attributes

    def counted(span: Any, attributes: Any) -> None:
        public.append(len(attributes))
        sdk_set_attributes(span, attributes)

    monkeypatch.setattr(Span, "set_attributes", counted)
    fast = _span_of_a_call(harness, client, None)
    assert not public, "the fast path called the SDK's set_attributes"
    monkeypatch.setattr(spans, "STORE_AS_WRITTEN_FOR", False)
    fallback = _span_of_a_call(harness, client, None)
    assert len(public) == 2, "before sending and after the answer: both through the public path"

    per_call = ("ctxguard.prev.hash", "ctxguard.messages.added", "gen_ai.response.id")
    assert {k: v for k, v in fallback.items() if k not in per_call} == {
        k: v for k, v in fast.items() if k not in per_call
    }
    assert set(fallback) == set(fast)


def test_the_import_time_check_refuses_other_releases(monkeypatch):
    assert spans._store_as_written_for()
    for release in ("1.29.0", "1.99.0", "2.0.0", "not a version"):
        monkeypatch.setattr(opentelemetry.sdk.version, "__version__", release)
        assert not spans._store_as_written_for(), release


class _Elsewhere(BoundedAttributes):
    """A container laid out as the fast path expects, that keeps its values somewhere else."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._kept: dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    def __setitem__(self, key: str, value: Any) -> None:
        self._kept[key] = value

    def __getitem__(self, key: str) -> Any:
        return self._kept[key]

    def __iter__(self) -> Any:
        return iter(self._kept)

    def __len__(self) -> int:
        return len(self._kept)


def test_the_import_time_check_refuses_a_container_that_reads_elsewhere(monkeypatch):
    """Same release, same fields, but a value written into ``_dict`` does not show in the span's
    ``attributes``: the check writes one and reads it back, and says no."""
    monkeypatch.setattr(opentelemetry.sdk.trace, "BoundedAttributes", _Elsewhere)
    assert not spans._store_as_written_for()  # another type than the one the fast path checks for
    monkeypatch.setattr(spans, "BoundedAttributes", _Elsewhere)
    assert not spans._store_as_written_for()  # the type matches, the value written is not read
