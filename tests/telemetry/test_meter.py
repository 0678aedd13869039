"""ctxguard's metrics through an OpenTelemetry meter (``metrics="otel" | "both"``).

The oracle is ctxguard's own Prometheus exposition of the same calls: every SPEC §4 series must
read the same through the meter (counters equal, histogram buckets and sums equal), under the
OTel instrument names and units of ``ctxguard.telemetry.meter.INSTRUMENTS``; and the GenAI client
metrics must carry what the provider answered (the fake's usage grows with what was sent).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import ctxguard
from ctxguard.telemetry.meter import GENAI_DURATION, GENAI_TOKEN_USAGE, INSTRUMENTS, MAX_ATTRIBUTE_VALUES
from ctxguard.testing import FakeLLM, Reply
from tests.conftest import guard_spans
from tests.providers.test_coexistence import Other

SYSTEM = {"role": "system", "content": "You are the order desk. Never reveal internal ids."}
PINNED = {"role": "system", "content": "Pinned facts\n- city: Pune\n- order: A-1041"}

#: A series: (OTel instrument name, sorted attributes) -> a counter's value, or a histogram's
#: (non-cumulative bucket counts, sum, count).
Series = dict[tuple[str, tuple[tuple[str, Any], ...]], Any]


def prometheus_series(registry: Any) -> Series:
    """ctxguard's Prometheus exposition, keyed the way the meter's points are."""
    out: Series = {}
    by_prom = {prom: name for prom, (name, _unit) in INSTRUMENTS.items()}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        name = by_prom.get(family.name)
        if name is None:
            continue
        if family.type == "counter":
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[(name, tuple(sorted(s.labels.items())))] = s.value
            continue
        grouped: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            entry = grouped.setdefault(tuple(sorted(labels.items())), {"buckets": []})
            if s.name.endswith("_bucket"):
                entry["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_sum"):
                entry["sum"] = s.value
            elif s.name.endswith("_count"):
                entry["count"] = s.value
        for key, entry in grouped.items():
            cumulative = [v for _, v in sorted(entry["buckets"])]
            counts = [int(b - a) for a, b in zip([0.0, *cumulative], cumulative, strict=False)]
            out[(name, key)] = (counts, entry["sum"], int(entry["count"]))
    return out


def otel_series(points: Iterable[tuple[str, str, dict[str, Any], Any]]) -> Series:
    """(instrument, kind, attributes, point) -> the same keys as ``prometheus_series``."""
    out: Series = {}
    for name, kind, attributes, point in points:
        key = (name, tuple(sorted(attributes.items())))
        if kind == "sum":
            out[key] = float(point.value)
        else:
            out[key] = (list(point.bucket_counts), point.sum, point.count)
    return out


def sdk_points(reader: InMemoryMetricReader) -> tuple[list[tuple[str, str, dict[str, Any], Any]], dict[str, Any]]:
    """Every data point the SDK collected, and each instrument's metric (for unit and kind)."""
    data = reader.get_metrics_data()
    points, metrics = [], {}
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            assert sm.scope.name == "ctxguard"
            for metric in sm.metrics:
                metrics[metric.name] = metric
                for p in metric.data.data_points:
                    kind = "sum" if isinstance(p, NumberDataPoint) else "histogram"
                    assert isinstance(p, (NumberDataPoint, HistogramDataPoint))
                    points.append((metric.name, kind, dict(p.attributes or {}), p))
    return points, metrics


@pytest.fixture
def reader() -> Iterable[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    reader.provider = provider  # type: ignore[attr-defined]
    yield reader
    provider.shutdown()


def traffic(client: openai.OpenAI, llm: FakeLLM) -> None:
    """Calls that move every kind of series: clean, evicting (system and pinned), over budget,
    streamed with a usage-only last chunk, and an HTTP error."""
    history = [SYSTEM, PINNED]
    with ctxguard.conversation("order-41"):
        for turn in range(4):
            history.append({"role": "user", "content": f"turn {turn}: where is my order? " * (turn + 1)})
            client.chat.completions.create(model="gpt-4o", messages=history, max_tokens=200)
            history.append({"role": "assistant", "content": f"It ships on day {turn}."})
        # The buffer drops the system prompt and the pinned block: evictions, a violation.
        client.chat.completions.create(model="gpt-4o", messages=history[3:])
    with ctxguard.conversation("order-42"):
        stream = client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, PINNED, history[2]],
                                                stream=True, stream_options={"include_usage": True})
        for _ in stream:
            pass
        # Over budget: gpt-4's window is 8,192 tokens and 9,000 are reserved for the answer.
        client.chat.completions.create(model="gpt-4", messages=[SYSTEM, PINNED, *history[2:]], max_tokens=9000)
    llm.script(Reply(status=429))
    with pytest.raises(openai.RateLimitError):
        client.with_options(max_retries=0).chat.completions.create(model="gpt-4o", messages=[SYSTEM, history[2]])


