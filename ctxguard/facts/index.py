"""Cross-conversation detection without scanning every conversation per call.

Every recorded value is indexed under one of its words (three or more
characters): the one that is rarest in the index when the value arrives, so that
values sharing a prefix ("ACC-0007", "ACC-0008") do not pile up under "acc". The
words of a payload's messages (cached per message) select the few candidate
values that could be in it; each is then searched only in the messages that
contain its word. The index is bounded (oldest entries dropped first) and lives
in this process. A value hidden inside a longer word ("ACC-77310" around
"ACC-7731") is not found by this route: a leak has to appear as itself.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

from .ledger import Scope, Version

__all__ = ["ValueIndex", "words"]

_WORD = re.compile(r"\w{3,}")

Entry = tuple[Scope, str, str]  # (scope, fact_id, normalised value)


def words(norm_text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(norm_text))


class ValueIndex:
    """``(scope, fact version)`` entries, each under its rarest word."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Entry, tuple[Version, str]] = OrderedDict()
        self._by_word: dict[str, set[Entry]] = {}
        self._words: set[str] = set()  # the keys of _by_word, as a set for fast intersections
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, scope: Scope, version: Version) -> None:
        candidates = _WORD.findall(version.norm)
        if not candidates:
            return
        entry = (scope, version.fact_id, version.norm)
        with self._lock:
            if entry in self._entries:
                self._entries.move_to_end(entry)
                return
            word = min(candidates, key=lambda w: (len(self._by_word.get(w, ())), -len(w)))
            self._entries[entry] = (version, word)
            self._by_word.setdefault(word, set()).add(entry)
            self._words.add(word)
            while len(self._entries) > self.max_entries:
                old, (_, old_word) = self._entries.popitem(last=False)
                bucket = self._by_word[old_word]
                bucket.discard(old)
                if not bucket:
                    del self._by_word[old_word]
                    self._words.discard(old_word)

    def foreign(self, scope: Scope, message_words: list[frozenset[str]]) -> dict[str, list[tuple[Scope, Version]]]:
        """Other conversations' values whose index word is in one of the messages, by that word."""
        with self._lock:
            indexed = self._words
            hits: set[str] = set()
            for ws in message_words:
                hits |= ws & indexed
            out: dict[str, list[tuple[Scope, Version]]] = {}
            for word in hits:
                found = [(e[0], self._entries[e][0]) for e in self._by_word[word] if e[0] != scope]
                if found:
                    out[word] = found
            return out
