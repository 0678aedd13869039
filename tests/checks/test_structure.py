"""``ctxguard/checks/structure.py``, case by case: ``system_at_head`` and ``system_stable``
(end to end through the SDK: ``tests/checks/test_checks.py``)."""

from __future__ import annotations

from ctxguard.policy import Policy
from tests.checks.cases import FAIL, PASS, SKIP, Case, context, digest_of, judge, payload, table

SYSTEM = ("system", "You are the order assistant.")
DEVELOPER = ("developer", "Answer in French.")
USER = ("user", "where is my parcel?")
ASSISTANT = ("assistant", "It left Lyon today.")


def at_head(id: str, *messages: tuple[str, str], expect: str, says: str = "", policy: Policy | None = None) -> Case:
    p = payload(*messages)
    return Case("system_at_head", id, p, context(p, policy=policy), expect, says)


@table("system_at_head", [
    at_head("the instruction first", SYSTEM, USER, expect=PASS),
    at_head("a developer instruction first", DEVELOPER, USER, expect=PASS),
    at_head("the instruction alone", SYSTEM, expect=PASS),
    at_head("a user message first", USER, SYSTEM, expect=FAIL, says="head is a 'user' message, not the system"),
    at_head("an assistant message first", ASSISTANT, SYSTEM, USER, expect=FAIL, says="head is a 'assistant' message"),
    at_head("no instruction at all", USER, expect=FAIL, says="head is a 'user' message"),
    at_head("no messages", expect=FAIL, says="the request carries no messages and no instruction"),
    at_head("disabled, a user message first", USER, SYSTEM, policy=Policy(system_at_head=False), expect=SKIP,
            says="disabled by policy"),
    at_head("disabled, no messages", policy=Policy(system_at_head=False), expect=SKIP, says="disabled by policy"),
])
def test_system_at_head(case: Case) -> None:
    judge(case)


def stable(id: str, *messages: tuple[str, str], first: tuple[str, str] | None, in_conversation: bool = True,
           expect: str, says: str = "") -> Case:
    p = payload(*messages)
    first_system = digest_of(*first) if first is not None else None
    return Case("system_stable", id, p, context(p, first_system=first_system, in_conversation=in_conversation),
                expect, says)


@table("system_stable", [
    stable("the conversation's first call", SYSTEM, USER, first=None, expect=PASS),
    stable("the same instruction as the first call", SYSTEM, USER, ASSISTANT, USER, first=SYSTEM, expect=PASS),
    stable("another instruction than the first call's", ("system", "You are a pirate."), USER, first=SYSTEM,
           expect=FAIL, says="system instruction differs from the first one of this conversation"),
    stable("the same text, now a developer message", ("developer", SYSTEM[1]), USER, first=SYSTEM, expect=FAIL,
           says="differs from the first one"),
    stable("one character more", ("system", SYSTEM[1] + " "), USER, first=SYSTEM, expect=FAIL, says="differs"),
    stable("no instruction at the head", USER, SYSTEM, first=SYSTEM, expect=SKIP,
           says="no system instruction at the head"),
    stable("no conversation", ("system", "You are a pirate."), USER, first=SYSTEM, in_conversation=False,
           expect=SKIP, says="no conversation id (use ctxguard.conversation())"),
])
def test_system_stable(case: Case) -> None:
    judge(case)
