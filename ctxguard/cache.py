"""ctxguard's two bounded caches, each idea in one place.

``TwoGenerationCache``: a dict cache bounded in entries and in bytes, free on a hit. Entries go
into the young generation. When it holds ``cap`` entries, or half of ``max_bytes`` as
``weight`` counts them, the old generation is dropped whole and the young one takes its
place; a hit in the old generation moves the entry back into the young one. So the cache
holds at most ``2 * cap`` entries and ``max_bytes`` bytes, a hit costs one dict look-up (no
recency list to update), and an entry weighing more than half of ``max_bytes`` is never
cached: it is computed again each time it is asked for. For values made from their key
(readings, renderings, digests of texts), looked up many times a call.

``BoundedLRU``: exact recency order, least recently used first out, within a cap on entries
and optionally a byte budget, handing back what it drops. For what is kept per conversation
(its memory, memo, facts, checkpoints, warning budget), used once or twice a call, where
the caller counts a drop or cleans up after it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from sys import getsizeof
from typing import Any, Generic, TypeVar, overload

from . import forksafe

__all__ = ["ENTRY_BYTES", "BoundedLRU", "TwoGenerationCache", "str_bytes", "text_bytes", "words_bytes"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

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
        self._lock = forksafe.lock()

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


_MISSING: Any = object()
_peek = OrderedDict.get
_pop = OrderedDict.pop
_popitem = OrderedDict.popitem
_move_to_end = OrderedDict.move_to_end


class BoundedLRU(OrderedDict[K, V]):
    """An ``OrderedDict`` in recency order, least recently used first, of at most ``max_entries``
    entries and, with a ``weight``, at most ``max_bytes`` bytes as ``weight(value)`` counts them.

    >>> lru = BoundedLRU(2)
    >>> lru.put("a", 1), lru.put("b", 2), lru.get("a"), lru.put("c", 3)
    ((), (), 1, [('b', 2)])
    >>> list(lru)
    ['a', 'c']

    A use: ``get`` and ``put`` (new or replaced) make the entry the most recent. ``put`` then drops
    the least recently used while over a bound and returns what it dropped, ``(key, value)``
    pairs oldest first, for the caller to count or clean up after (an empty tuple, nothing
    allocated, in the common case). Not a use: the dict's own reads, in C at a dict's cost
    (``key in lru``, ``len(lru)``, ``lru[key]``, ``peek``, iteration oldest first). Write only
    through ``put``, ``pop``, ``popitem``, ``clear`` and ``resized``: the dict's own setters
    (``lru[key] = v``, ``del``, ``update``, ``setdefault``) would bypass the bounds and the bytes.

    An entry weighing more than ``max_bytes`` alone is not kept: ``put`` returns it as dropped
    and leaves the others be. With ``keep_newest`` the most recent entry is never dropped, even if
    it alone is over ``max_bytes``: for a caller that goes on working on the entry it just used.
    ``weight`` is called when an entry is stored, replaced or dropped, so it must say what the
    entry weighed when counted: an entry grown in place (a mutable value) is told with ``resized``.
    These sit on the per-call path: a ``weight`` that is a C callable (``operator.itemgetter``,
    ``attrgetter``) costs a third of a Python function.

    Not locked: each caller already holds its own lock around more than the LRU's bookkeeping
    (a count of drops, an index to clean up), and a second one would be paid on every call.
    A subclass, not a wrapper: on a wrapper ``not lru``, ``len`` and ``in`` would each be a Python
    call (~750 instructions), and ``Sinks.idle`` alone asks four of them on every call.
    """

    __slots__ = ("bytes", "keep_newest", "max_bytes", "max_entries", "weight")

    def __init__(self, max_entries: int, max_bytes: int = 0, weight: Callable[[V], int] | None = None, *,
                 keep_newest: bool = False) -> None:
        super().__init__()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.weight = weight
        self.keep_newest = keep_newest
        #: The bytes held, as ``weight`` counts them (0 without one).
        self.bytes = 0

    @overload  # type: ignore[override]
    def get(self, key: K, default: None = None, /) -> V | None: ...
    @overload
    def get(self, key: K, default: V, /) -> V: ...
    @overload
    def get(self, key: K, default: T, /) -> V | T: ...
    def get(self, key: K, default: Any = None, /) -> Any:
        """The value at ``key``, made the most recent; ``default`` if there is none."""
        value = _peek(self, key, _MISSING)
        if value is _MISSING:
            return default
        _move_to_end(self, key)
        return value

    #: The value at ``key`` (or ``default``), left where it is in the order: a look, not a use.
    peek = _peek

    def put(self, key: K, value: V) -> Sequence[tuple[K, V]]:
        """Store ``value`` at ``key`` as the most recent entry; return the entries dropped for it."""
        weight = self.weight
        if weight is None:
            old = _peek(self, key, _MISSING)
            self[key] = value
            if old is not _MISSING:
                _move_to_end(self, key)
            if len(self) > self.max_entries:
                return self._trim()
            return ()
        size = weight(value)
        old = _peek(self, key, _MISSING)
        if size > self.max_bytes and not self.keep_newest:
            if old is not _MISSING:
                self.pop(key)
            return ((key, value),)
        self[key] = value
        if old is _MISSING:
            self.bytes += size
        else:
            _move_to_end(self, key)
            self.bytes += size - weight(old)
        if self.bytes > self.max_bytes or len(self) > self.max_entries:
            return self._trim()
        return ()

    def resized(self, key: K, grown: int) -> Sequence[tuple[K, V]]:
        """The entry at ``key`` now weighs ``grown`` bytes more (or less) than it was counted at:
        ``weight`` already says so. Return the entries dropped for it (it too, alone over
        ``max_bytes`` without ``keep_newest``)."""
        if key not in self:
            return ()
        self.bytes += grown
        if self.bytes <= self.max_bytes:
            return ()
        weight = self.weight
        if not self.keep_newest and weight is not None:
            value = self[key]
            if weight(value) > self.max_bytes:
                _pop(self, key)
                self.bytes -= weight(value)
                return ((key, value),)
        return self._trim()

    def _trim(self) -> list[tuple[K, V]]:
        """Drop the least recently used while over a bound (never the last one with ``keep_newest``)."""
        dropped = []
        weight, floor = self.weight, 1 if self.keep_newest else 0
        while len(self) > floor and (len(self) > self.max_entries or self.bytes > self.max_bytes):
            key, value = _popitem(self, False)
            if weight is not None:
                self.bytes -= weight(value)
            dropped.append((key, value))
        return dropped

    @overload
    def pop(self, key: K) -> V: ...
    @overload
    def pop(self, key: K, default: V) -> V: ...
    @overload
    def pop(self, key: K, default: T) -> V | T: ...
    def pop(self, key: K, default: Any = _MISSING) -> Any:
        value = _pop(self, key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        if self.weight is not None:
            self.bytes -= self.weight(value)
        return value

    def popitem(self, last: bool = True) -> tuple[K, V]:
        """The most recent entry removed (``last=False``: the least recently used)."""
        key, value = _popitem(self, last)
        if self.weight is not None:
            self.bytes -= self.weight(value)
        return key, value

    def clear(self) -> None:
        super().clear()
        self.bytes = 0
