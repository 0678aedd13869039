"""``instrument()`` / ``uninstrument()``: the one-line set-up and its undo."""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, cast

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import REGISTRY, CollectorRegistry

from . import facts, forksafe, intercept
from ._isolation import add_error_hook, remove_error_hook, report_internal_error
from .budget import add_model_windows, load_model_windows
from .capture import CaptureWriter, Redact, printable
from .config import ENV_CAPTURE_PATH, ENV_MODEL_WINDOWS, Config
from .guard import Guard
from .policy import Policy
from .providers import BY_DISTRIBUTION
from .telemetry import otlp as _otlp
from .telemetry.metrics import Metrics

__all__ = ["active_guard", "instrument", "uninstrument"]

logger = logging.getLogger("ctxguard")
_lock = forksafe.lock()  # instrument() and uninstrument(), one at a time

#: Set by gunicorn-style deployments: prometheus_client then keeps every Counter and
#: Histogram value in per-process mmap files under this directory.
ENV_MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"


def _multiprocess_dir() -> str | None:
    """The multiprocess directory, if prometheus_client runs in multiprocess mode.

    The lower-case spelling is the deprecated one prometheus_client still honours.
    """
    return os.environ.get(ENV_MULTIPROC_DIR) or os.environ.get("prometheus_multiproc_dir") or None  # noqa: SIM112


def _serve_metrics(port: int, registry: CollectorRegistry | None) -> Any:
    """Start ``/metrics`` on 127.0.0.1:``port``; None if another worker already serves it.

    In multiprocess mode a process's own registry holds only that process's counts,
    so the endpoint serves a fresh registry whose ``MultiProcessCollector`` sums the
    mmap files of every worker, live or exited. Any one process serving it is
    enough; when several pre-forked workers each call ``instrument(metrics_port=P)``
    the first binds P and the rest find it taken, which is fine and logged, instead
    of failing the worker's start-up (and the master's restart loop).
    """
    from prometheus_client import start_http_server

    multiproc = _multiprocess_dir()
    if multiproc is None:
        try:
            return start_http_server(port, addr="127.0.0.1", registry=registry if registry is not None else REGISTRY)
        except OSError as exc:  # the environment's doing (port taken, not allowed): never the app's failure
            logger.warning("ctxguard: /metrics not served: 127.0.0.1:%d cannot be bound (%s)", port, exc)
            return None

    from prometheus_client.multiprocess import MultiProcessCollector

    aggregate = CollectorRegistry()
    MultiProcessCollector(aggregate, path=multiproc)  # type: ignore[no-untyped-call]
    try:
        return start_http_server(port, addr="127.0.0.1", registry=aggregate)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            logger.info("ctxguard: 127.0.0.1:%d taken (another worker serves the multiprocess aggregate)", port)
        else:
            logger.warning("ctxguard: /metrics not served: 127.0.0.1:%d cannot be bound (%s)", port, exc)
        return None


def _start_tracing(otlp_endpoint: str | None) -> _otlp.OtlpTracing | None:
    """ctxguard's own OTLP export, or None; a failure to build it never fails ``instrument()``."""
    try:
        return _otlp.start(otlp_endpoint)
    except Exception as exc:
        logger.warning("ctxguard: OTLP span export not started: %r", exc)
        report_internal_error("telemetry", exc)
        return None


def _add_model_windows_file(path: str) -> None:
    """``CTXGUARD_MODEL_WINDOWS``: its entries win over the shipped ones and over ``model_windows=``.
    A file that cannot be read or holds no valid table is one warning naming it and the problem,
    never an error raised into the app: the windows known before stand."""
    try:
        add_model_windows(load_model_windows(path))
    except (OSError, ValueError) as exc:
        logger.warning("ctxguard: %s=%s ignored: %s; the shipped model windows (and model_windows= given in "
                       "code) stand", ENV_MODEL_WINDOWS, printable(path, 200), exc)
    except Exception as exc:  # anything else is ctxguard's own failure: counted, and start-up goes on
        logger.warning("ctxguard: %s=%s ignored: %r", ENV_MODEL_WINDOWS, printable(path, 200), exc)
        report_internal_error("config", exc)


