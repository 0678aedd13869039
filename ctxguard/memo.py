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
each memo counting as one more (a kept plain message costs ~300 bytes besides its text,
which the app holds anyway; a tool message a few hundred more for its containers),
least recently used conversations dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from .payload import Item, Message

__all__ = ["Memo", "Memos"]


class Memo:
    """One conversation's last call (per provider and API). Each field is replaced whole, never
    edited, so a concurrent call of the same conversation reads an old or a new one, both valid."""

    __slots__ = ("measured", "read")

    def __init__(self) -> None:
        #: (copies of the leading kept message dicts as sent, their Items, the model they were read
        #: for: an Item carries what its images cost on that model).
        self.read: tuple[list[dict[str, Any]], list[Item], str | None] | None = None
        #: (Items measured, their Messages, their digests, running token sums (``len + 1``),
        #: the payload digest's hasher after all of their digests). Shared with the call's
        #: Payload, which never changes them.
        self.measured: tuple[list[Item], list[Message], list[str], list[int], Any] | None = None

    @property
    def size(self) -> int:
        """Kept messages, plus one for the memo itself: memos that keep nothing (a provider not
        read through a memo, a conversation whose first message has parts) count too."""
        return 1 + (len(self.read[1]) if self.read else 0) + (len(self.measured[0]) if self.measured else 0)


class Memos:
    """``Memo`` per key, least recently used first out, bounded by the messages they keep."""

    def __init__(self, max_messages: int = 100_000) -> None:
        self.max_messages = max_messages
        self._memos: OrderedDict[Hashable, tuple[Memo, int]] = OrderedDict()
        self._kept = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Memo:
        with self._lock:
            found = self._memos.get(key)
            if found is not None:
                self._memos.move_to_end(key)
                return found[0]
            memo = Memo()
            self._memos[key] = (memo, 0)
            return memo

    def settle(self, key: Hashable, memo: Memo) -> None:
        """Account for what ``memo`` keeps now; drop the oldest memos while over the bound."""
        size = memo.size
        with self._lock:
            found = self._memos.get(key)
            if found is None or found[0] is not memo:
                return  # dropped meanwhile: what it keeps goes with it
            self._kept += size - found[1]
            self._memos[key] = (memo, size)
            while self._kept > self.max_messages and self._memos:
                _, (_, dropped) = self._memos.popitem(last=False)
                self._kept -= dropped

    @property
    def kept(self) -> int:
        return self._kept

    def __len__(self) -> int:
        return len(self._memos)
