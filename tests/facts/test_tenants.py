"""Whose fact it is: ``tenant=`` on record_fact / forget_fact / checkpoint, and how
``conversation=`` combines with an active ``conversation()`` scope (docs/facts.md).

A fact recorded from outside the scope (a webhook, a back-office job) must land in
the same (conversation, tenant) scope as the calls of that conversation: otherwise
its own value pages as a cross-conversation leak and its deletion is not enforced.
Real openai SDK over the loopback fake; the same through RedisLedger and a capture
file read by ``ctxguard check``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

import ctxguard
from ctxguard.testing import record
from tests.facts.test_redis_ledger import PATIENT  # fact semantics, not timing

SYSTEM = {"role": "system", "content": "You are the order assistant."}
ACCOUNT = "4417-2231-9902"
PHONE = "+91 98200 12345"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def ask(client, text: str) -> None:
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": text}])


def violations(harness) -> list[str]:
    return list(harness.spans()[-1].attributes["ctxguard.violations"])


# -- the rule ------------------------------------------------------------------------


@pytest.mark.parametrize(("active", "kwargs", "scope"), [
    (None, {"conversation": "c", "tenant": "acme"}, ("c", "acme")),
    (None, {"conversation": "c"}, ("c", None)),  # outside any scope: no tenant, as documented
    (("c", "acme"), {}, ("c", "acme")),
    (("c", "acme"), {"conversation": "c"}, ("c", "acme")),  # the scope's own conversation: its tenant
    (("c", "acme"), {"conversation": "d"}, ("d", None)),  # another conversation: not the scope's tenant
    (("c", "acme"), {"conversation": "d", "tenant": "acme"}, ("d", "acme")),
    (("c", "acme"), {"tenant": "globex"}, ("c", "globex")),  # what is given wins
    (("c", None), {"tenant": "acme"}, ("c", "acme")),
])
def test_a_facts_scope_is_what_is_given_then_the_active_scope_of_the_same_conversation(harness, active, kwargs, scope):
    ledger = ctxguard.MemoryLedger()
    harness.start(mode="observe", ledger=ledger, clock=lambda: NOW)

    def write() -> None:
        ctxguard.record_fact("city", "Lyon", **kwargs)
        ctxguard.record_fact("phone", PHONE, **kwargs)
        ctxguard.forget_fact("phone", **kwargs)

    if active is None:
        write()
    else:
        with ctxguard.conversation(active[0], tenant=active[1]):
            write()
    state = ledger.state(scope, NOW)
    assert list(state.active) == ["city"]
    assert list(state.forgotten) == ["phone"]
    others = {("c", "acme"), ("c", None), ("d", None), ("d", "acme"), ("c", "globex")} - {scope}
    assert all(not ledger.state(other, NOW).active for other in others)


@pytest.mark.parametrize("bad", ["", 7])
def test_a_bad_tenant_is_refused_clearly(harness, bad):
    harness.start(mode="observe")
    for call in (lambda: ctxguard.record_fact("city", "Lyon", conversation="c", tenant=bad),
                 lambda: ctxguard.forget_fact("city", conversation="c", tenant=bad),
                 lambda: ctxguard.checkpoint("load", "x", conversation="c", tenant=bad)):
        with pytest.raises(ValueError, match="tenant must be a non-empty string"):
            call()


def test_a_tenant_alone_still_needs_a_conversation(harness):
    harness.start(mode="observe")
    with pytest.raises(ValueError, match="needs a conversation"):
        ctxguard.record_fact("city", "Lyon", tenant="acme")


# -- through the real SDK ------------------------------------------------------------


@pytest.mark.parametrize(("tenant", "expected"), [
    ("acme", []),  # the conversation's own fact: not foreign
    (None, ["fact_scoped"]),  # recorded without its tenant: another scope (the documented rule)
    ("globex", ["fact_scoped"]),  # another tenant's conversation of the same name: a leak
])
def test_own_fact_recorded_from_outside_the_scope_is_not_foreign(harness, llm, client, tenant, expected):
    harness.start(mode="observe")
    ctxguard.record_fact("account", ACCOUNT, conversation="order-41", tenant=tenant)
    with ctxguard.conversation("order-41", tenant="acme"):
        ask(client, f"my account is {ACCOUNT}")
    assert violations(harness) == expected
    a = harness.spans()[-1].attributes
    assert list(a.get("ctxguard.facts.leaked", ())) == (["account@foreign"] if expected else [])
    assert list(a.get("ctxguard.facts.present", ())) == ([] if expected else ["account@1"])


def test_a_fact_recorded_from_outside_with_its_tenant_is_required_in_the_scope(harness, llm, client):
    harness.start(mode="observe")
    ctxguard.record_fact("account", ACCOUNT, conversation="order-41", tenant="acme")
    with ctxguard.conversation("order-41", tenant="acme"):
        ask(client, "what is my balance?")
    assert violations(harness) == ["fact_present"]


@pytest.mark.parametrize(("tenant", "expected"), [("acme", ["fact_forgotten"]), (None, [])])
def test_a_deletion_recorded_from_outside_with_its_tenant_is_enforced(harness, llm, client, tenant, expected):
    harness.start(mode="observe")
    with ctxguard.conversation("order-41", tenant="acme"):
        ctxguard.record_fact("phone", PHONE)
    ctxguard.forget_fact("phone", conversation="order-41", tenant=tenant)  # None: another scope's deletion
    with ctxguard.conversation("order-41", tenant="acme"):
        ask(client, f"call me on {PHONE}")
    assert violations(harness) == expected


@pytest.mark.parametrize(("tenant", "stage"), [("acme", "selection"), (None, "payload")])
def test_a_checkpoint_made_from_outside_with_its_tenant_is_the_scopes(harness, llm, client, tenant, stage):
    harness.start(mode="observe")
    with ctxguard.conversation("order-41", tenant="acme"):
        ctxguard.record_fact("shipping_city", "Mumbai")
        ctxguard.record_fact("shipping_city", "Pune")
    ctxguard.checkpoint("selection", ["deliver to Mumbai"], conversation="order-41", tenant=tenant)
    with ctxguard.conversation("order-41", tenant="acme"):
        ask(client, "deliver to Mumbai")
    a = harness.spans()[-1].attributes
    assert violations(harness) == ["fact_present", "fact_current"]
    assert a["ctxguard.divergence.stage"] == stage


# -- through RedisLedger -------------------------------------------------------------


@pytest.mark.parametrize(("tenant", "expected"), [("acme", []), ("globex", ["fact_scoped"])])
def test_redis_own_fact_recorded_from_outside_the_scope_is_not_foreign(
    redis_url, harness, llm, client, tenant, expected
):
    harness.start(mode="observe", ledger=ctxguard.RedisLedger(redis_url, prefix=uuid.uuid4().hex, read_timeout=PATIENT))
    ctxguard.record_fact("account", ACCOUNT, conversation="order-41", tenant=tenant)
    with ctxguard.conversation("order-41", tenant="acme"):
        ask(client, f"my account is {ACCOUNT}")
    assert violations(harness) == expected


@pytest.mark.parametrize(("tenant", "expected"), [("acme", ["fact_forgotten"]), (None, [])])
def test_redis_deletion_recorded_by_another_worker_outside_any_scope_is_enforced(
    redis_url, harness, llm, client, tenant, expected
):
    """The back-office worker deletes the phone number by (conversation, tenant), in no scope."""
    prefix = uuid.uuid4().hex
    harness.start(mode="observe", ledger=ctxguard.RedisLedger(redis_url, prefix=prefix, read_timeout=PATIENT))
    with ctxguard.conversation("order-41", tenant="acme"):
        ctxguard.record_fact("phone", PHONE)
    script = textwrap.dedent(f"""
        import ctxguard
        ctxguard.instrument(ledger=ctxguard.RedisLedger({redis_url!r}, prefix={prefix!r}), digest_key="k")
        ctxguard.forget_fact("phone", conversation="order-41", tenant={tenant!r})
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with ctxguard.conversation("order-41", tenant="acme"):
        ask(client, f"call me on {PHONE}")
    assert violations(harness) == expected