def instrument(
    *,
    policy: Policy | None = None,
    mode: str = "observe",
    providers: list[str] | None = None,
    digest_key: str | bytes | None = None,
    capture_content: bool = False,
    registry: CollectorRegistry | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    metrics: str = "prometheus",
    metrics_port: int | None = None,
    ledger: object | None = None,
    conversation_id: Callable[[Mapping[str, Any]], str | None] | None = None,
    clock: Callable[[], datetime] | None = None,
    otlp_endpoint: str | None = None,
    capture_path: str | None = None,
    capture_redact: Redact | None = None,
    span: str = "auto",
    hash_ids: bool = False,
    ollama_num_ctx: int | None = None,
    model_windows: Mapping[str, int] | None = None,
    tokenizer: str = "lazy",
    evaluations: str = "failed",
) -> Guard | None:
    """Guard every call of the installed (or later imported) LLM SDKs.

    >>> guard = ctxguard.instrument(policy=ctxguard.Policy(pinned=ctxguard.Pinned()))  # doctest: +SKIP

    Idempotent: a second call returns the active guard unchanged. Returns None
    when ``CTXGUARD_DISABLED=1``.

    Spans go to ``tracer_provider``, by default the global one. ``otlp_endpoint``
    (a collector's base URL, e.g. ``"http://127.0.0.1:4318"``; ``/v1/traces`` is
    appended) is for apps that set up no tracing themselves: while the global
    provider is still the API's no-op proxy, ctxguard then exports its own spans
    over OTLP/HTTP through a private SDK provider (never made global; bounded
    queue, 5 s export timeout; ``uninstrument()`` flushes it, waiting at most 5 s).
    The standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``
    variables do the same without code and, like ``CTXGUARD_*``, win over the
    argument. An app that has its own global provider (or passes
    ``tracer_provider``) keeps getting the spans there, and ``otlp_endpoint`` is
    ignored: ctxguard never installs a second pipeline next to the app's. The
    decision is made here, once: once ctxguard has its own provider, a global one
    the app sets later gets ctxguard's spans only after ``uninstrument()`` and
    ``instrument()`` again. See ``ctxguard.telemetry.otlp``.

    ``metrics`` (or ``CTXGUARD_METRICS``): ``"prometheus"`` (default), ``"otel"`` or ``"both"``.
    ``"otel"`` and ``"both"`` put every metric on an OpenTelemetry meter of ``meter_provider``
    (default: the global one; the API's proxy until the app sets one, which then receives them),
    plus the GenAI client metrics ``gen_ai.client.token.usage`` and
    ``gen_ai.client.operation.duration``; ``"otel"`` creates no Prometheus series at all
    (``ctxguard.telemetry.meter``; docs/operations.md, "OpenTelemetry metrics").

    ``metrics_port`` serves ``/metrics`` on 127.0.0.1. Under gunicorn-style
    pre-forked workers, set ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
    multiprocess mode, before anything imports prometheus_client): the endpoint then
    serves the aggregate of all workers through ``MultiProcessCollector``, and
    whichever process binds the port first serves it (with ``--preload`` and
    ``instrument()`` in the master, the master's server thread does; forked workers
    inherit the guard and write their own files). An app that serves ``/metrics``
    itself must do the same, as the prometheus_client docs describe::

        registry = CollectorRegistry()
        prometheus_client.multiprocess.MultiProcessCollector(registry)
        # ... expose generate_latest(registry)

    and the master must call ``prometheus_client.multiprocess.mark_process_dead(pid)``
    from its ``child_exit`` hook (gunicorn: ``def child_exit(server, worker):
    mark_process_dead(worker.pid)``) so that a dead worker's live gauges go away;
    its counters and histograms stay in the aggregate, as counters must.

    ``capture_path`` (or ``CTXGUARD_CAPTURE_PATH``) appends every request body as
    sent, and every fact event, to a JSON Lines file for ``ctxguard check`` /
    ``report`` (staging, not production: the file holds raw content).
    ``capture_redact(line) -> line | None`` rewrites or drops each line first.

    ``span`` (or ``CTXGUARD_SPAN``): beside another LLM instrumentation (OpenTelemetry's,
    OpenLLMetry, OpenLIT, Logfire ...), ``"auto"`` puts ctxguard's attributes and events on
    that instrumentation's span of the same call, so a trace shows one span per call;
    ``"own"`` always records ctxguard's span. Either way exactly one span of a call carries
    ``gen_ai.usage.*``: ctxguard's own span leaves it out when another one records it.

    ``hash_ids`` (or ``CTXGUARD_HASH_IDS=1``): conversation and fact ids go into spans and logs
    as keyed digests (the key of the payload digests), for apps whose ids are personal data;
    see ``ctxguard.telemetry.ids`` and docs/privacy.md.

    ``ollama_num_ctx`` (or ``CTXGUARD_OLLAMA_NUM_CTX``): the context window an Ollama server gives
    a request that sets no ``options.num_ctx`` (default 4096, Ollama's own below 24 GiB of VRAM;
    set your server's ``OLLAMA_CONTEXT_LENGTH``): the budget judges those requests against it, since
    the server silently drops what does not fit (docs/budget.md).

    ``model_windows`` (``{model id: context window in tokens}``) adds to or overrides the shipped
    window table; ``CTXGUARD_MODEL_WINDOWS`` names a TOML or JSON file that does the same and wins
    over both (docs/budget.md, "Adding or overriding windows"). Entries stay for the process.

    ``tokenizer`` (or ``CTXGUARD_TOKENIZER``): with tiktoken installed, ``"lazy"`` (default) counts
    byte bounds, which decide most budget verdicts, and loads tiktoken (~40 MB, ~0.25 s) the first
    time a verdict needs exact counts; ``"eager"`` loads it here. No verdict differs between the two
    (docs/budget.md, "Exact only when it matters").

    ``evaluations`` (or ``CTXGUARD_EVALUATIONS``): ``"failed"`` (default) reports each failed check
    as a ``gen_ai.evaluation.result`` span event; ``"all"`` reports the passed and skipped ones too,
    which costs more per call than failures do (docs/operations.md, "GenAI conventions").
    """
    if Config.disabled():
        logger.info("ctxguard: disabled by CTXGUARD_DISABLED")
        return None
    unknown = set(providers or ()) - set(BY_DISTRIBUTION)
    if unknown:  # before anything starts: a server or capture file started here would outlive the error
        raise ValueError(f"unknown providers {sorted(unknown)}; supported: {sorted(BY_DISTRIBUTION)}")
    with _lock:
        guard = active_guard()
        if guard is not None:
            logger.debug("ctxguard: instrument() called again; keeping the active guard")
            return guard
        if model_windows is not None:  # a mistake here raises ValueError: nothing has started yet
            add_model_windows(model_windows)
        config = Config.resolve(
            mode=mode,
            digest_key=digest_key,
            capture_content=capture_content,
            metrics_port=metrics_port,
            capture_path=capture_path,
            span=span,
            hash_ids=hash_ids,
            ollama_num_ctx=ollama_num_ctx,
            metrics=metrics,
            tokenizer=tokenizer,
            evaluations=evaluations,
        )
        if config.model_windows is not None:
            _add_model_windows_file(config.model_windows)
        tracing = _start_tracing(otlp_endpoint) if tracer_provider is None else None
        _otlp.warn_if_sdk_disabled(tracer_provider, otlp_endpoint)
        server = None
        try:
            guard = Guard(
                config,
                policy=policy,
                registry=registry,
                tracer_provider=tracing.provider if tracing is not None else tracer_provider,
                meter_provider=meter_provider,
                ledger=ledger,
                conversation_id=conversation_id,
                clock=clock,
            )
            if config.metrics_port is not None and config.metrics == "otel":
                logger.warning("ctxguard: /metrics not served on port %d: metrics='otel' creates no Prometheus "
                               "series (use metrics='both' for both)", config.metrics_port)
            elif config.metrics_port is not None:
                server = _serve_metrics(config.metrics_port, registry)
        except BaseException:
            if tracing is not None:
                tracing.shutdown(timeout=0)
            raise
        def count_errors(where: str, exc: BaseException, metrics: Metrics = guard.metrics) -> None:
            metrics.count_error(where)

        add_error_hook(count_errors)
        if config.capture_path is not None:
            try:
                guard.start_capture(CaptureWriter(config.capture_path, redact=capture_redact))
            except OSError as exc:  # the environment's doing (a missing directory, no permission, a FIFO)
                logger.warning("ctxguard: capture file not opened (%s, or capture_path=): %s", ENV_CAPTURE_PATH,
                               printable(str(exc), 300))
        installation = intercept.install(guard, only=providers)
        # What uninstrument() closes after the call sites are restored, in order; the exporter's
        # flush, which may wait, last.
        installation.closing += [guard.stop_capture, guard.stop_meters, lambda: remove_error_hook(count_errors)]
        if server is not None:
            installation.closing.append(functools.partial(_stop_serving, server, os.getpid()))
        if tracing is not None:
            installation.closing.append(tracing.shutdown)
        return guard


def _stop_serving(server: Any, pid: int) -> None:
    """Stop the ``/metrics`` server ``pid`` started. In a forked child the serving thread is the
    parent's (``shutdown()`` would wait for it forever): closing the child's copy of the socket
    leaves the parent's server serving."""
    server, _thread = server if isinstance(server, tuple) else (server, None)
    if pid == os.getpid():
        server.shutdown()
    server.server_close()


def active_guard() -> Guard | None:
    """The guard ``instrument()`` returned, while it is active."""
    installation = intercept.active()
    return cast(Guard, installation.guard) if installation is not None else None


def uninstrument() -> None:
    """Remove every wrapper: the SDKs behave, and are, exactly as before.

    ctxguard's own OTLP provider, if ``instrument()`` made one, is flushed and shut
    down, waiting at most ``ctxguard.telemetry.otlp.SHUTDOWN_TIMEOUT_S`` (a collector
    that never answers cannot hold the app up).
    """
    with _lock:
        installation = intercept.uninstall()
        facts.configure(None, None)  # facts recorded from now on go to the process default
    if installation is None:
        return
    # Outside the lock: a slow flush must not block a concurrent instrument().
    for close in installation.closing:
        try:
            close()
        except Exception as exc:
            report_internal_error("config", exc)
