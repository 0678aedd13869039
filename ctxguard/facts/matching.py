"""How a fact value is recognised in text: normalised substring search.

Both sides are normalised the same way (Unicode NFKC, case-folded, whitespace
collapsed), so "Pune", "PUNE" and "pune " match and a full-width digit matches
its ASCII twin. Values shorter than ``MIN_MATCH_CHARS`` after normalisation are
never matched: "No" or "5" would be found everywhere, and a guard that cries
wolf is switched off.
"""

from __future__ import annotations

import datetime as _dt
import unicodedata
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["MIN_MATCH_CHARS", "SEPARATOR", "normalise", "text_of", "value_text"]

MIN_MATCH_CHARS = 3
#: Joins the texts of separate messages: no value can match across a boundary.
SEPARATOR = "\x00"


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


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


def text_of(content: Any) -> str:
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
