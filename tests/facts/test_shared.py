"""The fleet index on its own: what a shared value is, how a payload is matched against digests
only, and its bounds (ctxguard.facts.shared; the processes and Redis are test_fleet.py's)."""

from __future__ import annotations

from collections.abc import Iterable

from ctxguard.digest import Digester
from ctxguard.facts.index import terms
from ctxguard.facts.matching import match_key, normalise
from ctxguard.facts.shared import DigestIndex, SharedValue, ValueDigests

DIGESTS = ValueDigests(Digester(b"k"))
A, B = ("cust-a", "shop"), ("cust-b", "shop")


def shared(value: str, scope: tuple[str, str | None] = A, fact_id: str = "phone") -> SharedValue:
    found = DIGESTS.shared(scope, fact_id, match_key(value), "elsewhere")  # as RedisLedger.append publishes it
    assert found is not None
    return found


def find(index: DigestIndex, scope: tuple[str, str | None], *texts: str, own: frozenset[str] = frozenset()):
    norms = [normalise(t) for t in texts]
    return index.foreign(scope, own, norms, [f"m{i}:{t}" for i, t in enumerate(texts)],
                         [terms(n, t) for n, t in zip(norms, texts, strict=True)])


def test_a_value_is_found_exactly_where_it_is_and_nowhere_else() -> None:
    index = DigestIndex(DIGESTS)
    index.add(shared("+91 98200 12345"))
    [(owner, version)] = find(index, B, "hello", "Call 98200 first, then +91  98200 12345 please")
    assert owner == DIGESTS.scope(A) and version.fact_id == "phone" and version.value == "+91 98200 12345"
    assert find(index, B, "+91 98200 12346") == []  # every word but one: the digest of the slice differs
    assert find(index, B, "12345 +91 98200") == []  # its words, not the value
    assert find(index, B, "+91 98200", "12345") == []  # split over two messages


def test_a_grouped_number_is_found_in_any_grouping_and_named_as_written() -> None:
    index = DigestIndex(DIGESTS)
    index.add(shared("06 12 34 56 78"))
    for written in ("0612345678", "06.12.34.56.78", "06-12-34-56-78", "06 12 34 56 78"):
        [(owner, version)] = find(index, B, f"call {written} please")
        assert owner == DIGESTS.scope(A) and version.value == written and version.number == "0612345678"
    assert find(index, B, "ref 106 12 34 56 78", "06 12 34 56 789") == []  # longer numbers
    assert find(index, B, "call 06.12.34.56.78", own=frozenset({"0612345678"})) == []  # B recorded it too


def test_a_value_inside_a_longer_word_is_not_a_leak_of_it() -> None:
    index = DigestIndex(DIGESTS)
    index.add(shared("ACC-7731"))
    assert find(index, B, "account ACC-77310") == []
    assert len(find(index, B, "account ACC-7731.")) == 1


def test_the_scope_s_own_values_are_never_foreign() -> None:
    index = DigestIndex(DIGESTS)
    index.add(shared("+91 98200 12345", scope=A))
    assert find(index, A, "+91 98200 12345") == []  # A itself among the value's owners
    assert find(index, B, "+91 98200 12345", own=frozenset({"+91 98200 12345"})) == []  # B's ledger holds it


def test_nothing_but_distinctive_values_with_a_word_is_shared() -> None:
    assert DIGESTS.shared(A, "city", "pune", "o") is None  # not distinctive
    assert DIGESTS.shared(A, "code", "a-12", "o") is None  # no word of 3 characters
    value = shared("14 Carter Road")
    assert value.length == len("14 carter road") and value.offset == len("14 ")  # its longest word: carter
    assert SharedValue.from_fields(value.fields()) == value
    assert "carter" not in repr(value.fields())


def test_another_key_digests_otherwise() -> None:
    other = ValueDigests(Digester(b"other"))
    assert other.key != DIGESTS.key and other.value("pune") != DIGESTS.value("pune")
    assert DIGESTS.value("pune") != Digester(b"k").text("v\x1fpune")  # a key of its own, derived


def test_the_index_is_bounded_oldest_first() -> None:
    index = DigestIndex(DIGESTS, max_entries=3)
    for i in range(5):
        index.add(shared(f"ACC-{i:04d}-7731", fact_id=f"acct{i}"))
    assert len(index) == 3
    assert find(index, B, "ACC-0000-7731 ACC-0001-7731") == []
    assert [v.fact_id for _, v in find(index, B, "ACC-0004-7731")] == ["acct4"]


def test_a_resent_message_costs_no_new_digest(monkeypatch) -> None:
    index = DigestIndex(DIGESTS)
    index.add(shared("+91 98200 12345"))
    digested: list[str] = []  # the words whose digests were looked up
    words = ValueDigests.words

    def counting(self: ValueDigests, ws: Iterable[str]) -> dict[str, str]:
        ws = list(ws)
        digested.extend(ws)
        return words(self, ws)

    monkeypatch.setattr(ValueDigests, "words", counting)
    assert len(find(index, B, "hello there", "call +91 98200 12345")) == 1
    first = len(digested)
    assert first == 6  # hello, there, call, 98200, 12345, and the number 919820012345
    assert len(find(index, B, "hello there", "call +91 98200 12345", "a new one")) == 1
    assert sorted(digested[first:]) == ["new", "one"]  # only the new message's words


def test_scope_digests_never_collide_across_separators() -> None:
    scopes = [("c", None), ("c", "-"), ("c", ""), ("c", "+"), ("c\x1f+x", None), ("c", "x"), ("1\x1fc", None),
              ("c\x1f1", "x"), ("", "c")]
    assert len({DIGESTS.scope(s) for s in scopes}) == len(scopes)