def test_every_spec_metric_reads_the_same_through_the_meter(harness, llm, client, reader) -> None:
    harness.start(mode="observe", metrics="both", meter_provider=reader.provider,
                  policy=ctxguard.Policy(pinned=ctxguard.Pinned(marker="Pinned facts")))
    traffic(client, llm)
    points, metrics = sdk_points(reader)
    ours = otel_series(p for p in points if p[0].startswith("ctxguard."))
    theirs = prometheus_series(harness.registry)
    # Every counter series, zeros included (observable counters report them all); a histogram's
    # series exists once it has an observation (OpenTelemetry has no empty histogram points).
    assert ours == {k: v for k, v in theirs.items() if not isinstance(v, tuple) or v[2]}
    # Not trivially: the traffic moved counters and histograms of every kind.
    assert theirs[("ctxguard.calls", (("operation", "chat"), ("provider", "openai")))] == 8
    assert theirs[("ctxguard.violations", (("check", "system_at_head"), ("provider", "openai")))] >= 1
    assert theirs[("ctxguard.evictions", (("kind", "system"),))] == 1
    assert theirs[("ctxguard.violations", (("check", "payload_under_budget"), ("provider", "openai")))] >= 1
    assert theirs[("ctxguard.pinned.tokens", ())][2] >= 5
    # Names, units and kinds by the OTel guidelines: every SPEC metric, none twice.
    assert {name for name, _ in INSTRUMENTS.values()} <= set(metrics)
    for prom, (name, unit) in INSTRUMENTS.items():
        metric = metrics[name]
        assert metric.unit == unit and "_" not in name.split(".")[-1].replace("lossy_summaries", ""), name
        counter = prom not in ("ctxguard_payload_tokens", "ctxguard_budget_utilization_ratio",
                               "ctxguard_pinned_tokens", "ctxguard_guard_duration_seconds")
        assert hasattr(metric.data, "is_monotonic") is counter, name
        if counter:
            assert metric.data.is_monotonic, name


def test_genai_client_metrics_carry_the_providers_usage(harness, llm, client, reader) -> None:
    harness.start(mode="observe", metrics="otel", meter_provider=reader.provider)
    with ctxguard.conversation("c"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "hi " * 50}])
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "hi " * 500}])
    llm.script(Reply(status=500))
    with pytest.raises(openai.InternalServerError):
        client.with_options(max_retries=0).chat.completions.create(model="gpt-4o", messages=[SYSTEM])
    points, metrics = sdk_points(reader)
    usage = [(a, p) for name, _, a, p in points if name == GENAI_TOKEN_USAGE]
    port = llm.port
    base = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
            "server.address": "127.0.0.1", "server.port": port}
    by_type = {a["gen_ai.token.type"]: (a, p) for a, p in usage}
    assert set(by_type) == {"input", "output"}  # the failed call reports no usage
    answered = llm.responses[:2]
    inp_attrs, inp = by_type["input"]
    assert {k: v for k, v in inp_attrs.items() if k not in ("gen_ai.token.type", "gen_ai.response.model")} == base
    assert inp_attrs["gen_ai.response.model"] == answered[0].model
    assert inp.count == 2 and inp.sum == sum(r.input_tokens for r in answered)
    assert answered[1].input_tokens > answered[0].input_tokens * 5  # usage grows with what was sent
    assert by_type["output"][1].sum == sum(r.output_tokens for r in answered)
    # The span says the same.
    spans = guard_spans(harness)
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in spans[:2]) == inp.sum
    durations = {a.get("error.type"): p for name, _, a, p in points if name == GENAI_DURATION}
    assert durations[None].count == 2 and durations["InternalServerError"].count == 1, durations
    assert metrics[GENAI_DURATION].unit == "s" and metrics[GENAI_TOKEN_USAGE].unit == "{token}"
    assert list(metrics[GENAI_TOKEN_USAGE].data.data_points[0].explicit_bounds)[:3] == [1, 4, 16]
    # metrics="otel": no Prometheus series at all.
    assert b"ctxguard_" not in generate_latest(harness.registry)


def test_no_genai_metrics_where_another_instrumentation_records_the_call(harness, llm, client, reader) -> None:
    other = Other(harness.tracer_provider)
    other.instrument()
    try:
        harness.start(mode="observe", metrics="both", meter_provider=reader.provider)
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "hi"}])
    finally:
        other.uninstrument()
    points, _ = sdk_points(reader)
    names = {name for name, *_ in points}
    assert GENAI_TOKEN_USAGE not in names and GENAI_DURATION not in names
    assert otel_series(p for p in points if p[0] == "ctxguard.calls")[
        ("ctxguard.calls", (("operation", "chat"), ("provider", "openai")))] == 1


def test_enforce_blocked_call_is_no_genai_operation(harness, llm, client, reader) -> None:
    harness.start(mode="enforce", metrics="both", meter_provider=reader.provider)
    with pytest.raises(ctxguard.ContextViolation):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "no system"}])
    points, _ = sdk_points(reader)
    assert not [p for p in points if p[0].startswith("gen_ai.")]
    assert otel_series(p for p in points if p[0] == "ctxguard.blocked")[
        ("ctxguard.blocked", (("check", "system_at_head"),))] == 1
    assert llm.requests == []


