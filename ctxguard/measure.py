"""Digest and count: ``RequestView`` -> ``Payload``, with a per-message cache.

Messages are cached by content (role, text, references), so a conversation
that grows by one turn per call digests and counts one new message per call;
the rest are dictionary hits. The cache is bounded with two generations: when
the young one fills up, the old one is dropped whole, so memory stays within
twice the cap without per-hit bookkeeping.
"""

from __future__ import annotations

import threading
from itertools import accumulate
from operator import attrgetter
from typing import Generic, TypeVar

from .digest import Digester
from .memo import Memo
from .payload import Item, Message, Payload, RequestView
from .tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, Calibration, TokenCounter

__all__ = ["Measurer", "TwoGenerationCache"]

_digest_of = attrgetter("digest")
_LARGE = 1 << 20  # characters: a message text past this is digested in pieces
_tokens_of = attrgetter("tokens")


def _common(items: list[Item], kept: list[Item]) -> int:
    """How many leading items equal the kept ones (list and tuple equality: C loops)."""
    n = min(len(items), len(kept))
    if items[:n] == (kept if n == len(kept) else kept[:n]):
        return n
    return next(i for i, (a, b) in enumerate(zip(items, kept, strict=False)) if a != b)


K = TypeVar("K")
V = TypeVar("V")


class TwoGenerationCache(Generic[K, V]):
    __slots__ = ("_cap", "_lock", "_new", "_old")

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._new: dict[K, V] = {}
        self._old: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        value = self._new.get(key)
        if value is None:
            value = self._old.get(key)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            if len(self._new) >= self._cap:
                self._old, self._new = self._new, {}
            self._new[key] = value


class Measurer:
    """``Measurer(Digester(key), counter, Calibration()).measure(view)`` -> Payload."""

    def __init__(
        self, digester: Digester, counter: TokenCounter, calibration: Calibration, cap: int = 50_000
    ) -> None:
        self.digester = digester
        self.counter = counter
        self.calibration = calibration
        self._messages: TwoGenerationCache[Item, Message] = TwoGenerationCache(cap)
        self._texts: TwoGenerationCache[str, int] = TwoGenerationCache(cap // 10 or 1)

    def message(self, item: Item) -> Message:
        cached = self._messages.get(item)
        if cached is not None:
            return cached
        role, text, refs, source, cost = item
        if len(text) <= _LARGE:
            digest = self.digester.text(f"{role}\x1f{text}\x1f" + "\x1e".join(refs))
        else:  # the same digest, without a copy of the text
            digest = self.digester.texts((role, "\x1f", text, "\x1f", "\x1e".join(refs)))
        tokens = self.counter.count(text) + MESSAGE_OVERHEAD + cost
        message = Message(role, text, digest, tokens, source)
        self._messages.put(item, message)
        return message

    def tokens(self, text: str) -> int:
        """Count a text that recurs across calls (a tool schema, a pinned block), cached."""
        cached = self._texts.get(text)
        if cached is None:
            cached = self.counter.count(text)
            self._texts.put(text, cached)
        return cached

    def measure(self, view: RequestView, memo: Memo | None = None) -> Payload:
        """``memo``: the conversation's previous call (see ``ctxguard.memo``): its leading items
        equal to this call's are not looked up again, and the payload digest resumes after them."""
        items = view.items
        start, messages, digests, sums, hasher = 0, [], [], [0], None
        last = memo.measured if memo is not None else None
        if last is not None:
            kept_items, kept_messages, kept_digests, kept_sums, kept_hasher = last
            start = _common(items, kept_items)
            messages, digests, sums = kept_messages[:start], kept_digests[:start], kept_sums[: start + 1]
            if start == len(kept_items):
                hasher = kept_hasher.copy()
        hit = self._messages._new.get  # inlined look-up: this loop runs once per new message per call
        message = self.message
        new = [hit(item) or message(item) for item in items[start:]]
        messages.extend(new)
        sums.extend(accumulate(map(_tokens_of, new), initial=sums.pop()))  # running sums, in C
        total = sums[-1]
        digests.extend(map(_digest_of, new))  # map + attrgetter: a C loop, over the new ones only
        if hasher is None:
            hasher = self.digester.hasher()
            hasher.update("\n".join(digests).encode("ascii"))
        elif new:
            tail = "\n".join(digests[start:])  # the digest of the joined digests, continued
            hasher.update((f"\n{tail}" if start else tail).encode("ascii"))
        if memo is not None:
            # Kept as they are, not copied: the view's items and the payload's lists are never
            # changed after this point (the next call slices them).
            memo.measured = (items, messages, digests, sums, hasher)
        tools_tokens = sum(self.tokens(schema) for schema in view.tools) + view.prompt_overhead
        raw = total + REPLY_PRIMING + tools_tokens
        factor = self.calibration.factor(view.model)
        return Payload(
            provider=view.provider,
            operation=view.operation,
            model=view.model,
            messages=messages,
            digests=digests,
            digest=hasher.hexdigest(),
            raw_tokens=raw,
            tokens=raw if factor is None else round(raw * factor),
            tokens_source=self.counter.name if factor is None else "calibrated",
            tools_tokens=tools_tokens,
            max_output_tokens=view.max_output_tokens,
            stream=view.stream,
            history_elsewhere=view.history_elsewhere,
            unreadable=view.unreadable,
            reply_room=view.reply_room,
        )
