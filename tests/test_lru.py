"""``BoundedLRU`` (ctxguard/cache.py): the one LRU every per-conversation memory is kept in."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from ctxguard.cache import BoundedLRU

by_len = len


def test_the_least_recently_put_goes_first_and_is_handed_back():
    lru: BoundedLRU[str, int] = BoundedLRU(3)
    assert [lru.put(k, i) for i, k in enumerate("abc")] == [(), (), ()]
    assert lru.put("d", 3) == [("a", 0)]
    assert list(lru) == ["b", "c", "d"] and len(lru) == 3


def test_a_get_is_a_use_a_look_is_not():
    lru: BoundedLRU[str, int] = BoundedLRU(3)
    for i, k in enumerate("abc"):
        lru.put(k, i)
    assert lru.get("a") == 0  # a is now the most recent: b is the oldest
    assert lru.peek("b") == 1 and lru["b"] == 1 and "b" in lru  # looks: b stays the oldest
    assert lru.get("x") is None and lru.get("x", -1) == -1 and lru.peek("x") is None
    assert lru.put("d", 3) == [("b", 1)]
    assert list(lru) == ["c", "a", "d"]


def test_putting_a_kept_key_replaces_its_value_and_makes_it_the_most_recent():
    lru: BoundedLRU[str, int] = BoundedLRU(2)
    lru.put("a", 0)
    lru.put("b", 1)
    assert lru.put("a", 10) == ()
    assert list(lru.items()) == [("b", 1), ("a", 10)]
    assert lru.put("c", 2) == [("b", 1)]


def test_a_byte_budget_drops_the_oldest_until_it_fits_and_hands_them_all_back_oldest_first():
    lru: BoundedLRU[str, str] = BoundedLRU(100, 10, by_len)
    for k in "abcd":
        assert lru.put(k, "xx") == ()
    assert lru.bytes == 8
    assert lru.put("e", "xxxxxx") == [("a", "xx"), ("b", "xx")]  # 14 bytes: two must go
    assert list(lru) == ["c", "d", "e"] and lru.bytes == 10  # exactly the budget is within it


def test_an_entry_heavier_than_the_budget_is_not_kept_and_costs_the_others_nothing():
    lru: BoundedLRU[str, str] = BoundedLRU(100, 10, by_len)
    lru.put("a", "xxxx")
    lru.put("b", "xxxx")
    assert lru.put("big", "x" * 11) == (("big", "x" * 11),)
    assert list(lru) == ["a", "b"] and lru.bytes == 8
    assert lru.put("a", "x" * 11) == (("a", "x" * 11),)  # a kept key given a value too heavy: gone
    assert list(lru) == ["b"] and lru.bytes == 4


def test_keep_newest_keeps_the_entry_just_used_even_alone_over_the_budget():
    lru: BoundedLRU[str, str] = BoundedLRU(100, 10, by_len, keep_newest=True)
    lru.put("a", "xxxx")
    lru.put("b", "xxxx")
    assert lru.put("big", "x" * 11) == [("a", "xxxx"), ("b", "xxxx")]
    assert list(lru) == ["big"] and lru.bytes == 11
    assert lru.put("c", "x") == [("big", "x" * 11)]


class Box:
    """A value that grows in place, weighing what it says."""

    def __init__(self, size: int) -> None:
        self.size = size


def box_size(box: Box) -> int:
    return box.size


def test_an_entry_grown_in_place_is_counted_and_the_oldest_make_room_for_it():
    lru: BoundedLRU[str, Box] = BoundedLRU(100, 10, box_size, keep_newest=True)
    a, b, c = Box(3), Box(3), Box(3)
    for k, box in zip("abc", (a, b, c), strict=True):
        lru.put(k, box)
    assert lru.resized("x", 100) == () and lru.bytes == 9  # not kept: nothing to count
    c.size += 3
    assert lru.resized("c", 3) == [("a", a)]
    assert lru.bytes == 9
    c.size += 10
    assert lru.resized("c", 10) == [("b", b)]  # alone over the budget, and kept: it is the newest
    assert list(lru) == ["c"] and lru.bytes == 16
    c.size -= 16
    assert lru.resized("c", -16) == () and lru.bytes == 0


def test_without_keep_newest_an_entry_grown_alone_over_the_budget_goes_alone():
    lru: BoundedLRU[str, Box] = BoundedLRU(100, 10, box_size)
    a, b = Box(3), Box(3)
    lru.put("a", a)
    lru.put("b", b)
    b.size = 11
    assert lru.resized("b", 8) == (("b", b),)
    assert list(lru) == ["a"] and lru.bytes == 3


def test_pop_popitem_and_clear_give_back_their_bytes():
    lru: BoundedLRU[str, str] = BoundedLRU(100, 100, by_len)
    for k, v in (("a", "x"), ("b", "xx"), ("c", "xxx"), ("d", "xxxx")):
        lru.put(k, v)
    assert lru.pop("b") == "xx" and lru.bytes == 8
    assert lru.pop("b", None) is None and lru.bytes == 8
    assert lru.popitem(last=False) == ("a", "x") and lru.bytes == 7
    assert lru.popitem() == ("d", "xxxx") and lru.bytes == 3
    lru.clear()
    assert not lru and lru.bytes == 0
    try:
        lru.pop("a")
    except KeyError:
        pass
    else:
        raise AssertionError("pop of a missing key without a default must raise")


def test_a_cap_lowered_at_run_time_is_held_at_the_next_put():
    lru: BoundedLRU[int, int] = BoundedLRU(10)
    for i in range(10):
        lru.put(i, i)
    lru.max_entries = 3
    assert lru.put(10, 10) == [(i, i) for i in range(8)]
    assert list(lru) == [8, 9, 10]


ops = st.lists(st.tuples(st.sampled_from(["put", "get", "pop"]), st.integers(0, 7), st.integers(0, 6)),
               max_size=60)


@given(ops=ops, max_entries=st.integers(1, 5), max_bytes=st.integers(0, 12), keep_newest=st.booleans())
def test_it_behaves_as_a_list_in_recency_order(ops, max_entries, max_bytes, keep_newest):
    """Against the plainest model of the rules: a list of (key, size), least recently used first."""
    lru: BoundedLRU[int, int] = BoundedLRU(max_entries, max_bytes, int, keep_newest=keep_newest)
    model: list[tuple[int, int]] = []
    for op, key, size in ops:
        found = next((kv for kv in model if kv[0] == key), None)
        if op == "get":
            assert lru.get(key) == (found[1] if found else None)
            if found:
                model.remove(found)
                model.append(found)
        elif op == "pop":
            assert lru.pop(key, None) == (found[1] if found else None)
            if found:
                model.remove(found)
        else:
            if found:
                model.remove(found)
            model.append((key, size))
            expected: list[tuple[int, int]] = []
            if size > max_bytes and not keep_newest:
                expected = [model.pop()]
            else:
                while len(model) > (1 if keep_newest else 0) and (
                        len(model) > max_entries or sum(s for _, s in model) > max_bytes):
                    expected.append(model.pop(0))
            assert list(lru.put(key, size)) == expected
        assert list(lru.items()) == model
        assert lru.bytes == sum(s for _, s in model)


# Each place that keeps one: its bound and its recency, as its callers see them.


def test_stage_checkpoints_forget_the_least_recently_checkpointed_conversation():
    from ctxguard.facts.stages import StageBook

    book = StageBook(max_conversations=2)
    book.put(("a", None), "selection", "x")
    book.put(("b", None), "selection", "y")
    book.put(("a", None), "payload", "z")  # a used again: b is the oldest
    book.put(("c", None), "selection", "w")
    assert book.take(("b", None)) == {}
    assert {stage: held.norm for stage, held in book.take(("a", None)).items()} == {"selection": "x", "payload": "z"}
    assert {stage: held.norm for stage, held in book.take(("c", None)).items()} == {"selection": "w"} and book.empty


def test_conversations_with_lost_fact_writes_are_remembered_up_to_ten_thousand():
    from ctxguard.facts import Sinks

    sinks = Sinks()
    for n in range(10_001):
        sinks.failed((f"c{n}", None))
    assert len(sinks.lost) == 10_000
    assert ("c0", None) not in sinks.lost and ("c1", None) in sinks.lost and ("c10000", None) in sinks.lost


def test_the_value_index_drops_its_least_recently_recorded_value_and_its_word():
    from ctxguard.facts.index import ValueIndex, words
    from ctxguard.facts.ledger import Version

    index = ValueIndex(max_entries=2)

    def add(scope: str, value: str) -> None:
        index.add((scope, None), Version("f", value, value, 0))

    def found(value: str) -> list[str]:
        return [c.version.value for c in index.foreign(("me", None), [words(value)])]

    add("a", "alpha-111")
    add("b", "bravo-222")
    add("c", "alpha-111")  # recorded again: bravo is the oldest
    add("d", "delta-444")
    assert len(index) == 2
    assert found("bravo-222") == [] and found("alpha-111") == ["alpha-111"] and found("delta-444") == ["delta-444"]
    assert "bravo" not in index._buckets.words and "bravo" not in index._buckets.keys  # its word went with it


def test_a_value_remembers_the_last_conversations_that_recorded_it():
    from ctxguard.facts.index import MAX_OWNERS, ValueIndex, words
    from ctxguard.facts.ledger import Version

    index = ValueIndex()
    for scope in ["o0", "o1", "o2", "o3", "o4", "o1"]:  # o1 again: the most recent
        index.add((scope, None), Version("f", "alpha-111", "alpha-111", 0))
    owners = index._values["alpha-111"].owners
    assert len(owners) == MAX_OWNERS and list(owners) == [("o2", None), ("o3", None), ("o4", None), ("o1", None)]
    assert [c.scope for c in index.foreign(("me", None), [words("alpha-111")])] == [("o1", None)]
    # A conversation among the owners recorded the value itself: not foreign to it, even when its
    # ledger cannot be read to say so (docs/facts.md, "Across processes").
    assert index.foreign(("o4", None), [words("alpha-111")]) == []
    # One the cap pushed out is told of the most recent other.
    assert [c.scope for c in index.foreign(("o0", None), [words("alpha-111")])] == [("o1", None)]


def test_lossy_summary_notes_forget_the_least_recently_noted_conversation():
    from ctxguard.summaries import LossyNotes

    notes = LossyNotes(max_conversations=2)
    notes.note(("a", None), ["f1"])
    notes.note(("b", None), ["f2"])
    notes.note(("a", None), ["f3"])  # noted again: b is the oldest
    notes.note(("c", None), ["f4"])
    assert notes.take(("b", None)) == ()
    assert notes.take(("a", None)) == ("f3",) and notes.take(("c", None)) == ("f4",)


def test_the_warning_limiter_forgets_the_least_recently_warned_conversation(monkeypatch):
    from ctxguard.telemetry import log

    monkeypatch.setattr(log, "MAX_TRACKED", 2)
    limiter = log.WarningLimiter(clock=lambda: 0.0)
    for _ in range(log.BURST):
        assert limiter.take("a") is not None
    assert limiter.take("a") is None  # a's burst spent, one held back
    limiter.take("b")
    limiter.take("a")  # warned again (held back): b is the oldest
    limiter.take("c")  # b forgotten
    assert limiter.take("a") is None  # a remembered: still out of budget
    limiter.take("d")  # c forgotten: a is the oldest
    limiter.take("e")  # a forgotten
    assert limiter.take("a") == 0  # forgotten: a fresh budget, nothing said held back


def test_capture_turn_counters_forget_the_least_recently_captured_conversation(monkeypatch, tmp_path):
    from ctxguard import capture

    monkeypatch.setattr(capture, "_MAX_TURN_COUNTERS", 2)
    writer = capture.CaptureWriter(str(tmp_path / "capture.jsonl"))
    for scope in ("a", "b", "a", "c", "a", "b"):
        writer.request((scope, None), "openai", {})
    writer.close()
    lines = [json.loads(line) for line in (tmp_path / "capture.jsonl").read_text().splitlines()]
    # b forgotten when c came (a was captured after it), a kept throughout: it was never the oldest
    assert [(line["conversation_id"], line["turn"]) for line in lines] == [
        ("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3), ("b", 1)]


def test_the_ledger_forgets_the_conversation_least_recently_written_and_the_fact_least_recently_revised():
    from datetime import datetime, timezone

    from ctxguard.facts.ledger import FactEvent, MemoryLedger

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ledger = MemoryLedger(max_conversations=2, max_facts=2)
    ledger.append(FactEvent(("a", None), "city", "Pune"))
    ledger.append(FactEvent(("b", None), "city", "Delhi"))
    ledger.append(FactEvent(("a", None), "zip", "411001"))  # a written again: b is the oldest
    ledger.state(("b", None), now)  # read, not written: still the oldest
    ledger.append(FactEvent(("c", None), "city", "Goa"))
    assert ledger.overflow == 1
    assert ledger.state(("b", None), now).active == {}
    assert sorted(ledger.state(("a", None), now).active) == ["city", "zip"]
    ledger.append(FactEvent(("a", None), "city", "Mumbai"))  # city revised: zip is the least recently
    ledger.append(FactEvent(("a", None), "name", "Asha"))
    assert ledger.overflow == 2  # the fact dropped counted too
    assert sorted(ledger.state(("a", None), now).active) == ["city", "name"]


def test_memos_dropped_for_their_bytes_no_longer_count_as_kept_messages():
    from ctxguard.memo import MEMO_BYTES, Memos

    memos = Memos(max_bytes=3 * MEMO_BYTES)  # three memos that keep nothing: each weighs MEMO_BYTES
    for key in "abcde":
        memos.settle(key, memos.get(key))
    assert len(memos) == 3 and memos.kept == 3 and memos.bytes == 3 * MEMO_BYTES
    assert "a" not in memos._memos and "c" in memos._memos


def _conversation_payload(n: int, digest: str, extends: str | None = None):
    from ctxguard.digest import Digester
    from ctxguard.payload import Message, Payload

    digester = Digester(b"k")
    messages = [Message("user", f"m{i}", digester.text(f"user\x1fm{i}"), 1) for i in range(n)]
    return Payload("openai", "chat", "m", messages, [m.digest for m in messages], digest, 0, 0, "estimate", 0,
                   None, False, None, None, extends=extends)


def test_the_conversation_memory_keeps_the_conversation_just_seen_even_alone_over_its_budget():
    from ctxguard.conversation import ConversationMemory

    memory = ConversationMemory(max_bytes=4 * 1024)
    memory.observe(("small", None), _conversation_payload(1, "s1"), pinned=False)
    memory.observe(("big", None), _conversation_payload(1_000, "b1"), pinned=False)  # 8 KB of keys alone
    assert len(memory) == 1 and memory.bytes > memory.max_bytes  # the small one made room, in vain
    assert memory.observe(("big", None), _conversation_payload(1_001, "b2"), pinned=False).prev_hash == "b1"


def test_the_conversation_memory_counts_what_a_grown_history_adds_to_it():
    """The common case, a history resent and grown (the memo says so: ``extends``): the keys of its
    new messages count against the budget as soon as they are kept."""
    from ctxguard.conversation import STATE_BYTES, ConversationMemory

    memory = ConversationMemory(max_bytes=4 * 1024)
    memory.observe(("old", None), _conversation_payload(1, "o1"), pinned=False)
    memory.observe(("grows", None), _conversation_payload(1, "g1"), pinned=False)
    assert memory.bytes == 2 * (STATE_BYTES + 8)
    memory.observe(("grows", None), _conversation_payload(400, "g2", extends="g1"), pinned=False)
    assert memory.bytes == STATE_BYTES + 8 * 400 and len(memory) == 1  # the old one dropped for its keys
    assert memory.observe(("old", None), _conversation_payload(1, "o2"), pinned=False).prev_hash is None


def test_a_body_whose_conversation_was_dropped_while_it_was_hashed_is_kept_anew(monkeypatch):
    """Another call of another conversation can push this one out between the look-up and the
    update (both under the lock, the hashing between them not): its body is then kept as new."""
    from ctxguard import wiredigest
    from ctxguard.digest import Digester

    digester = Digester(b"k")
    digests = wiredigest.WireDigests(digester, max_bytes=12_000)
    digests.digest("a", b"a" * 5_000)
    real = wiredigest.common_prefix

    def meanwhile(a: bytes, b: bytes, start: int) -> int:
        monkeypatch.setattr(wiredigest, "common_prefix", real)
        digests.digest("b", b"b" * 7_500)  # a, 5,000 bytes, must make room: dropped
        return real(a, b, start)

    monkeypatch.setattr(wiredigest, "common_prefix", meanwhile)
    assert digests.digest("a", b"a" * 4_500) == digester.bytes(b"a" * 4_500)
    assert list(digests._kept) == ["b", "a"] and digests._kept.bytes == 12_000
