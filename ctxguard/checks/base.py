"""The types every check shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..budget import BudgetEval
from ..facts.evaluate import FactView
from ..payload import Payload
from ..pinned import PinnedBlock
from ..policy import Policy
from ..violations import Violation

__all__ = ["Check", "Context", "Outcome", "Skip"]


@dataclass(slots=True)
class Skip:
    """The check could not decide; ``reason`` says why (on the span)."""

    reason: str


@dataclass(slots=True)
class Context:
    """What the checks need beyond the payload, derived once per call."""

    policy: Policy
    pinned: PinnedBlock | None
    pinned_tokens: int
    budget: BudgetEval | str  # a string is the reason the budget cannot be judged
    first_system: str | None  # digest of the conversation's first system instruction
    in_conversation: bool
    facts: FactView | str  # a string is the reason facts cannot be judged


@dataclass(slots=True, frozen=True)
class Outcome:
    """One check's verdict on one call. Passes and skips are shared between calls: read-only."""

    check: str
    outcome: str  # "pass", "fail" or "skip"
    violations: Sequence[Violation]
    reason: str | None = None


Check = Callable[[Payload, Context], "list[Violation] | Skip"]
