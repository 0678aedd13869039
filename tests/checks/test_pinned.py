"""``ctxguard/checks/pinned.py``, case by case: ``pinned_present``, ``pinned_capped`` and
``pinned_intact`` (end to end through the SDK: ``tests/checks/test_checks.py``)."""

from __future__ import annotations

from ctxguard.pinned import render_pinned
from ctxguard.policy import Pinned, Policy
from tests.checks.cases import FAIL, PASS, SKIP, Case, context, judge, payload, table

SYSTEM = ("system", "You are the order assistant.")
USER = ("user", "where is my parcel?")
BLOCK = render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
HAND_MADE = "Pinned facts:\n- city: Pune\n- order: A-1041"
LINES = BLOCK.split("\n")  # header, two entries, closing line
NO_CLOSING = "\n".join(LINES[:-1])
AN_ENTRY_LOST = "\n".join([LINES[0], LINES[2], LINES[3]])
PINNED = Policy(pinned=Pinned())


def present(id: str, *messages: tuple[str, str], policy: Policy | None, expect: str, says: str = "",
            history_elsewhere: str | None = None) -> Case:
    p = payload(*messages, history_elsewhere=history_elsewhere)
    return Case("pinned_present", id, p, context(p, policy=policy), expect, says)


@table("pinned_present", [
    present("a block of its own", SYSTEM, ("system", BLOCK), USER, policy=PINNED, expect=PASS),
    present("a block inside the instruction", ("system", SYSTEM[1] + "\n\n" + BLOCK), USER, policy=PINNED,
            expect=PASS),
    present("a hand-made block", SYSTEM, ("user", HAND_MADE), USER, policy=PINNED, expect=PASS),
    present("a cut block still carries its marker", SYSTEM, ("system", NO_CLOSING), USER, policy=PINNED,
            expect=PASS),
    present("no block", SYSTEM, USER, policy=PINNED, expect=FAIL,
            says="no message carries the pinned marker 'Pinned facts'"),
    present("a block under another marker", SYSTEM, ("system", BLOCK), USER,
            policy=Policy(pinned=Pinned(marker="Memory")), expect=FAIL, says="the pinned marker 'Memory'"),
    present("no block, not required", SYSTEM, USER, policy=Policy(pinned=Pinned(required=False)), expect=SKIP,
            says="pinned block not required"),
    present("no block, the history held by the provider", USER, policy=PINNED,
            history_elsewhere="history held by the provider (previous_response_id)", expect=SKIP,
            says="previous_response_id"),
    present("no Pinned policy", SYSTEM, USER, policy=None, expect=SKIP, says="no Pinned policy"),
])
def test_pinned_present(case: Case) -> None:
    judge(case)


def capped(id: str, block: str | None, *, policy: Policy | None, tokens: int | None = None, expect: str,
           says: str = "") -> Case:
    p = payload(SYSTEM, *([("system", block)] if block is not None else []), USER)
    return Case("pinned_capped", id, p, context(p, policy=policy, pinned_tokens=tokens), expect, says)


def caps(max_tokens: int = 800, max_entries: int | None = None) -> Policy:
    return Policy(pinned=Pinned(max_tokens=max_tokens, max_entries=max_entries))


MANY = render_pinned({f"fact_{i}": "value" for i in range(30)}, max_tokens=10_000)


@table("pinned_capped", [
    capped("under both caps", BLOCK, policy=caps(40, 2), tokens=39, expect=PASS),
    capped("exactly at the token cap", BLOCK, policy=caps(40), tokens=40, expect=PASS),
    capped("one token over the cap", BLOCK, policy=caps(40), tokens=41, expect=FAIL,
           says="pinned block is 41 tokens, cap 40"),
    capped("exactly at the entry cap", BLOCK, policy=caps(max_entries=2), expect=PASS),
    capped("one entry over the cap", BLOCK, policy=caps(max_entries=1), expect=FAIL,
           says="pinned block has 2 entries, cap 1"),
    capped("no entries allowed", BLOCK, policy=caps(max_entries=0), expect=FAIL, says="has 2 entries, cap 0"),
    capped("thirty entries, no entry cap", MANY, policy=caps(10_000), expect=PASS),
    capped("over both caps", MANY, policy=caps(10, 2), tokens=11, expect=FAIL, says="has 30 entries, cap 2"),
    capped("a hand-made block over the entry cap", HAND_MADE, policy=caps(max_entries=1), expect=FAIL,
           says="has 2 entries, cap 1"),
    capped("no block", None, policy=caps(), expect=SKIP, says="no pinned block"),
    capped("no Pinned policy", BLOCK, policy=None, expect=SKIP, says="no Pinned policy"),
])
def test_pinned_capped(case: Case) -> None:
    judge(case)


def intact(id: str, block: str | None, *, policy: Policy | None = PINNED, expect: str, says: str = "") -> Case:
    p = payload(SYSTEM, *([("system", block)] if block is not None else []), USER)
    return Case("pinned_intact", id, p, context(p, policy=policy), expect, says)


@table("pinned_intact", [
    intact("a whole rendered block", BLOCK, expect=PASS),
    intact("a whole block with text after it", BLOCK + "\n\nBe kind.", expect=PASS),
    intact("an empty rendered block", render_pinned({}, max_tokens=100), expect=PASS),
    intact("its closing line lost", NO_CLOSING, expect=FAIL,
           says="pinned block is cut: its closing line or an entry is missing"),
    intact("an entry lost", AN_ENTRY_LOST, expect=FAIL, says="pinned block is cut"),
    intact("cut mid-entry", BLOCK[: BLOCK.index("Pune")], expect=FAIL, says="pinned block is cut"),
    intact("a hand-made block", HAND_MADE, expect=SKIP, says="block not made by render_pinned"),
    intact("no block", None, expect=SKIP, says="no pinned block"),
    intact("no Pinned policy", BLOCK, policy=None, expect=SKIP, says="no Pinned policy"),
])
def test_pinned_intact(case: Case) -> None:
    judge(case)
