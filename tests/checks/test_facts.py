"""``ctxguard/checks/facts.py``, case by case: ``fact_present``, ``fact_current``,
``fact_forgotten``, ``fact_scoped`` and ``answer_consistent`` on a conversation's facts
(end to end through the SDK: ``tests/facts/test_fact_checks.py``)."""

from __future__ import annotations

from ctxguard.facts.matching import LARGE_TEXT
from ctxguard.payload import UNREAD, Answer
from ctxguard.policy import Policy
from tests.checks.cases import (
    FAIL,
    OTHER,
    PASS,
    SKIP,
    Case,
    Fact,
    context,
    fact,
    fact_view,
    judge,
    payload,
    table,
)

SYSTEM = ("system", "You are the order assistant.")
NO_CONVERSATION = "no conversation id (use ctxguard.conversation())"


def case(check: str, id: str, text: str, *facts: Fact, expect: str, says: str = "", policy: Policy | None = None,
         elsewhere: tuple = (), view: str | None = None) -> Case:
    """The payload is the instruction and one user message, ``text``; ``view``: the reason the
    facts cannot be judged, instead of the facts."""
    p = payload(SYSTEM, ("user", text))
    facts_ctx = view if view is not None else fact_view(p, *facts, elsewhere=elsewhere)
    return Case(check, id, p, context(p, policy=policy, facts=facts_ctx), expect, says)


CITY = fact("shipping_city", "Pune")
MOVED = fact("shipping_city", "Lyon", "Pune")  # Lyon superseded by Pune


def present(id: str, text: str, *facts: Fact, **kw) -> Case:  # type: ignore[no-untyped-def]
    return case("fact_present", id, text, *facts, **kw)


@table("fact_present", [
    present("the active value sent", "Ship to Pune.", CITY, expect=PASS),
    present("sent in another case and spacing", "ship to  PUNE", CITY, expect=PASS),
    present("a grouped number sent in another grouping", "Call 06.12.34.56.78", fact("phone", "0612345678"),
            expect=PASS),
    present("a longer number holding its digits", "Call 06 12 34 56 789", fact("phone", "0612 345 678"),
            expect=FAIL, says="phone@1 missing from the payload"),
    present("the active value missing", "Ship it.", CITY, expect=FAIL, says="shipping_city@1 missing from the payload"),
    present("only the superseded value sent", "Ship to Lyon.", MOVED, expect=FAIL,
            says="shipping_city@2 missing from the payload"),
    present("one of two missing", "Order A-1041.", CITY, fact("order_id", "A-1041"), expect=FAIL,
            says="shipping_city@1 missing"),
    present("a fact not required, missing", "Ship it.", fact("shipping_city", "Pune", required=False),
            expect=SKIP, says="no active required facts"),
    present("a value too short to match", "Ship it.", fact("state", "MH"), expect=SKIP,
            says="values too short to match reliably: state"),
    present("only deleted facts", "Ship it.", fact("phone", "+91 98765 43210", deleted=True), expect=SKIP,
            says="no active required facts"),
    present("disabled by policy", "Ship it.", CITY, policy=Policy(require_facts=False), expect=SKIP,
            says="disabled by policy (require_facts=False)"),
    present("no conversation", "Ship it.", view=NO_CONVERSATION, expect=SKIP, says=NO_CONVERSATION),
])
def test_fact_present(case: Case) -> None:
    judge(case)


def current(id: str, text: str, *facts: Fact, **kw) -> Case:  # type: ignore[no-untyped-def]
    return case("fact_current", id, text, *facts, **kw)


@table("fact_current", [
    current("the current value sent", "Ship to Pune.", MOVED, expect=PASS),
    current("the superseded value sent instead", "Ship to Lyon.", MOVED, expect=FAIL,
            says="shipping_city@1 sent instead of shipping_city@2"),
    current("the latest of two superseded values sent", "Ship to Delhi.", fact("shipping_city", "Lyon", "Delhi",
            "Pune"), expect=FAIL, says="shipping_city@2 sent instead of shipping_city@3"),
    current("the correction sent next to the old value", "Was Lyon, now Pune.", MOVED, expect=PASS),
    current("neither value sent", "Ship it.", MOVED, expect=PASS),
    current("no value superseded", "Ship to Lyon.", CITY, expect=SKIP, says="no superseded fact values"),
    current("no conversation", "Ship to Lyon.", view=NO_CONVERSATION, expect=SKIP, says=NO_CONVERSATION),
])
def test_fact_current(case: Case) -> None:
    judge(case)


PHONE = "+91 98765 43210"


def forgotten(id: str, text: str, *facts: Fact, **kw) -> Case:  # type: ignore[no-untyped-def]
    return case("fact_forgotten", id, text, *facts, **kw)


