"""ctxguard's own OTLP/HTTP export, end to end: real SDK, real exporter, loopback collector.

An app with no tracer provider of its own that points ctxguard at a collector
(``otlp_endpoint=`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``) must get SPEC §5 spans
there, without message content; a collector that never answers must cost the
LLM calls nothing and must not hold ``uninstrument()`` up; an app that has its
own global provider keeps ctxguard's spans in it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard.telemetry import otlp
from ctxguard.testing import FakeLLM

CANARY = "CANARY-otlp-5e1d7b"
MESSAGES = [
    {"role": "user", "content": f"my account number is {CANARY}"},
    {"role": "assistant", "content": "noted"},
    {"role": "user", "content": f"repeat {CANARY} back to me"},
]
SPEC_ATTRIBUTES = (
    "gen_ai.operation.name",
    "gen_ai.request.model",
    "ctxguard.payload.hash",
    "ctxguard.message.hashes",
    "ctxguard.head.role",
    "ctxguard.budget.window",
)
_OTEL_ENV = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_PYTHON_TRACER_PROVIDER",
    "OTEL_BSP_SCHEDULE_DELAY",
    "CTXGUARD_DISABLED",
)


class _Collector(BaseHTTPRequestHandler):
    """OTLP/HTTP receiver: records each POST body, answers 200 with an empty response."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.posts.append((self.path, body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class Collector:
    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
        self.server.posts = []  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    @property
    def posts(self) -> list[tuple[str, bytes]]:
        return list(self.server.posts)  # type: ignore[attr-defined]

    def request(self) -> ExportTraceServiceRequest:
        merged = ExportTraceServiceRequest()
        for _path, body in self.posts:
            part = ExportTraceServiceRequest()
            part.ParseFromString(body)
            merged.resource_spans.extend(part.resource_spans)
        return merged

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class HungCollector:
    """Accepts TCP connections, reads nothing, answers nothing, until closed."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted: list[socket.socket] = []
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.accepted:
            conn.close()
        self.thread.join(5)


@pytest.fixture(autouse=True)
def _clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _OTEL_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def hung() -> Iterator[HungCollector]:
    h = HungCollector()
    try:
        yield h
    finally:
        h.close()


def _attributes(span: object) -> dict[str, AnyValue]:
    return {kv.key: kv.value for kv in span.attributes}  # type: ignore[attr-defined]


def _chat(client: openai.OpenAI, n: int = 1) -> None:
    for _ in range(n):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)  # type: ignore[arg-type]


def _assert_exported(collector: Collector, *, calls: int, service: str) -> None:
    assert collector.posts, "no OTLP request reached the collector"
    assert {path for path, _ in collector.posts} == {"/v1/traces"}
    raw = b"".join(body for _, body in collector.posts)
    assert CANARY.encode() not in raw, "message content reached the collector"
    request = collector.request()
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
        assert resource["service.name"] == service
        for scope_spans in resource_spans.scope_spans:
            assert scope_spans.scope.name == "ctxguard"
            spans.extend(scope_spans.spans)
    assert len(spans) == calls
    for span in spans:
        assert span.name == "chat gpt-4o"
        attrs = _attributes(span)
        missing = [key for key in SPEC_ATTRIBUTES if key not in attrs]
        assert not missing, f"span lacks {missing}"
        assert attrs["gen_ai.operation.name"].string_value == "chat"
        assert attrs["gen_ai.request.model"].string_value == "gpt-4o"
        assert attrs["ctxguard.head.role"].string_value == "user"
        assert len(attrs["ctxguard.payload.hash"].string_value) >= 16
        assert len(attrs["ctxguard.message.hashes"].array_value.values) == len(MESSAGES)
        assert attrs["ctxguard.budget.window"].int_value > 0


def test_otlp_endpoint_argument_exports_spec_spans(fake_llm: FakeLLM, collector: Collector) -> None:
    guard = ctxguard.instrument(otlp_endpoint=collector.base_url, registry=CollectorRegistry(), digest_key="k")
    assert guard is not None
    # ctxguard's provider is private: the app's global provider is untouched.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0) as client:
        _chat(client, 3)
    ctxguard.uninstrument()  # shuts ctxguard's provider down, which flushes the queue
    _assert_exported(collector, calls=3, service=otlp.DEFAULT_SERVICE_NAME)


def test_standard_env_var_exports_spans(
    fake_llm: FakeLLM, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.base_url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-bot")
    ctxguard.instrument(registry=CollectorRegistry(), digest_key="k")
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0) as client:
        _chat(client, 2)
    ctxguard.uninstrument()
    _assert_exported(collector, calls=2, service="billing-bot")


def test_traces_endpoint_env_var_wins_and_is_used_as_is(
    fake_llm: FakeLLM, collector: Collector, hung: HungCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.base_url + "/v1/traces")
    ctxguard.instrument(otlp_endpoint=hung.base_url, registry=CollectorRegistry(), digest_key="k")
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0) as client:
        _chat(client)
    ctxguard.uninstrument()
    _assert_exported(collector, calls=1, service=otlp.DEFAULT_SERVICE_NAME)
    assert not hung.accepted


def test_endpoint_resolution() -> None:
    assert otlp.resolve_endpoint(None) is None
    assert otlp.resolve_endpoint("http://h:4318") == "http://h:4318/v1/traces"
    assert otlp.resolve_endpoint("http://h:4318/") == "http://h:4318/v1/traces"
    assert otlp.resolve_endpoint("http://h:4318/v1/traces") == "http://h:4318/v1/traces"
    assert otlp.resolve_endpoint("https://h/otel") == "https://h/otel/v1/traces"


def _own_tracing() -> list[object]:
    """What ctxguard closes at uninstrument() of a tracer provider of its own (none when the app has one)."""
    from ctxguard import intercept

    installation = intercept.active()
    assert installation is not None
    return [c for c in installation.closing if isinstance(getattr(c, "__self__", None), otlp.OtlpTracing)]


def test_no_endpoint_no_exporter(fake_llm: FakeLLM) -> None:
    """Without an endpoint nothing changes: spans go to the (proxy) global provider."""
    guard = ctxguard.instrument(registry=CollectorRegistry(), digest_key="k")
    assert guard is not None
    assert not _own_tracing(), "ctxguard built its own provider"


def test_hung_collector_costs_the_calls_nothing_and_shutdown_is_bounded(
    fake_llm: FakeLLM, hung: HungCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Export every 20 ms, so the exporter is stuck on the hung collector while the calls run.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0) as client:
        _chat(client, 5)  # warm up connection pool, SDK import paths

        def timed(n: int) -> list[float]:
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                _chat(client)
                out.append(time.perf_counter() - t0)
            return out

        baseline = timed(20)
        ctxguard.instrument(otlp_endpoint=hung.base_url, registry=CollectorRegistry(), digest_key="k")
        _chat(client)
        deadline = time.monotonic() + 5
        while not hung.accepted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hung.accepted, "the exporter never connected to the collector"
        t0 = time.perf_counter()
        guarded = timed(20)
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        ctxguard.uninstrument()
        shutdown = time.perf_counter() - t0
    base_median, guarded_median = statistics.median(baseline), statistics.median(guarded)
    print(
        f"\nmedian per call: {base_median * 1e3:.2f} ms without ctxguard, {guarded_median * 1e3:.2f} ms with "
        f"ctxguard + hung collector; 20 calls {total:.3f} s; uninstrument() {shutdown:.2f} s"
    )
    # Not a benchmark (bench/ measures overhead): the property is that no call waits on the
    # collector, whose export timeout is 5 s; 50 ms of slack keeps a loaded CI machine green.
    assert total < 2.0
    assert guarded_median < base_median + 0.05
    assert shutdown < otlp.SHUTDOWN_TIMEOUT_S + 1.0


def test_bounded_shutdown_with_a_full_queue(hung: HungCollector) -> None:
    """Many queued batches against a hung collector: still one bounded wait, not one per batch."""
    tracing = otlp.OtlpTracing(hung.base_url + "/v1/traces")
    tracer = tracing.provider.get_tracer("t")
    for _ in range(otlp.MAX_QUEUE_SIZE + 500):  # over the cap: the oldest are dropped, memory stays bounded
        tracer.start_span("s").end()
    t0 = time.perf_counter()
    flushed = tracing.shutdown(timeout=1.0)
    elapsed = time.perf_counter() - t0
    assert not flushed
    assert elapsed < 1.5
    assert tracing.shutdown() is True  # idempotent, immediate


_GLOBAL_PROVIDER_SCRIPT = textwrap.dedent(
    """
    import sys
    import openai
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    import ctxguard
    from ctxguard import intercept
    from ctxguard.telemetry.otlp import OtlpTracing

    llm_url, collector_url = sys.argv[1], sys.argv[2]
    app_provider = TracerProvider()
    exporter = InMemorySpanExporter()
    app_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(app_provider)

    ctxguard.instrument(otlp_endpoint=collector_url, registry=CollectorRegistry(), digest_key="k")
    installation = intercept.active()
    assert not [c for c in installation.closing if isinstance(getattr(c, "__self__", None), OtlpTracing)], \
        "ctxguard built its own provider despite the app's"
    assert trace.get_tracer_provider() is app_provider
    client = openai.OpenAI(base_url=llm_url, api_key="x", max_retries=0, timeout=20)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    ctxguard.uninstrument()
    assert trace.get_tracer_provider() is app_provider
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["chat gpt-4o"], names
    print("OK")
    """
)


def test_app_global_provider_is_used_and_no_own_exporter(fake_llm: FakeLLM, collector: Collector) -> None:
    # The global provider can be set once per process: do it in a child.
    env = {k: v for k, v in os.environ.items() if k not in _OTEL_ENV}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.base_url  # the env var must not win over the app either
    result = subprocess.run(
        [sys.executable, "-c", _GLOBAL_PROVIDER_SCRIPT, fake_llm.base_url, collector.base_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("OK")
    time.sleep(0.2)
    assert collector.posts == []


SDK_DISABLED = "OTEL_SDK_DISABLED=true: OpenTelemetry's SDK makes no-op tracers"


def test_a_disabled_sdk_is_one_warning_at_instrument_and_checks_still_run(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``OTEL_SDK_DISABLED=true`` (CrewAI sets it when its own telemetry is off): the app's SDK
    provider hands ctxguard a no-op tracer, so its spans vanish. ``instrument()`` says so once; the
    calls are still counted."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    with caplog.at_level("WARNING", logger="ctxguard"):
        ctxguard.instrument(tracer_provider=provider, registry=registry, digest_key="k")
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0) as client:
        _chat(client, 2)
    ctxguard.uninstrument()
    assert len([r for r in caplog.records if SDK_DISABLED in r.getMessage()]) == 1
    assert exporter.get_finished_spans() == ()
    assert registry.get_sample_value("ctxguard_calls_total", {"provider": "openai", "operation": "chat"}) == 2


def test_a_disabled_sdk_under_an_otlp_endpoint_is_one_warning_and_nothing_exported(
    fake_llm: FakeLLM, collector: Collector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    with caplog.at_level("WARNING", logger="ctxguard"):
        ctxguard.instrument(otlp_endpoint=collector.base_url, registry=CollectorRegistry(), digest_key="k")
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0) as client:
        _chat(client)
    ctxguard.uninstrument()
    assert len([r for r in caplog.records if SDK_DISABLED in r.getMessage()]) == 1
    assert collector.posts == []


@pytest.mark.parametrize("disabled", ["", "false"])
def test_an_enabled_sdk_or_nowhere_to_trace_is_no_warning(
    disabled: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No warning while the SDK is on, nor with it off when ctxguard was given nowhere to put spans."""
    from opentelemetry.sdk.trace import TracerProvider

    monkeypatch.setenv("OTEL_SDK_DISABLED", disabled)
    with caplog.at_level("WARNING", logger="ctxguard"):
        ctxguard.instrument(tracer_provider=TracerProvider(), registry=CollectorRegistry(), digest_key="k")
        ctxguard.uninstrument()
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        ctxguard.instrument(registry=CollectorRegistry(), digest_key="k")  # the API's proxy, no endpoint
        ctxguard.uninstrument()
    assert not [r for r in caplog.records if SDK_DISABLED in r.getMessage()]
