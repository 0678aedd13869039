"""Values shared between worker processes as keyed digests only (``RedisLedger``'s fleet index).

A value recorded in one process has to be recognised in another process's payload, of
another conversation, without the value leaving the process that recorded it and without
a Redis round trip on the LLM call. What crosses is a ``SharedValue``: keyed digests (a
key derived from the digest key, ``CTXGUARD_DIGEST_KEY``) of the conversation, of the
normalised value (a grouped number: its number, in any grouping) and of each of its
words, plus the fact id, the value's length and where its anchor word (its longest) starts
in it. The other processes keep them in a ``DigestIndex``, bounded like ``ValueIndex`` (in values,
and in bytes: ``index.INDEX_BYTES``, the least recently recorded dropped first): a
payload's word digests select the few candidate values, and a candidate is confirmed by
digesting, at each place its anchor word occurs in a message, the slice of the message
where the value would be and comparing it with the value's digest. A confirmed match is
exact (the slice is the value, normalised), and all this process learns of the value is
what its own payload already held. Processes with different digest keys cannot match
each other's values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from sys import getsizeof
from typing import Any

from .. import forksafe
from ..cache import ENTRY_BYTES, BoundedLRU, TwoGenerationCache, str_bytes
from ..conversation import Scope
from ..digest import Digester
from .index import INDEX_BYTES, MAX_OWNERS, VALUE_BYTES, WORD, WordBuckets
from .ledger import Version
from .matching import MIN_MATCH_CHARS, Chunked, distinctive, written

__all__ = ["WORD_HEX", "DigestIndex", "SharedValue", "ValueDigests"]

#: Word digests are cut to 64 bits (hex characters): they only select candidates, the value's
#: own 128-bit digest confirms one.
WORD_HEX = 16
#: What the digests of shared values are keyed for (``Digester.derived``): never equal to a
#: message or id digest of the same text.
PURPOSE = "ctxguard.facts.shared"
#: The bytes of the caches of word digests: by word, and by message (a message's words' digests).
WORDS_BYTES = 1 << 20
MESSAGE_WORDS_BYTES = 2 << 20


def _word_bytes(word: str, digest: str) -> int:
    return ENTRY_BYTES + getsizeof(word) + getsizeof(digest)


@dataclass(frozen=True)
class SharedValue:
    """One recorded value as the other processes see it: digests, a fact id, two numbers."""

    key: str  # a digest of a constant: which digest key made the others
    origin: str  # the recording process (random per process, drawn again in a forked child)
    scope: str  # digest of (conversation, tenant)
    fact_id: str
    value: str  # digest of the normalised value
    words: frozenset[str]  # digests of its words (WORD), cut to WORD_HEX
    anchor: str  # digest of its longest word (the first of them)
    offset: int  # where that word starts in the normalised value
    length: int  # the normalised value's length, in characters

    def fields(self) -> dict[str, str | int]:
        """The stream entry's fields."""
        return {"k": self.key, "o": self.origin, "s": self.scope, "f": self.fact_id, "v": self.value,
                "w": " ".join(sorted(self.words)), "a": self.anchor, "p": self.offset, "n": self.length}

    @classmethod
    def from_fields(cls, fields: Mapping[Any, Any]) -> SharedValue:
        """``ValueError`` (or ``KeyError``) on an entry that is not one."""
        f = {_text(k): _text(v) for k, v in fields.items()}
        words = frozenset(f["w"].split())
        shared = cls(f["k"], f["o"], f["s"], f["f"], f["v"], words, f["a"], int(f["p"]), int(f["n"]))
        if shared.anchor not in words or shared.offset < 0 or shared.length < MIN_MATCH_CHARS:
            raise ValueError("not a shared value entry")
        return shared


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ValueDigests:
    """How shared values, their words and their scopes are digested: one key derived from the
    process's digest key, so processes that share ``CTXGUARD_DIGEST_KEY`` agree."""

    __slots__ = ("_digester", "_words", "key")

    def __init__(self, digester: Digester) -> None:
        self._digester = digester.derived(PURPOSE)
        self.key = self._digester.text("key")[:WORD_HEX]
        # Word -> its digest: a chat's words recur across messages, and a payload's new messages
        # were a hundred keyed digests a call in the fleet workload (bench/fleet_load.py --profile).
        self._words: TwoGenerationCache[str, str] = TwoGenerationCache(16_384, WORDS_BYTES, _word_bytes)

    def scope(self, scope: Scope) -> str:
        conversation, tenant = scope  # the conversation's length first, the tenant marked: injective
        return self._digester.text(f"s\x1f{len(conversation)}\x1f{conversation}\x1f"
                                   + ("-" if tenant is None else "+" + tenant))

    def value(self, norm: str) -> str:
        return self._digester.text("v\x1f" + norm)

    def word(self, word: str) -> str:
        return self._words.get(word) or self._new_word(word)

    def words(self, words: Iterable[str]) -> dict[str, str]:
        """Word digest -> word (``word`` inlined: this runs for every word of every new message)."""
        known, new = self._words.get, self._new_word
        return {known(w) or new(w): w for w in words}

    def _new_word(self, word: str) -> str:
        digest = self._digester.text("w\x1f" + word)[:WORD_HEX]
        self._words.put(word, digest)
        return digest

    def shared(self, scope: Scope, fact_id: str, norm: str, origin: str) -> SharedValue | None:
        """What is published of a recorded value, ``norm`` as it is matched (``matching.match_key``: a
        grouped number as its number); None for a value no other conversation's payload is judged for
        (not distinctive, or without a word of three characters)."""
        if len(norm) < MIN_MATCH_CHARS or not distinctive(norm):
            return None
        found = list(WORD.finditer(norm))
        if not found:
            return None
        anchor = max(found, key=lambda m: len(m.group()))
        return SharedValue(self.key, origin, self.scope(scope), fact_id, self.value(norm),
                           frozenset(self.word(m.group()) for m in found), self.word(anchor.group()),
                           anchor.start(), len(norm))