@table("fact_forgotten", [
    forgotten("a deleted value not sent", "Call me.", fact("phone", PHONE, deleted=True), expect=PASS),
    forgotten("a deleted value still sent", f"Call {PHONE}.", fact("phone", PHONE, deleted=True), expect=FAIL,
              says="phone@1 was deleted or expired but is still sent"),
    forgotten("an expired value still sent", f"Call {PHONE}.", fact("phone", PHONE, expired=True), expect=FAIL,
              says="phone@1 was deleted or expired"),
    forgotten("an older value of a deleted fact sent", "Call +91 11111 22222.",
              fact("phone", "+91 11111 22222", PHONE, deleted=True), expect=FAIL, says="phone@1 was deleted"),
    forgotten("nothing deleted or expired", f"Call {PHONE}.", fact("phone", PHONE), expect=SKIP,
              says="no deleted or expired facts"),
    forgotten("no conversation", f"Call {PHONE}.", view=NO_CONVERSATION, expect=SKIP, says=NO_CONVERSATION),
])
def test_fact_forgotten(case: Case) -> None:
    judge(case)


ACCOUNT = "ACC-7731-X"


def scoped(id: str, text: str, *facts: Fact, **kw) -> Case:  # type: ignore[no-untyped-def]
    return case("fact_scoped", id, text, *facts, **kw)


@table("fact_scoped", [
    scoped("only this conversation's values", "Ship to Pune.", CITY, elsewhere=[(OTHER, "account", ACCOUNT)],
           expect=PASS),
    scoped("another conversation's value sent", f"Your account is {ACCOUNT}.", CITY,
           elsewhere=[(OTHER, "account", ACCOUNT)], expect=FAIL,
           says="account of another conversation is in this payload"),
    scoped("a value both conversations recorded", f"Your account is {ACCOUNT}.", fact("account", ACCOUNT),
           elsewhere=[(OTHER, "account", ACCOUNT)], expect=PASS),
    scoped("another conversation's common word", "Ship to Pune.", elsewhere=[(OTHER, "shipping_city", "Pune")],
           expect=PASS),
    scoped("another conversation's grouped number, in another grouping", "Call +33612345678.", CITY,
           elsewhere=[(OTHER, "phone", "+33 6 12 34 56 78")], expect=FAIL,
           says="phone of another conversation is in this payload"),
    scoped("a date with another conversation's digits", "Delivery on 2026-12-03.", CITY,
           elsewhere=[(OTHER, "account", "20261203")], expect=PASS),
    scoped("no other conversation", f"Your account is {ACCOUNT}.", CITY, expect=PASS),
    scoped("a message too large to search", "x" * (LARGE_TEXT + 1), CITY, elsewhere=[(OTHER, "account", ACCOUNT)],
           expect=SKIP, says="1 message(s) over 1,048,576 characters not searched"),
    scoped("no conversation", f"Your account is {ACCOUNT}.", view=NO_CONVERSATION, expect=SKIP,
           says=NO_CONVERSATION),
])
def test_fact_scoped(case: Case) -> None:
    judge(case)


def answered(id: str, text: str, answer: str | None, *facts: Fact, expect: str, says: str = "",
             view: str | None = None, unanswered: str = "", unread: str | None = None) -> Case:
    base = case("answer_consistent", id, text, *facts, view=view, expect=expect, says=says)
    reply = Answer(text=answer, unread=unread) if answer is not None else None
    return Case(base.check, id, base.payload, base.ctx, expect, says, (reply, unanswered))


@table("answer_consistent", [
    answered("the answer states the value sent", "Ship to Pune.", "It ships to Pune.", MOVED, expect=PASS),
    answered("the answer states the superseded value", "Ship to Pune.", "It ships to Lyon.", MOVED, expect=FAIL,
             says="answer states shipping_city@1; shipping_city@2 was sent"),
    answered("a superseded value of three characters", "Ship to Lima.", "It ships to Rio.",
             fact("shipping_city", "Rio", "Lima"), expect=FAIL, says="answer states shipping_city@1"),
    answered("the answer states both", "Ship to Pune.", "Not Lyon: Pune.", MOVED, expect=PASS),
    answered("the current value was not sent", "Ship it.", "It ships to Lyon.", MOVED, expect=PASS),
    answered("no value superseded", "Ship to Pune.", "It ships to Lyon.", CITY, expect=PASS),
    answered("an empty answer", "Ship to Pune.", "", MOVED, expect=SKIP, says="no answer text"),
    answered("an answer past what ctxguard keeps of one", "Ship to Pune.", "", MOVED, unread=UNREAD, expect=SKIP,
             says=UNREAD),
    answered("no answer", "Ship to Pune.", None, MOVED, unanswered="the call failed: APIConnectionError",
             expect=SKIP, says="the call failed: APIConnectionError"),
    answered("facts not judged", "Ship to Pune.", "It ships to Lyon.", view=NO_CONVERSATION, expect=SKIP,
             says=""),  # the fact checks give the reason on the span
])
def test_answer_consistent(case: Case) -> None:
    judge(case)


def test_a_fact_view_reason_is_one_skip_and_the_skips_kept_are_bounded():
    """The fact checks skip for the view's reason with one shared ``Skip`` per reason (an
    inspector's), at most ``SETTLED_MAX`` kept."""
    from ctxguard.checks import check_caches
    from ctxguard.checks.base import SETTLED_MAX

    skips = check_caches().skips
    assert skips["no facts"] is skips["no facts"]
    assert skips["no facts"].reason == "no facts"
    made = [skips[f"fact ledger unavailable: timeout {i}"] for i in range(SETTLED_MAX + 50)]
    assert 0 < len(skips) <= SETTLED_MAX
    assert made[-1].reason == f"fact ledger unavailable: timeout {SETTLED_MAX + 49}"
