"""The types every check shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..budget import BudgetEval
from ..cache import TwoGenerationCache
from ..facts.evaluate import FactView
from ..payload import Answer, Payload
from ..pinned import PinnedBlock
from ..policy import Policy
from ..violations import Violation

__all__ = [
    "NEEDS_EXACT", "UNLISTED", "AnswerCheck", "Check", "CheckCaches", "Context", "Declared", "Outcome", "Phase",
    "Skip", "WireCheck",
]


@dataclass(slots=True)
class Skip:
    """The check could not decide; ``reason`` says why (on the span)."""

    reason: str


#: A skip whose reason another check already gives on the span: counted, not listed again.
UNLISTED = Skip("")
#: What an answer check returns when the payload's byte bounds cannot decide it: it is judged
#: again on the payload counted exactly (``Inspector.answer``), which it then always decides.
NEEDS_EXACT = Skip("not counted exactly")


class CheckCaches:
    """What the checks keep between calls, each cache bounded in entries and bytes: ``wire_intact``'s
    needles (a protected text -> how JSON may write it, whole and line by line) and wholes (a
    fact-carrying message's digest -> how JSON may write it), ``tool_pairs_intact``'s runs (a payload
    digest -> where the check left off). Made by ``checks.check_caches()`` and owned by an
    ``Inspector``, so by an installation: gone with ``uninstrument()``, never the process's."""

    __slots__ = ("needles", "runs", "wholes")

    def __init__(self, needles: TwoGenerationCache[str, Any], wholes: TwoGenerationCache[str, Any],
                 runs: TwoGenerationCache[str, Any]) -> None:
        self.needles, self.wholes, self.runs = needles, wholes, runs


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
    caches: CheckCaches  # the inspector's


@dataclass(slots=True, frozen=True)
class Outcome:
    """One check's verdict on one call. Passes and skips are shared between calls: read-only."""

    check: str
    outcome: str  # "pass", "fail" or "skip"
    violations: Sequence[Violation]
    reason: str | None = None


Check = Callable[[Payload, Context], "list[Violation] | Skip"]

#: ``(payload, context, body sent)``: judged once the transport has the body.
WireCheck = Callable[[Payload, Context, bytes], "list[Violation] | Skip"]
#: ``(payload, context, the answer or None, why there is none)``: judged when the call ends.
AnswerCheck = Callable[[Payload, Context, "Answer | None", str], "list[Violation] | Skip"]

#: When a check is judged: before sending (it can block, in enforce mode), on the body the
#: transport sends, or on the answer.
Phase = Literal["before", "wire", "answer"]


@dataclass(frozen=True, slots=True)
class Declared:
    """One check of the registry (``ctxguard.checks.REGISTRY``): its contract name, its phase,
    the function judging it (its inputs are the phase's) and what it guards, in one line."""

    name: str
    phase: Phase
    judge: Check | WireCheck | AnswerCheck
    guards: str
