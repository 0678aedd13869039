"""Every check both failing and passing, through the real SDK over loopback HTTP; the registry
(ctxguard/checks/__init__.py): every check it declares has a table of cases in the test file of its
family (tests/checks/test_<family>.py), and the outcomes it shares between calls are bounded."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import pytest

import ctxguard
from ctxguard import Budget, Pinned, Policy, render_pinned
from ctxguard.checks import REGISTRY
from ctxguard.checks.base import Declared
from ctxguard.digest import Digester
from tests.checks.cases import FAIL, PASS, Case
from tests.conftest import KEY
from tests.events import violation_events

SYSTEM = {"role": "system", "content": "You are the order assistant."}
USER = {"role": "user", "content": "where is my parcel?"}
BLOCK = render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)


def outcome(harness, check: str) -> dict[str, float]:
    return {o: harness.metric("ctxguard_checks_total", check=check, outcome=o) for o in ("pass", "fail", "skip")}


def violations(harness) -> list[str]:
    return list(harness.spans()[-1].attributes["ctxguard.violations"])


def send(client, messages, **kwargs):
    kwargs.setdefault("model", "gpt-4o")
    return client.chat.completions.create(messages=messages, **kwargs)


def test_system_at_head(harness, client):
    harness.start(mode="observe")
    send(client, [SYSTEM, USER])
    send(client, [{"role": "developer", "content": "rules"}, USER])
    assert outcome(harness, "system_at_head") == {"pass": 2, "fail": 0, "skip": 0}
    send(client, [USER, SYSTEM])
    assert violations(harness) == ["system_at_head"]
    assert outcome(harness, "system_at_head")["fail"] == 1
    event = violation_events(harness.spans()[-1])[0]
    assert event.name == "ctxguard.violation"
    assert event.attributes["check"] == "system_at_head"


def test_each_violation_is_one_structured_warning(harness, client, caplog):
    caplog.set_level(logging.WARNING, logger="ctxguard")
    harness.start(mode="observe", policy=Policy(pinned=Pinned()))
    with ctxguard.conversation("order-41", tenant="acme"):
        send(client, [USER, SYSTEM])  # system not at head, no pinned block
    span = harness.spans()[-1].attributes
    records = [r for r in caplog.records if r.name == "ctxguard" and r.levelno == logging.WARNING]
    assert [r.ctxguard["check"] for r in records] == ["system_at_head", "pinned_present"]
    for r in records:
        assert r.ctxguard["provider"] == "openai"
        assert r.ctxguard["conversation_id"] == "order-41"
        assert r.ctxguard["payload_hash"] == span["ctxguard.payload.hash"]
        assert r.ctxguard["detail"] and r.ctxguard["detail"] in r.getMessage()


def test_system_at_head_can_be_disabled(harness, client):
    harness.start(mode="enforce", policy=Policy(system_at_head=False))
    send(client, [USER])
    assert outcome(harness, "system_at_head") == {"pass": 0, "fail": 0, "skip": 1}


def test_system_stable(harness, client):
    harness.start(mode="observe")
    with ctxguard.conversation("c1"):
        send(client, [SYSTEM, USER])
        send(client, [SYSTEM, USER, {"role": "assistant", "content": "ok"}, USER])
        assert outcome(harness, "system_stable")["pass"] == 2
        send(client, [{"role": "system", "content": "You are a pirate."}, USER])
    assert violations(harness) == ["system_stable"]
    with ctxguard.conversation("c2"):  # another conversation may have its own instruction
        send(client, [{"role": "system", "content": "You are a pirate."}, USER])
    assert violations(harness) == []
    send(client, [SYSTEM, USER])  # no conversation: cannot judge
    assert "system_stable: no conversation id (use ctxguard.conversation())" in (
        harness.spans()[-1].attributes["ctxguard.checks.skipped"]
    )


def test_pinned_present(harness, client):
    harness.start(mode="observe", policy=Policy(pinned=Pinned()))
    send(client, [SYSTEM, {"role": "system", "content": BLOCK}, USER])
    send(client, [{"role": "system", "content": SYSTEM["content"] + "\n\n" + BLOCK}, USER])
    assert outcome(harness, "pinned_present")["pass"] == 2
    send(client, [SYSTEM, USER])
    assert violations(harness) == ["pinned_present"]
    assert harness.spans()[-1].attributes["ctxguard.pinned.present"] is False


def test_pinned_not_required_skips(harness, client):
    harness.start(mode="enforce", policy=Policy(pinned=Pinned(required=False)))
    send(client, [SYSTEM, USER])
    assert outcome(harness, "pinned_present") == {"pass": 0, "fail": 0, "skip": 1}


def test_pinned_capped_by_tokens_and_entries(harness, client):
    harness.start(mode="observe", policy=Policy(pinned=Pinned(max_tokens=40, max_entries=2)))
    send(client, [SYSTEM, {"role": "system", "content": BLOCK}, USER])
    a = harness.spans()[-1].attributes
    assert violations(harness) == []
    assert a["ctxguard.pinned.entries"] == 2
    assert 0 < a["ctxguard.pinned.tokens"] <= 40
    big = render_pinned({f"fact_{i}": "x" * 40 for i in range(3)}, max_tokens=10_000)
    send(client, [SYSTEM, {"role": "system", "content": big}, USER])
    details = [e.attributes["detail"] for e in violation_events(harness.spans()[-1])]
    assert violations(harness) == ["pinned_capped"]
    assert any("entries, cap 2" in d for d in details)
    assert any("tokens, cap 40" in d for d in details)
    assert harness.metric("ctxguard_pinned_tokens_count") == 2


def test_pinned_capped_boundary_is_inclusive(harness, client):
    """A block of exactly ``max_tokens`` tokens (or ``max_entries`` entries) is within its cap
    (counted exactly: a lazy guard shows an estimate until a verdict needs the count)."""
    guard = harness.start(mode="observe", policy=Policy(pinned=Pinned(max_tokens=10_000)), tokenizer="eager")
    messages = [SYSTEM, {"role": "system", "content": BLOCK}, USER]
    send(client, messages)
    tokens = harness.spans()[-1].attributes["ctxguard.pinned.tokens"]
    guard.policy = Policy(pinned=Pinned(max_tokens=tokens, max_entries=2))
    send(client, messages)
    assert violations(harness) == []
    guard.policy = Policy(pinned=Pinned(max_tokens=tokens - 1))
    send(client, messages)
    assert violations(harness) == ["pinned_capped"]
    guard.policy = Policy(pinned=Pinned(max_tokens=tokens, max_entries=1))
    send(client, messages)
    assert violations(harness) == ["pinned_capped"]


def test_a_hand_made_block_runs_from_its_marker_line_to_the_next_blank_line(harness, client):
    harness.start(mode="observe", policy=Policy(pinned=Pinned(marker="Pinned facts", max_tokens=400)))
    block = "Pinned facts:\n- city: Pune\n- order: A-1041"
    send(client, [{"role": "system", "content": f"You are terse.\n{block}\n\nBe kind."}, USER])
    a = harness.spans()[-1].attributes
    assert a["ctxguard.pinned.hash"] == Digester(KEY).text(block)
    assert a["ctxguard.pinned.entries"] == 2
    send(client, [{"role": "system", "content": block}, USER])  # at the very start, to the very end
    assert harness.spans()[-1].attributes["ctxguard.pinned.hash"] == Digester(KEY).text(block)


def test_pinned_intact(harness, client):
    harness.start(mode="observe", policy=Policy(pinned=Pinned()))
    send(client, [SYSTEM, {"role": "system", "content": BLOCK}, USER])
    assert outcome(harness, "pinned_intact") == {"pass": 1, "fail": 0, "skip": 0}
    cut_tail = BLOCK.rsplit("\n", 1)[0]  # closing line lost (a byte limit, say)
    send(client, [SYSTEM, {"role": "system", "content": cut_tail}, USER])
    assert violations(harness) == ["pinned_intact"]
    lines = BLOCK.split("\n")
    missing_entry = "\n".join([lines[0], lines[2], lines[3]])
    send(client, [SYSTEM, {"role": "system", "content": missing_entry}, USER])
    assert violations(harness) == ["pinned_intact"]
    send(client, [SYSTEM, {"role": "system", "content": "Pinned facts:\n- city: Pune"}, USER])
    assert outcome(harness, "pinned_intact")["skip"] == 1  # hand-made block: cannot be judged


def test_payload_under_budget_window(harness, client):
    harness.start(mode="observe", policy=Policy(budget=Budget(window=1000)))
    send(client, [SYSTEM, USER], max_tokens=100)
    assert outcome(harness, "payload_under_budget")["pass"] == 1
    send(client, [SYSTEM, USER], max_tokens=990)
    a = harness.spans()[-1].attributes
    assert violations(harness) == ["payload_under_budget"]
    assert a["ctxguard.budget.headroom"] < 0
    assert a["ctxguard.budget.utilization"] > 1
    assert harness.metric("ctxguard_budget_utilization_ratio_count", provider="openai") == 2


def test_payload_exactly_filling_the_window_fits(harness, client):
    """Headroom 0 passes; one token more fails. Counted exactly from the first call: lazily, the
    first call would show its estimate and the next ones, near the window, their exact count
    (docs/budget.md, "What the span shows"), and reports on so short a text teach no calibration."""
    harness.start(mode="observe", policy=Policy(budget=Budget(window=1000)), tokenizer="eager")
    send(client, [SYSTEM, USER], max_tokens=100)
    headroom = harness.spans()[-1].attributes["ctxguard.budget.headroom"]
    assert headroom > 0
    send(client, [SYSTEM, USER], max_tokens=100 + headroom)
    assert harness.spans()[-1].attributes["ctxguard.budget.headroom"] == 0
    assert violations(harness) == []
    send(client, [SYSTEM, USER], max_tokens=101 + headroom)
    assert harness.spans()[-1].attributes["ctxguard.budget.headroom"] == -1
    assert violations(harness) == ["payload_under_budget"]


def test_no_system_message_and_no_pinned_block_reserve_nothing(harness, client):
    harness.start(mode="observe", policy=Policy(budget=Budget(window=1000), pinned=Pinned(required=False)))
    send(client, [USER], max_tokens=100)
    assert harness.spans()[-1].attributes["ctxguard.budget.history_available"] == 900


def test_reasoning_is_not_reserved_twice(harness, client):
    harness.start(mode="observe", policy=Policy(budget=Budget(window=1000)))
    send(client, [SYSTEM, USER], model="o3", max_completion_tokens=900, reasoning_effort="high")
    a = harness.spans()[-1].attributes
    assert a["ctxguard.budget.reserved_output"] == 900
    assert a["ctxguard.budget.reserved_reasoning"] == 0
    assert violations(harness) == []


def test_payload_under_budget_history_max(harness, client):
    history = [SYSTEM] + [{"role": "user", "content": f"turn {i} " + "words " * 30} for i in range(10)]
    harness.start(mode="observe", policy=Policy(budget=Budget(history_max=100)))
    send(client, history)
    details = [e.attributes["detail"] for e in violation_events(harness.spans()[-1])]
    assert violations(harness) == ["payload_under_budget"]
    assert "exceeds history_max 100" in details[0]


def test_model_window_from_table_and_unknown_model_skips(harness, client):
    harness.start(mode="observe")
    send(client, [SYSTEM, USER], model="gpt-4o-2024-08-06")
    assert harness.spans()[-1].attributes["ctxguard.budget.window"] == 128_000
    send(client, [SYSTEM, USER], model="my-finetune-v7")
    a = harness.spans()[-1].attributes
    assert "ctxguard.budget.window" not in a
    assert any(s.startswith("payload_under_budget: unknown context window") for s in a["ctxguard.checks.skipped"])
    assert outcome(harness, "payload_under_budget") == {"pass": 1, "fail": 0, "skip": 1}


def test_tool_schemas_count_against_the_budget(harness, client):
    tool = {"type": "function", "function": {"name": "lookup", "description": "d " * 400,
                                             "parameters": {"type": "object", "properties": {}}}}
    harness.start(mode="observe", policy=Policy(budget=Budget(window=300)))
    send(client, [SYSTEM, USER])
    assert violations(harness) == []
    send(client, [SYSTEM, USER], tools=[tool])
    assert violations(harness) == ["payload_under_budget"]
    assert harness.spans()[-1].attributes["ctxguard.budget.tools"] > 300


@pytest.mark.parametrize("mode", ["observe", "enforce"])
def test_passing_payload_is_never_blocked(harness, llm, client, mode):
    harness.start(mode=mode, policy=Policy(pinned=Pinned(), budget=Budget(reserved_output=1000)))
    send(client, [SYSTEM, {"role": "system", "content": BLOCK}, USER])
    assert len(llm.requests) == 1
    assert violations(harness) == []


@pytest.mark.parametrize("odd", [10, 400_000], ids=["10 tokens reported", "a hundredfold"])
def test_no_single_usage_report_changes_a_later_verdict(harness, llm, client, odd):
    """Calls at the budget's edge are judged the same whether or not one odd usage report (a
    fake reporting 10 tokens for thousands, a discount, an uncounted input) came before."""
    from ctxguard.testing import Reply

    history = [SYSTEM, {"role": "user", "content": "where is my parcel? " * 200}]

    def warm_up(odd_report: bool) -> int:
        harness.start(mode="observe", policy=Policy(budget=Budget(window=4000)))
        for call in range(8):
            if call == 6 and odd_report:
                llm.script(Reply(text="ok", input_tokens=odd))
            send(client, history, max_tokens=1000)
        return int(harness.spans()[-1].attributes["ctxguard.budget.headroom"])

    def verdicts(probes: list[int]) -> list[list[str]]:
        seen = []
        for max_tokens in probes:
            send(client, history, max_tokens=max_tokens)
            seen.append(violations(harness))
        return seen

    headroom = warm_up(False)
    probes = [1000 + headroom - 1, 1000 + headroom, 1000 + headroom + 1]  # the last one token past the edge
    plain = verdicts(probes)
    assert plain == [[], [], ["payload_under_budget"]]
    warm_up(True)
    assert verdicts(probes) == plain


def test_shared_check_outcomes_are_bounded_and_keep_their_reason():
    from ctxguard.checks import Skip, check_caches, outcome
    from ctxguard.checks.base import SETTLED_MAX

    caches = check_caches()
    assert outcome("system_at_head", [], caches) is outcome("system_at_head", [], caches)
    assert outcome("system_at_head", [], caches).outcome == "pass"
    assert outcome("system_at_head", Skip("why"), caches) is outcome("system_at_head", Skip("why"), caches)
    assert outcome("system_at_head", Skip("why"), caches).outcome == "skip"
    assert outcome("system_at_head", Skip("why"), check_caches()) is not outcome("system_at_head", Skip("why"), caches)
    outcomes = [outcome("payload_under_budget", Skip(f"unknown context window for model 'm{i}'"), caches)
                for i in range(SETTLED_MAX + 50)]
    assert 0 < len(caches.settled["payload_under_budget"]) <= SETTLED_MAX
    assert [o.reason for o in outcomes[-2:]] == [f"unknown context window for model 'm{i}'"
                                                  for i in (SETTLED_MAX + 48, SETTLED_MAX + 49)]


HERE = Path(__file__).parent
#: Checks being added with tests of their own kind: tolerated without a table while that file
#: exists (and held to one as soon as it has one).
TOLERATED = {"tool_pairs_intact": HERE / "test_tools.py"}


def _tables(module: object) -> dict[str, list[Case]]:
    """The cases of each ``@table`` (``tests.checks.cases.table``) in ``module``, by check."""
    found: dict[str, list[Case]] = {}
    for test in vars(module).values():
        for mark in getattr(test, "pytestmark", ()):
            if mark.name == "parametrize" and mark.args[0] == "case":
                for case in mark.args[1]:
                    if isinstance(case, Case):
                        found.setdefault(case.check, []).append(case)
    return found


@pytest.mark.parametrize("declared", REGISTRY, ids=[d.name for d in REGISTRY])
def test_every_registered_check_has_a_table_of_cases(declared: Declared):
    """A check is added with a table (one ``@table`` in tests/checks/test_<family>.py, its
    family being the module of its function) with at least a passing and a failing case."""
    family = declared.judge.__module__.rsplit(".", 1)[-1]
    path = HERE / f"test_{family}.py"
    cases = _tables(importlib.import_module(f"tests.checks.test_{family}")).get(declared.name, []) \
        if path.exists() else []
    if not cases and declared.name in TOLERATED and TOLERATED[declared.name].exists():
        pytest.skip(f"{declared.name}: tested in {TOLERATED[declared.name].name}, no table yet (tolerated)")
    assert cases, f"{declared.name} has no table of cases in {path.relative_to(HERE.parent.parent)}"
    outcomes = {case.expect for case in cases}
    assert {PASS, FAIL} <= outcomes, f"the table of {declared.name} needs a passing and a failing case"
