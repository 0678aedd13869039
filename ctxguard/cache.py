"""``TwoGenerationCache``: a dict cache bounded in entries and in bytes, free on a hit.

Entries go into the young generation. When it holds ``cap`` entries, or half of
``max_bytes`` as ``weight`` counts them, the old generation is dropped whole and the
young one takes its place; a hit in the old generation moves the entry back into the
young one. So the cache holds at most ``2 * cap`` entries and ``max_bytes`` bytes, a hit
costs one dict look-up (no recency list to update), and an entry weighing more than half
of ``max_bytes`` is never cached: it is computed again each time it is asked for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from sys import getsizeof
from typing import Generic, TypeVar

__all__ = ["ENTRY_BYTES", "TwoGenerationCache", "str_bytes", "text_bytes", "words_bytes"]

K = TypeVar("K")
V = TypeVar("V")

#: What a cached entry costs beside the objects it keeps: its slots in the dict (which is at most
#: two thirds full), and a key digest (32 hex characters) where it is keyed by one.
ENTRY_BYTES = 200


#: A str's size in memory (1, 2 or 4 bytes a character, and its header): ``sys.getsizeof`` of a
#: str, without its argument parsing, which costs eight times the rest.
str_bytes = str.__sizeof__


def text_bytes(key: object, text: str) -> int:
    """The weight of an entry holding a text."""
    return ENTRY_BYTES + str_bytes(text)


def words_bytes(key: object, words: frozenset[str]) -> int:
    """The weight of an entry holding a set of words."""
    return ENTRY_BYTES + getsizeof(words) + sum(map(str_bytes, words))


class TwoGenerationCache(Generic[K, V]):
    """``weight(key, value)``: the bytes an entry keeps (called when it is stored, never on a hit).
    Without a ``weight``, the cache is bounded in entries only: for entries small and bounded.

    >>> cache = TwoGenerationCache(1_000, 1 << 20, text_bytes)
    >>> cache.put("k", "text"); cache.get("k")
    'text'
    """

    __slots__ = ("_cap", "_half", "_lock", "_new", "_new_bytes", "_old", "_old_bytes", "_weight", "max_bytes")

    def __init__(self, cap: int, max_bytes: int = 0, weight: Callable[[K, V], int] | None = None) -> None:
        self.max_bytes = max_bytes
        self._cap = cap
        self._half = max_bytes // 2
        self._weight = weight
        self._new: dict[K, V] = {}
        self._new_bytes = 0
        self._old: dict[K, V] = {}
        self._old_bytes = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        value = self._new.get(key)
        if value is None:
            value = self._old.get(key)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: K, value: V) -> None:
        size = self._weight(key, value) if self._weight is not None else 0
        if size > self._half:
            return
        with self._lock:
            if len(self._new) >= self._cap or self._new_bytes + size > self._half:
                self._old, self._old_bytes = self._new, self._new_bytes
                self._new, self._new_bytes = {}, 0
            self._new[key] = value
            self._new_bytes += size

    @property
    def bytes(self) -> int:
        """The bytes held, as ``weight`` counts them: at most ``max_bytes``."""
        return self._new_bytes + self._old_bytes
