"""Prometheus metrics (SPEC §4): every series pre-created, one lock per call.

Label values come from bounded sets defined here; anything else (a role a
client invented, say) is folded into ``other`` so cardinality stays fixed.

Why not prometheus_client's ``Counter`` and ``Histogram``: each ``inc()`` costs
about 5,000 CPU instructions (validation, then a lock per value) and each
``observe()`` about 11,000; a guarded call makes ~17 of them, which measured as
12% of ctxguard's whole per-call cost. Here every series is one cell of a flat
list; a call adds its counts under one lock, and a collector registered on the
registry turns the cells into the same families, names and labels on scrape.

prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before it
is imported, as under gunicorn) keeps working: each cell then also writes through
to the per-process mmap value prometheus_client itself would have created (same
metric name, sample name and labels), and ``MultiProcessCollector`` sums those
files (it emits no ``_created`` samples). One thing does differ, see ``metrics_for``.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, cast

from prometheus_client import REGISTRY, CollectorRegistry, values
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from .. import forksafe
from .._isolation import WHERE
from ..payload import ROLES
from . import sinks


class Mirror(Protocol):
    """Where a call's histogram observations also go (``telemetry.meter.Meters``)."""

    def record(self, observed: list[tuple[int, float]], /) -> None:
        """(first cell of the series, value) per observation."""

__all__ = ["EVICTION_KINDS", "OPERATIONS", "ROLES", "Hist", "Metrics", "metrics_for"]

OPERATIONS = ("chat",)
OUTCOMES = ("pass", "fail", "skip")
EVICTION_KINDS = ("system", "pinned", "fact")

_TOKEN_BUCKETS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
_RATIO_BUCKETS = (0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.1, 1.25, 1.5, 2.0)
_PINNED_BUCKETS = (25, 50, 100, 200, 400, 800, 1600, 3200)
_DURATION_BUCKETS = (2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.25)

#: How prometheus_client writes a bucket bound in ``le`` (``+Inf``, ``1e+06``).
_le = cast(Callable[[float], str], floatToGoString)

#: A histogram series: (first cell, upper bounds without +Inf). Its cells are one count per
#: bucket (not cumulative; the last is +Inf), then the sum.
Hist = tuple[int, tuple[float, ...]]


class _Family:
    """One metric family: its series in label order, each starting at a cell index."""

    __slots__ = ("bounds", "help", "kind", "labelnames", "name", "series")

    def __init__(
        self, name: str, help: str, kind: str, labelnames: tuple[str, ...], bounds: tuple[float, ...] = ()
    ) -> None:
        self.name, self.help, self.kind, self.labelnames, self.bounds = name, help, kind, labelnames, bounds
        self.series: list[tuple[tuple[str, ...], int]] = []

    @property
    def width(self) -> int:
        return 1 if self.kind == "counter" else len(self.bounds) + 2


