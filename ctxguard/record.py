"""Recording: a ``Verdict`` turned into telemetry (metrics, the span, its events, the log,
the capture). Nothing here inspects.

A call is recorded at three moments, each one function: ``start`` (before sending: every
before-send outcome counted, the span started with the verdict on it), ``late`` (a check
judged after sending: counted now if the call's end may never come, as a stream's, else with
the end) and ``end`` (the answer's attributes, the duration, the span ended).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from .capture import CaptureWriter
from .checks import Context, Outcome
from .config import Config
from .conversation import Scope
from .digest import Digester
from .facts.evaluate import FactView
from .inspection import Verdict
from .payload import Answer, Payload
from .telemetry import spans as attr
from .telemetry.ids import ExportedIds
from .telemetry.log import WarningLimiter, log_violations
from .telemetry.meter import Meters
from .telemetry.metrics import Hist, Metrics
from .telemetry.neighbours import (
    claimed_beneath,
    inference_span,
    ours_to_add,
    records_usage,
    started_beneath,
    their_call_span,
)
from .violations import Violation

__all__ = ["Recorder", "CallTelemetry"]


class CallTelemetry:
    """The telemetry of one call in flight: its span (ctxguard's, or another instrumentation's
    it adopted), what goes on the span when it ends, and what is counted then."""

    __slots__ = ("adopted", "attrs", "began", "counts_at_end", "first_chunk", "request", "span", "token", "unsent",
                 "usage_elsewhere")

    def __init__(self, began: float = 0.0) -> None:
        self.began = began  # perf_counter() when ctxguard first saw the call
        #: Enforce mode refused to send it: no GenAI operation took place.
        self.unsent = False
        self.span: trace.Span | None = None
        self.token: object | None = None
        #: The span is another instrumentation's span of this call: ctxguard adds to it, never ends it.
        self.adopted = False
        #: Another span of this call records gen_ai.usage: ctxguard's own leaves it out.
        self.usage_elsewhere = False
        self.attrs: dict[str, Any] = {}  # set on the span when it ends (one call, not one per check)
        self.counts_at_end: list[int] = []  # metric cells counted with the call's duration, when it ends
        #: The request's arguments, to capture if the wire body is not seen (capture on only).
        self.request: Mapping[str, Any] | None = None
        #: perf_counter() when a streamed answer's first chunk arrived, if it did.
        self.first_chunk: float | None = None

    def detach(self) -> None:
        """ctxguard's span stops being the current one."""
        if self.token is not None:
            token, self.token = self.token, None
            otel_context.detach(token)  # type: ignore[arg-type]

    def sees_usage_beneath(self) -> None:
        """The transport is sending this call's body: something beneath ctxguard (Logfire, the
        anthropic SDK's own tracing) with a GenAI span of this call open records usage."""
        current, ours = trace.get_current_span(), self.span
        if current is ours:
            return
        if (inference_span(current, None) and started_beneath(current, ours)) or claimed_beneath(current, ours):
            self.usage_elsewhere = True


