"""ctxguard's own OTLP/HTTP span export, for apps that configured no tracing of their own.

SPEC §5 spans normally go to the app's global tracer provider. An app that never
set one up still gets a no-op proxy from the OpenTelemetry API, and every span
ctxguard writes would vanish. When such an app points ctxguard at a collector
(``instrument(otlp_endpoint=...)`` or the standard ``OTEL_EXPORTER_OTLP_*``
variables), this module builds a private SDK ``TracerProvider`` that exports over
OTLP/HTTP+protobuf. It is used for ctxguard's spans only and is never made the
global provider: installing a global provider is the application's decision, and
the API lets it be made only once per process.

Everything here is built so that a slow or dead collector cannot slow the
application down or keep it from exiting:

* spans are queued by a ``BatchSpanProcessor`` (bounded queue, ``MAX_QUEUE_SIZE``;
  the oldest spans are dropped when it is full) and sent by its background thread,
  so the LLM call never waits on the network;
* each export gives up after ``EXPORT_TIMEOUT_S``;
* shutdown (``uninstrument()``, or interpreter exit) waits at most
  ``SHUTDOWN_TIMEOUT_S``; batches still queued after that are dropped, not sent.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .. import forksafe

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "ENV_ENDPOINT",
    "ENV_TRACES_ENDPOINT",
    "EXPORT_TIMEOUT_S",
    "MAX_QUEUE_SIZE",
    "SHUTDOWN_TIMEOUT_S",
    "OtlpTracing",
    "app_has_tracer_provider",
    "resolve_endpoint",
    "start",
    "warn_if_sdk_disabled",
]

logger = logging.getLogger("ctxguard")

#: Base URL of an OTLP collector; ``/v1/traces`` is appended (OpenTelemetry spec).
ENV_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: Full URL for traces, used as is; wins over ``OTEL_EXPORTER_OTLP_ENDPOINT``.
ENV_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_ENV_SDK_DISABLED = "OTEL_SDK_DISABLED"
_ENV_TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
_ENV_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_TRACES_PATH = "/v1/traces"

#: ``service.name`` when neither ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES`` gives one.
DEFAULT_SERVICE_NAME = "ctxguard-app"
#: Spans waiting for export; past this the oldest are dropped (memory stays bounded
#: however long the collector is away).
MAX_QUEUE_SIZE = 2048
#: One export request (retries included) gives up after this long.
EXPORT_TIMEOUT_S = 5.0
#: ``shutdown()`` returns after at most this long, flushed or not.
SHUTDOWN_TIMEOUT_S = 5.0


def app_has_tracer_provider() -> bool:
    """True once the app (or ``OTEL_PYTHON_TRACER_PROVIDER``) has set a global provider.

    Until then the API hands out its default ``ProxyTracerProvider``, whose spans
    go nowhere unless a real provider is set later.
    """
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _traces_url(base: str) -> str:
    """``http://host:4318`` -> ``http://host:4318/v1/traces``; a URL already ending so is kept."""
    base = base.strip()
    if urlsplit(base).path.rstrip("/").endswith(_TRACES_PATH):
        return base
    return base.rstrip("/") + _TRACES_PATH


def resolve_endpoint(otlp_endpoint: str | None) -> str | None:
    """The traces URL to export to, or None for "no export of our own".

    The standard variables win over the argument, the way ``CTXGUARD_*`` variables
    win over ``instrument()`` arguments: an operator can re-point a deployed app
    without a release. ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is a full URL, taken
    as is; ``OTEL_EXPORTER_OTLP_ENDPOINT`` and ``otlp_endpoint`` are base URLs that
    get ``/v1/traces`` appended (unless they already end with it).
    """
    traces = os.environ.get(ENV_TRACES_ENDPOINT, "").strip()
    if traces:
        return traces
    base = os.environ.get(ENV_ENDPOINT, "").strip()
    if base:
        return _traces_url(base)
    if otlp_endpoint is not None and otlp_endpoint.strip():
        return _traces_url(otlp_endpoint)
    return None


def _service_resource() -> Resource:
    """Resource with ``service.name`` from the environment, else ``DEFAULT_SERVICE_NAME``.

    ``Resource.create`` alone would fall back to ``unknown_service:python``, which
    groups every ctxguard-only app together in a tracing backend.
    """
    name = OTELResourceDetector().detect().attributes.get(SERVICE_NAME)
    return Resource.create({SERVICE_NAME: name if isinstance(name, str) and name else DEFAULT_SERVICE_NAME})


