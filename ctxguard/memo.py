"""What a conversation's previous call read and measured, so the next call redoes only what is new.

A chat app resends its history on every call: at turn 200 a call carries 199 messages
the previous call already read (``providers._read.items``) and measured (digests, token
counts, the payload digest; ``measure.Measurer``). Per conversation, provider and API,
a ``Memo`` keeps both results for the leading messages; the next call reuses them for
as long as its messages still equal the kept ones **by value**, checked in C (list, dict
and tuple equality against private copies), and does the per-message Python work only
for the rest: ~25 ns per reused message instead of ~300.

Never a stale answer: reuse is decided by comparing the current messages' values with
the values read last time, not by object identity, so a message dict edited in place
(a redaction, a trimmed text) no longer matches and is read again. Kept: the common
``{"role": str, "content": str}`` dict message (a shallow copy), and messages of other
shapes (tool calls, tool results, content parts) whose value is a tree of exactly dicts,
lists, strings and None (a deep copy: an edit deep inside one shows; ``_read.snapshot``).
Numbers and booleans are never kept (``1 == 1.0 == True`` read differently), and
readers render a dict or list they want as text as canonical JSON, so two equal values
always read the same. The first message of any other kind (a pydantic object, a tuple)
ends what is reused. Bounded: at most ``max_messages`` kept messages across all memos,
each memo counting as one more, and at most ``max_bytes`` (``Memo.bytes``: the texts the
memos keep alive, which the app may long have dropped, counted for the copies and again for
the readings, and the objects around them), least recently used conversations dropped first.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from operator import attrgetter
from typing import Any

from . import forksafe
from .cache import BoundedLRU
from .payload import Item, Message

__all__ = ["KEPT_BYTES", "MEMO_BYTES", "Memo", "Memos"]

#: What a memo keeps beside its messages: itself, its tuples and lists, the payload digest's hasher.
MEMO_BYTES = 1024
#: Per kept message, beside what ``Message.size`` counts: its copy (a plain message's dict; a tool
#: message's containers cost more, and its strings are counted as its reading's text, again) and its
#: slots in the memo's lists.
KEPT_BYTES = 300


#: ``Memo.measured``: what the measurer keeps of a call for the next.
Measured = tuple[list[Item], list[Message], list[str], list[int], Any, int, str, "int | None", int, int, int]


class Memo:
    """One conversation's last call (per provider and API). Each field is replaced whole, never
    edited, so a concurrent call of the same conversation reads an old or a new one, both valid."""

    __slots__ = ("measured", "read")

    def __init__(self) -> None:
        #: (copies of the leading kept message dicts as sent, their Items, the model they were read
        #: for: an Item carries what its images cost on that model).
        self.read: tuple[list[dict[str, Any]], list[Item], str | None] | None = None
        #: (Items measured, their Messages, their digests, running token sums (``len + 1``),
        #: the payload digest's hasher after all of their digests, the bytes the Messages keep
        #: (``Message.size`` summed), the payload digest, the index of the first Message with tool
        #: refs or None, the measurer's generation: a memo of an earlier one, counted another way,
        #: is not resumed; the Messages' bounds summed, ``Message.bound``; their fixed tokens
        #: summed, ``Message.fixed``). Shared with the call's Payload, which never changes them.
        self.measured: Measured | None = None

    @property
    def size(self) -> tuple[int, int]:
        """(kept messages, plus one for the memo itself: memos that keep nothing (a provider not
        read through a memo, a conversation whose first message has parts) count too; the bytes
        it keeps). A copy's strings are the app's, which its reading's text was made of: counted
        as that text again (for a plain message the two are one string: the bound errs safe)."""
        read, measured = self.read, self.measured
        copies = len(read[1]) if read else 0
        readings, held = (len(measured[0]), measured[5]) if measured else (0, 0)
        return 1 + copies + readings, MEMO_BYTES + KEPT_BYTES * (copies + readings) + 2 * held


class _Settled:
    """A memo as ``Memos`` counted it when it was last settled (under its lock)."""

    __slots__ = ("held", "memo", "size")

    def __init__(self, memo: Memo) -> None:
        self.memo = memo
        self.size = 0
        self.held = 0


class Memos:
    """``Memo`` per key, least recently used first out, bounded by the messages and bytes they keep."""

    def __init__(self, max_messages: int = 100_000, max_bytes: int = 12 * 1024 * 1024) -> None:
        self.max_messages = max_messages
        # Bounded by their bytes, and by their messages below (each memo counting one).
        self._memos: BoundedLRU[Hashable, _Settled] = BoundedLRU(sys.maxsize, max_bytes, attrgetter("held"))
        self._kept = 0
        self._lock = forksafe.lock()

    @property
    def max_bytes(self) -> int:
        return self._memos.max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self._memos.max_bytes = value

    def get(self, key: Hashable) -> Memo:
        self._lock.acquire()  # not ``with``: the call path's locks (forksafe.lock)
        try:
            found = self._memos.get(key)
            if found is not None:
                return found.memo
            memo = Memo()
            self._memos.put(key, _Settled(memo))
            return memo
        finally:
            self._lock.release()

    def settle(self, key: Hashable, memo: Memo) -> None:
        """Account for what ``memo`` keeps now; drop the oldest memos while over a bound."""
        size, held = memo.size
        self._lock.acquire()  # not ``with``: the call path's locks (forksafe.lock)
        try:
            found = self._memos.peek(key)
            if found is None or found.memo is not memo:
                return  # dropped meanwhile: what it keeps goes with it
            self._kept += size - found.size
            found.size = size
            grown, found.held = held - found.held, held
            if grown:
                for _, dropped in self._memos.resized(key, grown):
                    self._kept -= dropped.size
            while self._kept > self.max_messages and self._memos:
                self._kept -= self._memos.popitem(last=False)[1].size
        finally:
            self._lock.release()

    @property
    def kept(self) -> int:
        return self._kept

    @property
    def bytes(self) -> int:
        """What the memos keep, as ``Memo.size`` counts it: at most ``max_bytes``."""
        return self._memos.bytes

    def __len__(self) -> int:
        return len(self._memos)
