"""Digest and count: ``RequestView`` -> ``Payload``, with a per-message cache.

Messages are cached by content (role, text, references), so a conversation
that grows by one turn per call digests and counts one new message per call;
the rest are dictionary hits. The cache is a ``TwoGenerationCache``: bounded in
entries and in bytes (a message's text counts, since the cache keeps it as its key).
"""

from __future__ import annotations

from itertools import accumulate, compress, count
from operator import attrgetter
from sys import getsizeof
from typing import Any

from .cache import ENTRY_BYTES, TwoGenerationCache, str_bytes, text_bytes
from .digest import Digester
from .memo import Measured, Memo
from .payload import TOOL_REFS, Item, Message, Payload, RequestView, message_key
from .tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, Calibration, TokenCounter

__all__ = ["MESSAGE_BYTES", "Measurer", "TwoGenerationCache"]

_digest_of = attrgetter("digest")
_LARGE = 1 << 20  # characters: a message text past this is digested in pieces
_tokens_of = attrgetter("tokens")
_size_of = attrgetter("size")
_tools_of = attrgetter("tool_refs")


def _common(items: list[Item], kept: list[Item]) -> int:
    """How many leading items equal the kept ones (list and tuple equality: C loops)."""
    n = min(len(items), len(kept))
    if items[:n] == (kept if n == len(kept) else kept[:n]):
        return n
    return next(i for i, (a, b) in enumerate(zip(items, kept, strict=False)) if a != b)


#: What a measured message keeps beside its text and refs: its Item tuple, the Message, its
#: digest, key, token count and role (``Message.size``).
MESSAGE_BYTES = 370


def _tool_refs(refs: tuple[str, ...]) -> tuple[str, ...]:
    """The tool refs among ``refs`` (``payload.TOOL_REFS``), for ``tool_pairs_intact``: read once per
    message, when it is first measured, so that the check reads no other ref. ``refs`` itself when
    they all are (a tool call or result message, most often): no second tuple."""
    tools = tuple(ref for ref in refs if ref.startswith(TOOL_REFS))
    return refs if len(tools) == len(refs) else tools


def _message_bytes(item: Item, message: Message) -> int:
    return message.size + ENTRY_BYTES


def _key_bytes(text: str, tokens: int) -> int:
    return text_bytes(tokens, text)


#: ``_resumed``: start, Messages, digests, sums, hasher, bytes held, extends, first tool index.
Resumed = tuple[int, list[Message], list[str], list[int], Any, int, "str | None", "int | None"]


def _resumed(items: list[Item], last: Measured) -> Resumed:
    """What a memo's previous call gives this one: how many leading items are the same, their
    Messages, digests and running sums; the hasher, bytes held and digest when all of them are
    (the payload extends that one); the first message with tool refs among the resumed ones."""
    kept_items, kept_messages, kept_digests, kept_sums, kept_hasher, kept_held, kept_digest, kept_tool = last
    start = _common(items, kept_items)
    hasher, held, extends = None, 0, None
    if start == len(kept_items):
        hasher, held, extends = kept_hasher.copy(), kept_held, kept_digest
    first_tool = kept_tool if kept_tool is not None and kept_tool < start else None
    return start, kept_messages[:start], kept_digests[:start], kept_sums[: start + 1], hasher, held, extends, first_tool


