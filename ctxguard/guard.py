"""The guard: the sinks and state of one ``instrument()``, and the start of every call.

The per-call flow runs one way (docs/design.md): ``intercept`` finds the call and asks
``Guard.before``; ``inspection`` turns the request into a ``Verdict``; ``record`` turns the
verdict into telemetry; ``call.Call`` is the lifecycle that says when, until the answer
ends it. Each stage runs inside ``guarded(where)``, or on the per-call path the same thing
spelled out (``try``/``except Exception`` -> ``report_internal_error(where, exc)``, free when
nothing fails): a failure there is counted and the stages that depend on it are skipped, but
the application's call always goes through with its own arguments, exactly once. Only enforce
mode raises, and only ``ContextViolation``, before the request is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import CollectorRegistry

from . import facts as facts_mod
from ._isolation import guarded, report_internal_error
from .call import Call, CallServices
from .capture import CaptureWriter
from .checks import CHECK_NAMES
from .config import MAX_CONVERSATIONS, Config
from .conversation import CONVERSATION_BYTES, ConversationMemory, Scope, current_conversation
from .digest import Digester
from .inspection import Inspector, Verdict
from .measure import Measurer
from .memo import Memos
from .policy import Policy
from .providers import LABELS
from .providers.base import Identity, Provider
from .record import CallTelemetry, Recorder
from .telemetry.ids import ExportedIds
from .telemetry.log import WarningLimiter
from .telemetry.meter import meters_for
from .telemetry.metrics import Metrics, metrics_for
from .tokens import BOUND, Calibration, default_counter, tiktoken_installed
from .wiredigest import WireDigests

__all__ = ["Guard"]

_perf = time.perf_counter


class Guard:
    """The active instrumentation, returned by ``ctxguard.instrument()``.

    Its API: ``config``, ``policy`` (replaceable at run time), ``enforce``, ``start_capture`` /
    ``stop_capture`` / ``capture``, and for ctxguard's own helpers (the ``ContextBuilder``,
    ``instrument``) the read-only ``measurer``, ``calibration``, ``ids`` and ``metrics``.
    Everything else is underscored: the inspector, the recorder, the call stages.

    >>> guard = ctxguard.instrument()            # doctest: +SKIP
    >>> guard.policy = ctxguard.Policy(pinned=ctxguard.Pinned())  # doctest: +SKIP
    """

    def __init__(
        self,
        config: Config,
        *,
        policy: Policy | None = None,
        registry: CollectorRegistry | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        ledger: object | None = None,
        conversation_id: Callable[[Mapping[str, Any]], str | None] | None = None,
        clock: Callable[[], datetime] | None = None,
        sinks: facts_mod.Sinks | None = None,
    ) -> None:
        """``sinks``: private fact sinks (offline checking), instead of making ``ledger`` the process's."""
        self.config = config
        self.policy = policy if policy is not None else Policy()
        # metrics="otel": cells of this installation alone; the meter provider is what counts on.
        self.metrics: Metrics = (Metrics(None, CHECK_NAMES, LABELS) if config.metrics == "otel"
                                 else metrics_for(registry, CHECK_NAMES, LABELS))
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        facts = sinks if sinks is not None else facts_mod.configure(ledger, clock)  # type: ignore[arg-type]
        self._inspector = inspector_for(config, facts)
        digester = self._inspector.measurer.digester
        if sinks is None:  # a random per-process key could match no other process's digests
            facts.share(digester if config.digest_key is not None else None)
        #: How conversation and fact ids are exported: as they are, or keyed digests (``hash_ids``).
        self.ids = ExportedIds(digester if config.hash_ids else None)
        self._recorder = Recorder(
            config, self.metrics, provider.get_tracer("ctxguard"), self.ids, WarningLimiter(), digester
        )
        self.calibration = self._inspector.measurer.calibration
        self._stages = CallServices(
            self._inspector, self._recorder, WireDigests(digester, max_bytes=config.cache_bytes // 8)
        )
        self._conversation_id = conversation_id
        if config.metrics != "prometheus":
            meters = meters_for(meter_provider if meter_provider is not None else otel_metrics.get_meter_provider(),
                                self.metrics)
            self.metrics.mirror = self._recorder.meters = meters

    @property
    def enforce(self) -> bool:
        return self.config.mode == "enforce"

    @property
    def measurer(self) -> Measurer:
        """How payloads and texts are digested and counted (the builder counts with it too)."""
        return self._inspector.measurer

    @property
    def capture(self) -> CaptureWriter | None:
        """Where request bodies and fact events are being captured, if anywhere (opt-in)."""
        return self._recorder.capture

    def start_capture(self, writer: CaptureWriter) -> None:
        """Capture every request body (as sent) and fact event to ``writer`` until ``stop_capture``."""
        if self._recorder.capture is not None:
            raise RuntimeError(f"already capturing to {self._recorder.capture.path}")
        self._recorder.capture = writer
        self._inspector.facts.capture = writer

    def note_lossy_summary(self, scope: Scope, fact_ids: list[str]) -> None:
        """A summary ``ContextBuilder`` was handed lost these facts: the conversation's next call says
        so (``ctxguard.summary.lossy``)."""
        self._inspector.lossy.note(scope, fact_ids)

    def stop_meters(self) -> None:
        """The OpenTelemetry instruments stop reporting (``uninstrument()``; they cannot be removed)."""
        meters = self._recorder.meters
        if meters is not None:
            meters.active = False
            self._recorder.meters = None
            if self.metrics.mirror is meters:
                self.metrics.mirror = None

    def stop_capture(self) -> None:
        writer, self._recorder.capture = self._recorder.capture, None
        if self._inspector.facts.capture is writer:
            self._inspector.facts.capture = None
        if writer is not None:
            writer.close()

    def _scope(self, kwargs: Mapping[str, Any]) -> Scope | None:
        scope = current_conversation()
        if scope is None and self._conversation_id is not None:
            with guarded("callback"):
                found = self._conversation_id(kwargs)
                if isinstance(found, str) and found:
                    scope = (found, None)
        return scope

    def before(
        self, provider: Provider, api: str, kwargs: Mapping[str, Any], over: Any = None, *, may_block: bool = True,
        instance: Any = None,
    ) -> Call | None:
        """Inspect a request about to be sent, record the verdict and start its call. Raises only
        ``ContextViolation`` (enforce, when it ``may_block``). ``over``: another library's wrapper
        over ctxguard's at this call site, if any; ``instance``: the call site's object (the SDK's
        resource or client), whose ``identity`` says which provider the call reaches."""
        started = _perf()
        scope = self._scope(kwargs)
        inspector = self._inspector
        # Who the call reaches is read first: it says how the request is counted (``Adapter.for_route``).
        found = _identity(provider, instance) if instance is not None else None
        payload = inspector.measure(provider, api, kwargs, scope, found[0] if found is not None else None)
        if payload is None:
            return None
        if found is not None:
            label, address, port = found
            if label is not None:
                payload.provider = label
            if address is not None and payload.server is None:  # a server the call names wins
                payload.server = (address, port)
        verdict = Verdict(payload, scope)
        try:
            inspector.evaluate(verdict, self.policy)
        except Exception as exc:
            report_internal_error("checks", exc)
        recorder = self._recorder
        t = CallTelemetry(started)
        tools = None
        if recorder.config.capture_content:  # the tools read again, as definitions, for captured content only
            with guarded("telemetry"):
                tools = provider.adapter.tool_definitions(api, kwargs)
        try:
            recorder.start(t, verdict, over, tools)
        except Exception as exc:
            report_internal_error("telemetry", exc)
        if recorder.capture is not None:
            t.request = kwargs  # captured from the wire, or from these if the wire is not seen
        call = Call(self._stages, provider, verdict, t)
        if self.enforce and may_block and verdict.violations:
            call.block()
        call.elapsed += _perf() - started
        return call


_LABELS = frozenset(LABELS)


def _identity(provider: Provider, instance: Any) -> Identity | None:
    """The provider and server the call reaches (``Adapter.identity``); a label outside the
    fixed set is never used (the metric series exist for those alone)."""
    try:
        found = provider.adapter.identity(instance)
    except Exception as exc:
        report_internal_error("normalise", exc)
        return None
    if found is None or found[0] is None or found[0] in _LABELS:
        return found
    return None, found[1], found[2]


def inspector_for(config: Config, facts: facts_mod.Sinks) -> Inspector:
    """An inspector with the memory budget shared out as docs/operations.md, "Memory", says."""
    budget = config.cache_bytes
    digester = Digester(config.digest_key)
    if config.tokenizer == "lazy" and tiktoken_installed():
        measurer = Measurer(digester, BOUND, Calibration(), max_bytes=budget // 4, exact=default_counter)
    else:
        counter = default_counter()
        measurer = Measurer(digester, counter, Calibration(exact=counter.exact), max_bytes=budget // 4)
    # CTXGUARD_MAX_CONVERSATIONS set past its share is honoured for conversations of ~25 messages; the
    # default count is a bound, not a promise: it would hold 10 MiB whatever the budget.
    remembered = budget * 3 // 16
    if config.max_conversations != MAX_CONVERSATIONS:
        remembered = max(remembered, config.max_conversations * CONVERSATION_BYTES)
    memory = ConversationMemory(config.max_conversations, max_bytes=remembered)
    return Inspector(measurer, memory, Memos(max_bytes=budget * 3 // 16), facts, budget, config.server_windows)
