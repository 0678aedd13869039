"""Business facts: the active version is sent, stale, deleted and foreign values are not."""

from __future__ import annotations

from ..facts.evaluate import FactView
from ..facts.ledger import Version
from ..facts.matching import LARGE_TEXT, MIN_MATCH_CHARS
from ..facts.stages import Checkpoint
from ..payload import Answer, Payload
from ..violations import Violation
from .base import UNLISTED, Context, Skip

_VERB = {"commit": "committed", "load": "loaded", "selection": "selected", "payload": "sent", "answer": "answered"}


def _clear(fact_id: str, stage: str, expected: Version | None, observed: Version | None) -> str:
    want = f"expected {expected.value!r} (v{expected.version})" if expected else "expected no value"
    got = f"{observed.value!r} (v{observed.version})" if observed else "nothing"
    return f"{fact_id} diverged at {stage}: {want}, {_VERB.get(stage, stage)} {got}"


def _view(ctx: Context) -> FactView | Skip:
    """The view, for the checks of the conversation's own facts: unknown while its ledger cannot be read."""
    facts = ctx.facts
    if isinstance(facts, str):
        return ctx.caches.skips[facts]
    return facts if facts.unavailable is None else ctx.caches.skips[facts.unavailable]


def fact_present(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    view = _view(ctx)
    if isinstance(view, Skip):
        return view
    if not ctx.policy.require_facts:
        return Skip("disabled by policy (require_facts=False)")
    required = {fid: v for fid, v in view.state.active.items() if v.required and fid not in view.too_short}
    if not required:
        if view.too_short:
            return Skip(f"values too short to match reliably: {', '.join(sorted(view.too_short))}")
        return Skip("no active required facts")
    violations = []
    for fact_id, active in required.items():
        if not view.sent(active):
            stage, observed = view.divergence(fact_id, active)
            violations.append(
                Violation("fact_present", f"{active.label} missing from the payload", fact_id, stage,
                          clear=_clear(fact_id, stage, active, observed))
            )
    return violations


def fact_current(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    view = _view(ctx)
    if isinstance(view, Skip):
        return view
    if not view.state.stale:
        return Skip("no superseded fact values")
    violations = []
    for fact_id, stale in view.state.stale.items():
        active = view.state.active[fact_id]
        if fact_id in view.too_short or view.sent(active):
            continue
        sent = [v for v in stale if view.sent(v)]
        if sent:
            stage, observed = view.divergence(fact_id, active)
            violations.append(
                Violation("fact_current", f"{sent[-1].label} sent instead of {active.label}", fact_id, stage,
                          clear=_clear(fact_id, stage, active, observed or sent[-1]))
            )
    return violations


def fact_forgotten(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    view = _view(ctx)
    if isinstance(view, Skip):
        return view
    if not view.state.forgotten:
        return Skip("no deleted or expired facts")
    violations = []
    for fact_id, versions in view.state.forgotten.items():
        for version in versions:
            if view.sent(version):
                stage, observed = view.divergence(fact_id, None)
                violations.append(
                    Violation("fact_forgotten", f"{version.label} was deleted or expired but is still sent",
                              fact_id, stage, clear=_clear(fact_id, stage, None, observed or version))
                )
                break
    return violations


def fact_scoped(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    view = ctx.facts  # judged also while the conversation's own facts are unknown (its ledger unreadable)
    if isinstance(view, str):
        return ctx.caches.skips[view]
    if view.unsearched and not view.foreign:
        return Skip(f"{view.unsearched} message(s) over {LARGE_TEXT:,} characters not searched for other "
                    "conversations' values")
    return [_foreign(owner, version) for owner, version in view.foreign]


def _foreign(owner: tuple[str, str | None] | str, version: Version) -> Violation:
    fact_id = version.fact_id
    if isinstance(owner, str):  # from the fleet index: recorded by another process, shared as digests
        return Violation(
            "fact_scoped", f"{fact_id} of a conversation of another process (known here only by digest) is in this "
            "payload", fact_id, "payload",
            clear=f"{fact_id} of a conversation of another process, known here only by its digest {owner[:16]}, "
                  f"sent here: {version.value!r}")
    return Violation("fact_scoped", f"{fact_id} of another conversation is in this payload", fact_id, "payload",
                     clear=f"{fact_id} of conversation {owner[0]!r} sent here: {version.value!r}")


def answer_consistent(payload: Payload, ctx: Context, reply: Answer | None, unanswered: str) -> list[Violation] | Skip:
    """After the response: the answer states a stale value whose active value was sent (a
    model-level miss). ``unanswered``: why there is no answer, if there is none."""
    view = ctx.facts
    if not isinstance(view, FactView) or view.unavailable is not None:
        return UNLISTED  # its reason is the fact checks' (on the span)
    if reply is None:
        return Skip(unanswered)
    if reply.unread is not None:
        return Skip(reply.unread)
    if not reply.text:
        return Skip("no answer text")
    answer = Checkpoint.of(reply.text)  # the answer, searched as a stage's checkpoint is
    violations = []
    for fact_id, stale in view.state.stale.items():
        active = view.state.active[fact_id]
        if fact_id in view.too_short or not view.sent(active) or answer.holds(active):
            continue
        said = [v for v in stale if len(v.norm) >= MIN_MATCH_CHARS and answer.holds(v)]
        if said:
            violations.append(
                Violation("answer_consistent", f"answer states {said[-1].label}; {active.label} was sent",
                          fact_id, "answer", clear=_clear(fact_id, "answer", active, said[-1]))
            )
    return violations
