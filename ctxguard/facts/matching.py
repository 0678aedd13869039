"""How a fact value is recognised in text: normalised substring search.

Both sides are normalised the same way (Unicode NFKC, case-folded, whitespace
collapsed), so "Pune", "PUNE" and "pune " match and a full-width digit matches
its ASCII twin. Values shorter than ``MIN_MATCH_CHARS`` after normalisation are
never matched: "No" or "5" would be found everywhere, and a guard that cries
wolf is switched off.
"""

from __future__ import annotations

import datetime as _dt
import re
import unicodedata
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

__all__ = [
    "LARGE_TEXT", "MIN_MATCH_CHARS", "SEPARATOR", "Chunked", "distinctive", "normalise", "searchable", "strings_in",
    "value_text",
]

MIN_MATCH_CHARS = 3
#: Joins the texts of separate messages: no value can match across a boundary.
SEPARATOR = "\x00"


def normalise(text: str) -> str:
    """Text as fact values are matched in it: NFKC (ligatures and full-width forms spelt
    out), case-folded, every run of whitespace one space.

    >>> normalise("Ship to  ZÜRICH,\\tﬁle A-1041")
    'ship to zürich, file a-1041'
    """
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def distinctive(norm: str) -> bool:
    """Only values unlikely to be typed independently count as leaks (no false alarms on "pune"):
    8 characters or more, or a digit."""
    return len(norm) >= 8 or any(ch.isdigit() for ch in norm)


#: Texts longer than this (characters) are never normalised whole, which would copy them three
#: times over and cost seconds at 100 MB: they are searched a chunk at a time (``Chunked``).
LARGE_TEXT = 1 << 20
_CHUNK = 1 << 20
_OVERLAP = 4_096  # a match spanning a chunk boundary is found if it spans at most this much text


class Chunked:
    """A text too large to normalise whole, searched a chunk at a time in bounded memory:
    ``value in Chunked(text)`` is ``value in normalise(text)`` for any normalised value whose
    match spans at most 4 KiB of the text. An ASCII chunk is only lower-cased (NFKC and
    case folding do nothing else to ASCII), and a value's spaces match any run of whitespace,
    as normalising would have collapsed it; other chunks are normalised. Results are kept."""

    __slots__ = ("_known", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._known: dict[str, bool] = {}

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        known = self._known.get(value)
        if known is None:
            self.search((value,))
            known = self._known[value]
        return known

    def search(self, values: Iterable[str]) -> None:
        """Look for every one of ``values`` in one pass over the text (each then known)."""
        pending = [v for v in dict.fromkeys(values) if v not in self._known]
        if not pending:
            return
        spaced = {v: re.compile(r"\s+".join(map(re.escape, v.split(" ")))) for v in pending if " " in v}
        found: set[str] = set()
        text = self.text
        for start in range(0, len(text), _CHUNK):
            piece = text[max(0, start - _OVERLAP) : start + _CHUNK]
            if piece.isascii():
                hay = piece.lower()
                found.update(v for v in pending if v not in found and (
                    spaced[v].search(hay) is not None if v in spaced else v in hay))
            else:
                hay = normalise(piece)
                found.update(v for v in pending if v not in found and v in hay)
            if len(found) == len(pending):
                break
        for v in pending:
            self._known[v] = v in found


def searchable(text: str) -> str | Chunked:
    """``text`` normalised for fact matching, or ``Chunked`` when it is too large for that."""
    return Chunked(text) if len(text) > LARGE_TEXT else normalise(text)


def value_text(value: object) -> str:
    """A fact value as text, deterministically (numbers, dates, booleans included)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    raise TypeError(f"fact values must be str, int, float, Decimal, bool or a date/time, not {type(value).__name__}")


def strings_in(content: Any) -> str:
    """Every string inside a checkpoint's content (text, message list, dict), joined."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            parts.append(node)
        elif isinstance(node, Mapping):
            for item in node.values():
                walk(item)
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item)
        else:
            content = getattr(node, "content", None)
            if content is not None:
                walk(content)

    walk(content)
    return SEPARATOR.join(parts)
