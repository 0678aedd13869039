"""ctxguard's metrics over the real OTLP/HTTP metric exporter to a loopback receiver: what a
backend (Datadog, Honeycomb, Grafana Cloud, a Collector) receives equals ctxguard's Prometheus
series for the same calls, under the OTel names and units, with the GenAI client metrics."""

from __future__ import annotations

from typing import Any

import openai
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

import ctxguard
from ctxguard.telemetry.meter import GENAI_DURATION, GENAI_TOKEN_USAGE, INSTRUMENTS
from ctxguard.testing import FakeLLM
from tests.ops.test_otlp import CANARY, Collector
from tests.telemetry.test_meter import SYSTEM, otel_series, prometheus_series, traffic


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def exported(collector: Collector) -> tuple[list[tuple[str, str, dict[str, Any], Any]], dict[str, Any]]:
    """The points of the last export (cumulative temporality: it holds every total)."""
    assert collector.posts, "no OTLP request reached the receiver"
    assert {path for path, _ in collector.posts} == {"/v1/metrics"}
    request = ExportMetricsServiceRequest()
    request.ParseFromString(collector.posts[-1][1])
    points, metrics = [], {}
    for rm in request.resource_metrics:
        resource = {kv.key: _value(kv.value) for kv in rm.resource.attributes}
        assert resource["service.name"] == "shop-api"
        for sm in rm.scope_metrics:
            assert sm.scope.name == "ctxguard"
            for metric in sm.metrics:
                metrics[metric.name] = metric
                kind = metric.WhichOneof("data")
                for p in getattr(metric, kind).data_points:
                    attributes = {kv.key: _value(kv.value) for kv in p.attributes}
                    if kind == "sum":
                        assert getattr(metric, kind).is_monotonic
                        p = _Number(p.as_double if p.WhichOneof("value") == "as_double" else p.as_int)
                    points.append((metric.name, "sum" if kind == "sum" else "histogram", attributes, p))
    return points, metrics


class _Number:
    def __init__(self, value: float) -> None:
        self.value = value


def test_otlp_export_equals_the_prometheus_series(harness, llm: FakeLLM, client: openai.OpenAI) -> None:
    collector = Collector()
    exporter = OTLPMetricExporter(endpoint=f"{collector.base_url}/v1/metrics", timeout=5)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "shop-api"}))
    try:
        harness.start(mode="observe", metrics="both", meter_provider=provider,
                      policy=ctxguard.Policy(pinned=ctxguard.Pinned(marker="Pinned facts")))
        traffic(client, llm)
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": CANARY}])
        assert provider.force_flush(timeout_millis=10_000)
        points, metrics = exported(collector)
    finally:
        provider.shutdown()
        collector.close()
    assert CANARY.encode() not in b"".join(body for _, body in collector.posts)
    ours = otel_series(p for p in points if p[0].startswith("ctxguard."))
    theirs = prometheus_series(harness.registry)
    assert ours == {k: v for k, v in theirs.items() if not isinstance(v, tuple) or v[2]}
    assert theirs[("ctxguard.calls", (("operation", "chat"), ("provider", "openai")))] == 9
    for name, unit in INSTRUMENTS.values():
        assert metrics[name].unit == unit, name
    # The GenAI client metrics: one duration per call, tokens as the provider reported them.
    durations = [p for name, _, _, p in points if name == GENAI_DURATION]
    assert sum(p.count for p in durations) == 9
    usage = {a["gen_ai.token.type"]: p for name, _, a, p in points
             if name == GENAI_TOKEN_USAGE and a["gen_ai.request.model"] == "gpt-4o"}
    answered = [r for r, req in zip(llm.responses, llm.requests, strict=True) if req.json["model"] == "gpt-4o"]
    assert usage["input"].sum == sum(r.input_tokens for r in answered if r.input_tokens is not None)
    assert metrics[GENAI_TOKEN_USAGE].unit == "{token}" and metrics[GENAI_DURATION].unit == "s"
