"""Cross-conversation detection without scanning every conversation per call.

Every recorded value is indexed under one of its words (three or more
characters): the one that is rarest in the index when the value arrives, so that
values sharing a prefix ("ACC-0007", "ACC-0008") do not pile up under "acc". The
words of a payload's messages (cached per message) select the few candidate
values that could be in it; each is then searched only in the messages that
hold all its words. A value is one entry however many conversations recorded it
(the last few are remembered, to name one), so a value shared by a hundred
thousand conversations costs a call what a value of one does. The index lives in this process
and is bounded in values and in bytes (``INDEX_BYTES``): the least recently recorded value goes
first, and a leak of a value dropped is not seen. A value hidden inside a longer word ("ACC-77310" around
"ACC-7731") is not found by this route: a leak has to appear as itself. A grouped number
("+33 6 12 34 56 78") is indexed as its number ("33612345678"), which a message's terms hold
whatever grouping it is written in (``matching.numbers``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from operator import attrgetter
from sys import getsizeof
from typing import Any, NamedTuple

from .. import forksafe
from ..cache import ENTRY_BYTES, BoundedLRU, str_bytes
from ..conversation import Scope
from .ledger import Version
from .matching import numbers

__all__ = ["INDEX_BYTES", "MAX_OWNERS", "WORD", "Candidate", "ValueIndex", "terms", "words"]

#: What counts as a word of a value or a message: three or more word characters.
WORD = re.compile(r"\w{3,}")

#: Conversations remembered per value: enough to name one that is not the caller, whatever
#: the number sharing it (a value shared by 100,000 conversations is one entry, not 100,000).
MAX_OWNERS = 4
#: The bytes an index of recorded values keeps at most (this process's ``ValueIndex``, and with a
#: shared ``RedisLedger`` the fleet's ``DigestIndex``, each), beside ``CTXGUARD_CACHE_BYTES``:
#: about 2,000 short values, some 230 of 120 words (docs/facts.md, "How much is remembered").
INDEX_BYTES = 4 * 1024 * 1024
#: What an indexed value costs beside its texts: its entry, its slot under its word (and that
#: word's set, when it is the first there), its owners' ordered dict.
VALUE_BYTES = ENTRY_BYTES + 1_000
#: What a conversation among a value's owners costs beside its texts: its slot, its scope and
#: its ``Version`` (a dataclass with a ``__dict__``, and ``number`` cached in it).
OWNER_BYTES = 400


class Candidate(NamedTuple):
    """A value recorded in another conversation whose index word is in the payload."""

    word: str  # its index word
    words: frozenset[str]  # all its words: a value that appears as itself has them all
    scope: Scope  # the most recent other conversation that recorded it
    version: Version


def words(norm_text: str) -> frozenset[str]:
    return frozenset(WORD.findall(norm_text))


def terms(norm_text: str, text: str) -> frozenset[str]:
    """A message's words and grouped numbers (``text`` as it is, ``norm_text`` normalised): what
    selects the values that could be in it, and a grouped number is in it if it is among them."""
    return words(norm_text) | numbers(text)


def _owner_bytes(scope: Scope, version: Version) -> int:
    conversation, tenant = scope
    return (OWNER_BYTES + str_bytes(conversation) + (0 if tenant is None else str_bytes(tenant))
            + str_bytes(version.fact_id) + str_bytes(version.value) + str_bytes(version.norm))


class _Value:
    __slots__ = ("bytes", "owners", "word", "words")

    def __init__(self, key: str, word: str, value_words: frozenset[str]) -> None:
        self.word = word
        self.words = value_words
        self.owners: BoundedLRU[Scope, Version] = BoundedLRU(MAX_OWNERS)  # most recent last
        #: What it keeps, with its owners (``_owner_bytes``) as they come and go.
        self.bytes = VALUE_BYTES + str_bytes(key) + getsizeof(value_words) + sum(map(str_bytes, value_words))


class WordBuckets:
    """An index's keys by the word each is indexed under, and those words as a set, for fast
    intersections with a message's words. Guarded by its index's lock."""

    __slots__ = ("keys", "words")

    def __init__(self) -> None:
        self.keys: dict[str, set[str]] = {}
        self.words: set[str] = set()  # the keys of ``keys``, as a set

    def size(self, word: str) -> int:
        return len(self.keys.get(word, ()))

    def add(self, word: str, key: str) -> None:
        self.keys.setdefault(word, set()).add(key)
        self.words.add(word)

    def drop(self, dropped: Sequence[tuple[str, Any]]) -> None:
        """Forget the keys an index dropped (``(key, entry)``, the entry's ``word`` its bucket)."""
        for key, gone in dropped:
            bucket = self.keys[gone.word]
            bucket.discard(key)
            if not bucket:
                del self.keys[gone.word]
                self.words.discard(gone.word)


class ValueIndex:
    """Recorded values (normalised), each under its rarest word, with the last few conversations
    that recorded it. Bounded: ``max_entries`` values, ``MAX_OWNERS`` conversations each, and
    ``max_bytes`` in all; the least recently recorded value goes first."""

    def __init__(self, max_entries: int = 100_000, max_bytes: int = INDEX_BYTES) -> None:
        # normalised value (a grouped number: its number) -> entry, least recently recorded first
        self._values: BoundedLRU[str, _Value] = BoundedLRU(max_entries, max_bytes, attrgetter("bytes"))
        self._buckets = WordBuckets()
        self._lock = forksafe.lock()

    @property
    def max_entries(self) -> int:
        return self._values.max_entries

    @max_entries.setter
    def max_entries(self, value: int) -> None:
        self._values.max_entries = value

    def __len__(self) -> int:
        return len(self._values)

    def add(self, scope: Scope, version: Version) -> None:
        """Index ``version``; a value with no word of three characters that is not a grouped number
        cannot be looked for by word and is not indexed (``record_fact`` says so, once)."""
        key = version.number or version.norm  # a grouped number, as itself: one entry however written
        candidates = [key] if version.number else WORD.findall(key)
        if not candidates:
            return
        with self._lock:
            entry = self._values.get(key)
            if entry is None:
                word = min(candidates, key=lambda w: (self._buckets.size(w), -len(w)))
                entry = _Value(key, word, frozenset(candidates))
                self._buckets.add(word, key)
                self._buckets.drop(self._values.put(key, entry))
            old = entry.owners.peek(scope)
            grown = _owner_bytes(scope, version) - (0 if old is None else _owner_bytes(scope, old))
            grown -= sum(_owner_bytes(*owner) for owner in entry.owners.put(scope, version))
            entry.bytes += grown
            self._buckets.drop(self._values.resized(key, grown))

    def foreign(self, scope: Scope, message_words: list[frozenset[str]]) -> list[Candidate]:
        """Values recorded in another conversation whose index word is in one of the messages:
        one candidate per value, however many conversations recorded it, none for a value
        ``scope`` itself recorded here (judged so even when its ledger cannot be read). The work
        under the lock is bounded by the payload's words and the values under them, never by how
        many conversations share a value."""
        with self._lock:
            indexed = self._buckets.words
            hits: set[str] = set()
            for ws in message_words:
                hits |= ws & indexed
            out: list[Candidate] = []
            for word in hits:
                for key in self._buckets.keys[word]:
                    entry = self._values[key]
                    if scope not in entry.owners:
                        other, version = next(reversed(entry.owners.items()))
                        out.append(Candidate(word, entry.words, other, version))
            return out
