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
    "NEEDS_EXACT", "UNLISTED", "AnswerCheck", "Check", "CheckCaches", "Context", "Declared", "Outcome", "OutcomesOf",
    "Phase", "Skip", "Skips", "WireCheck",
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
    digest -> where the check left off); and the outcomes every call shares: each check's skips by
    reason (``settled``), the fact checks' skips (``skips``). Made by ``checks.check_caches()`` and
    owned by an ``Inspector``, so by an installation: gone with ``uninstrument()``, never the
    process's."""

    __slots__ = ("needles", "runs", "settled", "skips", "wholes")

    def __init__(self, needles: TwoGenerationCache[str, Any], wholes: TwoGenerationCache[str, Any],
                 runs: TwoGenerationCache[str, Any], check_names: Sequence[str]) -> None:
        self.needles, self.wholes, self.runs = needles, wholes, runs
        self.settled = {name: OutcomesOf(name) for name in check_names}
        self.skips = Skips()


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


#: Skips kept per check (``OutcomesOf``), and fact-check skips (``Skips``), at most.
SETTLED_MAX = 256


class OutcomesOf(dict[str, Outcome]):
    """One check's skip outcomes, by reason, each made at its first use (its pass is made once,
    ``checks._PASSED``): they carry nothing of their call, so one instance per (check, reason)
    serves every call, no new object on the common path. Outcomes are read-only. An empty reason
    is a skip another check explains: counted, not listed on the span. A look-up here costs ~400 instructions where a
    ``functools.lru_cache`` keyed by (check, reason) costs ~935: five skips a call without facts,
    3,500 fewer instructions a call (bench/instructions.py's guarded-own child at 20 messages,
    649,411 -> 645,894). Bounded: skip reasons can name a model; emptied when full."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def __missing__(self, reason: str) -> Outcome:
        if len(self) >= SETTLED_MAX:
            self.clear()
        found = self[reason] = Outcome(self.name, "skip", (), reason or None)
        return found


class Skips(dict[str, Skip]):
    """The skip for each reason the fact checks cannot judge a call (``Context.facts`` a string: no
    facts recorded, no conversation id), made at its first use: the four fact checks skip for it on
    every call of a conversation without facts, and a new ``Skip`` costs ~1,500 instructions where a
    look-up here costs ~400: 3,900 fewer a call (bench/instructions.py's guarded-own child at 20
    messages, 655,413 -> 651,518). A ``Skip`` is read-only. Bounded: a reason can carry an
    exception's text."""

    def __missing__(self, reason: str) -> Skip:
        if len(self) >= SETTLED_MAX:
            self.clear()
        skip = self[reason] = Skip(reason)
        return skip


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