class Recorder:
    """Turns verdicts into telemetry, through the sinks it was given."""

    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        tracer: Tracer,
        ids: ExportedIds,
        warnings: WarningLimiter,
        digester: Digester,
    ) -> None:
        """``digester``: keys the digests the span carries beyond the payload's (the pinned block's)."""
        self.config = config
        self.digester = digester
        self.metrics = metrics
        self.tracer = tracer
        self.ids = ids
        self.warnings = warnings
        #: Where request bodies and fact events are being captured, if anywhere (opt-in).
        self.capture: CaptureWriter | None = None
        #: The OpenTelemetry instruments (``metrics="otel"`` or ``"both"``), for the GenAI client metrics.
        self.meters: Meters | None = None

    # -- before sending -------------------------------------------------

    def start(self, t: CallTelemetry, verdict: Verdict, over: Any, tools: list[dict[str, Any]] | None = None) -> None:
        """Count the before-send outcomes, log the violations and start the span into ``t`` (or
        adopt the span of ``over``, another library's wrapper of this call site, if it is this
        call's). ``t`` is the caller's: a failure part way leaves in it what was started (the span,
        the context attached), so the call's end still ends and detaches them. ``tools``: the
        request's tool definitions, when content is captured."""
        payload = verdict.payload
        self._count(verdict)
        exported = self.ids.violations(verdict.violations)
        if exported:
            self._log(verdict, exported)
        # The current context, read once: what it shows of a span around this call, the new span's
        # parent and the context that span is made current in. Given it, the SDK and its sampler read
        # it no more (three reads: 3,800 instructions a call less, 645,233 -> 641,412, guarded-own child at 20
        # messages, bench/instructions.py).
        current = otel_context.get_current()
        theirs = trace.get_current_span(current)
        if over is not None and self.config.span == "auto" and their_call_span(theirs, payload.operation,
                                                                               payload.model):
            # Another instrumentation wraps this call site and its span of the call is current:
            # ctxguard's attributes and events go on it, so a trace shows one span per call.
            t.span, t.adopted = theirs, True
            a = self._attributes(verdict)
            attr.set_attributes(theirs, {k: v for k, v in a.items() if ours_to_add(k, theirs)})
            self._events(theirs, verdict, exported)
            return
        # The usage is another span's: that of an instrumentation wrapping this call site, or a GenAI
        # span of this call current around it, wrapper or none (a framework's span of the model run:
        # OpenTelemetry's LangChain instrumentation makes its own current around the model's work).
        t.usage_elsewhere = (over is not None and records_usage(over)) or inference_span(theirs, payload.model)
        # Attributes go on right after creation, through the non-validating fast path;
        # handing them to start_span would have the SDK re-validate each one. But the names of the
        # checks that failed are start attributes: a sampler sees them (``ViolationSampler``).
        failed = verdict.violations and tuple(dict.fromkeys(v.check for v in verdict.violations))
        span = self.tracer.start_span(f"{payload.operation} {payload.model or 'unknown'}", context=current,
                                      kind=SpanKind.CLIENT, attributes={attr.VIOLATIONS: failed} if failed else None)
        t.span = span
        t.token = otel_context.attach(trace.set_span_in_context(span, current))
        if span.is_recording():
            attr.set_attributes(span, self._attributes(verdict))
            self._events(span, verdict, exported)
            if self.config.capture_content:
                attr.set_attributes(span, attr.input_content(payload.messages, tools))

    def _count(self, verdict: Verdict) -> None:
        """The before-send metrics: the call, each outcome, each violation and eviction, the token,
        utilisation and pinned histograms."""
        m, payload, ctx, diff = self.metrics, verdict.payload, verdict.ctx, verdict.diff
        provider = payload.provider
        cells = [m.calls_at[(provider, payload.operation)]]
        checks_at, violations_at = m.checks_at, m.violations_at
        for o in verdict.outcomes:
            cells.append(checks_at[(o.check, o.outcome)])
            if o.outcome == "fail":
                cells.append(violations_at[(o.check, provider)])
        if diff is not None:
            cells.extend(m.evictions_at[kind] for kind in diff.evicted)
            for role, count in diff.dropped.items():
                m.dropped_role(role, count)
        if verdict.fact_evictions:
            m.add_amount(m.evictions_at["fact"], verdict.fact_evictions)
        # A body ctxguard could not read has no token count: not a number of 3 (its reply priming).
        observed: list[tuple[Hist, float]] = [] if payload.unreadable else [(m.tokens_h[provider], payload.tokens)]
        if ctx is not None:
            if not isinstance(ctx.budget, str):
                observed.append((m.utilization_h[provider], ctx.budget.utilization))
            if ctx.pinned is not None:
                observed.append((m.pinned_h, ctx.pinned_tokens))
        m.add(cells, observed)

    def _events(self, span: trace.Span, verdict: Verdict, exported: list[Violation]) -> None:
        """The before-send verdict's span events: one per violation, and the evaluation results."""
        every = self.config.evaluations == "all"
        if exported:
            attr.violation_events(span, exported)
        if exported or every:  # nothing to report of a call whose checks all passed, by default
            attr.evaluation_events(span, verdict.outcomes, exported, every=every)

    def _log(self, verdict: Verdict, exported: list[Violation]) -> None:
        scope = verdict.scope
        log_violations(exported, provider=verdict.payload.provider,
                       conversation_id=self.ids.id(scope[0]) if scope is not None else None,
                       payload_hash=verdict.payload.digest, limiter=self.warnings)

    def _attributes(self, verdict: Verdict) -> dict[str, Any]:
        payload, ctx, diff, scope = verdict.payload, verdict.ctx, verdict.diff, verdict.scope
        messages = payload.messages
        shown = messages[: attr.MESSAGE_ATTR_CAP]
        a: dict[str, Any] = {
            attr.OPERATION: payload.operation,
            attr.PROVIDER: payload.provider,
            attr.MODE: self.config.mode,
            attr.PAYLOAD_HASH: payload.digest,
            attr.PAYLOAD_MESSAGES: len(messages),
            attr.MESSAGE_ROLES: tuple([msg.role for msg in shown]),
            attr.MESSAGE_HASHES: tuple(payload.digests[: attr.MESSAGE_ATTR_CAP]),
            attr.VIOLATIONS: tuple([o.check for o in verdict.outcomes if o.outcome == "fail"]),
        }
        if payload.unreadable is None:  # else no count: the skipped checks say why
            a[attr.PAYLOAD_TOKENS] = payload.tokens
            a[attr.TOKENS_SOURCE] = payload.tokens_source
            if payload.out_of_range is not None:
                a[attr.TOKENS_OUT_OF_RANGE] = payload.out_of_range
        if len(messages) > attr.MESSAGE_ATTR_CAP:
            a[attr.MESSAGE_TRUNCATED] = True
        if payload.view is not None:  # a bound payload (``Payload.basis``)
            a[attr.TOKENS_CEILING] = payload.ceiling
        _request_attributes(a, payload)
        if scope is not None:
            a[attr.CONVERSATION_ID] = scope[0]
            if verdict.lossy:
                a[attr.SUMMARY_LOSSY] = verdict.lossy
        head = payload.head
        if head is not None:
            a[attr.HEAD_ROLE] = head.role
            a[attr.HEAD_HASH] = head.digest
        skipped = _skips(verdict.outcomes)
        if skipped:
            a[attr.SKIPPED] = skipped
        if payload.history_elsewhere is not None:
            a[attr.HISTORY_ELSEWHERE] = payload.history_elsewhere
        diverged = next((v for v in verdict.violations if v.stage is not None), None)
        if diverged is not None:
            a[attr.DIVERGENCE_STAGE] = diverged.stage
            a[attr.DIVERGENCE_FACT] = diverged.fact_id or ""
        if diff is not None:
            if diff.prev_hash is not None:
                a[attr.PREV_HASH] = diff.prev_hash
            a[attr.MESSAGES_ADDED] = diff.added
            dropped = sum(diff.dropped.values())
            a[attr.MESSAGES_DROPPED] = dropped
            if dropped:  # turns the previous call of the conversation sent are gone: never false
                a[attr.CONVERSATION_COMPACTED] = True
            a[attr.EVICTED] = (*diff.evicted, "fact") if verdict.fact_evictions else diff.evicted
        if ctx is not None:
            _context_attributes(a, ctx, self.digester)
        return self.ids.attributes(a, verdict.facts)

    def blocked(self, verdict: Verdict) -> None:
        """Enforce mode refused to send: one count per check that blocked it."""
        m = self.metrics
        m.add(m.blocked_at[check] for check in dict.fromkeys(v.check for v in verdict.violations))

    # -- after sending --------------------------------------------------

    def late(self, t: CallTelemetry, verdict: Verdict, outcome: Outcome, *, at_end: bool = False) -> None:
        """Record a check judged after the request left. It never blocks: the request is already
        sent; it is counted, logged and put on the span like the others. Its attributes go on the
        span when the span ends; ``at_end``: the call is ending now, so it is counted together
        with the call's duration."""
        m, provider = self.metrics, verdict.payload.provider
        cells = [m.checks_at[(outcome.check, outcome.outcome)]]
        update = t.attrs
        violations = outcome.violations
        if violations:
            cells.append(m.violations_at[(outcome.check, provider)])
            exported = self.ids.violations(list(violations))
            self._log(verdict, exported)
            failed = [o.check for o in (*verdict.outcomes, *verdict.late) if o.outcome == "fail"]
            update[attr.VIOLATIONS] = tuple(failed)
            earlier = verdict.violations[: len(verdict.violations) - len(violations)]
            if violations[0].stage is not None and not any(v.stage is not None for v in earlier):
                update[attr.DIVERGENCE_STAGE] = violations[0].stage
                update[attr.DIVERGENCE_FACT] = violations[0].fact_id or ""
            span = t.span
            if span is not None and span.is_recording():
                attr.violation_events(span, exported)
                attr.evaluation_events(span, (outcome,), exported)
        elif self.config.evaluations == "all":
            span = t.span
            if span is not None and span.is_recording():
                attr.evaluation_events(span, (outcome,), (), every=True)
        if at_end:
            t.counts_at_end.extend(cells)
        else:
            m.add(cells)

    def request(self, scope: Scope | None, provider: str, body: Any, model: str | None, sdk: str) -> None:
        """Capture a request body, in ``sdk``'s request format (capture on only)."""
        writer = self.capture
        if writer is not None:
            writer.request(scope, provider, body, model, sdk)

    def end(
        self, t: CallTelemetry, verdict: Verdict, elapsed: float, reply: Answer | None, error_type: str | None
    ) -> None:
        """The call ended: the answer on the span, the span ended (unless adopted), the
        duration and the checks judged at the end counted."""
        t.detach()
        span = t.span
        if span is not None:
            t.span = None
            if span.is_recording():
                update = t.attrs
                replied: dict[str, Any] = {}
                if reply is not None:
                    replied = _reply_attributes(reply, usage=not t.usage_elsewhere)
                    ctx = verdict.ctx
                    window = ctx.budget.breakdown.window if ctx is not None and not isinstance(ctx.budget, str) else 0
                    if window and reply.input_tokens is not None:
                        # Sentry's: the share of the window this generation used, prompt and answer.
                        used = reply.input_tokens + (reply.output_tokens or 0)
                        replied[attr.CONTEXT_UTILIZATION] = round(used / window, 4)
                    if self.config.capture_content and reply.text:
                        replied[attr.OUTPUT_MESSAGES] = attr.output_content(reply)
                if t.first_chunk is not None and verdict.payload.stream:
                    replied[attr.TIME_TO_FIRST_CHUNK] = t.first_chunk - t.began
                if t.adopted:  # on an adopted span, only what its owner did not record
                    replied = {k: v for k, v in replied.items() if ours_to_add(k, span)}
                update.update(replied)
                if error_type is not None and not t.adopted:
                    update[attr.ERROR_TYPE] = error_type
                late = [f"{o.check}: {o.reason}" for o in verdict.late if o.outcome == "skip" and o.reason]
                if late:
                    update[attr.SKIPPED] = (*_skips(verdict.outcomes), *late)
                if update:
                    attr.set_attributes(span, self.ids.attributes(update, verdict.facts))
            if not t.adopted:
                if error_type is not None:
                    span.set_status(Status(StatusCode.ERROR))
                span.end()
        m = self.metrics
        cells, t.counts_at_end = t.counts_at_end, []
        m.add(cells, ((m.duration_h, elapsed),))
        meters = self.meters
        if meters is not None and not (t.adopted or t.usage_elsewhere or t.unsent):
            # Only when ctxguard's own span records the usage: the instrumentation whose span
            # does records these too, and two would double every token on a GenAI dashboard.
            payload = verdict.payload
            meters.call(
                operation=payload.operation, provider=payload.provider, request_model=payload.model,
                response_model=reply.model if reply is not None else None, server=payload.server,
                duration=time.perf_counter() - t.began,
                input_tokens=reply.input_tokens if reply is not None else None,
                output_tokens=reply.output_tokens if reply is not None else None, error_type=error_type,
            )