#: What a conversation among a value's owners costs beside its fact id: its slot and its scope digest.
OWNER_BYTES = 200


def _owner_bytes(fact_id: str) -> int:
    return OWNER_BYTES + str_bytes(fact_id)


class _Shared:
    __slots__ = ("anchor", "bytes", "length", "offset", "owners", "word", "words")

    def __init__(self, shared: SharedValue, word: str) -> None:
        self.word = word  # the index word: the rarest in the index when the value arrived
        self.words = shared.words
        self.anchor = shared.anchor
        self.offset = shared.offset
        self.length = shared.length
        self.owners: BoundedLRU[str, str] = BoundedLRU(MAX_OWNERS)  # scope digest -> fact id, most recent last
        #: What it keeps, with its owners (``_owner_bytes``) as they come and go.
        self.bytes = (VALUE_BYTES + str_bytes(shared.value) + str_bytes(shared.anchor) + getsizeof(shared.words)
                      + sum(map(str_bytes, shared.words)))


_NO_WORDS: dict[str, str] = {}


def _words_map_bytes(key: object, words: dict[str, str]) -> int:
    return ENTRY_BYTES + getsizeof(words) + len(words) * (49 + WORD_HEX)  # the words are the words cache's


class DigestIndex:
    """The values other processes recorded, as digests, each under its rarest word digest, with the
    last few conversations (digests) that recorded it. Bounded: ``max_entries`` values,
    ``MAX_OWNERS`` conversations each, ``max_bytes`` in all (the least recently recorded value
    goes first), and the per-message word digests in a byte-bounded cache.
    No I/O: the reader thread adds, the call path asks, under one short lock."""

    def __init__(self, digests: ValueDigests, max_entries: int = 100_000, max_bytes: int = INDEX_BYTES) -> None:
        self.digests = digests
        # value digest -> entry, least recently recorded first
        self._values: BoundedLRU[str, _Shared] = BoundedLRU(max_entries, max_bytes, attrgetter("bytes"))
        self._buckets = WordBuckets()
        self._lock = forksafe.lock()
        # Message digest -> its word digests: a message resent costs nothing new.
        self._messages: TwoGenerationCache[str, dict[str, str]] = TwoGenerationCache(
            4_096, MESSAGE_WORDS_BYTES, _words_map_bytes
        )

    def __len__(self) -> int:
        return len(self._values)

    def add(self, shared: SharedValue) -> None:
        with self._lock:
            key = shared.value
            entry = self._values.get(key)
            if entry is None:
                word = min(shared.words, key=lambda w: (self._buckets.size(w), w))
                entry = _Shared(shared, word)
                self._buckets.add(word, key)
                self._buckets.drop(self._values.put(key, entry))
            old = entry.owners.peek(shared.scope)
            grown = _owner_bytes(shared.fact_id) - (0 if old is None else _owner_bytes(old))
            grown -= sum(_owner_bytes(fact_id) for _, fact_id in entry.owners.put(shared.scope, shared.fact_id))
            entry.bytes += grown
            self._buckets.drop(self._values.resized(key, grown))

    def message_words(self, digest: str, words: frozenset[str]) -> dict[str, str]:
        """A message's word digests (-> the word), cached by the message's digest."""
        if not words:
            return _NO_WORDS
        cached = self._messages.get(digest)
        if cached is None:
            cached = self.digests.words(words)
            self._messages.put(digest, cached)
        return cached

    def foreign(
        self,
        scope: Scope,
        own: frozenset[str],
        norms: Sequence[str | Chunked],
        digests: Sequence[str],
        message_words: Sequence[frozenset[str]],
    ) -> list[tuple[str, Version]]:
        """Values other conversations recorded in other processes that this payload holds: (the
        digest of the most recent such conversation, the value as found here, as version 0).
        Values this scope recorded (``own``, or itself among a value's owners) are not foreign."""
        maps = [self.message_words(d, ws) for d, ws in zip(digests, message_words, strict=True)]
        with self._lock:
            indexed = self._buckets.words
            hits: set[str] = set()
            for m in maps:
                hits |= m.keys() & indexed
            candidates = [
                (value, self._values[value], tuple(self._values[value].owners.items()))
                for value in {v for word in hits for v in self._buckets.keys[word]}
            ]
        if not candidates:
            return []
        mine = self.digests.scope(scope)
        out: list[tuple[str, Version]] = []
        for value, entry, owners in candidates:
            if any(owner == mine for owner, _ in owners):
                continue
            found = self._confirm(value, entry, norms, maps)
            if found is None:
                continue
            owner, fact_id = owners[-1]
            version = Version(fact_id, found, found, 0)
            if found not in own and version.number not in own:  # own: values, and numbers however written
                out.append((owner, version))
        return out

    def _confirm(self, value: str, entry: _Shared, norms: Sequence[str | Chunked],
                 maps: list[dict[str, str]]) -> str | None:
        """The value, if a message holds it: the slice at each place its anchor word occurs, digested;
        a value that is one word (a grouped number is shared as its number), that term itself."""
        words, offset, length = entry.words, entry.offset, entry.length
        for text, m in zip(norms, maps, strict=True):
            if not isinstance(text, str) or not words <= m.keys():
                continue
            anchor = m[entry.anchor]
            if offset == 0 and length == len(anchor) and self.digests.value(anchor) == value:
                return written(text, anchor)  # a word of the message, or one of its numbers, as written
            at = text.find(anchor)
            while at >= 0:
                start = at - offset
                if start >= 0 and start + length <= len(text):
                    piece = text[start : start + length]
                    if self.digests.value(piece) == value:
                        return piece
                at = text.find(anchor, at + 1)
        return None