class Metrics:
    """All ctxguard series on one registry. The hot path adds to cells by index:
    ``m.add([m.calls_at[...], m.checks_at[...]], [(m.tokens_h[p], n)])``."""

    def __init__(
        self, registry: CollectorRegistry | None, check_names: tuple[str, ...], providers: tuple[str, ...]
    ) -> None:
        """``check_names`` and ``providers``: every check and ``provider`` label, each a fixed set.
        ``registry`` None: no Prometheus series at all (``metrics="otel"``; the cells still count,
        for the OpenTelemetry instruments that read them)."""
        self.check_names, self.providers = check_names, providers
        self._families: list[_Family] = []
        self._cells: list[float] = []
        self._shared: list[Any] | None = [] if registry is not None and _multiprocess() else None  # mmap values
        #: The OpenTelemetry instruments fed from these cells, if any (``metrics="otel"`` or ``"both"``).
        self.mirror: Mirror | None = None
        self._lock = forksafe.lock()
        self._created = time.time()
        self._lay_out(check_names, providers)
        self._collector = _Collector(self)
        if registry is not None:
            registry.register(self._collector)

    def _lay_out(self, check_names: tuple[str, ...], providers: tuple[str, ...]) -> None:
        """Every family and series, in exposition order."""
        calls = self._family("ctxguard_calls_total", "LLM calls inspected by ctxguard.", ("provider", "operation"))
        self.calls_at = {(p, o): self._series(calls, (p, o)) for p in providers for o in OPERATIONS}
        checks = self._family("ctxguard_checks_total", "Check evaluations by outcome.", ("check", "outcome"))
        self.checks_at = {(c, o): self._series(checks, (c, o)) for c in check_names for o in OUTCOMES}
        violations = self._family("ctxguard_violations_total", "Failed checks.", ("check", "provider"))
        self.violations_at = {(c, p): self._series(violations, (c, p)) for c in check_names for p in providers}
        evictions = self._family("ctxguard_evictions_total",
                                 "Protected items (system, pinned, fact) that vanished from a conversation's payload.",
                                 ("kind",))
        self.evictions_at = {k: self._series(evictions, (k,)) for k in EVICTION_KINDS}
        blocked = self._family(
            "ctxguard_blocked_total", "Requests not sent because a check failed (enforce mode).", ("check",)
        )
        self.blocked_at = {c: self._series(blocked, (c,)) for c in check_names}
        tokens = self._family(
            "ctxguard_payload_tokens", "Input tokens per request, counted before sending.", ("provider",),
            _TOKEN_BUCKETS,
        )
        self.tokens_h = {p: self._hist(tokens, (p,)) for p in providers}
        utilization = self._family(
            "ctxguard_budget_utilization_ratio", "(input + reserved output) / context window.", ("provider",),
            _RATIO_BUCKETS,
        )
        self.utilization_h = {p: self._hist(utilization, (p,)) for p in providers}
        pinned = self._family("ctxguard_pinned_tokens", "Tokens of the pinned facts block.", (), _PINNED_BUCKETS)
        self.pinned_h = self._hist(pinned, ())
        dropped = self._family(
            "ctxguard_messages_dropped_total",
            "Messages present in a conversation's previous payload and absent now.",
            ("role",),
        )
        self.dropped_at = {role: self._series(dropped, (role,)) for role in ROLES}
        errors = self._family(
            "ctxguard_guard_errors_total", "Internal ctxguard errors swallowed (observe mode).", ("where",)
        )
        self.errors_at = {w: self._series(errors, (w,)) for w in WHERE}
        lossy = self._family(
            "ctxguard_lossy_summaries_total", "Supplied summaries that lost an active fact's value.", ()
        )
        self.lossy_at = self._series(lossy, ())
        duration = self._family(
            "ctxguard_guard_duration_seconds", "ctxguard's own time per call.", (), _DURATION_BUCKETS
        )
        self.duration_h = self._hist(duration, ())

    # -- layout -----------------------------------------------------------

    def _family(self, name: str, help: str, labelnames: tuple[str, ...], bounds: Sequence[float] = ()) -> _Family:
        kind = "histogram" if bounds else "counter"
        family = _Family(name.removesuffix("_total"), help, kind, labelnames, tuple(float(b) for b in bounds))
        self._families.append(family)
        return family

    def _series(self, family: _Family, labelvalues: tuple[str, ...]) -> int:
        start = len(self._cells)
        family.series.append((labelvalues, start))
        self._cells.extend([0.0] * family.width)
        if self._shared is not None:
            self._shared.extend(_mmap_values(family, labelvalues))
        return start

    def _hist(self, family: _Family, labelvalues: tuple[str, ...]) -> Hist:
        return (self._series(family, labelvalues), family.bounds)

    # -- hot path ---------------------------------------------------------

    def add(self, cells: Iterable[int], observed: Iterable[tuple[Hist, float]] = ()) -> None:
        """Add one to each of ``cells`` (a cell may repeat) and record each observation, under one lock."""
        hits = list(cells)
        sums: list[tuple[int, float]] = []
        seen: list[tuple[int, float]] = []  # (first cell, value): what the mirror records
        for (start, bounds), value in observed:
            hits.append(start + bisect.bisect_left(bounds, value))  # le: the first bound >= value
            sums.append((start + len(bounds) + 1, value))
            seen.append((start, value))
        self._lock.acquire()  # not ``with``: the call path's locks (forksafe.lock)
        try:
            v = self._cells
            for i in hits:
                v[i] += 1
            for i, amount in sums:
                v[i] += amount
        finally:
            self._lock.release()
        shared = self._shared
        if shared is not None:
            for i in hits:
                shared[i].inc(1)
            for i, amount in sums:
                shared[i].inc(amount)
        mirror = self.mirror
        if mirror is not None and seen:  # last: an OpenTelemetry SDK that raises costs no Prometheus count
            mirror.record(seen)

    def add_amount(self, cell: int, amount: float) -> None:
        with self._lock:
            self._cells[cell] += amount
        if self._shared is not None:
            self._shared[cell].inc(amount)

    def count_error(self, where: str) -> None:
        self.add((self.errors_at[where],))

    def dropped_role(self, role: str, count: int) -> None:
        self.add_amount(self.dropped_at.get(role, self.dropped_at["other"]), count)

    # -- exposition -------------------------------------------------------

    def layout(self) -> list[_Family]:
        """The families, in order (each with its name, kind, labels, bounds and series' cells)."""
        return list(self._families)

    def counts(self, family_name: str) -> list[tuple[float, dict[str, str]]]:
        """A counter family's series now: (value, {label: value}) each."""
        family = next(f for f in self._families if f.name == family_name)
        with self._lock:
            cells = self._cells
            values = [cells[start] for _, start in family.series]
        names = family.labelnames
        return [(value, dict(zip(names, labelvalues, strict=True)))
                for value, (labelvalues, _) in zip(values, family.series, strict=True)]

    def register(self, registry: CollectorRegistry) -> None:
        """Expose these same series on one more registry as well."""
        registry.register(self._collector)

    def families(self, *, with_samples: bool = True) -> Iterator[Metric]:
        with self._lock:
            cells = list(self._cells) if with_samples else []
        for family in self._families:
            labels = list(family.labelnames)
            if family.kind == "counter":
                counter = CounterMetricFamily(family.name, family.help, labels=labels)
                for labelvalues, start in family.series if cells else ():
                    counter.add_metric(list(labelvalues), cells[start], created=self._created)
                yield counter
                continue
            histogram = HistogramMetricFamily(family.name, family.help, labels=labels)
            for labelvalues, start in family.series if cells else ():
                running, buckets = 0.0, []
                for i, bound in enumerate((*family.bounds, float("inf"))):
                    running += cells[start + i]
                    buckets.append((_le(bound), running))
                histogram.add_metric(list(labelvalues), buckets, cells[start + len(family.bounds) + 1])
            yield histogram


