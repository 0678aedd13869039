"""``ctxguard/checks/wire.py``, case by case: ``wire_intact`` on the raw body the transport sends
(end to end through the SDKs: ``tests/providers/test_wire.py``)."""

from __future__ import annotations

import json
from typing import Any

from ctxguard.pinned import render_pinned
from ctxguard.policy import Pinned, Policy
from tests.checks.cases import FAIL, PASS, Case, context, fact, fact_view, judge, payload, table

SYSTEM = "You are the order assistant.\nAnswer in one sentence."
USER = "Where is my parcel?"
BLOCK = render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
PINNED = Policy(pinned=Pinned())
CITY = fact("shipping_city", "Zürich")
PHONE = fact("phone", "06 12 34 56 78")  # a grouped number: found in any grouping (docs/facts.md)


def body(*messages: tuple[str, Any], ascii: bool = True, **more: Any) -> bytes:
    """A Chat Completions body as an SDK writes it (``ensure_ascii`` as ``ascii``)."""
    sent = {"model": "gpt-4o", "messages": [{"role": r, "content": c} for r, c in messages], **more}
    return json.dumps(sent, ensure_ascii=ascii).encode()


def wire(id: str, messages: list[tuple[str, str]], sent: bytes, *, policy: Policy | None = None, facts: tuple = (),
         expect: str, says: str = "") -> Case:
    p = payload(*messages)
    view = fact_view(p, *facts) if facts else "no facts recorded for this conversation"
    return Case("wire_intact", id, p, context(p, policy=policy, facts=view), expect, says, (sent,))


AS_PASSED = [("system", SYSTEM), ("user", USER)]
WITH_BLOCK = [("system", SYSTEM), ("system", BLOCK), ("user", USER)]


@table("wire_intact", [
    wire("the body as passed", AS_PASSED, body(*AS_PASSED), expect=PASS),
    wire("written without ASCII escapes", [("system", "Répondez en français.")],
         body(("system", "Répondez en français."), ascii=False), expect=PASS),
    wire("written with ASCII escapes", [("system", "Répondez en français.")],
         body(("system", "Répondez en français.")), expect=PASS),
    wire("the instruction split into blocks, line by line", AS_PASSED,
         body(("system", [{"type": "text", "text": line} for line in SYSTEM.split("\n")]), ("user", USER)),
         expect=PASS),
    wire("the instruction moved after the messages", AS_PASSED, body(("user", USER), instructions=SYSTEM),
         expect=PASS),
    wire("no instruction passed", [("user", USER)], body(("user", "something else")), expect=PASS),
    wire("the instruction dropped", AS_PASSED, body(("user", USER)), expect=FAIL,
         says="the system instruction passed is not in the body sent"),
    wire("the instruction one character short", AS_PASSED, body(("system", SYSTEM[:-1]), ("user", USER)),
         expect=FAIL, says="the system instruction passed is not in the body sent"),
    wire("a line of the instruction rewritten", AS_PASSED,
         body(("system", SYSTEM.replace("one sentence", "two sentences")), ("user", USER)), expect=FAIL,
         says="the system instruction passed is not in the body sent"),
    wire("the pinned block sent", WITH_BLOCK, body(*WITH_BLOCK), policy=PINNED, expect=PASS),
    wire("the pinned block inside the instruction sent whole", [("system", SYSTEM + "\n\n" + BLOCK)],
         body(("system", SYSTEM + "\n\n" + BLOCK)), policy=PINNED, expect=PASS),
    wire("the pinned block dropped", WITH_BLOCK, body(("system", SYSTEM), ("user", USER)), policy=PINNED,
         expect=FAIL, says="the pinned block passed is not in the body sent"),
    wire("the pinned block edited", WITH_BLOCK, body(("system", SYSTEM), ("system", BLOCK.replace("Pune", "Puna")),
         ("user", USER)), policy=PINNED, expect=FAIL, says="the pinned block passed is not in the body sent"),
    wire("an active fact sent as passed", [("system", SYSTEM), ("user", "Ship to Zürich, please.\nThanks")],
         body(("system", SYSTEM), ("user", [{"type": "text", "text": "Ship to Zürich, please."},
                                            {"type": "text", "text": "Thanks"}])),
         facts=(CITY,), expect=PASS),
    wire("an active fact rewritten below the SDK", [("system", SYSTEM), ("user", "Ship to Zürich, please.\nThanks")],
         body(("system", SYSTEM), ("user", [{"type": "text", "text": "Ship to Zurich, please."},
                                            {"type": "text", "text": "Thanks"}])),
         facts=(CITY,), expect=FAIL, says="shipping_city@1 passed is not in the body sent"),
    wire("a grouped number passed in another grouping, sent", [("system", SYSTEM), ("user", "Call 0612345678")],
         body(("system", SYSTEM), ("user", "Call 0612345678")), facts=(PHONE,), expect=PASS),
    wire("a grouped number passed in another grouping, rewritten below the SDK",
         [("system", SYSTEM), ("user", "Call 0612345678")], body(("system", SYSTEM), ("user", "Call 0612345679")),
         facts=(PHONE,), expect=FAIL, says="phone@1 passed is not in the body sent"),
])
def test_wire_intact(case: Case) -> None:
    judge(case)
