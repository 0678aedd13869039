"""The fake's token estimate: what the model reads of a request, and what it says.

Usage grows with what the model reads and writes, never with JSON punctuation or parameters the
model does not read. A deterministic approximation (about a token per five letters of a word, one
per punctuation mark), not a tokenizer: ctxguard's own estimate must not agree with it by construction.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .media import flat

# Per message (role, separators) and once for the reply's own header, as OpenAI's cookbook counts.
FRAME_TOKENS = 3


class Reading:
    """What a wire format's model reads of a message, by key (space-separated): keys it never reads (ids, cache
    hints, signatures; no API reads a block's ``type``, ``role`` or ``id``), keys holding a picture, audio or a
    file (priced once a part), and keys whose JSON it reads keys and all (tool arguments and results as objects)."""

    def __init__(self, unread: str = "", media: str = "", structured: str = "") -> None:
        self.unread = frozenset({"type", "role", "id", *unread.split()})
        self.media = frozenset(media.split())
        self.structured = frozenset(structured.split())


_PIECES = re.compile(r"[^\W\d_]+|\d{1,3}|[^\s]")

def text_tokens(text: str) -> int:
    """Digits go in threes, a non-ASCII word costs a token per ~3 UTF-8 bytes."""
    n = 0
    for piece in _PIECES.findall(text):
        n += 1 + (len(piece) - 1) // 5 if piece.isascii() else -(-len(piece.encode()) // 3)
    return n


def read_tokens(value: Any, reads: Reading, *, keys: bool = False, price: Callable[[Any], int] = flat) -> int:
    """Tokens of what the model reads in a message, part or schema (``reads``: its API's keys;
    ``keys``: names count too; ``price``: what a part holding a picture, audio or a file costs, once
    per part: a picture by its size as its provider prices it, ``media``)."""
    if isinstance(value, str):
        return text_tokens(value)
    if isinstance(value, (bool, int, float)):
        return 1
    if isinstance(value, list):
        # A loop, not sum() over a generator: one frame a level, so that the deepest body the
        # server accepts is read (server.py).
        n = 0
        for v in value:
            n += read_tokens(v, reads, keys=keys, price=price)
        return n
    if not isinstance(value, dict):
        return 0
    n = price(value) if not keys and not reads.media.isdisjoint(value) else 0
    for key, v in value.items():
        if keys or (key not in reads.unread and key not in reads.media):
            n += (text_tokens(str(key)) if keys else 0) + read_tokens(
                v, reads, keys=keys or key in reads.structured, price=price)
    return n


def schemas_tokens(*schemas: Any) -> int:
    """Tool definitions and output formats, names and all; a plain-text format costs nothing."""
    n = 0
    for schema in schemas:
        for item in schema if isinstance(schema, list) else [schema]:
            if isinstance(item, dict) and item.get("type") != "text":
                n += read_tokens(item, Reading(), keys=True)
    return n


def messages_tokens(messages: Any, reads: Reading, price: Callable[[Any], int] = flat) -> int:
    if not isinstance(messages, list):
        return 0
    return sum(FRAME_TOKENS + read_tokens(m, reads, price=price) for m in messages)
