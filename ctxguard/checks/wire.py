"""``wire_intact``: what the app passed is what the SDK put on the wire.

SDKs rename fields, drop unset values and restructure messages; this check is
the evidence that the payload ctxguard judged is the payload that was sent. It is
judged when the transport sends the request (so it never blocks), on the raw
body: each line of the system instruction and of the pinned block must appear
in it, JSON-escaped as an encoder would write it. Line by line, because an SDK
may split an instruction into blocks; on the raw bytes, because decoding and
normalising every body would cost more than the rest of the guard.

Active facts the payload carries elsewhere (a user message, a tool result) are
held to the same rule through the line that carries them: the raw line of the
message whose normalised text holds the value must be in the body. A value that
spans a line break has no such line and is not judged (no false alarm). A fact whose
line is not in the raw body may have gone as structure rather than text (a tool call's
object arguments, an Anthropic ``tool_use`` input): then, and only then, the body is
decoded once and its own strings settle it. The value anywhere in them counts as sent,
so a fact whose carrying message the SDK dropped while another part of the body still
holds the value is not reported: the fact did reach the model.
"""

from __future__ import annotations

import json
from sys import getsizeof
from typing import Any

from ..cache import ENTRY_BYTES, TwoGenerationCache
from ..facts.evaluate import FactView
from ..facts.index import WORD as _WORD
from ..facts.ledger import Version
from ..facts.matching import LARGE_TEXT, normalise, numbers, strings_in
from ..facts.stages import Checkpoint
from ..payload import Payload
from ..violations import Violation
from .base import Context


class _Needle:
    """A text as a JSON encoder may write it inside a string (ASCII-escaped or not), and where
    it was last found in a body: looked at first next time, since an app resends the same
    instruction at the same place call after call. Only a hint, always checked, so a stale
    one (another thread, a body laid out differently) costs one search, never a verdict;
    and a bytes search for a needle of 100+ bytes in a body of a few KB first builds a
    table from the needle, which this skips."""

    __slots__ = ("at", "variants")

    def __init__(self, text: str) -> None:
        self.variants = tuple({json.dumps(text)[1:-1].encode(), json.dumps(text, ensure_ascii=False)[1:-1].encode()})
        self.at = -1

    def found_in(self, body: bytes) -> bool:
        at = self.at
        if at >= 0:
            for variant in self.variants:
                if body.startswith(variant, at):
                    return True
        for variant in self.variants:
            at = body.find(variant)
            if at >= 0:
                self.at = at
                return True
        return False


def _needle_bytes(needle: _Needle) -> int:
    return ENTRY_BYTES + sum(map(getsizeof, needle.variants))


def _needles_bytes(text: str, needles: tuple[_Needle, ...]) -> int:
    return getsizeof(text) + sum(map(_needle_bytes, needles))


def needle_cache(max_bytes: int = 4 << 20) -> TwoGenerationCache[str, tuple[_Needle, ...]]:
    """The same instruction and block are sent call after call: their needles are kept, keyed by
    the text, within ``max_bytes`` (the text counted with its encodings; an inspector's is its
    share of ``CTXGUARD_CACHE_BYTES``)."""
    return TwoGenerationCache(256, max_bytes, _needles_bytes)


def _needles(text: str, cache: TwoGenerationCache[str, tuple[_Needle, ...]]) -> tuple[_Needle, ...]:
    """(the whole text; then each non-empty line of it)."""
    found = cache.get(text)
    if found is None:
        lines = (line for line in (raw.strip() for raw in text.splitlines()) if line)
        found = (_Needle(text), *(_Needle(line) for line in lines))
        cache.put(text, found)
    return found


def _carried(text: str, body: bytes, cache: TwoGenerationCache[str, tuple[_Needle, ...]]) -> bool:
    if len(text) > _WHOLE_CACHED_CHARS:  # not kept: an instruction of 100 MB is not cached 256 times over
        if _in_one_piece(text, body):
            return True
        stripped = (line for line in (raw.strip() for raw in text.splitlines()) if line)
        return all(_Needle(line).found_in(body) for line in stripped)
    whole, *lines = _needles(text, cache)
    # The whole text in one piece carries every line: one search instead of one per line.
    return whole.found_in(body) or all(line.found_in(body) for line in lines)


def wire_intact(payload: Payload, ctx: Context, body: bytes) -> list[Violation]:
    """The system instruction and pinned block passed to the SDK, missing from ``body`` as sent."""
    violations = []
    system = payload.system
    system_carried = system is not None and _carried(system.text, body, ctx.caches.needles)
    if system is not None and not system_carried:
        violations.append(Violation("wire_intact", "the system instruction passed is not in the body sent"))
    pinned = ctx.pinned
    # A block inside an instruction that went out whole went out with it.
    inside = system_carried and system is not None and pinned is not None and pinned.text in system.text
    if pinned is not None and not inside and not _carried(pinned.text, body, ctx.caches.needles):
        violations.append(Violation("wire_intact", "the pinned block passed is not in the body sent"))
    if isinstance(ctx.facts, FactView):
        violations.extend(_facts_on_the_wire(payload, ctx, ctx.facts, body))
    return violations


