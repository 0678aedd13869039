"""``ViolationSampler``: a span that carries a violation is always recorded; the base sampler
decides every other span.

A trace sampler at 1% drops 99% of the spans, and with them 99% of the violations they carry.
ctxguard decides its verdict before its span starts and, when a before-send check failed, puts
the violation names in the span's *start* attributes (``ctxguard.violations``), which is what a
sampler is given. So::

    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    provider = TracerProvider(sampler=ctxguard.ViolationSampler(ParentBased(TraceIdRatioBased(0.01))))

records every violating call and 1% of the rest. What it cannot see: a violation judged after
sending (``wire_intact``, ``answer_consistent``, ``provider_kept_all``: the span is already started,
sampled or not), and calls whose attributes go on another instrumentation's span (``span="auto"``:
that span's sampling was decided by its own start). docs/operations.md gives the OpenTelemetry Collector
tail-sampling policy that keeps those too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind

from .spans import VIOLATIONS

__all__ = ["ViolationSampler"]


class ViolationSampler(Sampler):
    """Record and sample a span whose start attributes name a violation (``ctxguard.violations``
    non-empty); ask ``base`` for every other span."""

    def __init__(self, base: Sampler) -> None:
        self.base = base

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if attributes and attributes.get(VIOLATIONS):
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, _trace_state(parent_context, trace_state))
        return self.base.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"ViolationSampler{{{self.base.get_description()}}}"


def _trace_state(parent_context: Any, trace_state: Any) -> Any:
    """The parent's trace state, carried on as the SDK's own samplers do."""
    if trace_state is not None:
        return trace_state
    from opentelemetry import trace

    parent = trace.get_current_span(parent_context).get_span_context()
    return parent.trace_state if parent.is_valid else None
