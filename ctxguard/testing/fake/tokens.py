"""The fake's token estimate: what the model reads of a request, and what it says.

Usage grows with what the model reads (message text, instructions, tool results and arguments,
tool and output schemas, a few tokens of framing per message) and with what it writes, never with
JSON punctuation or parameters the model does not read. A deterministic approximation (about a
token per five letters of a word, one per punctuation mark), not a tokenizer: ctxguard's own
estimate must not agree with it by construction. Each wire format says which parts of its
request are read (its ``prompt_tokens``) and how its provider prices a picture (``media``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .media import FLAT

# Per message (role, separators) and once more for the reply's own header, as
# OpenAI's cookbook counts chat framing.
FRAME_TOKENS = 3
#: What a media part costs: a picture by its size as its provider prices it (``media``), audio, a
#: file or a picture it cannot read a flat ``media.FLAT``.
Price = Callable[[Any], int]
# Keys whose values the model never reads as text: ids, roles, block types, cache
# hints, signatures, Mistral's ``prefix`` flag.
_UNREAD_KEYS = frozenset({
    "type", "role", "id", "tool_call_id", "call_id", "tool_use_id", "cache_control", "signature", "status",
    "index", "mime_type", "media_type", "mimeType", "thought_signature", "thoughtSignature", "encrypted_content",
    "detail", "annotations", "logprobs", "citations", "prefix", "toolUseId",
})
_MEDIA_KEYS = frozenset({
    "image_url", "input_image", "image", "input_audio", "file", "source", "inlineData", "inline_data", "fileData",
    "file_data", "document_url",
})
# JSON objects the model reads keys and all: tool arguments and results, schemas (Mistral's
# tool-call ``arguments`` may be an object; elsewhere they are a JSON string, read the same).
_STRUCTURED_KEYS = frozenset({
    "input", "args", "response", "parameters", "input_schema", "schema", "properties", "arguments",
})
_PIECES = re.compile(r"[^\W\d_]+|\d{1,3}|[^\s]")


def text_tokens(text: str) -> int:
    """Roughly what a BPE tokenizer makes of ``text``: a word is a token per ~5 letters,
    digits go in threes, every other visible character is its own token; non-ASCII
    words cost a token per ~3 UTF-8 bytes.  An approximation, not a tokenizer."""
    n = 0
    for piece in _PIECES.findall(text):
        if piece.isascii():
            n += 1 + (len(piece) - 1) // 5
        else:
            n += -(-len(piece.encode()) // 3)
    return n


def flat(part: Any) -> int:
    return FLAT


def read_tokens(value: Any, *, keys: bool = False, price: Price = flat) -> int:
    """Tokens of what the model reads in a message, part or schema (``keys``: names count too;
    ``price``: what a part holding a picture, audio or a file costs, once per part)."""
    if isinstance(value, str):
        return text_tokens(value)
    if isinstance(value, (bool, int, float)):
        return 1
    if isinstance(value, list):
        # A loop, not sum() over a generator: one frame a level, so that the deepest body the
        # server accepts is read (server.py).
        n = 0
        for v in value:
            n += read_tokens(v, keys=keys, price=price)
        return n
    if not isinstance(value, dict):
        return 0
    n, priced = 0, False
    for key, v in value.items():
        if key in _MEDIA_KEYS and not keys:
            if not priced:
                n += price(value)
                priced = True
        elif keys or key not in _UNREAD_KEYS:
            n += (text_tokens(str(key)) if keys else 0) + read_tokens(
                v, keys=keys or key in _STRUCTURED_KEYS, price=price)
    return n


def schemas_tokens(*schemas: Any) -> int:
    """Tool definitions and output formats, names and all; a plain-text format costs nothing."""
    n = 0
    for schema in schemas:
        for item in schema if isinstance(schema, list) else [schema]:
            if isinstance(item, dict) and item.get("type") != "text":
                n += read_tokens(item, keys=True)
    return n


def messages_tokens(messages: Any, price: Price = flat) -> int:
    if isinstance(messages, str):
        messages = [messages]
    if not isinstance(messages, list):
        return 0
    return sum(FRAME_TOKENS + read_tokens(m, price=price) for m in messages)
