"""pytest plugin (entry point ``ctxguard``): ``fake_llm`` and ``ctxguard_guard`` fixtures.

    def test_system_prompt_survives(fake_llm, ctxguard_guard):
        client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=history)   # raises ContextViolation if not

``ctxguard_guard`` runs in enforce mode; ``@pytest.mark.ctxguard(mode="collect")``
(or ``ctxguard_guard.start(mode="collect")``) lets every call through and
collects what failed in ``ctxguard_guard.violations``. Other keyword arguments
of the marker go to ``instrument()`` (``policy=...``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from .._instrument import instrument, uninstrument
from ..facts import MemoryLedger
from ..guard import Guard
from ..telemetry.spans import VIOLATION_EVENT
from ..violations import Violation
from .fake import FakeLLM

__all__ = ["GuardHarness", "ctxguard_guard", "fake_llm"]


class GuardHarness:
    """An instrumented guard with its own registry, in-memory span exporter and in-memory metric
    reader (``metrics="otel"`` or ``"both"``), so a test's counts start at zero whatever earlier
    tests counted.

    ``start(mode="observe", policy=...)`` re-instruments with other settings, on the same sinks:
    counts go on from where they were.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.metric_reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metric_reader], shutdown_on_exit=False)
        self.guard: Guard | None = None

    def start(self, *, mode: str = "enforce", **kwargs: Any) -> Guard:
        """Re-instrument; ``mode`` is ``enforce``, ``observe`` or ``collect`` (observe, and read
        the violations back with ``violations``)."""
        uninstrument()
        if mode == "collect":
            mode = "observe"
        kwargs.setdefault("digest_key", b"ctxguard-tests")
        kwargs.setdefault("ledger", MemoryLedger())  # facts never leak from one test into another
        kwargs.setdefault("meter_provider", self.meter_provider)
        guard = instrument(
            mode=mode, registry=self.registry, tracer_provider=self.tracer_provider, **kwargs
        )
        assert guard is not None, "ctxguard is disabled (CTXGUARD_DISABLED)"
        self.guard = guard
        return guard

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    @property
    def violations(self) -> list[Violation]:
        """Every violation of the finished calls so far, from their spans' events, in order."""
        found = []
        for span in self.spans():
            for event in span.events:
                if event.name == VIOLATION_EVENT:
                    a = event.attributes or {}
                    fact_id, stage = a.get("fact_id"), a.get("stage")
                    found.append(Violation(
                        str(a.get("check")), str(a.get("detail")),
                        str(fact_id) if fact_id is not None else None, str(stage) if stage is not None else None,
                    ))
        return found

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def stop(self) -> None:
        uninstrument()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ctxguard(mode='enforce'|'observe'|'collect', **instrument_kwargs): configure ctxguard_guard"
    )


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A loopback fake OpenAI/Anthropic/Gemini server recording every request body."""
    with FakeLLM() as server:
        yield server


@pytest.fixture
def ctxguard_guard(request: pytest.FixtureRequest) -> Iterator[GuardHarness]:
    """ctxguard instrumented with a fresh registry and span exporter; enforce mode unless
    the test is marked ``@pytest.mark.ctxguard(mode="collect")``."""
    marker = request.node.get_closest_marker("ctxguard")
    harness = GuardHarness()
    harness.start(**(marker.kwargs if marker is not None else {}))
    try:
        yield harness
    finally:
        harness.stop()
