"""The per-call pipeline: normalise -> digest/count -> checks -> record -> (send) -> answer.

Each stage runs inside ``guarded(where)``, or on the per-call path the same thing
spelled out (``try``/``except Exception`` -> ``report_internal_error(where, exc)``,
free when nothing fails, where a ``with`` costs three calls): a failure there is
counted and the stages that depend on it are skipped, but the application's call always goes
through with its own arguments, exactly once. Only enforce mode raises, and
only ``ContextViolation``, before the request is sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
from prometheus_client import CollectorRegistry

from . import budget as budget_mod
from . import facts as facts_mod
from ._isolation import guarded, report_internal_error
from .cache import TwoGenerationCache, text_bytes, words_bytes
from .capture import CaptureWriter, capture_body
from .checks import CHECK_NAMES, Context, Outcome, run_checks
from .checks.facts import answer_consistent
from .checks.wire import wire_intact
from .config import Config
from .conversation import CONVERSATION_BYTES, ConversationMemory, Diff, Scope, current_conversation
from .digest import Digester
from .facts.evaluate import FactView, build_view
from .facts.index import words
from .facts.matching import Chunked, normalise, searchable
from .measure import Measurer
from .memo import Memos
from .payload import Payload, Reply
from .pinned import PinnedBlock, find_block
from .policy import Policy
from .providers.base import Adapter, StreamReader
from .providers.streams import http_response_of, tap_response, wrap_manager, wrap_stream
from .summaries import LOSSY
from .telemetry import spans as attr
from .telemetry.ids import ExportedIds
from .telemetry.log import WarningLimiter, log_violations
from .telemetry.metrics import Hist, Metrics, metrics_for
from .tokens import Calibration, default_counter
from .violations import ContextViolation, Violation
from .wiredigest import WireDigests

__all__ = ["Call", "Guard"]

_DEFAULT_BUDGET = budget_mod.Budget()
NO_FACTS = "no facts recorded for this conversation"
_perf = time.perf_counter


class Guard:
    """The active instrumentation, returned by ``ctxguard.instrument()``.

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
        ledger: object | None = None,
        conversation_id: Callable[[Mapping[str, Any]], str | None] | None = None,
        clock: Callable[[], datetime] | None = None,
        sinks: facts_mod.Sinks | None = None,
    ) -> None:
        """``sinks``: private fact sinks (offline checking), instead of making ``ledger`` the process's."""
        self.config = config
        self.policy = policy if policy is not None else Policy()
        self.metrics: Metrics = metrics_for(registry, CHECK_NAMES)
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self.tracer = provider.get_tracer("ctxguard")
        counter = default_counter()
        self.calibration = Calibration(exact=counter.exact)
        budget = config.cache_bytes  # shared out as docs/operations.md, "Memory", says
        self.measurer = Measurer(Digester(config.digest_key), counter, self.calibration, max_bytes=budget // 4)
        self.wire_digests = WireDigests(self.measurer.digester, max_bytes=budget // 8)
        #: How conversation and fact ids are exported: as they are, or keyed digests (``hash_ids``).
        self.ids = ExportedIds(self.measurer.digester if config.hash_ids else None)
        self.memos = Memos(max_bytes=budget * 3 // 16)
        #: Warnings logged per conversation are rate-limited (metrics and spans count every call).
        self.warnings = WarningLimiter()
        # CTXGUARD_MAX_CONVERSATIONS raised past its share is honoured for conversations of ~25 messages.
        remembered = max(budget * 3 // 16, config.max_conversations * CONVERSATION_BYTES)
        self.memory = ConversationMemory(config.max_conversations, max_bytes=remembered)
        self.facts = sinks if sinks is not None else facts_mod.configure(ledger, clock)  # type: ignore[arg-type]
        self._norms: TwoGenerationCache[str, str] = TwoGenerationCache(20_000, budget // 8, text_bytes)
        self._words: TwoGenerationCache[str, frozenset[str]] = TwoGenerationCache(4_096, budget // 16, words_bytes)
        self._conversation_id = conversation_id
        #: Where request bodies and fact events are being captured, if anywhere (opt-in).
        self.capture: CaptureWriter | None = None

    @property
    def enforce(self) -> bool:
        return self.config.mode == "enforce"

    def _scope(self, kwargs: Mapping[str, Any]) -> Scope | None:
        scope = current_conversation()
        if scope is None and self._conversation_id is not None:
            with guarded("callback"):
                found = self._conversation_id(kwargs)
                if isinstance(found, str) and found:
                    scope = (found, None)
        return scope

    def norm(self, digest: str, text: str) -> str | Chunked:
        """A message's text normalised for fact matching, cached by its digest; a text too
        large to normalise is searched in chunks, and neither it nor its norm is kept."""
        cached = self._norms.get(digest)
        if cached is None:
            found = searchable(text)
            if isinstance(found, Chunked):
                return found
            cached = found
            self._norms.put(digest, cached)
        return cached

    def words(self, digest: str, norm: str | Chunked) -> frozenset[str]:
        """A message's words (for the cross-conversation index), cached by its digest; none
        for a text too large to normalise (it is not searched for other conversations' values)."""
        if isinstance(norm, Chunked):
            return frozenset()
        cached = self._words.get(digest)
        if cached is None:
            cached = words(norm)
            self._words.put(digest, cached)
        return cached

    def start_capture(self, writer: CaptureWriter) -> None:
        """Capture every request body (as sent) and fact event to ``writer`` until ``stop_capture``."""
        if self.capture is not None:
            raise RuntimeError(f"already capturing to {self.capture.path}")
        self.capture = writer
        self.facts.capture = writer

    def stop_capture(self) -> None:
        writer, self.capture = self.capture, None
        if self.facts.capture is writer:
            self.facts.capture = None
        if writer is not None:
            writer.close()

    def fact_view(self, scope: Scope | None, payload: Payload) -> FactView | str:
        if scope is None:
            return "no conversation id (use ctxguard.conversation())"
        if payload.history_elsewhere is not None:
            return payload.history_elsewhere
        sinks = self.facts
        if sinks.idle():
            return NO_FACTS
        checkpoints = sinks.stages.take(scope)
        if scope in sinks.lost:
            return "fact writes of this conversation were lost while the ledger was unavailable"
        if not sinks.usable():
            return "fact ledger unavailable (circuit open)"
        with guarded("ledger"):
            try:
                state = sinks.ledger.state(scope, sinks.clock())
            except Exception:
                sinks.failed()
                raise
            if not (state.active or state.forgotten or len(sinks.index)):
                return NO_FACTS
            norms = [self.norm(m.digest, m.text) for m in payload.messages]
            return build_view(
                state,
                scope,
                norms,
                payload.digests,
                checkpoints,
                self.memory.fact_locations(scope),
                sinks.index,
                lambda: [self.words(m.digest, n) for m, n in zip(payload.messages, norms, strict=True)],
            )
        return "fact ledger unavailable"

    def before(
        self, adapter: Adapter, api: str, kwargs: Mapping[str, Any], over: Any = None, *, may_block: bool = True
    ) -> Call | None:
        """Inspect a request about to be sent. Raises only ``ContextViolation`` (enforce, when it
        ``may_block``). ``over``: another library's wrapper over ctxguard's at this call site, if any."""
        started = _perf()
        scope = self._scope(kwargs)
        try:
            key = (scope, adapter.provider, api)
            memo = self.memos.get(key) if scope is not None else None
            view = adapter.normalise(api, kwargs, memo)
        except Exception as exc:
            report_internal_error("normalise", exc)
            return None
        try:
            payload = self.measurer.measure(view, memo)
            if memo is not None:
                self.memos.settle(key, memo)
        except Exception as exc:
            report_internal_error("digest", exc)
            return None
        call = Call(self, adapter, api, payload, scope, started)
        call.over = over
        if self.capture is not None:
            call.request = kwargs  # captured from the wire, or from these if the wire is not seen
        try:
            call.evaluate()
        except Exception as exc:
            report_internal_error("checks", exc)
        try:
            call.record()
        except Exception as exc:
            report_internal_error("telemetry", exc)
        if self.enforce and may_block and call.violations:
            call.block()
        call.elapsed += _perf() - started
        return call


class Call:
    """One guarded LLM call, from inspection to the end of its answer."""

    __slots__ = (
        "adapter",
        "adopted",
        "api",
        "ctx",
        "diff",
        "done",
        "elapsed",
        "fact_evictions",
        "guard",
        "heard",
        "late_attrs",
        "late_cells",
        "late_fails",
        "late_skips",
        "outcomes",
        "over",
        "payload",
        "request",
        "scope",
        "span",
        "started",
        "token",
        "usage_elsewhere",
        "violations",
        "wire_hash",
    )

    def __init__(
        self, guard: Guard, adapter: Adapter, api: str, payload: Payload, scope: Scope | None, started: float
    ) -> None:
        self.guard = guard
        self.adapter = adapter
        self.api = api
        self.payload = payload
        self.scope = scope
        self.started = started
        self.elapsed = 0.0
        self.done = False
        self.ctx: Context | None = None
        self.diff: Diff | None = None
        self.fact_evictions = 0
        self.late_fails: list[str] = []  # checks judged after sending that failed
        self.late_skips: list[str] = []  # "check: reason" of checks skipped after sending
        self.late_attrs: dict[str, Any] = {}  # set on the span when it ends (one call, not one per check)
        self.late_cells: list[int] = []  # counted with the call's duration, when it ends
        self.wire_hash: str | None = None
        self.request: Mapping[str, Any] | None = None
        self.outcomes: list[Outcome] = []
        self.violations: list[Violation] = []
        self.span: trace.Span | None = None
        self.token: object | None = None
        self.over: Any = None
        #: The provider's own answer, read off the transport's response (a delegating call).
        self.heard: Reply | None = None
        #: The span is another instrumentation's span of this call: ctxguard adds to it, never ends it.
        self.adopted = False
        #: Another span of this call records gen_ai.usage: ctxguard's own leaves it out.
        self.usage_elsewhere = False

    # -- before sending -------------------------------------------------

    def evaluate(self) -> None:
        guard, payload = self.guard, self.payload
        policy = guard.policy
        pinned: PinnedBlock | None = None
        pinned_tokens = 0
        if policy.pinned is not None and payload.unreadable is None:
            pinned = find_block(payload.messages, policy.pinned.marker)
            if pinned is not None:
                pinned_tokens = guard.measurer.tokens(pinned.text)
        system = payload.system
        budget = budget_mod.evaluate(
            policy.budget or _DEFAULT_BUDGET,
            model=payload.model,
            input_tokens=payload.tokens,
            system_tokens=(system.tokens if system is not None else 0) + pinned_tokens,
            tools_tokens=payload.tools_tokens,
            max_output_tokens=payload.max_output_tokens,
        )
        if self.scope is not None and payload.history_elsewhere is None and payload.unreadable is None:
            try:
                self.diff = guard.memory.observe(self.scope, payload, pinned=pinned is not None)
            except Exception as exc:
                report_internal_error("conversation", exc)
        diff = self.diff
        facts = guard.fact_view(self.scope, payload) if payload.unreadable is None else payload.unreadable
        if isinstance(facts, FactView) and self.scope is not None:
            with guarded("conversation"):
                present = {v.label for v in facts.state.active.values() if facts.sent(v)}
                active = {v.label for v in facts.state.active.values()}
                self.fact_evictions = guard.memory.fact_evictions(self.scope, present, active)
        self.ctx = Context(
            policy=policy,
            pinned=pinned,
            pinned_tokens=pinned_tokens,
            budget=budget,
            first_system=diff.first_system if diff is not None else None,
            in_conversation=diff is not None,
            facts=facts,
        )
        self.outcomes = run_checks(payload, self.ctx)
        self.violations = [v for o in self.outcomes for v in o.violations]

    def record(self) -> None:
        guard, payload, ctx, diff = self.guard, self.payload, self.ctx, self.diff
        m = guard.metrics
        provider = payload.provider
        cells = [m.calls_at[(provider, payload.operation)]]
        checks_at, violations_at = m.checks_at, m.violations_at
        for o in self.outcomes:
            cells.append(checks_at[(o.check, o.outcome)])
            if o.outcome == "fail":
                cells.append(violations_at[(o.check, provider)])
        if diff is not None:
            cells.extend(m.evictions_at[kind] for kind in diff.evicted)
            for role, count in diff.dropped.items():
                m.dropped_role(role, count)
        if self.fact_evictions:
            m.add_amount(m.evictions_at["fact"], self.fact_evictions)
        observed: list[tuple[Hist, float]] = [(m.tokens_h[provider], payload.tokens)]
        if ctx is not None:
            if not isinstance(ctx.budget, str):
                observed.append((m.utilization_h[provider], ctx.budget.utilization))
            if ctx.pinned is not None:
                observed.append((m.pinned_h, ctx.pinned_tokens))
        m.add(cells, observed)

        ids = guard.ids
        conversation_id = ids.id(self.scope[0]) if self.scope is not None else None
        exported = ids.violations(self.violations)
        if exported:
            log_violations(exported, provider=provider, conversation_id=conversation_id,
                           payload_hash=payload.digest, limiter=guard.warnings)

        if self.over is not None:
            theirs = trace.get_current_span()
            if guard.config.span == "auto" and _their_call_span(theirs, payload.operation, payload.model):
                # Another instrumentation wraps this call site and its span of the call is current:
                # ctxguard's attributes and events go on it, so a trace shows one span per call.
                self.span, self.adopted = theirs, True
                attr.set_attributes(theirs, {k: v for k, v in self._attributes().items() if _ours_to_add(k, theirs)})
                attr.violation_events(theirs, exported)
                return
            self.usage_elsewhere = _records_usage(self.over) or _inference_span(theirs, payload.model)
        # Attributes go on right after creation, through the non-validating fast path;
        # handing them to start_span would have the SDK re-validate each one.
        span = guard.tracer.start_span(f"{payload.operation} {payload.model or 'unknown'}", kind=SpanKind.CLIENT)
        self.span = span
        self.token = otel_context.attach(trace.set_span_in_context(span))
        if span.is_recording():
            attr.set_attributes(span, self._attributes())
            attr.violation_events(span, exported)
            if guard.config.capture_content:
                span.set_attribute(
                    attr.INPUT_MESSAGES,
                    attr.content_json([{"role": msg.role, "content": msg.text} for msg in payload.messages]),
                )

    def _attributes(self) -> dict[str, Any]:
        payload, ctx, diff = self.payload, self.ctx, self.diff
        messages = payload.messages
        shown = messages[: attr.MESSAGE_ATTR_CAP]
        a: dict[str, Any] = {
            attr.OPERATION: payload.operation,
            attr.PROVIDER: payload.provider,
            attr.MODE: self.guard.config.mode,
            attr.PAYLOAD_HASH: payload.digest,
            attr.PAYLOAD_MESSAGES: len(messages),
            attr.PAYLOAD_TOKENS: payload.tokens,
            attr.TOKENS_SOURCE: payload.tokens_source,
            attr.MESSAGE_ROLES: tuple([msg.role for msg in shown]),
            attr.MESSAGE_HASHES: tuple(payload.digests[: attr.MESSAGE_ATTR_CAP]),
            attr.VIOLATIONS: tuple([o.check for o in self.outcomes if o.outcome == "fail"]),
        }
        if len(messages) > attr.MESSAGE_ATTR_CAP:
            a[attr.MESSAGE_TRUNCATED] = True
        if payload.model:
            a[attr.REQUEST_MODEL] = payload.model
        if payload.max_output_tokens is not None:
            a[attr.REQUEST_MAX_TOKENS] = payload.max_output_tokens
        if self.scope is not None:
            a[attr.CONVERSATION_ID] = self.scope[0]
            lossy = LOSSY.take(self.scope)
            if lossy:
                a[attr.SUMMARY_LOSSY] = lossy
        head = payload.head
        if head is not None:
            a[attr.HEAD_ROLE] = head.role
            a[attr.HEAD_HASH] = head.digest
        skipped = [f"{o.check}: {o.reason}" for o in self.outcomes if o.outcome == "skip"]
        if skipped:
            a[attr.SKIPPED] = tuple(skipped)
        if payload.history_elsewhere is not None:
            a[attr.HISTORY_ELSEWHERE] = payload.history_elsewhere
        diverged = next((v for v in self.violations if v.stage is not None), None)
        if diverged is not None:
            a[attr.DIVERGENCE_STAGE] = diverged.stage
            a[attr.DIVERGENCE_FACT] = diverged.fact_id or ""
        if diff is not None:
            if diff.prev_hash is not None:
                a[attr.PREV_HASH] = diff.prev_hash
            a[attr.MESSAGES_ADDED] = diff.added
            a[attr.MESSAGES_DROPPED] = sum(diff.dropped.values())
            a[attr.EVICTED] = (*diff.evicted, "fact") if self.fact_evictions else diff.evicted
        if ctx is not None:
            if not isinstance(ctx.budget, str):
                ev = ctx.budget
                a[attr.BUDGET_WINDOW] = ev.breakdown.window
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
                    a[attr.PINNED_HASH] = self.guard.measurer.digester.text(ctx.pinned.text)
        if payload.reply_room is not None:
            # Thinking is drawn from max_tokens: say when it leaves the reply under a quarter.
            a[attr.BUDGET_REPLY_ROOM] = payload.reply_room
            if payload.max_output_tokens:
                a[attr.BUDGET_REPLY_ROOM_LOW] = payload.reply_room * 4 < payload.max_output_tokens
        return self.guard.ids.attributes(a, self._view())

    def _view(self) -> FactView | None:
        facts = self.ctx.facts if self.ctx is not None else None
        return facts if isinstance(facts, FactView) else None

    def block(self) -> None:
        """Enforce mode: count, close the span, and refuse to send."""
        with guarded("telemetry"):
            m = self.guard.metrics
            m.add(m.blocked_at[check] for check in dict.fromkeys(v.check for v in self.violations))
        self._conclude(None, _perf(), error_type=ContextViolation.__name__, unanswered="not sent (enforce mode)")
        raise ContextViolation(self.violations)

    # -- after sending --------------------------------------------------

    def _detach(self) -> None:
        if self.token is not None:
            token, self.token = self.token, None
            otel_context.detach(token)  # type: ignore[arg-type]

    def _end(self, *, reply: Reply | None = None, error_type: str | None = None) -> None:
        self._detach()
        span = self.span
        if span is not None:
            self.span = None
            if span.is_recording():
                update = self.late_attrs
                if reply is not None:  # on an adopted span, only what its owner did not record
                    replied = _reply_attributes(reply, usage=not self.usage_elsewhere)
                    if self.adopted:
                        replied = {k: v for k, v in replied.items() if _ours_to_add(k, span)}
                    update.update(replied)
                    if self.guard.config.capture_content and reply.text:
                        update[attr.OUTPUT_MESSAGES] = attr.content_json([{"role": "assistant", "content": reply.text}])
                if error_type is not None and not self.adopted:
                    update[attr.ERROR_TYPE] = error_type
                if self.late_skips:
                    early = [f"{o.check}: {o.reason}" for o in self.outcomes if o.outcome == "skip"]
                    update[attr.SKIPPED] = (*early, *self.late_skips)
                if update:
                    attr.set_attributes(span, self.guard.ids.attributes(update, self._view()))
            if not self.adopted:
                if error_type is not None:
                    span.set_status(Status(StatusCode.ERROR))
                span.end()
        m = self.guard.metrics
        cells, self.late_cells = self.late_cells, []
        m.add(cells, ((m.duration_h, self.elapsed),))

    def finished(self, result: Any, *, asynchronous: bool = False) -> Any:
        """The SDK returned ``result`` (to an ``async`` call site if ``asynchronous``); returns it
        (the same object, or a transparent stream proxy)."""
        started = _perf()
        try:
            self._detach()
        except Exception as exc:
            report_internal_error("telemetry", exc)
        final = getattr(self.adapter, "final_reply", None)
        if self.api.endswith(".stream") and final is not None:
            with guarded("stream"):
                proxy = wrap_manager(result, self, final)
                self.elapsed += _perf() - started
                return proxy
        adapter, api = self.adapter, self.api
        try:
            http = http_response_of(result)
            if http is not None:
                # A stream or a raw response: its body is read as it passes, the object stays the SDK's.
                self.elapsed += _perf() - started
                tap_response(http, self, adapter.stream_reader(api), lambda body: adapter.read_response(api, body))
                return result
        except Exception as exc:
            report_internal_error("response", exc)
            self.answer(None, started)
            return result
        if self.payload.stream and _is_stream(result):
            with guarded("stream"):
                reader = adapter.stream_reader(api)
                proxy = wrap_stream(result, self, reader, asynchronous=asynchronous)
                self.elapsed += _perf() - started
                return proxy
        try:
            reply = adapter.read_response(api, result)
        except Exception as exc:
            report_internal_error("response", exc)
            reply = None
        self.answer(reply, started)
        return result

    def refused(self, status: int) -> None:
        """The server answered with an HTTP error (a call guarded from the wire, which sees the
        status, not the exception the SDK makes of it)."""
        self._conclude(None, _perf(), error_type=str(status), unanswered="the call failed")

    def failed(self, exc: BaseException, reply: Reply | None = None) -> None:
        """The SDK raised (after answering ``reply`` so far, if a stream); record it. The caller
        re-raises ``exc`` unchanged."""
        self._conclude(reply, _perf(), error_type=type(exc).__qualname__, unanswered="the call failed")

    def answer(self, reply: Reply | None, started: float | None = None) -> None:
        """The whole answer is known (after the response, or at the end of a stream)."""
        self._conclude(reply, _perf() if started is None else started)

    def settle(self, reply: Reply | None, exc: BaseException | None, *, early: bool, streamed: bool) -> None:
        """The answer's body ended (see ``providers.streams.tap_response``): in a transport error,
        before its end, or complete."""
        if exc is not None:
            self.failed(exc, reply)
        elif early:
            self.ended_early(reply, streamed=streamed)
        else:
            self.answer(reply)

    def from_wire(self, body: bytes, beneath: trace.Span) -> None:
        """This call is guarded from the wire (``providers._unguarded``): ``body`` is what it judged,
        so it is what was sent; ``beneath`` was current when it started (another GenAI span of the
        same call, such as the SDK's own, records the usage)."""
        self.late_attrs[attr.GUARDED_AT] = "wire"
        self.usage_elsewhere = _inference_span(beneath, self.payload.model)
        self.wire(body)

    def answered(self, response: Any) -> None:
        """A call guarded from the wire: the server's ``response`` is its answer (an HTTP error, or a
        body read as it passes, as a Stainless result's is)."""
        self._detach()
        if not 200 <= response.status_code < 300:
            self.refused(response.status_code)
            return
        adapter, api = self.adapter, self.api
        tap_response(response, self, adapter.stream_reader(api), lambda body: adapter.read_response(api, body))

    def overheard(self, response: Any) -> None:
        """The transport got ``response`` for this call. A delegating call (LiteLLM) reads the
        provider's own answer off it, for the span; the call still ends with the answer returned."""
        readers = getattr(self.adapter, "wire_readers", None)
        if readers is None or self.done or not 200 <= response.status_code < 300:
            return
        found = readers(self.payload.provider)
        if found is not None:
            read, reader = found
            tap_response(response, self, reader, read, settle=self._heard)

    def _heard(self, reply: Reply | None, exc: BaseException | None, *, early: bool, streamed: bool) -> None:
        if reply is not None:
            self.heard = reply

    def ended_early(self, reply: Reply | None, *, streamed: bool) -> None:
        """The app closed or dropped the answer before its end: a stream with what it said so
        far (``ctxguard.stream.abandoned``), a response body unread. An answer that reported an
        error ended there (the SDK raised it to the app, which then closed the stream)."""
        if reply is not None and reply.error is not None:
            self._conclude(reply, _perf(), unanswered="the call failed")
            return
        if streamed:
            self.late_attrs[attr.STREAM_ABANDONED] = True
        self._conclude(reply, _perf(), unanswered="the stream was abandoned" if streamed else "the answer was not read")

    def _conclude(
        self, reply: Reply | None, started: float, *, error_type: str | None = None, unanswered: str = "no answer"
    ) -> None:
        """End the call, once: every check not judged yet gets its outcome (``unanswered`` says
        why the answer could not be judged), then the span ends."""
        if self.done:
            return
        self.done = True
        if self.heard is not None:
            reply = self.heard  # what the provider said, not its translation
        if error_type is None and reply is not None and reply.error is not None:
            error_type = reply.error
        if reply is not None and reply.input_tokens:
            try:
                self.guard.calibration.observe(self.payload.model, self.payload.raw_tokens, reply.input_tokens)
            except Exception as exc:
                report_internal_error("tokens", exc)
        try:
            self._judge_answer(reply, unanswered)
            if self.wire_hash is None and self.ctx is not None:
                # The transport was not observed (not sent, a helper that sends later, another
                # HTTP stack): counted as a skip, so every call still yields one outcome per check.
                why = unanswered if error_type is not None else "the body sent was not observed"
                self._late("wire_intact", None, at_end=True, reason=why)
        except Exception as exc:
            report_internal_error("checks", exc)
        if self.request is not None and self.wire_hash is None and error_type is None:
            with guarded("capture"):
                self._capture(capture_body(self.request))
        try:
            self.elapsed += _perf() - started
            self._end(reply=reply, error_type=error_type)
        except Exception as exc:
            report_internal_error("telemetry", exc)

    def _judge_answer(self, reply: Reply | None, unanswered: str) -> None:
        """``answer_consistent``: a model-level miss, judged once the answer is known."""
        ctx = self.ctx
        if ctx is None:
            return
        if isinstance(ctx.facts, FactView) and reply is not None and reply.text:
            self._late("answer_consistent", answer_consistent(ctx.facts, normalise(reply.text)), at_end=True)
        elif not isinstance(ctx.facts, FactView):
            self._late("answer_consistent", None, at_end=True)  # its reason is the fact checks' (on the span)
        else:
            self._late("answer_consistent", None, at_end=True, reason=unanswered if reply is None else "no answer text")

    def wire(self, body: object) -> None:
        """The transport is sending ``body`` for this call: judge ``wire_intact`` (once)."""
        if self.wire_hash is not None or self.ctx is None:
            return
        if not isinstance(body, (bytes, bytearray)) or not body:
            return
        started = _perf()
        sent = bytes(body)
        self.wire_hash = self.guard.wire_digests.digest(self.scope, sent)
        current = trace.get_current_span()
        if current is not self.span and (_inference_span(current, None) or _claimed_beneath(current, self.span)):
            # Something beneath ctxguard (Logfire, the anthropic SDK's own tracing) has a GenAI
            # span of this call open: that one records usage.
            self.usage_elsewhere = True
        if self.request is not None:
            with guarded("capture"):
                self._capture(json.loads(sent))
        # Counted with the call's end when the end follows the response at once; a stream's
        # end may never come (an app can abandon it), so its verdict is counted now.
        streamed = self.payload.stream or self.api.endswith(".stream")
        verdict = wire_intact(self.payload, self.ctx, sent)
        self._late("wire_intact", verdict, {attr.WIRE_HASH: self.wire_hash}, at_end=not streamed)
        self.elapsed += _perf() - started  # ctxguard's own time includes judging the wire

    def _capture(self, body: Any) -> None:
        writer = self.guard.capture
        self.request = None
        if writer is not None:
            writer.request(self.scope, self.payload.provider, body, self.payload.model)

    def _late(
        self,
        check: str,
        violations: list[Violation] | None,
        extra: dict[str, Any] | None = None,
        *,
        at_end: bool = False,
        reason: str | None = None,
    ) -> None:
        """Record a check judged after the request left (``None``: skipped). It never blocks:
        the request is already sent; it is counted, logged and put on the span like the others.
        Its attributes go on the span when the span ends; ``at_end``: the call is ending now,
        so it is counted together with the call's duration."""
        m, provider = self.guard.metrics, self.payload.provider
        outcome = "skip" if violations is None else "fail" if violations else "pass"
        cells = [m.checks_at[(check, outcome)]]
        if reason is not None and outcome == "skip":
            self.late_skips.append(f"{check}: {reason}")
        span = self.span
        recording = span is not None and span.is_recording()
        update = self.late_attrs
        if extra:
            update.update(extra)
        if violations:
            cells.append(m.violations_at[(check, provider)])
            ids = self.guard.ids
            conversation_id = ids.id(self.scope[0]) if self.scope is not None else None
            exported = ids.violations(violations)
            log_violations(exported, provider=provider, conversation_id=conversation_id,
                           payload_hash=self.payload.digest, limiter=self.guard.warnings)
            first_divergence = next((v for v in self.violations if v.stage is not None), None)
            self.violations.extend(violations)
            self.late_fails.append(check)
            update[attr.VIOLATIONS] = (*[o.check for o in self.outcomes if o.outcome == "fail"], *self.late_fails)
            if first_divergence is None and violations[0].stage is not None:
                update[attr.DIVERGENCE_STAGE] = violations[0].stage
                update[attr.DIVERGENCE_FACT] = violations[0].fact_id or ""
            if recording:
                attr.violation_events(span, exported)  # type: ignore[arg-type]
        if at_end:
            self.late_cells.extend(cells)
        else:
            m.add(cells)

    def stream_chunk(self, reader: StreamReader, chunk: Any) -> None:
        started = _perf()
        with guarded("stream"):
            reader.feed(chunk)
        self.elapsed += _perf() - started


def _is_stream(result: Any) -> bool:
    cls = type(result)
    return hasattr(cls, "__next__") or hasattr(cls, "__anext__")


def _fact_attributes(view: FactView) -> dict[str, Any]:
    """fact_id@version lists only: never a value."""
    state = view.state
    present = tuple(v.label for v in state.active.values() if view.sent(v))
    missing = tuple(v.label for fid, v in state.active.items() if fid not in view.too_short and not view.sent(v))
    stale = tuple(v.label for vs in state.stale.values() for v in vs if view.sent(v))
    leaked = [v.label for vs in state.forgotten.values() for v in vs if view.sent(v)]
    leaked.extend(f"{v.fact_id}@foreign" for _, v in view.foreign)
    short = view.too_short_labels()
    return {
        attr.FACTS_PRESENT: present,
        attr.FACTS_MISSING: missing,
        attr.FACTS_STALE: stale,
        attr.FACTS_LEAKED: tuple(leaked),
        **({attr.FACTS_TOO_SHORT: short} if short else {}),
    }


def _inference_span(span: trace.Span, model: str | None) -> bool:
    """Whether ``span`` is another instrumentation's span of an inference call, still open: its
    start attributes name a GenAI inference operation (and the model, if they name one, is this
    call's). An enclosing framework or agent span names another operation, or none."""
    if not span.is_recording() or getattr(getattr(span, "instrumentation_scope", None), "name", None) == "ctxguard":
        return False
    attributes = getattr(span, "attributes", None) or {}
    if attributes.get(attr.OPERATION) not in _INFERENCE:
        return False
    theirs = attributes.get(attr.REQUEST_MODEL)
    return theirs is None or model is None or theirs == model


#: GenAI semantic-convention operation names of one model call.
_INFERENCE = frozenset({"chat", "text_completion", "generate_content"})
#: Instrumentations known to record ``gen_ai.usage.*`` on a span of their own, by the module of
#: their wrapper: when one wraps a call site above ctxguard without making its span current
#: (OpenLLMetry's anthropic and Responses wrappers), ctxguard's span leaves usage out.
_USAGE_RECORDERS = ("opentelemetry.", "openlit.")


def _their_call_span(span: trace.Span, operation: str, model: str | None) -> bool:
    """Whether ``span``, current under another library's wrapper of this call site, is that
    library's span of this call: a GenAI inference span (``_inference_span``); or, for those that
    name the operation their own way or only once the answer is in, a recording span of another
    scope that is OpenInference's LLM span of this model, or a CLIENT span named as the GenAI
    conventions name one (``chat gpt-4o``: OpenLIT's, whose attributes come with the answer)."""
    if _inference_span(span, model):
        return True
    if not span.is_recording() or getattr(getattr(span, "instrumentation_scope", None), "name", None) == "ctxguard":
        return False
    attributes = getattr(span, "attributes", None) or {}
    if attributes.get("openinference.span.kind") == "LLM":
        theirs = attributes.get("llm.model_name")
        return theirs is None or model is None or theirs == model
    return getattr(span, "kind", None) is SpanKind.CLIENT and getattr(span, "name", None) == f"{operation} {model}"


#: The OpenTelemetry context key an instrumentation sets to suppress the ones beneath it (the API's
#: own name for it, private but the one every instrumentation checks).
_SUPPRESSED = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", None)


def _claimed_beneath(current: trace.Span, ours: trace.Span | None) -> bool:
    """Whether an instrumentation between the call site and the transport took this call over:
    it suppressed the ones beneath it, and the current span is a non-recording stand-in carrying
    the context of a span ctxguard did not start (Logfire gives a suppressed span the context of
    its own request span, which records the usage)."""
    if current.is_recording() or _SUPPRESSED is None or not otel_context.get_value(_SUPPRESSED):
        return False
    theirs = current.get_span_context()
    return theirs.is_valid and (ours is None or theirs.span_id != ours.get_span_context().span_id)


def _records_usage(over: Any) -> bool:
    wrapper = getattr(over, "_self_wrapper", None)
    return str(getattr(wrapper, "__module__", "")).startswith(_USAGE_RECORDERS)


def _ours_to_add(key: str, span: trace.Span) -> bool:
    """What ctxguard adds to an adopted span: its own attributes, and a GenAI one the owner lacks
    (the conversation id, say); never one the owner set."""
    if key.startswith("ctxguard."):
        return True
    return key not in (getattr(span, "attributes", None) or {})


def _reply_attributes(reply: Reply, *, usage: bool = True) -> dict[str, Any]:
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
    return a