class _DeadlineExporter(SpanExporter):
    """Forwards to the OTLP exporter until the shutdown deadline, then drops batches.

    ``BatchSpanProcessor.shutdown()`` exports everything still queued, one batch
    after another, each allowed the full export timeout; against a collector that
    never answers that is many timeouts. Past the deadline this wrapper answers
    FAILURE at once, so the processor's thread ends soon after ``shutdown()`` gave
    up waiting for it.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._deadline: float | None = None

    def close_at(self, deadline: float) -> None:
        self._deadline = deadline

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        deadline = self._deadline
        if deadline is not None and time.monotonic() >= deadline:
            return SpanExportResult.FAILURE
        return self._inner.export(spans)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class OtlpTracing:
    """ctxguard's private tracer provider and its bounded shutdown."""

    def __init__(self, endpoint: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.endpoint = endpoint
        self._exporter = _DeadlineExporter(OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_S))
        # shutdown_on_exit=False: the SDK's own exit hook would wait up to 30 s per
        # processor on a hung collector; ours (below) is bounded.
        self.provider = TracerProvider(resource=_service_resource(), shutdown_on_exit=False)
        self.provider.add_span_processor(BatchSpanProcessor(self._exporter, max_queue_size=MAX_QUEUE_SIZE))
        self._lock = forksafe.lock()
        self._closed = False
        atexit.register(self.shutdown)

    def shutdown(self, timeout: float = SHUTDOWN_TIMEOUT_S) -> bool:
        """Flush and stop export; True if that finished within ``timeout`` seconds.

        The SDK's shutdown runs on a daemon thread that we wait for at most
        ``timeout``: an export blocked on an unresponsive collector cannot be
        interrupted, but it can be left behind, so the caller (often the app's
        own shutdown path) is never held up by it. Idempotent.
        """
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        atexit.unregister(self.shutdown)
        self._exporter.close_at(time.monotonic() + timeout)
        done = threading.Event()

        def run() -> None:
            try:
                self.provider.shutdown()
            except Exception as exc:
                from .._isolation import report_internal_error

                report_internal_error("telemetry", exc)
            finally:
                done.set()

        threading.Thread(target=run, name="ctxguard-otlp-shutdown", daemon=True).start()
        finished = done.wait(timeout)
        if not finished:
            logger.warning(
                "ctxguard: OTLP span export to %s did not finish within %.1f s; remaining spans dropped",
                self.endpoint,
                timeout,
            )
        return finished


def start(otlp_endpoint: str | None) -> OtlpTracing | None:
    """ctxguard's own OTLP export, if the app has no tracer provider and an endpoint is configured.

    Returns None (ctxguard then uses the global provider, as SPEC §5 says) when the
    app set a global provider, when no endpoint is configured, or when the standard
    ``OTEL_SDK_DISABLED=true`` / ``OTEL_TRACES_EXPORTER=none`` switch tracing off.
    """
    endpoint = resolve_endpoint(otlp_endpoint)
    if endpoint is None:
        return None
    if app_has_tracer_provider():
        logger.info("ctxguard: the app has a tracer provider; its exporters get ctxguard's spans (%s unused)", endpoint)
        return None
    if os.environ.get(_ENV_SDK_DISABLED, "").strip().lower() == "true":
        return None
    if os.environ.get(_ENV_TRACES_EXPORTER, "").strip().lower() == "none":
        return None
    for name in _ENV_PROTOCOLS:
        protocol = os.environ.get(name, "").strip().lower()
        if protocol:
            if protocol != "http/protobuf":
                logger.warning("ctxguard: %s=%s ignored; ctxguard exports OTLP over http/protobuf", name, protocol)
            break
    tracing = OtlpTracing(endpoint)
    logger.info("ctxguard: exporting spans over OTLP/HTTP to %s", endpoint)
    return tracing


def warn_if_sdk_disabled(tracer_provider: trace.TracerProvider | None, otlp_endpoint: str | None) -> None:
    """One warning when ctxguard is told where to put its spans (an SDK tracer provider, given or
    global, or an OTLP endpoint of its own) but ``OTEL_SDK_DISABLED=true`` makes the SDK hand out
    no-op tracers: the spans would vanish without a word while checks and metrics run. It is CrewAI's
    telemetry opt-out, set by users of CrewAI (docs/operations.md, "Troubleshooting"). Never raises."""
    if os.environ.get(_ENV_SDK_DISABLED, "").strip().lower() != "true":
        return
    try:
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        no_op_sdk = isinstance(provider, TracerProvider) and isinstance(provider.get_tracer("ctxguard"),
                                                                        trace.NoOpTracer)
        own_export = tracer_provider is None and not app_has_tracer_provider() and resolve_endpoint(otlp_endpoint)
    except Exception as exc:
        from .._isolation import report_internal_error

        report_internal_error("telemetry", exc)
        return
    if no_op_sdk or own_export:
        logger.warning("ctxguard: %s=true: OpenTelemetry's SDK makes no-op tracers, so ctxguard records no spans; "
                       "its checks, metrics and logs still run", _ENV_SDK_DISABLED)
