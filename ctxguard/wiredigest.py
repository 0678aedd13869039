"""``ctxguard.wire.hash`` without rehashing what the previous request already sent.

The digest of the body sent is linear in its size (keyed BLAKE2b, about 1.1 µs per KB):
at 450 messages it was more than half of ctxguard's per-message cost. Yet a
conversation's next body repeats the previous one up to the message appended (the
SDKs serialise the history first). So per conversation the previous body is kept with
the hasher's state at the end of what it shared with the one before; the next body
that starts with those same bytes (one ``memcmp``) resumes from a copy of that state
and hashes only what follows. The digest is identical to hashing the whole body.

Bounded: bodies under ``MIN_BYTES`` are hashed directly, and the kept bodies of all
conversations total at most ``max_bytes`` (least recently used dropped first).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Hashable
from operator import attrgetter

from . import forksafe
from .cache import BoundedLRU
from .digest import Digester

__all__ = ["MIN_BYTES", "WireDigests"]

#: Smaller bodies are hashed whole: the bookkeeping would cost more than it saves.
MIN_BYTES = 4096


def common_prefix(a: bytes, b: bytes, start: int) -> int:
    """Length of the longest common prefix of ``a`` and ``b``, given they agree up to ``start``."""
    view = memoryview(a)
    lo, hi = start, min(len(a), len(b))
    while lo < hi:  # invariant: a[:lo] == b[:lo]
        mid = (lo + hi + 1) // 2
        if b.startswith(view[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


class _LastBody:
    """A conversation's last body, the offset its hasher state is at, that state, and the body's
    length as counted. Replaced field by field under the lock, read under it."""

    __slots__ = ("body", "offset", "size", "state")

    def __init__(self, body: bytes, offset: int, state: hashlib.blake2b) -> None:
        self.body, self.offset, self.state, self.size = body, offset, state, len(body)


class WireDigests:
    """``digest(scope, body)``: the keyed digest of ``body``, resumed from ``scope``'s last body."""

    def __init__(self, digester: Digester, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.digester = digester
        # Bounded by the bodies' lengths alone: each body kept is at least MIN_BYTES.
        self._kept: BoundedLRU[Hashable, _LastBody] = BoundedLRU(sys.maxsize, max_bytes, attrgetter("size"))
        self._lock = forksafe.lock()

    @property
    def max_bytes(self) -> int:
        return self._kept.max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self._kept.max_bytes = value

    def digest(self, scope: Hashable | None, body: bytes) -> str:
        if scope is None or len(body) < MIN_BYTES or len(body) > self._kept.max_bytes:
            return self.digester.bytes(body)
        self._lock.acquire()  # not ``with``: the call path's locks (forksafe.lock)
        try:
            kept = self._kept.get(scope)
            last = (kept.body, kept.offset, kept.state) if kept is not None else None
        finally:
            self._lock.release()
        start, hasher = 0, None
        if last is not None:
            previous, offset, state = last
            if offset <= len(body) and body.startswith(memoryview(previous)[:offset]):
                start, hasher = offset, state.copy()
            shared = common_prefix(previous, body, start)
        else:
            shared = 0
        if hasher is None:
            hasher = self.digester.hasher()
        view = memoryview(body)
        hasher.update(view[start:shared])
        resume = hasher.copy()  # the next body of this conversation likely shares at least this much
        hasher.update(view[shared:])
        self._lock.acquire()  # not ``with``: the call path's locks (forksafe.lock)
        try:
            if kept is not None and self._kept.peek(scope) is kept:  # still kept: brought up to date
                grown, kept.size = len(body) - kept.size, len(body)
                kept.body, kept.offset, kept.state = body, shared, resume
                if grown:
                    self._kept.resized(scope, grown)
            else:
                self._kept.put(scope, _LastBody(body, shared, resume))
        finally:
            self._lock.release()
        return hasher.hexdigest()