# -- through a capture file and ctxguard check ------------------------------------------


@pytest.mark.parametrize(("tenant", "first"), [
    ("acme", "order-41: first violation at turn 1: fact_forgotten"),
    ("globex", "order-41: first violation at turn 1: fact_scoped"),
])
def test_check_judges_fact_lines_in_their_tenants_scope(tmp_path: Path, harness, llm, client, tenant, first):
    harness.start(mode="observe")
    path = tmp_path / "cap.jsonl"
    with record(str(path)):
        ctxguard.record_fact("account", ACCOUNT, conversation="order-41", tenant=tenant)
        ctxguard.record_fact("phone", PHONE, conversation="order-41", tenant=tenant)
        ctxguard.forget_fact("phone", conversation="order-41", tenant=tenant)
        with ctxguard.conversation("order-41", tenant="acme"):
            ask(client, f"account {ACCOUNT}, phone {PHONE}")
    facts = [json.loads(line) for line in path.read_text().splitlines() if '"fact"' in line]
    assert {line.get("tenant") for line in facts} == {tenant}
    live = violations(harness)
    out = subprocess.run([sys.executable, "-m", "ctxguard.cli", "check", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines()[0] == first
    assert live == first.rsplit(": ", 1)[1].split(", ")  # offline says what the live guard said