class _Collector:
    """The registry's view of one ``Metrics``."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.families()

    def describe(self) -> Iterator[Metric]:
        return self._metrics.families(with_samples=False)


def _mmap_values(family: _Family, labelvalues: tuple[str, ...]) -> list[Any]:
    """The mmap-backed values prometheus_client would create for this series, in cell order."""
    make, kind, name = values.ValueClass, family.kind, family.name
    if kind == "counter":
        return [make(kind, name, name + "_total", family.labelnames, labelvalues, family.help)]
    bucket_labels = (*family.labelnames, "le")
    out = [
        make(kind, name, name + "_bucket", bucket_labels, (*labelvalues, _le(b)), family.help)
        for b in (*family.bounds, float("inf"))
    ]
    out.append(make(kind, name, name + "_sum", family.labelnames, labelvalues, family.help))
    return out


def _multiprocess() -> bool:
    """Whether prometheus_client chose mmap-backed values (decided once, at its import)."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


def metrics_for(
    registry: CollectorRegistry | None, check_names: tuple[str, ...], providers: tuple[str, ...]
) -> Metrics:
    """The series on ``registry`` (default: the global one), created on first use: the registry
    is the sink, so ``instrument()`` again with it counts on from where it was, as
    prometheus_client's own counters on it would, and a new registry starts at zero.

    In multiprocess mode a series' value lives in one mmap entry per process, keyed
    by name and labels, not by registry, and each value object caches the value it
    last wrote. Separate series per registry (``instrument(registry=a)``, then
    ``b``, then ``a`` again) would write stale counts over each other's, so there
    the process keeps one set of series and registers it on every registry. There the
    sink is the process's file, not the registry: a new registry reads the process's counts,
    as a prometheus_client counter made again in the process would (its value is read back
    from the file).
    """
    registry = REGISTRY if registry is None else registry

    def make() -> Metrics:
        shared = sinks.one_of(Metrics) if _multiprocess() else None
        if shared is not None and (shared.check_names, shared.providers) == (check_names, providers):
            shared.register(registry)
            return shared
        return Metrics(registry, check_names, providers)

    return sinks.made_on(registry, make)