class Measurer:
    """``Measurer(Digester(key), counter, Calibration()).measure(view)`` -> Payload."""

    def __init__(
        self,
        digester: Digester,
        counter: TokenCounter,
        calibration: Calibration,
        cap: int = 50_000,
        max_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        """``max_bytes``: what both caches keep, an eighth of it for the recurring texts."""
        self.digester = digester
        self.counter = counter
        self.calibration = calibration
        self._messages: TwoGenerationCache[Item, Message] = TwoGenerationCache(
            cap, max_bytes - max_bytes // 8, _message_bytes)
        self._texts: TwoGenerationCache[str, int] = TwoGenerationCache(cap // 10 or 1, max_bytes // 8, _key_bytes)

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
        size = MESSAGE_BYTES + str_bytes(text) + (getsizeof(refs) + sum(map(str_bytes, refs)) if refs else 0)
        tools = _tool_refs(refs) if refs else ()
        if tools and tools is not refs:
            size += getsizeof(tools)  # its own tuple; the strings are the refs'
        message = Message(role, text, digest, tokens, source, size, message_key(role, digest), tool_refs=tools)
        self._messages.put(item, message)
        return message

    def tokens(self, text: str) -> int:
        """Count a text that recurs across calls (a tool schema, a pinned block), cached."""
        cached = self._texts.get(text)
        if cached is None:
            cached = self.counter.count(text)
            self._texts.put(text, cached)
        return cached

    def _hashed(self, hasher: Any, digests: list[str], start: int, grown: bool) -> Any:
        """The payload digest's hasher after all of ``digests``: ``hasher`` (after the first
        ``start`` of them, if not None) continued, else a new one."""
        if hasher is None:
            hasher = self.digester.hasher()
            hasher.update("\n".join(digests).encode("ascii"))
        elif grown:
            tail = "\n".join(digests[start:])  # the digest of the joined digests, continued
            hasher.update((f"\n{tail}" if start else tail).encode("ascii"))
        return hasher

    def measure(self, view: RequestView, memo: Memo | None = None) -> Payload:
        """``memo``: the conversation's previous call (see ``ctxguard.memo``): its leading items
        equal to this call's are not looked up again, and the payload digest resumes after them."""
        items = view.items
        last = memo.measured if memo is not None else None
        messages: list[Message]
        digests: list[str]
        if last is None:
            start, messages, digests, sums, hasher, held, extends, first_tool = 0, [], [], [0], None, 0, None, None
        else:
            start, messages, digests, sums, hasher, held, extends, first_tool = _resumed(items, last)
        hit = self._messages._new.get  # inlined look-up: this loop runs once per new message per call
        message = self.message
        new = [hit(item) or message(item) for item in items[start:]]
        messages.extend(new)
        if first_tool is None and new:
            # The first message with tool refs, for ``tool_pairs_intact``: looked for in the new
            # ones only (none before them has any), so a payload without any costs it nothing.
            first_tool = next(compress(count(start), map(_tools_of, new)), None)
        sums.extend(accumulate(map(_tokens_of, new), initial=sums.pop()))  # running sums, in C
        total = sums[-1]
        digests.extend(map(_digest_of, new))  # map + attrgetter: a C loop, over the new ones only
        hasher = self._hashed(hasher, digests, start, bool(new))
        digest = hasher.hexdigest()
        if memo is not None:
            # The bytes its messages keep, for the memo's bound: the kept ones' sum carried on when
            # all of them were resumed, else added up again (after an edit or a trim).
            if extends is None:
                held = sum(map(_size_of, messages))
            elif new:
                held += sum(map(_size_of, new))
            # Kept as they are, not copied: the view's items and the payload's lists are never
            # changed after this point (the next call slices them).
            memo.measured = (items, messages, digests, sums, hasher, held, digest, first_tool)
        tools_tokens = sum(self.tokens(schema) for schema in view.tools) + view.prompt_overhead
        raw = total + REPLY_PRIMING + tools_tokens
        factor = self.calibration.factor(view.model)
        return Payload(
            provider=view.provider,
            operation=view.operation,
            model=view.model,
            messages=messages,
            digests=digests,
            digest=digest,
            raw_tokens=raw,
            tokens=raw if factor is None else round(raw * factor),
            tokens_source=self.counter.name if factor is None else "calibrated",
            tools_tokens=tools_tokens,
            max_output_tokens=view.max_output_tokens,
            stream=view.stream,
            history_elsewhere=view.history_elsewhere,
            unreadable=view.unreadable,
            reply_room=view.reply_room,
            extends=extends,
            first_tool=first_tool,
            tool_results=view.tool_results,
            window=view.window,
        )
