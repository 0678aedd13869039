"""The recorder (ctxguard/record.py) alone: a Verdict in, telemetry out (the span, the counters);
nothing inspected, no SDK, no server. (End to end: tests/telemetry, tests/providers.)"""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from ctxguard import facts
from ctxguard.checks import CHECK_NAMES
from ctxguard.config import Config
from ctxguard.guard import inspector_for
from ctxguard.inspection import Verdict
from ctxguard.payload import Answer
from ctxguard.policy import Pinned, Policy
from ctxguard.providers import BY_DISTRIBUTION, LABELS
from ctxguard.record import CallTelemetry, Recorder
from ctxguard.telemetry.ids import ExportedIds
from ctxguard.telemetry.log import WarningLimiter
from ctxguard.telemetry.metrics import metrics_for

CONFIG = Config(digest_key=b"k")


class Sinks:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        inspector = inspector_for(CONFIG, facts.Sinks())
        self.inspector = inspector
        self.recorder = Recorder(CONFIG, metrics_for(self.registry, CHECK_NAMES, LABELS), provider.get_tracer("t"),
                                 ExportedIds(None), WarningLimiter(), inspector.measurer.digester)

    def verdict(self, messages: list[dict[str, str]], policy: Policy) -> Verdict:
        scope = ("c1", None)
        payload = self.inspector.measure(BY_DISTRIBUTION["openai"], "chat.completions",
                                         {"model": "gpt-4o", "messages": messages}, scope)
        assert payload is not None
        return self.inspector.inspect(payload, scope, policy)

    def count(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


def test_start_counts_the_call_and_its_outcomes_and_opens_a_span_with_the_verdict_on_it():
    s = Sinks()
    verdict = s.verdict([{"role": "user", "content": "hi"}], Policy(pinned=Pinned()))
    t = CallTelemetry()
    s.recorder.start(t, verdict, None)
    assert t.span is not None and t.span.is_recording() and t.token is not None
    assert s.count("ctxguard_calls_total", provider="openai", operation="chat") == 1
    assert s.count("ctxguard_checks_total", check="system_at_head", outcome="fail") == 1
    assert s.count("ctxguard_violations_total", check="system_at_head", provider="openai") == 1
    assert s.count("ctxguard_checks_total", check="payload_under_budget", outcome="pass") == 1
    assert s.exporter.get_finished_spans() == ()  # open until the call ends
    s.recorder.end(t, verdict, 0.25, Answer(text="ok", model="gpt-4o-2024-08-06", input_tokens=9, output_tokens=1),
                   None)
    assert t.span is None and t.token is None
    (span,) = s.exporter.get_finished_spans()
    a = span.attributes
    assert span.name == "chat gpt-4o"
    assert a["ctxguard.payload.tokens"] == verdict.payload.tokens
    assert set(a["ctxguard.violations"]) == {"system_at_head", "pinned_present"}
    assert a["gen_ai.response.model"] == "gpt-4o-2024-08-06" and a["gen_ai.usage.input_tokens"] == 9
    assert span.status.status_code is not StatusCode.ERROR
    assert s.count("ctxguard_guard_duration_seconds_count") == 1


def test_a_late_check_is_counted_now_or_with_the_end_and_goes_on_the_span_when_it_ends():
    s = Sinks()
    verdict = s.verdict([{"role": "system", "content": "You are the order assistant."},
                         {"role": "user", "content": "hi"}], Policy())
    t = CallTelemetry()
    s.recorder.start(t, verdict, None)
    (wire,) = s.inspector.wire(verdict, b'{"messages": []}')  # the system prompt never left
    assert wire.outcome == "fail"
    s.recorder.late(t, verdict, wire, at_end=True)
    assert s.count("ctxguard_checks_total", check="wire_intact", outcome="fail") == 0  # not yet
    s.recorder.end(t, verdict, 0.1, None, "APIConnectionError")
    assert s.count("ctxguard_checks_total", check="wire_intact", outcome="fail") == 1
    (span,) = s.exporter.get_finished_spans()
    assert "wire_intact" in span.attributes["ctxguard.violations"]
    assert span.attributes["error.type"] == "APIConnectionError" and span.status.status_code is StatusCode.ERROR


def test_blocked_counts_each_blocking_check_once():
    s = Sinks()
    verdict = s.verdict([{"role": "user", "content": "hi"}], Policy(pinned=Pinned()))
    s.recorder.blocked(verdict)
    assert s.count("ctxguard_blocked_total", check="system_at_head") == 1
    assert s.count("ctxguard_blocked_total", check="pinned_present") == 1