def _facts_on_the_wire(payload: Payload, ctx: Context, view: FactView, body: bytes) -> list[Violation]:
    """Each active fact the payload carries outside the instruction and the pinned block, by its line.

    One pass per carrying message, whatever the number of facts: a message found whole in the
    body carries all its lines; otherwise its lines are normalised once and each fact is looked
    for only in the lines holding its longest word (a value appears as itself, as words, as in
    the cross-conversation index: one hidden inside a longer word is not judged here)."""
    system = payload.system
    pinned = ctx.pinned.text if ctx.pinned is not None else None
    carried_by: dict[int, list[Version]] = {}
    for version in view.state.active.values():
        at = view.carrier(version)
        if at >= 0:
            carried_by.setdefault(at, []).append(version)
    violations: list[Violation] = []
    messages = payload.messages
    for at, versions in carried_by.items():
        message = messages[at]
        if message is system or (pinned is not None and pinned in message.text):  # those are checked whole
            continue
        if len(message.text) > LARGE_TEXT:
            continue  # too large to split into lines and normalise each: its facts are not judged here
        if _whole(message.digest, message.text, ctx.caches.wholes).found_in(body):
            continue
        for version, lines in _lines_holding(message.text, versions):
            if lines and not all(_carried(line, body, ctx.caches.needles) for line in lines):
                violations.append(Violation(
                    "wire_intact", f"{version.label} passed is not in the body sent", version.fact_id))
    if violations:
        sent = _decoded(body)
        if sent is not None:  # the body's own text says otherwise: not a loss
            violations = [v for v in violations if not sent.holds(view.state.active[v.fact_id or ""])]
    return violations


#: Bodies up to this size are decoded when a fact's line is not found in them raw.
_DECODED_BYTES = 8 << 20


def _decoded(body: bytes) -> Checkpoint | None:
    """Every string of the body as sent, searched as a checkpoint is: what settles a fact whose line is not in
    the raw bytes because the SDK sent it as structure, not text (a tool call's object
    arguments, an Anthropic ``tool_use`` input: nested JSON, where ctxguard's line is the
    value's text, or canonical JSON with other spacing and key order). Only read when a fact
    looks lost, so never on a clean call; None for a body too large or not JSON."""
    if len(body) > _DECODED_BYTES:
        return None
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    return Checkpoint.of(strings_in(_parsed_strings(decoded)))


def _parsed_strings(node: Any) -> Any:
    """``node`` with every string that is itself a JSON document (OpenAI's ``arguments``)
    replaced by what it holds."""
    if isinstance(node, str):
        if node[:1] in ("{", "["):
            try:
                return _parsed_strings(json.loads(node))
            except ValueError:
                return node
        return node
    if isinstance(node, dict):
        return {k: _parsed_strings(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_parsed_strings(v) for v in node]
    return node


#: Messages resent call after call are searched for whole at the place they were last found.
#: Only texts up to this size are kept (a larger one is re-encoded per call: bounded memory).
_WHOLE_CACHED_CHARS = 16_384
def _whole_bytes(digest: str, needle: _Needle) -> int:
    return _needle_bytes(needle)


def whole_cache(max_bytes: int = 4 << 20) -> TwoGenerationCache[str, _Needle]:
    """Fact-carrying messages, whole, by their digest (up to ``_WHOLE_CACHED_CHARS``), within ``max_bytes``."""
    return TwoGenerationCache(2_048, max_bytes, _whole_bytes)


def _whole(digest: str, text: str, cache: TwoGenerationCache[str, _Needle]) -> _Needle:
    if len(text) > _WHOLE_CACHED_CHARS:
        return _Needle(text)
    needle = cache.get(digest)
    if needle is None:
        needle = _Needle(text)
        cache.put(digest, needle)
    return needle


def _in_one_piece(text: str, body: bytes) -> bool:
    """Whether ``text`` is in ``body`` in one piece, JSON-escaped either way: encoded and
    compared a chunk at a time (a copy of the text, encoded whole, would double its memory)."""
    pieces = range(0, len(text), LARGE_TEXT)
    for ascii_only in (True, False):
        first = json.dumps(text[:LARGE_TEXT], ensure_ascii=ascii_only)[1:-1].encode()
        at = body.find(first)
        while at >= 0:
            end = at + len(first)
            for start in pieces[1:]:
                piece = json.dumps(text[start : start + LARGE_TEXT], ensure_ascii=ascii_only)[1:-1].encode()
                if not body.startswith(piece, end):
                    break
                end += len(piece)
            else:
                return True
            at = body.find(first, at + 1)
    return False


def _lines_holding(text: str, versions: list[Version]) -> list[tuple[Version, list[str]]]:
    """For each version, the raw lines of ``text`` whose normalised form holds its value (a grouped
    number: in any grouping, among the line's numbers)."""
    raw = [line for line in text.splitlines() if line.strip()]
    norms = [normalise(line) for line in raw]
    keys: list[str] = []
    for version in versions:
        found = _WORD.findall(version.norm)
        keys.append(max(found, key=len) if found and version.number is None else "")
    wanted = {key for key in keys if key}
    by_word: dict[str, list[int]] = {}
    if wanted:
        for i, norm in enumerate(norms):
            for word in wanted.intersection(_WORD.findall(norm)):
                by_word.setdefault(word, []).append(i)
    every = range(len(norms))
    line_numbers: dict[int, frozenset[str]] = {}

    def holds(i: int, version: Version) -> bool:
        if version.norm in norms[i]:
            return True
        if version.number is None:
            return False
        if i not in line_numbers:
            line_numbers[i] = numbers(raw[i])
        return version.number in line_numbers[i]

    out = []
    for version, key in zip(versions, keys, strict=True):
        out.append((version, [raw[i] for i in (by_word.get(key, ()) if key else every) if holds(i, version)]))
    return out
