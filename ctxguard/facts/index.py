"""Cross-conversation detection without scanning every conversation per call.

Every recorded value is indexed under its first word; a payload's words select
the few candidate values that could be in it, and only those are searched. The
index is bounded (oldest entries dropped first) and lives in this process.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

from .ledger import Scope, Version

__all__ = ["ValueIndex", "words"]

_WORD = re.compile(r"\w+")


def words(norm_text: str) -> set[str]:
    return set(_WORD.findall(norm_text))


class ValueIndex:
    """``(scope, fact version)`` entries keyed by the value's first word."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[Scope, str, str], Version] = OrderedDict()
        self._by_word: dict[str, set[tuple[Scope, str, str]]] = {}
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
            while len(self._entries) > self.max_entries:
                old_key, old = self._entries.popitem(last=False)
                first = _WORD.search(old.norm)
                if first is not None:
                    bucket = self._by_word.get(first.group())
                    if bucket is not None:
                        bucket.discard(old_key)
                        if not bucket:
                            del self._by_word[first.group()]

    def foreign(self, scope: Scope, payload_words: set[str]) -> list[tuple[Scope, Version]]:
        """Values recorded for other conversations whose first word is in the payload."""
        with self._lock:
            hits = payload_words & self._by_word.keys()
            return [
                (key[0], self._entries[key]) for word in hits for key in self._by_word[word] if key[0] != scope
            ]