def _request_attributes(a: dict[str, Any], payload: Payload) -> None:
    """What the request asked for, and of whom."""
    if payload.model:
        a[attr.REQUEST_MODEL] = payload.model
    if payload.server is not None:
        a[attr.SERVER_ADDRESS] = payload.server[0]
        if payload.server[1] is not None:
            a[attr.SERVER_PORT] = payload.server[1]
    if payload.max_output_tokens is not None:
        a[attr.REQUEST_MAX_TOKENS] = payload.max_output_tokens
    if payload.stream:  # the conventions: set if and only if the request streams
        a[attr.REQUEST_STREAM] = True
    settings = payload.settings
    if settings:
        names = attr.REQUEST_SETTINGS
        for name, value in settings.items():
            a[names[name]] = value
    if payload.reply_room is not None:
        # Thinking is drawn from max_tokens: say when it leaves the reply under a quarter.
        a[attr.BUDGET_REPLY_ROOM] = payload.reply_room
        if payload.max_output_tokens:
            a[attr.BUDGET_REPLY_ROOM_LOW] = payload.reply_room * 4 < payload.max_output_tokens


def _context_attributes(a: dict[str, Any], ctx: Context, digester: Digester) -> None:
    """The budget equation, the facts and the pinned block, as the checks read them."""
    if not isinstance(ctx.budget, str):
        ev = ctx.budget
        a[attr.BUDGET_WINDOW] = a[attr.CONTEXT_WINDOW_SIZE] = ev.breakdown.window
        if ev.breakdown.window_inferred is not None:
            a[attr.BUDGET_WINDOW_INFERRED] = ev.breakdown.window_inferred
        a[attr.BUDGET_RESERVED_OUTPUT] = ev.breakdown.reserved_output
        a[attr.BUDGET_RESERVED_REASONING] = ev.breakdown.reserved_reasoning
        a[attr.BUDGET_TOOLS] = ev.breakdown.tools
        a[attr.BUDGET_HISTORY_AVAILABLE] = ev.breakdown.history_available
        a[attr.BUDGET_HEADROOM] = ev.headroom
        a[attr.BUDGET_UTILIZATION] = round(ev.utilization, 4)
    if isinstance(ctx.facts, FactView):
        a.update(_fact_attributes(ctx.facts))
    if ctx.policy.pinned is not None:
        a[attr.PINNED_PRESENT] = ctx.pinned is not None
        if ctx.pinned is not None:
            a[attr.PINNED_TOKENS] = ctx.pinned_tokens
            a[attr.PINNED_ENTRIES] = ctx.pinned.entries
            a[attr.PINNED_HASH] = digester.text(ctx.pinned.text)


