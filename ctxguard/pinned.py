"""The pinned facts block: rendering an intact, capped block and finding one in a payload.

A block made by ``render_pinned`` announces its entry count in its header and
ends with a closing line, so a block that was cut (by a trimmer, a byte limit,
a careless edit) is recognisable: the closing line or an entry is missing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from .cache import ENTRY_BYTES, TwoGenerationCache, str_bytes
from .payload import Message
from .tokens import TokenCounter, default_counter

__all__ = ["PinnedBlock", "block_cache", "find_block", "render_pinned"]


def _header(marker: str, entries: int) -> str:
    return f"[{marker}: {entries} {'entry' if entries == 1 else 'entries'}]"


def _closing(marker: str) -> str:
    return f"[end of {marker}]"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def render_pinned(
    facts: Mapping[str, str],
    *,
    max_tokens: int,
    max_entries: int | None = None,
    marker: str = "Pinned facts",
    counter: TokenCounter | None = None,
) -> str:
    """Render facts as a block that fits the caps, dropping the oldest facts whole.

    >>> print(render_pinned({"shipping_city": "Pune"}, max_tokens=100))
    [Pinned facts: 1 entry]
    shipping_city: Pune
    [end of Pinned facts]
    """
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    if max_entries is not None and max_entries < 0:
        raise ValueError("max_entries must be >= 0")
    if not marker:
        raise ValueError("marker must be a non-empty string")
    count = (counter or default_counter()).count
    lines = [f"{_one_line(fact_id)}: {_one_line(value)}" for fact_id, value in facts.items()]
    if max_entries is not None:
        lines = lines[len(lines) - max_entries :] if max_entries else []
    closing = _closing(marker)
    # Oldest first in mapping order: drop from the front until the whole block fits.
    while True:
        block = "\n".join([_header(marker, len(lines)), *lines, closing])
        if not lines or count(block) <= max_tokens:
            return block
        lines = lines[1:]


@dataclass(frozen=True, slots=True)
class PinnedBlock:
    """A pinned block found in a payload (frozen: ``find_block`` shares one between the calls that send it)."""

    text: str
    entries: int
    rendered: bool  # made by render_pinned (header with a count)
    intact: bool | None  # None when not rendered (cannot be judged)


@lru_cache(maxsize=64)
def _header_re(marker: str) -> re.Pattern[str]:
    return re.compile(r"^\[" + re.escape(marker) + r": (\d+) entr(?:y|ies)\]$", re.MULTILINE)


Parsed = tuple[str, int, bool, bool | None]


def _parse(text: str, marker: str) -> Parsed:
    match = _header_re(marker).search(text)
    if match is not None:
        expected = int(match.group(1))
        closing_at = text.find(_closing(marker), match.end())
        stop = len(text) if closing_at < 0 else closing_at + len(_closing(marker))
        body = text[match.end() : len(text) if closing_at < 0 else closing_at]
        entries = sum(1 for line in body.split("\n") if line.strip())
        return text[match.start() : stop], entries, True, closing_at >= 0 and entries == expected
    # A hand-made block: from the marker's line to the next blank line.
    start = text.rfind("\n", 0, text.find(marker)) + 1
    stop = text.find("\n\n", start)
    block_text = text[start:] if stop < 0 else text[start:stop]
    entries = sum(1 for line in block_text.split("\n")[1:] if line.strip())
    return block_text, entries, False, None


def _block_bytes(key: tuple[str, str], block: PinnedBlock) -> int:
    return ENTRY_BYTES + str_bytes(key[0]) + str_bytes(block.text)


def block_cache() -> TwoGenerationCache[tuple[str, str], PinnedBlock]:
    """For ``find_block``: the same block is re-sent call after call, parsed once and kept, by the text
    of the message carrying it and the marker (an inspector's). The block itself is kept, not what
    builds it: no new ``PinnedBlock`` a call (1,240 instructions a call less, 641,412 -> 640,170,
    bench/instructions.py's guarded-own child at 20 messages)."""
    return TwoGenerationCache(1024, 1024 * 1024, _block_bytes)


def find_block(messages: list[Message], marker: str,
               cache: TwoGenerationCache[tuple[str, str], PinnedBlock] | None = None) -> PinnedBlock | None:
    """The first message carrying ``marker``, parsed (kept in ``cache``, if given); None when no
    message does.

    >>> block = render_pinned({"shipping_city": "Pune", "order_id": "A-1041"}, max_tokens=100)
    >>> found = find_block([Message("system", "Be brief.\\n" + block, "digest", 0)], "Pinned facts")
    >>> found.entries, found.rendered, found.intact
    (2, True, True)
    >>> find_block([Message("system", block[:-1], "digest", 0)], "Pinned facts").intact  # closing line cut
    False
    """
    for message in messages:
        if marker in message.text:
            if cache is None:
                return PinnedBlock(*_parse(message.text, marker))
            key = (message.text, marker)
            block = cache.get(key)
            if block is None:
                block = PinnedBlock(*_parse(message.text, marker))
                cache.put(key, block)
            return block
    return None
