"""The table-driven unit tests of the checks: one small case is a ``Payload`` and its ``Context``
(the phase's further inputs too: the body sent, the answer) and the outcome expected of one check.

Payloads are measured the way the guard measures them (``Measurer.measure`` of a ``RequestView``);
each ``Context`` field a check reads is given by the case, or derived from the payload the way
``Inspector.evaluate`` derives it (the pinned block found in the messages, the facts' view of them).

``table(check, cases)`` parametrizes a test over its cases; ``judge(case)`` runs the check on one
and asserts its outcome. ``tests/checks/test_checks.py`` holds every check of ``REGISTRY`` to a
table with a passing and a failing case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from ctxguard.budget import BudgetEval
from ctxguard.checks import BY_NAME, Context, Skip, check_caches
from ctxguard.conversation import Scope
from ctxguard.digest import Digester
from ctxguard.facts.evaluate import FactView, build_view
from ctxguard.facts.index import ValueIndex, terms
from ctxguard.facts.ledger import FactEvent, Version, reduce
from ctxguard.facts.matching import Chunked, normalise, searchable
from ctxguard.facts.stages import Checkpoint
from ctxguard.measure import Measurer
from ctxguard.payload import Payload, RequestView
from ctxguard.pinned import PinnedBlock, find_block
from ctxguard.policy import Policy
from ctxguard.tokens import Calibration, EstimateCounter
from tests.conftest import KEY

PASS, FAIL, SKIP = "pass", "fail", "skip"
SCOPE: Scope = ("order-41", "acme")
OTHER: Scope = ("order-77", "acme")
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)

#: The reason a case gives for a context field it does not judge.
NOT_JUDGED = "not judged by this case"


@dataclass(frozen=True)
class Case:
    """One row of a check's table: ``expect`` is ``"pass"``, ``"fail"`` (a violation of this
    check whose detail contains ``says``) or ``"skip"`` (a reason containing ``says``)."""

    check: str
    id: str
    payload: Payload
    ctx: Context
    expect: str
    says: str = ""
    args: tuple[Any, ...] = ()  # the phase's further inputs: (body,) on the wire, (reply, unanswered) on the answer

    def __post_init__(self) -> None:
        if self.expect not in (PASS, FAIL, SKIP):
            raise ValueError(f"{self.id}: expect must be pass, fail or skip, not {self.expect!r}")
        if self.expect == FAIL and not self.says:
            raise ValueError(f"{self.id}: a failing case names what the violation says")


def table(check: str, cases: Sequence[Case]) -> pytest.MarkDecorator:
    """``@table("system_at_head", [...])``: the test runs once per case, named by its id."""
    wrong = [c.id for c in cases if c.check != check]
    if wrong:
        raise ValueError(f"cases of another check in the table of {check}: {wrong}")
    return pytest.mark.parametrize("case", list(cases), ids=[c.id for c in cases])


def judge(case: Case) -> None:
    """Run ``case.check`` (the function ``REGISTRY`` declares) on the case and assert its outcome."""
    result = BY_NAME[case.check].judge(case.payload, case.ctx, *case.args)  # type: ignore[call-arg]
    if case.expect == PASS:
        assert result == [], result
    elif case.expect == FAIL:
        assert isinstance(result, list) and result, result
        assert {v.check for v in result} == {case.check}, result
        assert any(case.says in v.detail for v in result), [v.detail for v in result]
    else:
        assert isinstance(result, Skip), result
        assert case.says in result.reason, result.reason


# -- inputs ------------------------------------------------------------------

_MEASURER = Measurer(Digester(KEY), EstimateCounter(), Calibration())

Msg = tuple[str, str]


def payload(*messages: Msg, model: str | None = "gpt-4o", history_elsewhere: str | None = None) -> Payload:
    """A measured Chat Completions request of ``(role, text)`` messages."""
    items = [(role, text, (), "message", 0) for role, text in messages]
    view = RequestView("openai", "chat.completions", model, items, history_elsewhere=history_elsewhere)
    return _MEASURER.measure(view)


def digest_of(role: str, text: str) -> str:
    """The digest the measurer gives the message ``(role, text)``."""
    message = payload((role, text)).head
    assert message is not None
    return message.digest


def context(
    p: Payload,
    *,
    policy: Policy | None = None,
    pinned: PinnedBlock | None = None,
    pinned_tokens: int | None = None,
    budget: BudgetEval | str = NOT_JUDGED,
    first_system: str | None = None,
    in_conversation: bool = False,
    facts: FactView | str = NOT_JUDGED,
) -> Context:
    """The context of ``p``: the pinned block is the one found in its messages under the
    policy's marker (unless given), its tokens counted as the measurer counts them."""
    policy = policy or Policy()
    if pinned is None and policy.pinned is not None:
        pinned = find_block(p.messages, policy.pinned.marker)
    if pinned_tokens is None:
        pinned_tokens = _MEASURER.tokens(pinned.text) if pinned is not None else 0
    return Context(policy, pinned, pinned_tokens, budget, first_system, in_conversation, facts, check_caches())


@dataclass(frozen=True)
class Fact:
    """A fact's history: its values in order, then deleted (``deleted``) or expired (``expired``)."""

    fact_id: str
    values: tuple[str, ...]
    deleted: bool = False
    expired: bool = False
    required: bool = True


def fact(fact_id: str, *values: str, deleted: bool = False, expired: bool = False, required: bool = True) -> Fact:
    return Fact(fact_id, values, deleted, expired, required)


def fact_view(p: Payload, *facts: Fact, elsewhere: Sequence[tuple[Scope, str, str]] = (),
              checkpoints: dict[str, str] | None = None) -> FactView:
    """The facts of conversation ``SCOPE`` against ``p``, as ``Inspector.fact_view`` builds them;
    ``elsewhere``: ``(scope, fact_id, value)`` recorded in other conversations."""
    events = []
    for f in facts:
        for i, value in enumerate(f.values):
            last = i == len(f.values) - 1
            expires = NOW - timedelta(seconds=1) if f.expired and last else None
            events.append(FactEvent(SCOPE, f.fact_id, value, expires_at=expires, required=f.required,
                                    arrival=len(events) + 1))
        if f.deleted:
            events.append(FactEvent(SCOPE, f.fact_id, None, arrival=len(events) + 1))
    state = reduce(events, NOW)
    index = ValueIndex()
    for scope, fact_id, value in elsewhere:
        index.add(scope, Version(fact_id, value, normalise(value), 1))
    norms = [searchable(m.text) for m in p.messages]
    held = {stage: Checkpoint.of(text) for stage, text in (checkpoints or {}).items()}
    return build_view(state, SCOPE, norms, p.digests, held, {}, index,
                      [frozenset() if isinstance(n, Chunked) else terms(n, m.text)
                       for n, m in zip(norms, p.messages, strict=True)])
