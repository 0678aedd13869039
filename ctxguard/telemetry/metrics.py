"""Prometheus collectors (SPEC §4), created once per registry, every series pre-created.

Label values come from bounded sets defined here; anything else (a role a
client invented, say) is folded into ``other`` so cardinality stays fixed.

prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before it
is imported, as under gunicorn) needs nothing special here: Counters and
Histograms, pre-created children included, are backed by per-process mmap files
and summed by ``MultiProcessCollector`` (which emits no ``_created`` samples).
One thing does differ, see ``metrics_for``.
"""

from __future__ import annotations

import threading
import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, values

from .._isolation import WHERE

__all__ = ["EVICTION_KINDS", "OPERATIONS", "PROVIDERS", "ROLES", "Metrics", "metrics_for"]

PROVIDERS = ("openai", "anthropic", "gcp.gen_ai", "litellm")
OPERATIONS = ("chat",)
OUTCOMES = ("pass", "fail", "skip")
EVICTION_KINDS = ("system", "pinned", "fact")
ROLES = ("system", "developer", "user", "assistant", "tool", "function", "other")

_TOKEN_BUCKETS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
_RATIO_BUCKETS = (0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.1, 1.25, 1.5, 2.0)
_PINNED_BUCKETS = (25, 50, 100, 200, 400, 800, 1600, 3200)
_DURATION_BUCKETS = (2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.25)


class Metrics:
    """All ctxguard collectors on one registry, with their labelled children resolved."""

    def __init__(self, registry: CollectorRegistry, check_names: tuple[str, ...]) -> None:
        self.check_names = check_names
        r = registry
        self.calls = Counter(
            "ctxguard_calls_total", "LLM calls inspected by ctxguard.", ["provider", "operation"], registry=r
        )
        self.checks = Counter(
            "ctxguard_checks_total", "Check evaluations by outcome.", ["check", "outcome"], registry=r
        )
        self.violations = Counter(
            "ctxguard_violations_total", "Failed checks.", ["check", "provider"], registry=r
        )
        self.evictions = Counter(
            "ctxguard_evictions_total",
            "Protected items (system, pinned, fact) that vanished from a conversation's payload.",
            ["kind"],
            registry=r,
        )
        self.blocked = Counter(
            "ctxguard_blocked_total", "Requests not sent because a check failed (enforce mode).", ["check"],
            registry=r,
        )
        self.payload_tokens = Histogram(
            "ctxguard_payload_tokens", "Input tokens per request, counted before sending.", ["provider"],
            buckets=_TOKEN_BUCKETS, registry=r,
        )
        self.utilization = Histogram(
            "ctxguard_budget_utilization_ratio", "(input + reserved output) / context window.", ["provider"],
            buckets=_RATIO_BUCKETS, registry=r,
        )
        self.pinned_tokens = Histogram(
            "ctxguard_pinned_tokens", "Tokens of the pinned facts block.", buckets=_PINNED_BUCKETS, registry=r
        )
        self.dropped = Counter(
            "ctxguard_messages_dropped_total",
            "Messages present in a conversation's previous payload and absent now.",
            ["role"],
            registry=r,
        )
        self.guard_errors = Counter(
            "ctxguard_guard_errors_total", "Internal ctxguard errors swallowed (observe mode).", ["where"],
            registry=r,
        )
        self.summary_lossy = Counter(
            "ctxguard_summary_lossy_total", "Supplied summaries that lost an active fact's value.", registry=r
        )
        self.duration = Histogram(
            "ctxguard_guard_duration_seconds", "ctxguard's own time per call.", buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self._collectors: tuple[Counter | Histogram, ...] = (
            self.calls, self.checks, self.violations, self.evictions, self.blocked, self.payload_tokens,
            self.utilization, self.pinned_tokens, self.dropped, self.guard_errors, self.summary_lossy,
            self.duration,
        )
        # Resolve every child now: the series exist at zero (increase() sees the first
        # failure) and the hot path does dict look-ups instead of labels() calls.
        self.calls_by = {(p, o): self.calls.labels(p, o) for p in PROVIDERS for o in OPERATIONS}
        self.checks_by = {(c, o): self.checks.labels(c, o) for c in check_names for o in OUTCOMES}
        self.violations_by = {(c, p): self.violations.labels(c, p) for c in check_names for p in PROVIDERS}
        self.evictions_by = {k: self.evictions.labels(k) for k in EVICTION_KINDS}
        self.blocked_by = {c: self.blocked.labels(c) for c in check_names}
        self.tokens_by = {p: self.payload_tokens.labels(p) for p in PROVIDERS}
        self.utilization_by = {p: self.utilization.labels(p) for p in PROVIDERS}
        self.dropped_by = {role: self.dropped.labels(role) for role in ROLES}
        self.errors_by = {w: self.guard_errors.labels(w) for w in WHERE}

    def register(self, registry: CollectorRegistry) -> None:
        """Expose these same collectors on one more registry as well."""
        for collector in self._collectors:
            registry.register(collector)

    def count_error(self, where: str) -> None:
        self.errors_by[where].inc()

    def dropped_role(self, role: str, count: int) -> None:
        self.dropped_by.get(role, self.dropped_by["other"]).inc(count)


_lock = threading.Lock()
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, Metrics] = weakref.WeakKeyDictionary()
_process_metrics: Metrics | None = None


def _multiprocess() -> bool:
    """Whether prometheus_client chose mmap-backed values (decided once, at its import)."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


def metrics_for(registry: CollectorRegistry | None, check_names: tuple[str, ...]) -> Metrics:
    """The collectors on ``registry`` (default: the global one), created on first use.

    In multiprocess mode a series' value lives in one mmap entry per process, keyed
    by name and labels, not by registry, and each collector caches the value it
    last wrote. Separate collectors per registry (``instrument(registry=a)``, then
    ``b``, then ``a`` again) would write stale counts over each other's, so there
    the process keeps one set of collectors and registers it on every registry.
    """
    global _process_metrics
    registry = REGISTRY if registry is None else registry
    with _lock:
        metrics = _by_registry.get(registry)
        if metrics is None:
            shared = _process_metrics if _multiprocess() else None
            if shared is not None and shared.check_names == check_names:
                shared.register(registry)
                metrics = shared
            else:
                metrics = Metrics(registry, check_names)
                if _multiprocess():
                    _process_metrics = metrics
            _by_registry[registry] = metrics
        return metrics
