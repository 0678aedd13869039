"""The indexes of recorded values keep within their bytes (issue 43): this process's ``ValueIndex``
and, with a shared ``RedisLedger``, the fleet's ``DigestIndex`` hold at most ``INDEX_BYTES`` each,
however long the values and however many words they have, whatever ``max_shared`` says; the
least recently recorded values go first, and the newest are still found (docs/facts.md, "How
much is remembered")."""

from __future__ import annotations

import functools
import random
import time
import uuid

import pytest

import ctxguard
from ctxguard import facts as facts_mod
from ctxguard.digest import Digester
from ctxguard.facts.index import INDEX_BYTES, ValueIndex, words
from ctxguard.facts.ledger import FactEvent, Version
from ctxguard.facts.matching import match_key, normalise
from ctxguard.facts.shared import DigestIndex, SharedValue, ValueDigests
from tests.conftest import traced

#: Values of 120 words (about 1 KB): an entry is ~20 KB, so the bound holds ~200 of them.
WORDS = 120
#: Enough such values for ~5 times the bound.
VALUES = 1_000
HANG_GUARD_S = 30.0  # a bound against hanging, not a performance claim
SYSTEM = {"role": "system", "content": "You are the order assistant."}


@functools.cache
def notes() -> list[str]:
    """Long values: notes of many words (each new to the index), numbered, the oldest first."""
    rng = random.Random(43)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [" ".join("".join(rng.choice(letters) for _ in range(rng.randint(4, 10))) for _ in range(WORDS)) + f" n{n}"
            for n in range(VALUES)]


def test_this_process_index_keeps_within_its_bytes_however_long_the_values() -> None:
    notes()  # made before: what is retained is the index's
    with traced() as retained:
        index = ValueIndex()  # the default count, 100,000 values: the bytes are what bind
        for n, note in enumerate(notes()):
            for owner in range(2):  # two conversations recorded it, each its own copy
                value = "".join(note)
                index.add((f"conversation-{n}-{owner}", None), Version("note", value, normalise(value), 0))
        del value
        kept = retained()
    assert kept < INDEX_BYTES, f"{kept / 2**20:.1f} MiB retained"
    assert 0 < len(index) < VALUES
    newest, oldest = notes()[-1], notes()[0]
    assert [c.version.value for c in index.foreign(("me", None), [words(normalise(newest))])] == [newest]
    assert index.foreign(("me", None), [words(normalise(oldest))]) == []


def test_the_fleet_index_keeps_within_its_bytes_whatever_max_shared_says() -> None:
    digests = ValueDigests(Digester(b"k"))
    entries = []
    for n in range(VALUES):
        norm = normalise(notes()[n])
        shared = digests.shared((f"conversation-{n}", None), "note", norm, "other process")
        assert shared is not None
        # As the reader gets them from Redis: bytes, decoded into strings of the index's own.
        entries.append({k.encode(): str(v).encode() for k, v in shared.fields().items()})
    with traced() as retained:
        index = DigestIndex(digests, max_entries=10 * VALUES)  # a max_shared far past what is recorded
        while entries:
            index.add(SharedValue.from_fields(entries.pop(0)))
        kept = retained()
    assert kept < INDEX_BYTES, f"{kept / 2**20:.1f} MiB retained"
    assert 0 < len(index) < VALUES
    newest, oldest = normalise(notes()[-1]), normalise(notes()[0])

    def found(text: str) -> list[str]:
        word_sets = [words(text)]
        return [v.value for _, v in index.foreign(("me", None), frozenset(), [text], [text], word_sets)]

    assert found(newest) == [newest]
    assert found(oldest) == []


def ask(client, text: str):
    return client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": text}])


def test_a_leak_of_the_newest_long_values_is_still_caught(harness, llm, client) -> None:
    """Through the real openai SDK: past the bound, a recent value sent in another conversation
    fails ``fact_scoped``; one of the first, dropped since, is no longer seen."""
    harness.start(mode="observe")
    for n in range(VALUES):
        ctxguard.record_fact(f"note{n}", notes()[n], conversation=f"customer-{n}")
    index = facts_mod.SINKS.index
    assert 0 < len(index) < VALUES and index._values.bytes <= INDEX_BYTES
    with ctxguard.conversation("someone-else"):
        ask(client, f"as noted: {notes()[-1]}")
        ask(client, f"as noted: {notes()[0]}")
    newest, oldest = (s.attributes for s in harness.spans()[-2:])
    assert list(newest["ctxguard.violations"]) == ["fact_scoped"]
    assert list(newest["ctxguard.facts.leaked"]) == [f"note{VALUES - 1}@foreign"]
    assert notes()[-1] in llm.bodies()[-2]["messages"][1]["content"]  # it was sent
    assert "fact_scoped" not in oldest.get("ctxguard.violations", ())
    assert notes()[0] in llm.bodies()[-1]["messages"][1]["content"]  # sent, and not seen


def test_a_leak_of_the_newest_long_values_of_another_process_is_still_caught(harness, llm, client, redis_url) -> None:
    """Another process's values, through the shared values stream: past the bound, the newest is
    found in this process's payload, and one of the first is not."""
    redis = pytest.importorskip("redis")
    prefix = f"t{uuid.uuid4().hex[:12]}"
    key = b"ctxguard-tests"  # the harness's digest key: both ends digest alike
    other = ctxguard.RedisLedger(redis_url, prefix=prefix, read_timeout=1.0)
    other.share(Digester(key))
    mine = ctxguard.RedisLedger(redis_url, prefix=prefix, read_timeout=1.0)
    try:
        harness.start(mode="observe", ledger=mine, digest_key=key)
        for n in range(VALUES):
            other.append(FactEvent((f"customer-{n}", None), f"note{n}", notes()[n]))
        reader = facts_mod.SINKS.shared
        assert reader is not None
        last = redis.Redis.from_url(redis_url).xrevrange(other.stream_key, count=1)[0][0].decode()
        deadline = time.monotonic() + HANG_GUARD_S
        while reader.last_id != last:
            assert time.monotonic() < deadline, "the reader never caught up"
            time.sleep(0.01)
        index = reader.index
        assert 0 < len(index) < VALUES and index._values.bytes <= INDEX_BYTES
        with ctxguard.conversation("someone-else"):
            ask(client, f"as noted: {notes()[-1]}")
            ask(client, f"as noted: {notes()[0]}")
        newest, oldest = (s.attributes for s in harness.spans()[-2:])
        assert newest["ctxguard.facts.reach"] == "fleet"
        assert list(newest["ctxguard.violations"]) == ["fact_scoped"]
        assert list(newest["ctxguard.facts.leaked"]) == [f"note{VALUES - 1}@foreign"]
        assert "fact_scoped" not in oldest.get("ctxguard.violations", ())
        assert match_key(notes()[0]) in normalise(llm.bodies()[-1]["messages"][1]["content"])
    finally:
        harness.stop()
        other.close()
        mine.close()
