"""ctxguard's metrics through an OpenTelemetry meter (``instrument(metrics="otel" | "both")``).

Every SPEC §4 metric has an OpenTelemetry instrument of the same meaning, named by the OTel
naming guidelines (dots, no ``_total``, the unit in ``unit=``), with the Prometheus label names
as its attribute keys, so a query ported from the shipped dashboard or rules needs only the
metric's name changed:

==================================== ============================== ===========
Prometheus (SPEC §4)                 OpenTelemetry instrument       unit
==================================== ============================== ===========
``ctxguard_calls_total``             ``ctxguard.calls``             ``{call}``
``ctxguard_checks_total``            ``ctxguard.checks``            ``{check}``
``ctxguard_violations_total``        ``ctxguard.violations``        ``{violation}``
``ctxguard_evictions_total``         ``ctxguard.evictions``         ``{item}``
``ctxguard_blocked_total``           ``ctxguard.blocked``           ``{request}``
``ctxguard_payload_tokens``          ``ctxguard.payload.tokens``    ``{token}``
``ctxguard_budget_utilization_ratio`` ``ctxguard.budget.utilization`` ``1``
``ctxguard_pinned_tokens``           ``ctxguard.pinned.tokens``     ``{token}``
``ctxguard_messages_dropped_total``  ``ctxguard.messages.dropped``  ``{message}``
``ctxguard_guard_errors_total``      ``ctxguard.guard.errors``      ``{error}``
``ctxguard_lossy_summaries_total``   ``ctxguard.lossy_summaries``   ``{summary}``
``ctxguard_guard_duration_seconds``  ``ctxguard.guard.duration``    ``s``
==================================== ============================== ===========

How, and what it costs the call: the counters are *observable* counters whose callbacks read
the same cells the Prometheus collector reads (``Metrics``), at collection time, so they cost
a call nothing and the counts they add equal the Prometheus ones by construction. OpenTelemetry
has no observable histogram: each histogram observation a call makes is also recorded on a
synchronous histogram, with the Prometheus buckets as its explicit bucket boundaries (so the
bucket counts and sums equal too).

Each sink counts what was counted while it was installed: a meter provider's counters start at
zero, and go on from where they were when ``instrument()`` uses the provider again, whatever
the cells they then read already hold (``Meters``), as its histograms do; a registry's series
likewise (``metrics_for``). So after ``uninstrument()`` and ``instrument()`` with a new meter
provider but the same registry, the provider reports the calls since, the registry all of them.

And the GenAI semantic-convention client metrics the peer instrumentations emit, so the
GenAI dashboards of a backend light up: ``gen_ai.client.token.usage`` (``{token}``, one record
per token type the response reports) and ``gen_ai.client.operation.duration`` (``s``, the call
from ctxguard's first look at it to its answer's end), with ``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
``server.address``, ``server.port`` and, on a failed call, ``error.type``. They are recorded
only when ctxguard's own span records the call's usage: beside another GenAI instrumentation
of the same call (whose span ctxguard adopted or which records usage beneath ctxguard), that
instrumentation records them, and two would double every token in the backend's dashboards.
The model and server strings come from the app: each attribute takes at most
``MAX_ATTRIBUTE_VALUES`` distinct values in a process, the rest are ``_OTHER``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import CallbackOptions, Histogram, Meter, MeterProvider, Observation

from .. import forksafe
from . import sinks
from . import spans as attr

if TYPE_CHECKING:
    from .metrics import Metrics

__all__ = ["GENAI_DURATION", "GENAI_TOKEN_USAGE", "INSTRUMENTS", "MAX_ATTRIBUTE_VALUES", "Meters", "meters_for"]

#: Prometheus family name (without ``_total``) -> (OpenTelemetry instrument name, unit).
INSTRUMENTS: dict[str, tuple[str, str]] = {
    "ctxguard_calls": ("ctxguard.calls", "{call}"),
    "ctxguard_checks": ("ctxguard.checks", "{check}"),
    "ctxguard_violations": ("ctxguard.violations", "{violation}"),
    "ctxguard_evictions": ("ctxguard.evictions", "{item}"),
    "ctxguard_blocked": ("ctxguard.blocked", "{request}"),
    "ctxguard_payload_tokens": ("ctxguard.payload.tokens", "{token}"),
    "ctxguard_budget_utilization_ratio": ("ctxguard.budget.utilization", "1"),
    "ctxguard_pinned_tokens": ("ctxguard.pinned.tokens", "{token}"),
    "ctxguard_messages_dropped": ("ctxguard.messages.dropped", "{message}"),
    "ctxguard_guard_errors": ("ctxguard.guard.errors", "{error}"),
    "ctxguard_lossy_summaries": ("ctxguard.lossy_summaries", "{summary}"),
    "ctxguard_guard_duration_seconds": ("ctxguard.guard.duration", "s"),
}

# The GenAI client metrics by the names of the pinned revision (docs/operations.md, "GenAI
# conventions": mid-rename upstream, these are the names backends chart today); written out as
# spans.py's attribute names are, and held equal to the package's constants by the same test.
GENAI_TOKEN_USAGE = "gen_ai.client.token.usage"
GENAI_DURATION = "gen_ai.client.operation.duration"
#: The bucket boundaries the GenAI semantic conventions advise for the two client metrics.
_TOKEN_USAGE_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)

#: Distinct values per app-supplied attribute (model, server address) in a process; then ``_OTHER``.
MAX_ATTRIBUTE_VALUES = 64
_OTHER = "_OTHER"


class _Bounded:
    """The first ``MAX_ATTRIBUTE_VALUES`` distinct values pass; later new ones become ``_OTHER``."""

    __slots__ = ("_lock", "_seen")

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = forksafe.lock()

    def __call__(self, value: str) -> str:
        seen = self._seen
        if value in seen:
            return value
        with self._lock:
            if len(seen) < MAX_ATTRIBUTE_VALUES:
                seen.add(value)
                return value
        return _OTHER


class Meters:
    """The OpenTelemetry instruments of one meter provider, fed from a ``Metrics`` (its source).

    The meter provider is the sink. Its counters start at zero whatever the source already holds
    (with ``metrics="both"``, a registry an earlier installation counted on), and when
    ``instrument()`` again binds them to another source they go on from where they were, never
    down (to a backend a lower cumulative value is a counter reset). So each series reports its
    source's count plus an offset, chosen at every bind to continue what it reported before."""

    def __init__(self, meter: Meter, source: Metrics) -> None:
        #: (source, per counter family: each series' offset); one attribute, so a collection
        #: running beside ``rebind`` reads a source with its own offsets.
        self._bound: tuple[Metrics, dict[str, list[float]]] = (source, {})
        self.active = True
        self._hists: dict[int, tuple[Histogram, dict[str, str]]] = {}  # first cell -> instrument, attributes
        self._model = _Bounded()
        self._server = _Bounded()
        for family in source.layout():
            name, unit = INSTRUMENTS[family.name]
            if family.kind == "counter":
                self._bound[1][family.name] = [-value for value, _ in source.counts(family.name)]
                meter.create_observable_counter(name, [self._observer(family.name)], unit=unit,
                                                description=family.help)
                continue
            histogram = meter.create_histogram(name, unit=unit, description=family.help,
                                               explicit_bucket_boundaries_advisory=list(family.bounds))
            for labelvalues, start in family.series:
                self._hists[start] = (histogram, dict(zip(family.labelnames, labelvalues, strict=True)))
        self._token_usage = meter.create_histogram(
            GENAI_TOKEN_USAGE, unit="{token}", description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(_TOKEN_USAGE_BUCKETS))
        self._duration = meter.create_histogram(
            GENAI_DURATION, unit="s", description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS))

    def rebind(self, source: Metrics) -> None:
        """Read from ``source`` from now on (``instrument()`` again with this meter provider),
        each series going on from what it reported."""
        old, offsets = self._bound
        if source is not old:  # (the same cells keep their offsets: two reads could miss a count between)
            offsets = {  # what each series reports now (old count + offset), less the new count
                name: [was + offset - count for (was, _), offset, (count, _)
                       in zip(old.counts(name), family_offsets, source.counts(name), strict=True)]
                for name, family_offsets in offsets.items()
            }
        self._bound, self.active = (source, offsets), True

    def _observer(self, family_name: str) -> Any:
        def observe(options: CallbackOptions) -> Iterator[Observation]:
            if not self.active:
                return iter(())
            source, offsets = self._bound
            return (Observation(value + offset, attributes) for (value, attributes), offset
                    in zip(source.counts(family_name), offsets[family_name], strict=True))
        return observe

    # -- hot path ---------------------------------------------------------

    def record(self, observed: Iterable[tuple[int, float]]) -> None:
        """The histogram observations a call added to its ``Metrics`` (first cell, value)."""
        hists = self._hists
        for start, value in observed:
            found = hists.get(start)
            if found is not None:
                found[0].record(value, found[1])

    def call(
        self,
        *,
        operation: str,
        provider: str,
        request_model: str | None,
        response_model: str | None,
        server: tuple[str, int | None] | None,
        duration: float,
        input_tokens: int | None,
        output_tokens: int | None,
        error_type: str | None,
    ) -> None:
        """The GenAI client metrics of one call ctxguard's own span recorded."""
        a: dict[str, Any] = {attr.OPERATION: operation, attr.PROVIDER: provider}
        if request_model:
            a[attr.REQUEST_MODEL] = self._model(request_model)
        if response_model:
            a[attr.RESPONSE_MODEL] = self._model(response_model)
        if server is not None:
            a[attr.SERVER_ADDRESS] = self._server(server[0])
            if server[1] is not None:
                a[attr.SERVER_PORT] = server[1]
        if error_type is not None:
            a[attr.ERROR_TYPE] = error_type
        self._duration.record(duration, a)
        if error_type is None:
            for kind, tokens in (("input", input_tokens), ("output", output_tokens)):
                if tokens is not None:
                    self._token_usage.record(tokens, {**a, attr.TOKEN_TYPE: kind})


def _version() -> str:
    try:
        return metadata.version("ctxguard")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "0"


def meters_for(provider: MeterProvider, source: Metrics) -> Meters:
    """The instruments on ``provider``, created once per provider: instruments cannot be removed
    from a meter, and creating them again would duplicate them, so ``instrument()`` again with
    the same provider points the existing ones at ``source``."""
    return sinks.made_on(provider, lambda: Meters(provider.get_meter("ctxguard", _version()), source),
                         again=lambda meters: meters.rebind(source))
