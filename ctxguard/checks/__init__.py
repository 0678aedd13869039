"""Boundary checks: small pure functions ``(Payload, Context) -> list[Violation] | Skip``.

Adding a check: write the function in the family module and add one line to
``CHECKS``. A check never knows which provider produced the payload.
"""

from __future__ import annotations

from ..payload import Payload

__all__ = ["CHECKS", "CHECK_NAMES", "Context", "Outcome", "Skip", "run_checks"]


from . import budget, facts, pinned, structure
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
    "wire_intact",
)


def run_checks(payload: Payload, ctx: Context) -> list[Outcome]:
    if payload.unreadable is not None:
        return [Outcome(name, "skip", [], payload.unreadable) for name in CHECKS]
    outcomes = []
    for name, check in CHECKS.items():
        result = check(payload, ctx)
        if isinstance(result, Skip):
            outcomes.append(Outcome(name, "skip", [], result.reason))
        else:
            outcomes.append(Outcome(name, "fail" if result else "pass", result))
    return outcomes
