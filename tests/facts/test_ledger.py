"""The reducer and the in-memory store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ctxguard.facts import FactEvent, MemoryLedger, reduce

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)
S = ("c1", None)


def ev(value, *, fact="city", seq=None, arrival=0, expires=None, scope=S):
    return FactEvent(scope, fact, value, seq, expires, True, arrival)


def test_latest_revision_wins_by_arrival():
    state = reduce([ev("Mumbai", arrival=1), ev("Pune", arrival=2)], NOW)
    assert state.active["city"].value == "Pune"
    assert state.active["city"].label == "city@2"
    assert [v.label for v in state.stale["city"]] == ["city@1"]


def test_a_late_event_with_a_lower_sequence_does_not_win():
    state = reduce([ev("Pune", seq=2, arrival=1), ev("Mumbai", seq=1, arrival=2)], NOW)
    assert state.active["city"].value == "Pune"
    assert state.active["city"].version == 2
    assert state.stale["city"][0].value == "Mumbai"


def test_ties_are_broken_deterministically():
    a = reduce([ev("Pune", seq=1, arrival=1), ev("Mumbai", seq=1, arrival=2)], NOW)
    b = reduce([ev("Mumbai", seq=1, arrival=1), ev("Pune", seq=1, arrival=2)], NOW)
    assert a.active["city"].value == b.active["city"].value


def test_events_without_a_sequence_come_after_the_revisions_seen():
    state = reduce([ev("Mumbai", seq=10, arrival=1), ev("Pune", arrival=2)], NOW)
    assert state.active["city"].value == "Pune"


def test_deletion_and_expiry_remove():
    deleted = reduce([ev("+91 98200 12345", fact="phone", arrival=1), ev(None, fact="phone", arrival=2)], NOW)
    assert "phone" not in deleted.active
    assert [v.value for v in deleted.forgotten["phone"]] == ["+91 98200 12345"]
    expiring = [ev("482913", fact="otp", arrival=1, expires=NOW)]
    assert "otp" in reduce(expiring, NOW - timedelta(microseconds=1)).active
    assert "otp" in reduce(expiring, NOW).forgotten
    assert reduce(expiring, NOW - timedelta(seconds=1)).next_expiry == NOW


def test_a_revision_back_to_an_old_value_is_not_stale():
    state = reduce([ev("Pune", arrival=1), ev("Mumbai", arrival=2), ev("pune", arrival=3)], NOW)
    assert state.active["city"].version == 3
    assert [v.value for v in state.stale["city"]] == ["Mumbai"]


def test_memory_ledger_scopes_and_bounds():
    ledger = MemoryLedger(max_conversations=2, max_facts=2)
    ledger.append(ev("Pune"))
    ledger.append(ev("Delhi", scope=("c1", "tenant-b")))
    assert ledger.state(S, NOW).active["city"].value == "Pune"
    assert ledger.state(("c1", "tenant-b"), NOW).active["city"].value == "Delhi"
    ledger.append(ev("Goa", scope=("c3", None)))
    assert ledger.state(S, NOW).active == {}  # least recently used conversation dropped
    assert ledger.overflow == 1
    for fact in ("a", "b", "c"):
        ledger.append(ev("value " + fact, fact=fact, scope=("c3", None)))
    assert sorted(ledger.state(("c3", None), NOW).active) == ["b", "c"]
    with pytest.raises(ValueError):
        MemoryLedger(max_facts=0)


def test_memory_ledger_state_is_recomputed_at_expiry():
    ledger = MemoryLedger()
    ledger.append(ev("482913", fact="otp", expires=NOW))
    assert "otp" in ledger.state(S, NOW - timedelta(seconds=1)).active
    assert "otp" in ledger.state(S, NOW).forgotten


def test_facts_recorded_before_instrument_are_kept_by_the_default_ledger():
    import ctxguard

    with ctxguard.conversation("early-bird"):
        ctxguard.record_fact("city", "Pune")
    ctxguard.instrument(digest_key="k")
    from ctxguard import facts

    assert facts.SINKS.ledger.state(("early-bird", None), NOW).active["city"].value == "Pune"


def test_index_keys_values_by_their_rarest_word_so_shared_prefixes_do_not_pile_up():
    from ctxguard.facts import Version
    from ctxguard.facts.index import ValueIndex, words
    from ctxguard.facts.matching import normalise

    index = ValueIndex()
    for k in range(50):
        value = f"ACC-{k:04d}-shared"
        index.add((f"c{k}", None), Version("account", value, normalise(value), 1))
    payload = [words(normalise("my account is ACC-0007-shared"))]
    found = [c.version.value for c in index.foreign(("me", None), payload)]
    assert "ACC-0007-shared" in found
    assert len(found) <= 2  # candidates, verified by substring search afterwards; not all 50


def test_sinks_are_idle_only_while_nothing_at_all_is_recorded():
    from ctxguard.facts import Sinks, Version

    scope = ("c", None)
    assert Sinks().idle()
    sinks = Sinks()
    sinks.ledger.append(FactEvent(scope, "city", "Pune"))
    assert not sinks.idle()
    sinks = Sinks()
    sinks.index.add(scope, Version("city", "Pune", "pune", 0))
    assert not sinks.idle()
    sinks = Sinks()
    sinks.stages.put(scope, "selection", "text")
    assert not sinks.idle()
    sinks = Sinks()
    sinks.failed(scope)
    assert not sinks.idle()

    class Remote(MemoryLedger):  # another store: only it knows what it holds
        pass

    assert not Sinks(ledger=Remote()).idle()