def _skips(outcomes: list[Outcome]) -> tuple[str, ...]:
    return tuple([f"{o.check}: {o.reason}" for o in outcomes if o.outcome == "skip"])


def _fact_attributes(view: FactView) -> dict[str, Any]:
    """fact_id@version lists only: never a value."""
    foreign = tuple([f"{v.fact_id}@foreign" for _, v in view.foreign])
    if view.unavailable is not None:  # the conversation's own facts are unknown: only other conversations'
        return {attr.FACTS_LEAKED: foreign, attr.FACTS_REACH: view.reach or "process"}
    state = view.state
    present = tuple(v.label for v in state.active.values() if view.sent(v))
    missing = tuple(v.label for fid, v in state.active.items() if fid not in view.too_short and not view.sent(v))
    stale = tuple(v.label for vs in state.stale.values() for v in vs if view.sent(v))
    leaked = [v.label for vs in state.forgotten.values() for v in vs if view.sent(v)]
    leaked.extend(foreign)
    short = view.too_short_labels()
    a: dict[str, Any] = {
        attr.FACTS_PRESENT: present,
        attr.FACTS_MISSING: missing,
        attr.FACTS_STALE: stale,
        attr.FACTS_LEAKED: tuple(leaked),
    }
    if short:
        a[attr.FACTS_TOO_SHORT] = short
    if view.reach is not None:
        a[attr.FACTS_REACH] = view.reach
    return a


def _reply_attributes(reply: Answer, *, usage: bool = True) -> dict[str, Any]:
    a: dict[str, Any] = {}
    if reply.model:
        a[attr.RESPONSE_MODEL] = reply.model
    if reply.id:
        a[attr.RESPONSE_ID] = reply.id
    if reply.finish_reasons:
        a[attr.FINISH_REASONS] = tuple(reply.finish_reasons)
    if usage and reply.input_tokens is not None:
        a[attr.INPUT_TOKENS] = reply.input_tokens
    if usage and reply.output_tokens is not None:
        a[attr.OUTPUT_TOKENS] = reply.output_tokens
    if usage and reply.cache_read_tokens is not None:
        a[attr.CACHE_READ_TOKENS] = reply.cache_read_tokens
    if usage and reply.cache_write_tokens is not None:
        a[attr.CACHE_WRITE_TOKENS] = reply.cache_write_tokens
    if usage and reply.reasoning_tokens is not None:
        a[attr.REASONING_TOKENS] = reply.reasoning_tokens
    return a
