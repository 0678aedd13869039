"""Inspection: a request in, a ``Verdict`` out. Nothing here records or sends.

``Inspector.inspect`` runs the flow's first half (normalise -> measure -> derive the
context -> the before-send checks) and ``wire`` / ``answer`` judge the checks of the
later phases. The live guard and ``ctxguard check`` (offline) use it identically; what
it keeps between calls is its state (the conversation memory, the fact sinks, caches
of normalised texts), never telemetry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import budget as budget_mod
from . import facts as facts_mod
from ._isolation import guarded, report_internal_error
from .budget import BudgetEval
from .cache import TwoGenerationCache
from .checks import ANSWER_CHECKS, NEEDS_EXACT, WIRE_CHECKS, Context, Outcome, Skip, check_caches, outcome, run_checks
from .conversation import ConversationMemory, Diff, Scope
from .facts.evaluate import NO_TERMS, FactText, FactView, build_view, fact_text_bytes
from .facts.index import terms
from .facts.ledger import FactState
from .facts.matching import Chunked, searchable
from .facts.redis import LedgerSlow
from .measure import Measurer, shown
from .memo import Memos
from .payload import Answer, Payload
from .pinned import PinnedBlock, block_cache, find_block
from .policy import Policy
from .providers.base import Provider
from .summaries import LossyNotes
from .tokens import BOUND
from .violations import Violation

__all__ = ["NO_FACTS", "Inspector", "Verdict"]

_DEFAULT_BUDGET = budget_mod.Budget()

NO_FACTS = "no facts recorded for this conversation"
#: A conversation's facts while its ledger cannot be read: only other conversations' values are judged.
_UNKNOWN = FactState()


@dataclass(slots=True)
class Verdict:
    """What inspection found in one call: its payload, the context the checks read, and
    one outcome per check judged so far (``late``: judged after sending)."""

    payload: Payload
    scope: Scope | None
    ctx: Context | None = None
    diff: Diff | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    #: Facts of the conversation that were sent before and are missing now.
    fact_evictions: int = 0
    late: list[Outcome] = field(default_factory=list)
    #: Fact ids the summary last supplied to ``ContextBuilder`` in this conversation lost.
    lossy: tuple[str, ...] = ()

    @property
    def facts(self) -> FactView | None:
        facts = self.ctx.facts if self.ctx is not None else None
        return facts if isinstance(facts, FactView) else None

    def add_late(self, check: str, result: list[Violation] | Skip | None) -> Outcome:
        """Add the outcome of a check judged after sending (``None``: skipped, its reason given elsewhere)."""
        assert self.ctx is not None, "judged after the before-send checks, which set the context"
        judged = outcome(check, result, self.ctx.caches)
        self.late.append(judged)
        if judged.outcome == "fail":
            self.violations.extend(judged.violations)
        return judged


class Inspector:
    """The state inspection keeps between calls, and the three phases' judgements."""

    def __init__(
        self,
        measurer: Measurer,
        memory: ConversationMemory,
        memos: Memos,
        facts: facts_mod.Sinks,
        cache_bytes: int,
        server_windows: Mapping[str, int] | None = None,
    ) -> None:
        """``server_windows``: ``provider`` label -> the context window its server holds a request to
        when the request sets none (``Config.server_windows``: Ollama's default ``num_ctx``)."""
        self.measurer = measurer
        self.server_windows: Mapping[str, int] = server_windows or {}
        self.memory = memory
        #: What a summary lost, per conversation, until its next call takes it (``ContextBuilder``).
        self.lossy = LossyNotes(memory.max_conversations)
        self.memos = memos
        self.facts = facts
        self._fact_texts: TwoGenerationCache[str, FactText] = TwoGenerationCache(
            20_000, cache_bytes * 3 // 16, fact_text_bytes
        )
        #: Pure readings kept between calls, of fixed size (docs/operations.md, "Memory"): pinned
        #: blocks parsed, and what the checks keep (wire needles, tool runs).
        self._blocks = block_cache()
        self.check_caches = check_caches(cache_bytes // 32)  # each wire cache: 1/32 of the budget

    # -- before sending -------------------------------------------------

    def measure(
        self, provider: Provider, api: str, kwargs: Mapping[str, Any], scope: Scope | None, route: str | None = None
    ) -> Payload | None:
        """Normalise and measure a request; None (counted) if either failed. ``route``: the label of
        the provider the call reaches, when known (``Adapter.for_route``)."""
        try:
            key = (scope, provider.label, api)
            memo = self.memos.get(key) if scope is not None else None
            adapter = provider.adapter if route is None else provider.adapter.for_route(route)
            view = adapter.normalise(api, kwargs, memo)
            if view.window is None:
                view.window = self.server_windows.get(view.provider)
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
        return payload

    def inspect(self, payload: Payload, scope: Scope | None, policy: Policy) -> Verdict:
        """The before-send checks' verdict on ``payload`` under ``policy`` (the conversation memory
        learns it).

        >>> verdict = inspector.inspect(payload, ("order-41", None), Policy())  # doctest: +SKIP
        >>> [o.check for o in verdict.outcomes if o.outcome == "fail"]          # doctest: +SKIP
        ['system_at_head']
        """
        verdict = Verdict(payload, scope)
        self.evaluate(verdict, policy)
        return verdict

    def evaluate(self, verdict: Verdict, policy: Policy) -> None:
        """Fill ``verdict`` (``inspect``, for a verdict made already: filled as far as it got if this raises)."""
        pinned, pinned_tokens, budget = self._counts(verdict, policy)
        payload, scope = verdict.payload, verdict.scope
        if scope is not None:
            verdict.lossy = self.lossy.take(scope)
        if scope is not None and payload.history_elsewhere is None and payload.unreadable is None:
            try:
                verdict.diff = self.memory.observe(scope, payload, pinned=pinned is not None)
            except Exception as exc:
                report_internal_error("conversation", exc)
        diff = verdict.diff
        facts = self.fact_view(scope, payload) if payload.unreadable is None else payload.unreadable
        if isinstance(facts, FactView) and facts.unavailable is None and scope is not None:
            with guarded("conversation"):
                versions = facts.state.active.values()
                present = {v.label for v in versions if facts.sent(v)}
                active = {v.label for v in versions}
                verdict.fact_evictions = self.memory.fact_evictions(scope, present, active)
        verdict.ctx = Context(
            policy=policy,
            pinned=pinned,
            pinned_tokens=pinned_tokens,
            budget=budget,
            first_system=diff.first_system if diff is not None else None,
            in_conversation=diff is not None,
            facts=facts,
            caches=self.check_caches,
        )
        verdict.outcomes = run_checks(payload, verdict.ctx)
        verdict.violations = [v for o in verdict.outcomes for v in o.violations]

    def _counts(self, verdict: Verdict, policy: Policy) -> tuple[PinnedBlock | None, int, BudgetEval | str]:
        """The pinned block, its tokens and the budget of ``verdict.payload``. A bound payload whose
        bounds decide every verdict that reads a count shows its bounds scaled by the model's
        learnt tokens a byte; one they do not decide is measured again exactly (it becomes
        ``verdict.payload``), so that no verdict depends on whether the counts were exact."""
        payload = verdict.payload
        pinned = self._pinned(payload, policy)
        pinned_tokens = self.measurer.tokens(pinned.text) if pinned is not None else 0
        if payload.basis != BOUND.name:
            return pinned, pinned_tokens, self._budget(payload, policy, pinned_tokens)
        scale = payload.scale  # the pinned block shown at it, but never above its bound (an exact count's most)
        pinned_shown = round(pinned_tokens * scale) if scale < 1.0 else pinned_tokens
        budget = self._budget(payload, policy, pinned_shown)
        if not _undecided(payload, policy, pinned_tokens, budget):
            return pinned, pinned_shown, budget
        payload = verdict.payload = self.measurer.exact(payload)
        pinned = self._pinned(payload, policy)
        pinned_tokens = self.measurer.tokens(pinned.text) if pinned is not None else 0
        return pinned, pinned_tokens, self._budget(payload, policy, pinned_tokens)

    @staticmethod
    def _budget(payload: Payload, policy: Policy, pinned_tokens: int) -> BudgetEval | str:
        system, scale = payload.system, payload.scale
        system_tokens, tools_tokens = (system.tokens if system is not None else 0), payload.tools_tokens
        if scale != 1.0:  # a bound payload: its texts shown at its scale, its fixed tokens as they are
            if system is not None:
                system_tokens = shown(system_tokens, system.fixed, scale)
            view = payload.view
            tools_tokens = shown(tools_tokens, view.prompt_overhead if view is not None else 0, scale)
        return budget_mod.evaluate(
            policy.budget or _DEFAULT_BUDGET,
            model=payload.model,
            input_tokens=payload.tokens,
            system_tokens=system_tokens + pinned_tokens,
            tools_tokens=tools_tokens,
            max_output_tokens=payload.max_output_tokens,
            request_window=payload.window,
        )

    def _pinned(self, payload: Payload, policy: Policy) -> PinnedBlock | None:
        if policy.pinned is None or payload.unreadable is not None:
            return None
        return find_block(payload.messages, policy.pinned.marker, self._blocks)

    def fact_text(self, digest: str, text: str) -> FactText:
        """What the fact checks read of a message, cached by its digest; a text too large to
        normalise is searched in chunks, has no terms, and is not kept."""
        cached = self._fact_texts.get(digest)
        if cached is None:
            norm = searchable(text)
            if isinstance(norm, Chunked):
                return FactText(norm, NO_TERMS)
            cached = FactText(norm, terms(norm, text))
            self._fact_texts.put(digest, cached)
        return cached

    def fact_view(self, scope: Scope | None, payload: Payload) -> FactView | str:
        """What the fact checks read: the conversation's facts against this payload, or why not."""
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
        shared = sinks.shared
        if shared is not None:
            shared.start()  # after a fork, the child's own reader (no I/O here: the thread does it)
        fleet = shared.index if shared is not None and len(shared.index) else None
        unavailable: str | None = None
        state = _UNKNOWN
        if not sinks.usable():
            unavailable = "fact ledger unavailable (circuit open)"
        else:
            try:
                state = sinks.ledger.state(scope, sinks.clock())
            except LedgerSlow as exc:
                # Slow, not down, and not ctxguard's failure: this call goes on without its facts (its
                # fact checks skip, saying so); no breaker, so writes go on. A Redis that stays hung
                # fails the writes and the shared values' reader too, and those are counted.
                unavailable = f"fact ledger unavailable: {exc}"
            except Exception as exc:
                sinks.failed()
                report_internal_error("ledger", exc)
                unavailable = "fact ledger unavailable"
        if unavailable is not None and not (len(sinks.index) or fleet is not None):
            return unavailable
        if not (state.active or state.forgotten or len(sinks.index) or fleet is not None):
            return NO_FACTS
        with guarded("ledger"):
            texts = [self.fact_text(m.digest, m.text) for m in payload.messages]
            return build_view(
                state,
                scope,
                [t.norm for t in texts],
                payload.digests,
                checkpoints,
                self.memory.fact_locations(scope),
                sinks.index,
                [t.terms for t in texts],
                fleet,
                sinks.reach(),
                unavailable,
            )
        return "fact ledger unavailable"

    # -- on the wire, on the answer --------------------------------------

    @staticmethod
    def wire(verdict: Verdict, body: bytes) -> list[Outcome]:
        """The wire checks on the body the transport sent (none if nothing was judged before sending)."""
        ctx = verdict.ctx
        if ctx is None:
            return []
        judged = []
        for name, judge in WIRE_CHECKS.items():  # loops, not comprehensions: one frame less a call
            judged.append(verdict.add_late(name, judge(verdict.payload, ctx, body)))
        return judged

    @staticmethod
    def wire_not_observed(verdict: Verdict, why: str) -> list[Outcome]:
        """The wire checks skipped: the body sent was not seen (``why``)."""
        if verdict.ctx is None:
            return []
        return [verdict.add_late(name, Skip(why)) for name in WIRE_CHECKS]

    def answer(self, verdict: Verdict, reply: Answer | None, unanswered: str) -> list[Outcome]:
        """The answer checks' outcomes, once the answer is known (``unanswered``: why there is none, if
        so). A check the payload's byte bounds cannot decide (``NEEDS_EXACT``) is judged again on the
        payload counted exactly, loading the exact counter if it is not yet. Then the input tokens the
        answer reports teach the calibration, unless ``provider_kept_all`` found them the count of a
        cut prompt: a server that cuts prompts would teach it that the model's text costs less than
        it does, hiding the next over-budget request (docs/budget.md, "Kept whole"). One method, one
        loop: 660 instructions a call less than the checks judged in a method of their own and their
        outcomes looked through again (bench/instructions.py's guarded-own child at 20 messages)."""
        payload = verdict.payload
        reported = reply.input_tokens if reply is not None and payload.unreadable is None else None
        judged = []
        ctx = verdict.ctx
        if ctx is not None:
            counted = payload
            for name, judge in ANSWER_CHECKS.items():
                result = judge(counted, ctx, reply, unanswered)
                if result is NEEDS_EXACT:
                    try:
                        counted = self.measurer.exact(counted)
                    except Exception as exc:  # judged on the bounds again: a skip, "not counted exactly"
                        report_internal_error("tokens", exc)
                    result = judge(counted, ctx, reply, unanswered)
                judged_one = verdict.add_late(name, result)
                if name == "provider_kept_all" and judged_one.outcome == "fail":
                    reported = None
                judged.append(judged_one)
        if reported:
            try:
                self.measurer.observe(payload, reported)
            except Exception as exc:
                report_internal_error("tokens", exc)
        return judged


def _undecided(payload: Payload, policy: Policy, pinned_bound: int, shown: BudgetEval | str) -> bool:
    """Whether an exact count could fail a check that the bounds pass (``shown``: the bound
    payload's budget): the input's ceiling over the window with the reservations, or (history
    having no other bound) over ``history_max``; the pinned block's bound over its cap. What a
    bound payload shows is at most its ceiling, so it passes what the bounds prove."""
    if policy.pinned is not None and pinned_bound > policy.pinned.max_tokens:
        return True
    if isinstance(shown, str):
        return False  # no window: nothing reads a count
    ceiling = payload.ceiling
    if shown.breakdown.window - ceiling - shown.reserved < 0:
        return True
    retrieved = shown.breakdown.retrieved
    return shown.history_max is not None and max(0, ceiling - retrieved) > shown.history_max

