"""Cross-conversation detection without scanning every conversation per call.

Every recorded value is indexed under its first word of three or more
characters; the words of a payload's messages (cached per message) select the few
candidate values that could be in it, and only those are searched. The index is
bounded (oldest entries dropped first) and lives in this process.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

from .ledger import Scope, Version

__all__ = ["ValueIndex", "words"]

_WORD = re.compile(r"\w{3,}")


def words(norm_text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(norm_text))


class ValueIndex:
    """``(scope, fact version)`` entries keyed by the value's first word."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[Scope, str, str], Version] = OrderedDict()
        self._by_word: dict[str, set[tuple[Scope, str, str]]] = {}
        self._words: set[str] = set()  # the keys of _by_word, as a set for fast intersections
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, scope: Scope, version: Version) -> None:
        found = _WORD.search(version.norm)
        if found is None:
            return
        key = (scope, version.fact_id, version.norm)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = version
            self._by_word.setdefault(found.group(), set()).add(key)
            self._words.add(found.group())
            while len(self._entries) > self.max_entries:
                old_key, old = self._entries.popitem(last=False)
                first = _WORD.search(old.norm)
                if first is not None:
                    bucket = self._by_word.get(first.group())
                    if bucket is not None:
                        bucket.discard(old_key)
                        if not bucket:
                            del self._by_word[first.group()]
                            self._words.discard(first.group())

    def foreign(self, scope: Scope, message_words: list[frozenset[str]]) -> list[tuple[Scope, Version]]:
        """Values recorded for other conversations whose first word is in one of the messages."""
        with self._lock:
            indexed = self._words
            hits: set[str] = set()
            for ws in message_words:
                hits |= ws & indexed
            return [
                (key[0], self._entries[key]) for word in hits for key in self._by_word[word] if key[0] != scope
            ]
