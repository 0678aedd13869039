"""Boundary checks: small pure functions ``(Payload, Context) -> list[Violation] | Skip``.

Adding a check: write the function in the family module and add one line to
``CHECKS``. A check never knows which provider produced the payload.
"""

from __future__ import annotations

from ..payload import Payload

__all__ = ["CHECKS", "CHECK_NAMES", "Context", "Outcome", "Skip", "run_checks"]


from . import budget, facts, pinned, structure, tools
from .base import Check, Context, Outcome, Skip

CHECKS: dict[str, Check] = {
    "system_at_head": structure.system_at_head,
    "system_stable": structure.system_stable,
    "pinned_present": pinned.pinned_present,
    "pinned_capped": pinned.pinned_capped,
    "pinned_intact": pinned.pinned_intact,
    "payload_under_budget": budget.payload_under_budget,
    "fact_present": facts.fact_present,
    "fact_current": facts.fact_current,
    "fact_forgotten": facts.fact_forgotten,
    "fact_scoped": facts.fact_scoped,
    "tool_pairs_intact": tools.tool_pairs_intact,
}

#: Every check name of the contract (SPEC §3), implemented here or not: the
#: metric series for all of them exist from ``instrument()`` on.
CHECK_NAMES: tuple[str, ...] = (
    "system_at_head",
    "system_stable",
    "pinned_present",
    "pinned_capped",
    "pinned_intact",
    "payload_under_budget",
    "fact_present",
    "fact_current",
    "fact_forgotten",
    "fact_scoped",
    "answer_consistent",
    "tool_pairs_intact",
    "wire_intact",
)


def run_checks(payload: Payload, ctx: Context) -> list[Outcome]:
    if payload.unreadable is not None:
        return [_settled(name, payload.unreadable) for name in CHECKS]
    outcomes = []
    for name, check in CHECKS.items():
        result = check(payload, ctx)
        if isinstance(result, Skip):
            outcomes.append(_settled(name, result.reason))
        elif result:
            outcomes.append(Outcome(name, "fail", result))
        else:
            outcomes.append(_settled(name, None))
    return outcomes


#: Passes and skips carry nothing of their call, so one instance per (check, skip reason)
#: serves every call: no new objects on the common path. Outcomes are read-only.
_SETTLED: dict[tuple[str, str | None], Outcome] = {}
_SETTLED_CAP = 1024  # skip reasons can name a model; past the cap, new ones are built per call


def _settled(name: str, reason: str | None) -> Outcome:
    key = (name, reason)
    outcome = _SETTLED.get(key)
    if outcome is None:
        outcome = Outcome(name, "pass" if reason is None else "skip", (), reason)
        if len(_SETTLED) < _SETTLED_CAP:
            _SETTLED[key] = outcome
    return outcome