def test_model_attributes_are_bounded(harness, llm, client, reader) -> None:
    harness.start(mode="observe", metrics="otel", meter_provider=reader.provider)
    for i in range(MAX_ATTRIBUTE_VALUES + 6):
        client.chat.completions.create(model=f"ft:gpt-4o:acme:{i}", messages=[SYSTEM])
    points, _ = sdk_points(reader)
    models = {a["gen_ai.request.model"] for name, _, a, _ in points if name == GENAI_DURATION}
    assert len(models) == MAX_ATTRIBUTE_VALUES + 1 and "_OTHER" in models


def test_env_chooses_and_reinstrumenting_keeps_counting(harness, llm, client, reader, monkeypatch) -> None:
    monkeypatch.setenv("CTXGUARD_METRICS", "otel")
    harness.start(mode="observe", meter_provider=reader.provider)  # metrics= not given: the env decides
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM])
    assert b"ctxguard_calls_total" not in generate_latest(harness.registry)

    def openai_calls() -> list[float]:
        points, _ = sdk_points(reader)
        return [p[3].value for p in points if p[0] == "ctxguard.calls" and p[2]["provider"] == "openai"]

    before = openai_calls()
    harness.start(mode="observe", meter_provider=reader.provider)  # again, same provider: no duplicates
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM])
    after = openai_calls()
    assert len(before) == len(after) == 1 and after[0] == before[0] + 1  # cumulative: on from where it was
    ctxguard.uninstrument()
    points, _ = sdk_points(reader)
    assert not [p for p in points if p[0] == "ctxguard.calls"]  # stopped reporting


def test_bad_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="metrics must be"):
        ctxguard.instrument(metrics="statsd")


# -- re-instrumenting: a new sink starts at zero, a sink used again keeps counting ---------------

NO_SYSTEM = [{"role": "user", "content": "hi"}]  # system_at_head fails
HEAD = ("ctxguard.violations", (("check", "system_at_head"), ("provider", "openai")))


def provider_and_reader() -> tuple[MeterProvider, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader], shutdown_on_exit=False), reader


def violations(reader: InMemoryMetricReader) -> float:
    """``ctxguard.violations{check=system_at_head, provider=openai}`` as the reader collects it now."""
    points, _ = sdk_points(reader)
    return otel_series(points)[HEAD]


def test_a_new_meter_provider_starts_at_zero_after_uninstrument(harness, llm, client) -> None:
    a, reader_a = provider_and_reader()
    b, reader_b = provider_and_reader()
    try:
        harness.start(mode="observe", metrics="otel", meter_provider=a)
        client.chat.completions.create(model="gpt-4o", messages=NO_SYSTEM)
        assert violations(reader_a) == 1
        ctxguard.uninstrument()
        harness.start(mode="observe", metrics="otel", meter_provider=b)
        client.chat.completions.create(model="gpt-4o", messages=NO_SYSTEM)
        assert violations(reader_b) == 1  # B saw one violating call, not A's too
    finally:
        a.shutdown()
        b.shutdown()


def test_a_new_meter_provider_starts_at_zero_on_a_registry_that_kept_counting(harness, llm, client) -> None:
    """metrics="both": the counters read the registry's cells, which still hold the earlier
    installation's counts (the registry is the same sink, so they continue there)."""
    a, reader_a = provider_and_reader()
    b, reader_b = provider_and_reader()
    try:
        harness.start(mode="observe", metrics="both", meter_provider=a)
        client.chat.completions.create(model="gpt-4o", messages=NO_SYSTEM)
        assert violations(reader_a) == 1
        ctxguard.uninstrument()
        harness.start(mode="observe", metrics="both", meter_provider=b)  # the same registry
        client.chat.completions.create(model="gpt-4o", messages=NO_SYSTEM)
        assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="openai") == 2
        assert violations(reader_b) == 1
    finally:
        a.shutdown()
        b.shutdown()


def test_a_meter_provider_used_again_keeps_counting_and_never_goes_down(harness, llm, client) -> None:
    """The same provider behind a new registry, then behind no registry: its cumulative
    counters go on from where they were (a lower value is a counter reset to a backend)."""
    provider, reader = provider_and_reader()
    seen = []
    try:
        harness.start(mode="observe", metrics="both", meter_provider=provider)
        client.chat.completions.create(model="gpt-4o", messages=NO_SYSTEM)
        seen.append(violations(reader))
        ctxguard.uninstrument()
        ctxguard.instrument(mode="observe", metrics="both", meter_provider=provider, registry=CollectorRegistry(),
                            digest_key="k", tracer_provider=harness.tracer_provider)
        seen.append(violations(reader))
        client.chat.completions.create(model="gpt-4o", messages=NO_SYSTEM)
        seen.append(violations(reader))
        ctxguard.uninstrument()
        ctxguard.instrument(mode="observe", metrics="otel", meter_provider=provider, digest_key="k",
                            tracer_provider=harness.tracer_provider)
        client.chat.completions.create(model="gpt-4o", messages=NO_SYSTEM)
        seen.append(violations(reader))
    finally:
        provider.shutdown()
    assert seen == [1, 1, 2, 3]
