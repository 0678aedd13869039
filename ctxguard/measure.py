"""Digest and count: ``RequestView`` -> ``Payload``, with a per-message cache.

Messages are cached by content (role, text, references), so a conversation
that grows by one turn per call digests and counts one new message per call;
the rest are dictionary hits. The cache is a ``TwoGenerationCache``: bounded in
entries and in bytes (a message's text counts, since the cache keeps it as its key).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from itertools import accumulate, compress, count
from operator import attrgetter
from sys import getsizeof
from typing import Any

from . import forksafe
from ._isolation import report_internal_error
from .cache import ENTRY_BYTES, TwoGenerationCache, str_bytes, text_bytes
from .digest import Digester
from .memo import Memo
from .payload import REASONING_REFS, TOOL_REFS, Item, Message, Payload, RequestView, message_key
from .providers import text_scale
from .tokens import (
    BOUND,
    BOUND_SCALE,
    MESSAGE_OVERHEAD,
    Calibration,
    TokenCounter,
    loaded_counter,
    utf8_bytes,
)

logger = logging.getLogger("ctxguard")

__all__ = ["MESSAGE_BYTES", "Measurer", "TwoGenerationCache", "ceiling", "shown"]

_digest_of = attrgetter("digest")
_LARGE = 1 << 20  # characters: a message text past this is digested in pieces
_tokens_of = attrgetter("tokens")
_size_of = attrgetter("size")
_tools_of = attrgetter("tool_refs")
_bound_of = attrgetter("bound")
_fixed_of = attrgetter("fixed")
#: A pending calibration sample of a bound payload: (reported, its bound, its Messages, its schemas,
#: its texts not read), both numbers less the payload's fixed tokens (its text's share of them).
Pending = tuple[int, int, list[Message], list[str], list[str]]
#: The bounds the pending samples may hold in all before the exact counter is loaded to count them
#: (their Messages are kept alive meanwhile; most are the caches' and memos' anyway).
PENDING_BOUND = 4 * 1024 * 1024
#: What a report must leave for the text, its fixed tokens off, to teach the calibrations: tokens at
#: least, and times the fixed tokens at least. Below that an error in the fixed tokens (a framing
#: assumed larger than the model's template writes, an image priced lower) or a short text's own
#: noise decides the ratio, not the text (docs/budget.md, "What teaches calibration").
_LEARNS_FROM_TEXT = 64
_TEXT_PER_FIXED = 10


def _common(items: list[Item], kept: list[Item]) -> int:
    """How many leading items equal the kept ones (list and tuple equality: C loops)."""
    n = min(len(items), len(kept))
    if items[:n] == (kept if n == len(kept) else kept[:n]):
        return n
    return next(i for i, (a, b) in enumerate(zip(items, kept, strict=False)) if a != b)


#: What a measured message keeps beside its text and refs: its Item tuple, the Message, its
#: digest, key, token count and role (``Message.size``).
MESSAGE_BYTES = 386


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


#: ``_resumed``: start, Messages, digests, sums, hasher, bytes held, extends, first tool index,
#: the resumed Messages' bounds and fixed tokens summed (when it extends).
Resumed = tuple[int, list[Message], list[str], list[int], Any, int, "str | None", "int | None", int, int]


def _resumed(items: list[Item], memo: Memo | None, generation: int) -> Resumed:
    """What a memo's previous call gives this one: how many leading items are the same, their
    Messages, digests and running sums; the hasher, bytes held and digest when all of them are
    (the payload extends that one), and their bounds and fixed tokens summed; the first message with tool refs
    among the resumed ones. Nothing from a memo measured in another ``generation`` (counted the
    other way)."""
    last = memo.measured if memo is not None else None
    if last is None or last[8] != generation:
        return 0, [], [], [0], None, 0, None, None, 0, 0
    kept_items, kept_messages, kept_digests, kept_sums, kept_hasher, kept_held, kept_digest, kept_tool = last[:8]
    start = _common(items, kept_items)
    hasher, held, extends, bound, fixed = None, 0, None, 0, 0
    if start == len(kept_items):
        hasher, held, extends, bound, fixed = kept_hasher.copy(), kept_held, kept_digest, last[9], last[10]
    first_tool = kept_tool if kept_tool is not None and kept_tool < start else None
    return (start, kept_messages[:start], kept_digests[:start], kept_sums[: start + 1], hasher, held, extends,
            first_tool, bound, fixed)


class _Basis:
    """What a measurer counts with and what it has counted that way: swapped whole when the exact
    counter replaces the bounds, so a call measuring meanwhile finishes in one basis."""

    __slots__ = ("counter", "generation", "messages", "texts")

    def __init__(self, counter: TokenCounter, generation: int, cap: int, max_bytes: int) -> None:
        self.counter, self.generation = counter, generation
        self.messages: TwoGenerationCache[Item, Message] = TwoGenerationCache(
            cap, max_bytes - max_bytes // 8, _message_bytes)
        self.texts: TwoGenerationCache[str, int] = TwoGenerationCache(cap // 10 or 1, max_bytes // 8, _key_bytes)


def _recount(bound: int, messages: list[Message], schemas: list[str], counter: TokenCounter,
             seen: dict[str, int], skipped: list[str]) -> int:
    """The count ``counter`` gives a payload whose bound was ``bound`` (less its fixed tokens, or
    not: they pass through): each text's bytes less its tokens come off (``seen`` caches them by
    text, across the payloads of one pass); a text not read (``skipped``) came off as its bytes, so
    its bytes less its tokens go back on."""
    for text in (*(m.text for m in messages), *schemas):
        bound -= _saved(text, counter, seen)
    for text in skipped:
        bound += _saved(text, counter, seen)
    return bound


def _saved(text: str, counter: TokenCounter, seen: dict[str, int]) -> int:
    saved = seen.get(text)
    if saved is None:
        saved = seen[text] = utf8_bytes(text) - counter.count(text)
    return saved


class Measurer:
    """``Measurer(Digester(key), counter, Calibration()).measure(view)`` -> Payload.

    With ``exact`` (the exact counter's loader), it counts byte bounds (``tokens.BOUND``) until a
    verdict needs the exact counts (``exact(payload)``); the bounds' own calibration (``bounds``)
    gives what a bound payload shows, and each report on one waits, with the payload, until the
    exact counter is there to count it for ``calibration`` (docs/budget.md, "Exact only when it
    matters").
    """

    def __init__(
        self,
        digester: Digester,
        counter: TokenCounter,
        calibration: Calibration,
        cap: int = 50_000,
        max_bytes: int = 16 * 1024 * 1024,
        *,
        exact: Callable[[], TokenCounter] | None = None,
    ) -> None:
        """``max_bytes``: what both caches keep, an eighth of it for the recurring texts."""
        self.digester = digester
        self.calibration = calibration
        self._cap, self._max_bytes = cap, max_bytes
        self._load = exact
        self._basis = _Basis(BOUND if exact is not None else counter, 0, cap, max_bytes)
        #: Tokens a byte of text, per model: reported over bound, both less the fixed tokens (images,
        #: framing: ``Payload.fixed``), learnt from every report whatever counted it.
        self.bounds = Calibration(low=1 / 16)
        self._pending: dict[str, deque[Pending]] = {}
        self._pending_bound = 0
        self._lock = forksafe.lock()
        #: Whether ``calibration.exact`` follows the counter (a lazy measurer's does: it changes).
        self._tracks = exact is not None
        if self._tracks:
            calibration.exact = BOUND.exact

    @property
    def counter(self) -> TokenCounter:
        return self._basis.counter

    @counter.setter
    def counter(self, counter: TokenCounter) -> None:
        """Count with ``counter`` from now on (what was counted before is forgotten)."""
        with self._lock:
            self._load = None
            self._count_with(counter)

    def _count_with(self, counter: TokenCounter) -> None:
        """A new basis counting with ``counter`` (under the lock)."""
        self._basis = _Basis(counter, self._basis.generation + 1, self._cap, self._max_bytes)
        if self._tracks:
            self.calibration.exact = counter.exact

    def message(self, item: Item) -> Message:
        return self._message(item, self._basis)

    def _message(self, item: Item, basis: _Basis) -> Message:
        cached = basis.messages.get(item)
        if cached is not None:
            return cached
        role, text, refs, source, cost = item
        if len(text) <= _LARGE:
            digest = self.digester.text(f"{role}\x1f{text}\x1f" + "\x1e".join(refs))
        else:  # the same digest, without a copy of the text
            digest = self.digester.texts((role, "\x1f", text, "\x1f", "\x1e".join(refs)))
        fixed = MESSAGE_OVERHEAD + cost
        bound = utf8_bytes(text) + fixed
        tokens = bound if basis.counter is BOUND else basis.counter.count(text) + fixed
        size = MESSAGE_BYTES + str_bytes(text) + (getsizeof(refs) + sum(map(str_bytes, refs)) if refs else 0)
        tools = _tool_refs(refs) if refs else ()
        if tools and tools is not refs:
            size += getsizeof(tools)  # its own tuple; the strings are the refs'
        reasoning = (bool(refs) and not REASONING_REFS.isdisjoint(refs)) or (role == "assistant" and "</think>" in text)
        message = Message(role, text, digest, tokens, source, size, message_key(role, digest), tool_refs=tools,
                          bound=bound, fixed=fixed, reasoning=reasoning)
        basis.messages.put(item, message)
        return message

    def tokens(self, text: str, basis: _Basis | None = None) -> int:
        """Count a text that recurs across calls (a tool schema, a pinned block), cached (in
        ``basis``, the current one by default)."""
        if basis is None:
            basis = self._basis
        cached = basis.texts.get(text)
        if cached is None:
            cached = basis.counter.count(text)
            basis.texts.put(text, cached)
        return cached

    def exact(self, payload: Payload) -> Payload:
        """``payload`` (a bound one) measured again with the exact counter, loaded now if it is
        not yet: what it would have been had the counter been there all along."""
        self.resolve()
        view = payload.view
        if view is None or self._basis.counter is BOUND:
            return payload
        fresh = self.measure(view)
        fresh.provider, fresh.server, fresh.extends = payload.provider, payload.server, payload.extends
        return fresh

    def resolve(self) -> None:
        """Replace the bounds with the exact counter (once): the caches start again, memos of the
        bounds are not resumed, and each waiting report is counted in the order it came."""
        with self._lock:
            if self._load is None or self._basis.counter is not BOUND:
                return
            counter = self._load()
            self._count_with(counter)
            pending, self._pending, self._pending_bound = self._pending, {}, 0
            seen: dict[str, int] = {}
            for model, samples in pending.items():
                for reported, bound, messages, schemas, skipped in samples:
                    self.calibration.observe(model, _recount(bound, messages, schemas, counter, seen, skipped),
                                             reported)

    def observe(self, payload: Payload, reported: int) -> None:
        """Learn from the input tokens the provider reported for ``payload`` (``Calibration``):
        both calibrations learn what the text costs, the report and the count each less the
        payload's fixed tokens. A report that leaves the text fewer than ``_LEARNS_FROM_TEXT``
        tokens, or fewer than ``_TEXT_PER_FIXED`` times the fixed ones, teaches nothing: an error
        in the fixed tokens assumed would decide its ratio (docs/budget.md, "What teaches calibration")."""
        model, fixed = payload.model, payload.fixed
        text = reported - fixed
        if text < _LEARNS_FROM_TEXT or text < _TEXT_PER_FIXED * fixed:
            return
        self._observe(payload, model, fixed, text)
        after = self.out_of_range(model)
        if after is not None and payload.out_of_range is None:  # as it was when measured
            _said_out_of_range(model, after, reported, payload.tokens)

    def out_of_range(self, model: str | None) -> str | None:
        """Whether ``model``'s counts are past what calibration corrects (``Calibration.outside``)."""
        calibration, bounds = self.calibration, self.bounds
        if not (calibration.outside_by_model or bounds.outside_by_model):
            return None  # every model within range, as nearly always: no call (~4,000 instructions a call)
        return calibration.outside(model) or bounds.outside(model)

    def _observe(self, payload: Payload, model: str | None, fixed: int, text: int) -> None:
        self.bounds.observe(model, payload.bound - fixed, text)  # ignored if either is not > 0
        if payload.basis != BOUND.name:
            self.calibration.observe(model, payload.raw_tokens - fixed, text)
            return
        if not model or payload.view is None:
            return
        schemas, skipped = payload.view.tools, list(payload.view.not_read.values())
        with self._lock:
            counter = self._basis.counter
            if counter is BOUND:
                self._wait(model, (text, payload.raw_tokens - fixed, payload.messages, schemas, skipped))
                full = self._pending_bound > PENDING_BOUND
            else:  # the exact counter came meanwhile: count it now
                counted = _recount(payload.raw_tokens - fixed, payload.messages, schemas, counter, {}, skipped)
        if counter is not BOUND:
            self.calibration.observe(model, counted, text)
        elif full:
            self.resolve()

    def _wait(self, model: str, sample: Pending) -> None:
        """Keep ``sample`` for the exact counter (under the lock): the last ``WINDOW`` per model, of
        the first ``MAX_MODELS`` models, as ``calibration`` keeps its ratios."""
        samples = self._pending.get(model)
        if samples is None:
            if len(self._pending) >= Calibration.MAX_MODELS:
                return
            samples = self._pending[model] = deque(maxlen=Calibration.WINDOW)
        if len(samples) == samples.maxlen:
            self._pending_bound -= samples[0][1]
        samples.append(sample)
        self._pending_bound += sample[1]

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
        if view.text_scale is None:  # every adapter's views pass here: its model's own tokenizer, whatever the route
            view.text_scale = text_scale(view.model)
        items = view.items
        basis = self._basis
        if basis.counter is BOUND:
            basis = self._current()
        start, messages, digests, sums, hasher, held, extends, first_tool, bound, fixed = _resumed(
            items, memo, basis.generation)
        # The cache's look-up inlined (``_message`` makes it too): ~900 instructions less a message
        # looked up, which is every message of a call without a conversation's memo: 18,000 (3% of a
        # call) at 20 messages (callgrind).
        hit = basis.messages._new.get
        message = self._message
        new = [hit(item) or message(item, basis) for item in items[start:]]
        messages.extend(new)
        if first_tool is None and new:
            # The first message with tool refs, for ``tool_pairs_intact``: looked for in the new
            # ones only (none before them has any), so a payload without any costs it nothing.
            first_tool = next(compress(count(start), map(_tools_of, new)), None)
        sums.extend(accumulate(map(_tokens_of, new), initial=sums.pop()))  # running sums, in C
        total = sums[-1]
        digests.extend(map(_digest_of, new))  # map + attrgetter: a C loop, over the new ones only
        # The messages' bounds (their counts, counted as bounds) and the bytes they keep (the memo's
        # bound): the resumed ones' sums carried on if it extends the memo's, else summed again.
        bound = total if basis.counter is BOUND else (
            bound + sum(map(_bound_of, new)) if extends is not None else sum(map(_bound_of, messages)))
        fixed = fixed + sum(map(_fixed_of, new)) if extends is not None else sum(map(_fixed_of, messages))
        hasher = self._hashed(hasher, digests, start, bool(new))
        digest = hasher.hexdigest()
        if memo is not None:
            held = held + sum(map(_size_of, new)) if extends is not None else sum(map(_size_of, messages))
            # Kept as they are, not copied: nothing changes them after this (the next call slices them).
            memo.measured = (items, messages, digests, sums, hasher, held, digest, first_tool, basis.generation,
                             bound, fixed)
        if view.not_read:  # text sent but not read (``RequestView.not_read``): off the count, the messages as sent
            skipped = view.not_read.values()
            total -= sum([self.tokens(text, basis) for text in skipped])
            bound -= sum(map(utf8_bytes, skipped))
        tools = view.tools
        tools_tokens = (sum([self.tokens(schema, basis) for schema in tools]) if tools else 0) + view.prompt_overhead
        # The provider's own framing (``RequestView``): each message was counted with OpenAI Chat's.
        framing = view.reply_priming + (view.message_framing - MESSAGE_OVERHEAD) * len(items)
        raw = total + framing + tools_tokens
        fixed += framing + view.prompt_overhead
        tokens, source, bound, most, scale = self._shown(basis, view, raw, bound, fixed, view.text_scale)
        return Payload(
            provider=view.provider, operation=view.operation, model=view.model,
            messages=messages, digests=digests, digest=digest,
            raw_tokens=raw, tokens=tokens, tokens_source=source, tools_tokens=tools_tokens,
            max_output_tokens=view.max_output_tokens, stream=view.stream,
            history_elsewhere=view.history_elsewhere, unreadable=view.unreadable, reply_room=view.reply_room,
            extends=extends, first_tool=first_tool, tool_results=view.tool_results, window=view.window,
            server_edits=view.server_edits, loose_tool_counts=view.loose_tool_counts, server=view.server,
            basis=basis.counter.name, view=view if basis.counter is BOUND else None,
            bound=bound, ceiling=most, fixed=fixed, scale=scale, out_of_range=self.out_of_range(view.model),
            settings=view.settings, prompt_overhead=view.prompt_overhead,
        )

    def _current(self) -> _Basis:
        basis = self._basis
        if basis.counter is BOUND and loaded_counter() is not None:
            self.resolve()  # something else loaded the exact counter: no reason to bound any more
            basis = self._basis
        return basis

    def _shown(
        self, basis: _Basis, view: RequestView, raw: int, messages: int, fixed: int, model_scale: float,
    ) -> tuple[int, str, int, int, float]:
        """What a payload of ``raw`` counted tokens, whose messages' bounds sum to ``messages`` and
        ``fixed`` of whose tokens are not text, shows, its source, its bound, its ceiling
        (``ceiling``) and its text's scale (``shown``). A bound shows its text at its model's learnt
        tokens a byte (four bytes a token, times ``model_scale``, the view's ``text_scale``, before five
        reports) and its fixed tokens as they are; a count shows its text calibrated (at ``model_scale``
        before five reports: the model's documented tokenizer, the calibration's
        prior, never applied on top of a learnt factor, which is learnt from the unscaled counts)
        and its fixed tokens as they are, never more than the ceiling."""
        bounds = self.bounds.factor(view.model)
        if basis.counter is BOUND:
            scale = BOUND_SCALE * model_scale if bounds is None else bounds
            source = "estimate" if bounds is None else "calibrated"
            return shown(raw, fixed, scale), source, raw, ceiling(raw, fixed, bounds), scale
        tools = view.tools
        framing = view.reply_priming + (view.message_framing - MESSAGE_OVERHEAD) * len(view.items)
        bound = messages + framing + (utf8_bytes("".join(tools)) if tools else 0) + view.prompt_overhead
        most = ceiling(bound, fixed, bounds)
        factor = self.calibration.factor(view.model)
        if factor is None:
            prior = model_scale
            if prior == 1.0:
                return raw, basis.counter.name, bound, most, 1.0
            return min(shown(raw, fixed, prior), most), basis.counter.name, bound, most, prior
        return min(shown(raw, fixed, factor), most), "calibrated", bound, most, 1.0


class CountOutOfRange(Exception):
    """A model's reported input tokens stay past what calibration corrects: counted in
    ``ctxguard_guard_errors_total{where="tokens"}`` once per model (its accounting is wrong)."""


def _said_out_of_range(model: str | None, direction: str, reported: int, counted: int) -> None:
    """Once per model (the calibration flags it once until it comes back within range)."""
    logger.warning("ctxguard: %s is %s: its provider reports input tokens past what calibration corrects (%d "
                   "reported where %d were counted); its budget verdicts are not to be trusted until its provider's "
                   "accounting is fixed (docs/budget.md, \"Calibration refines, never rescues\")",
                   model, direction, reported, counted)
    report_internal_error("tokens", CountOutOfRange(f"{model}: {direction}"))


def shown(bound: int, fixed: int, scale: float) -> int:
    """What ``bound`` bytes and tokens, ``fixed`` of which are tokens (framing, images: see
    ``Payload.fixed``), show as tokens at ``scale`` tokens a byte of the rest, the text.

    ``Measurer._shown`` shows a payload's tokens by it, the inspector its budget terms.

    >>> shown(1_003, 3, 0.25), shown(768, 768, 0.25), shown(40, 3, 1.0)
    (253, 768, 40)
    """
    return bound if scale == 1.0 else round((bound - fixed) * scale) + fixed


def ceiling(bound: int, fixed: int, factor: float | None) -> int:
    """The most tokens a payload of ``bound`` bytes and tokens, ``fixed`` of them tokens, shows
    counted exactly and calibrated: its bound, or more where the provider has reported more tokens
    than its text has bytes (``factor``, its model's median tokens a byte of text). An exact count
    is at most the bound (``tokens.utf8_bytes``), so a bound-proven verdict is the exact count's
    verdict too."""
    return bound if factor is None or factor <= 1 else shown(bound, fixed, factor)
