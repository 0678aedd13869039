"""What an image costs in input tokens, without decoding it: its pixel size from the file
header, and the providers' published formulas (sources and choices in docs/budget.md).

Pure stdlib. For base64 data only the few bytes around each header field are decoded
(``binascii``, at the 4-character boundary that holds them), so a 5 MB image costs a
handful of 4-byte decodes, wherever its JPEG frame header sits behind ICC profiles and
EXIF thumbnails. Nothing here keeps or returns image bytes: only a size and a count.
"""

from __future__ import annotations

import binascii
import math
import re
from collections.abc import Callable

from ._read import family

__all__ = [
    "ANTHROPIC_HIGH_RES",
    "ANTHROPIC_STANDARD",
    "anthropic_tokens",
    "gemini_generation",
    "gemini_tokens",
    "openai_tokens",
    "size_of_base64",
    "size_of_bytes",
    "size_of_url",
]

Size = tuple[int, int]
#: ``read(offset, length)`` -> up to ``length`` bytes of the image from byte ``offset``.
Reader = Callable[[int, int], bytes]

#: JPEG segments walked before giving up (a real file reaches its frame header in a few dozen).
_JPEG_SEGMENTS = 512
#: Start-of-frame markers (baseline, extended, progressive, lossless, arithmetic): all carry
#: height and width at the same place. C4 (DHT), C8 (JPG) and CC (DAC) are not frames.
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def _u16be(b: bytes, i: int) -> int:
    return (b[i] << 8) | b[i + 1]


def _u16le(b: bytes, i: int) -> int:
    return b[i] | (b[i + 1] << 8)


def _u24le(b: bytes, i: int) -> int:
    return b[i] | (b[i + 1] << 8) | (b[i + 2] << 16)


def _jpeg(read: Reader) -> Size | None:
    offset = 2
    for _ in range(_JPEG_SEGMENTS):
        head = read(offset, 9)
        if len(head) < 4 or head[0] != 0xFF:
            return None
        marker = head[1]
        if marker == 0xFF:  # fill byte before a marker
            offset += 1
            continue
        if marker in _SOF:
            return (_u16be(head, 7), _u16be(head, 5)) if len(head) == 9 else None
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # markers without a length
            offset += 2
            continue
        offset += 2 + _u16be(head, 2)
    return None


def _webp(head: bytes) -> Size | None:
    chunk = head[12:16]
    if chunk == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        return _u16le(head, 26) & 0x3FFF, _u16le(head, 28) & 0x3FFF
    if chunk == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        bits = head[21] | (head[22] << 8) | (head[23] << 16) | (head[24] << 24)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(head) >= 30:
        return _u24le(head, 24) + 1, _u24le(head, 27) + 1
    return None


def _size(read: Reader) -> Size | None:
    head = read(0, 30)
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
        size = (int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"))
    elif head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        size = (_u16le(head, 6), _u16le(head, 8))
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        size = _webp(head) or (0, 0)
    elif head[:3] == b"\xff\xd8\xff":
        size = _jpeg(read) or (0, 0)
    else:
        return None
    return size if size[0] > 0 and size[1] > 0 else None


def size_of_bytes(data: bytes) -> Size | None:
    """``size_of_bytes(png)`` -> ``(width, height)``, or None if the header is not one read here."""
    return _size(lambda offset, length: data[offset : offset + length])


_SPACE = re.compile(r"\s")
#: URL-safe base64 (RFC 4648 section 5, what the google-genai SDK sends) as the standard alphabet:
#: ``binascii`` would drop ``-`` and ``_`` as noise, shifting every byte after them.
_URL_SAFE = str.maketrans("-_", "+/")


def size_of_base64(text: str, start: int = 0) -> Size | None:
    """The size of a base64-encoded image (``text`` from ``start``, standard or URL-safe), decoding
    only the bytes its header fields sit in. Never copies the text (a data URL may be megabytes)
    unless its base64 is wrapped in lines."""
    if _SPACE.search(text, start, start + 4096):  # wrapped (MIME-style lines): offsets need it unwrapped
        text, start = _SPACE.sub("", text[start:]), 0

    def read(offset: int, length: int) -> bytes:
        first = offset // 3 * 4
        stop = -(-(offset + length) // 3) * 4
        try:
            raw = binascii.a2b_base64(text[start + first : start + stop].translate(_URL_SAFE))
        except (binascii.Error, ValueError):
            return b""
        skip = offset - first // 4 * 3
        return raw[skip : skip + length]

    return _size(read)


def size_of_url(url: str) -> Size | None:
    """A ``data:image/...;base64,`` URL's image size; None for a remote URL (never fetched)."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 0, 256)
    if comma < 0 or not url.endswith(";base64", 0, comma):
        return None
    return size_of_base64(url, comma + 1)


def _fit(width: int, height: int, box: float) -> tuple[float, float]:
    """Scaled down, aspect kept, so both sides fit in ``box``; never enlarged."""
    scale = min(1.0, box / width, box / height)
    return width * scale, height * scale


# -- OpenAI ---------------------------------------------------------------------------

#: Tile-based models: (base tokens, tokens per 512-px tile). "Images and vision", Calculating costs.
_OPENAI_TILES = {
    "gpt-4o": (85, 170),
    "gpt-4o-mini": (2833, 5667),
    "chatgpt-4o": (85, 170),
    "gpt-4-turbo": (85, 170),
    "gpt-4.1": (85, 170),
    "gpt-4.5-preview": (85, 170),
    "gpt-5": (70, 140),
    "gpt-5-chat": (70, 140),
    "gpt-5.1": (70, 140),
    "o1": (75, 150),
    "o1-pro": (75, 150),
    "o3": (75, 150),
    "o3-pro": (75, 150),
    "computer-use-preview": (65, 129),
}

#: Patch-based models (32-px patches): (multiplier, {detail: (largest side in px, patch budget)}).
#: ``None`` as a budget: no patch budget is documented for that detail level.
_Limits = dict[str, tuple[int, int | None]]
_SAME_2048_6144: _Limits = {"low": (2048, 6144), "high": (2048, 6144), "auto": (2048, 6144)}
_BUDGET_1536: _Limits = {"low": (65535, 1536), "high": (65535, 1536), "auto": (65535, 1536)}
_OPENAI_PATCHES: dict[str, tuple[float, _Limits]] = {
    "gpt-5.6": (1.2, {"low": (512, None), "high": (2048, 2500), "original": (65535, None), "auto": (65535, None)}),
    "gpt-5.5": (1.2, {"low": (512, None), "high": (2048, 2500), "original": (6000, 10000), "auto": (6000, 10000)}),
    "gpt-5.4": (1.2, {"low": (2048, 6144), "high": (2048, 2500), "original": (6000, 10000), "auto": (2048, 2500)}),
    "gpt-5.2": (1.2, _SAME_2048_6144),
    "gpt-4.1-mini": (1.62, _SAME_2048_6144),
    # Deprecated models the current sizing table leaves out: the earlier rule, a 1,536-patch cap.
    "gpt-5-mini": (1.2, _BUDGET_1536),
    "gpt-5-nano": (1.5, _BUDGET_1536),
    "gpt-4.1-nano": (2.46, _BUDGET_1536),
    "o4-mini": (1.72, _BUDGET_1536),
}

#: An image whose size cannot be read (a remote URL, a file id, an unreadable header) is
#: charged what the formula charges at most for any image up to this many pixels a side.
UNKNOWN_SIDE = 2048


def _tiles(width: float, height: float, base: int, tile: int, detail: str) -> int:
    if detail == "low":
        return base
    width, height = _fit(int(width), int(height), 2048)
    short = min(width, height)
    if short > 768:
        width, height = width * 768 / short, height * 768 / short
    return base + tile * math.ceil(int(width) / 512) * math.ceil(int(height) / 512)


def _patches(width: int, height: int, multiplier: float, side: int, budget: int | None) -> int:
    w, h = _fit(width, height, side)
    w, h = int(w), int(h)
    patches = math.ceil(w / 32) * math.ceil(h / 32)
    if budget is not None and patches > budget:
        shrink = math.sqrt(32 * 32 * budget / (w * h))
        shrink *= min(math.floor(w * shrink / 32) / (w * shrink / 32), math.floor(h * shrink / 32) / (h * shrink / 32))
        patches = min(budget, math.ceil(int(w * shrink) / 32) * math.ceil(int(h * shrink) / 32))
    return math.ceil(patches * multiplier)


#: Every OpenAI family in one table, so the longest name wins across both rules
#: (``gpt-4.1-mini`` is patches although ``gpt-4.1`` is tiles).
_OPENAI: dict[str, tuple[int, int] | tuple[float, _Limits]] = {**_OPENAI_TILES, **_OPENAI_PATCHES}


def _openai_known(model: str | None, detail: str, size: Size) -> int:
    name = family(model, _OPENAI)
    if name in _OPENAI_TILES:
        return _tiles(*size, *_OPENAI_TILES[name], detail)
    if name in _OPENAI_PATCHES:
        multiplier, limits = _OPENAI_PATCHES[name]
        return _patches(*size, multiplier, *limits.get(detail, limits["auto"]))
    # A model not in the tables: the larger of the two current rules (gpt-4o tiles, gpt-5.4 patches).
    return max(_tiles(*size, 85, 170, detail), _patches(*size, 1.2, *_OPENAI_PATCHES["gpt-5.4"][1]["high"]))


def openai_tokens(model: str | None, detail: object, size: Size | None) -> int:
    """``openai_tokens("gpt-4o", "high", (1024, 1024))`` -> 765 (Images and vision, Calculating costs)."""
    level = detail if detail in ("low", "high", "original") else "auto"
    if size is not None:
        return _openai_known(model, level, size)
    name = family(model, _OPENAI)
    if level == "low" and name in _OPENAI_TILES:
        return _OPENAI_TILES[name][0]
    # Unknown size: the most any image up to UNKNOWN_SIDE px a side costs. For tiles that is a
    # 768 x 2048 image (eight tiles); for patches the largest square the limits allow.
    return max(_openai_known(model, level, (768, UNKNOWN_SIDE)), _openai_known(model, level, (UNKNOWN_SIDE,) * 2))


# -- Anthropic ------------------------------------------------------------------------

#: Most models: at most 1568 px a side and 1568 visual tokens; Claude Opus 4.7 and later with
#: high-resolution support: 2576 px and 4784 ("Images and vision", Evaluate image size).
ANTHROPIC_STANDARD = (1568, 1568)
ANTHROPIC_HIGH_RES = (2576, 4784)


def _claude_patches(width: int, height: int) -> int:
    return math.ceil(width / 28) * math.ceil(height / 28)


def _claude_fits(width: int, height: int, edge: int, budget: int) -> bool:
    return (
        math.ceil(width / 28) * 28 <= edge
        and math.ceil(height / 28) * 28 <= edge
        and _claude_patches(width, height) <= budget
    )


def _claude_resized(width: int, height: int, edge: int, budget: int) -> Size:
    """The largest aspect-preserving size within both limits (a search along the long side)."""
    if _claude_fits(width, height, edge, budget):
        return width, height
    if height > width:
        h, w = _claude_resized(height, width, edge, budget)
        return w, h
    ratio = width / height
    low, high = 1, width  # low always fits, high never does
    while low + 1 < high:
        mid = (low + high) // 2
        if _claude_fits(mid, max(round(mid / ratio), 1), edge, budget):
            low = mid
        else:
            high = mid
    return low, max(round(low / ratio), 1)


def anthropic_tokens(size: Size | None, limits: tuple[int, int] = ANTHROPIC_STANDARD) -> int:
    """``anthropic_tokens((1000, 1000))`` -> 1296: one token per 28-px patch, after resizing to fit
    ``limits`` (longest side, visual-token budget); an image of unknown size costs the budget."""
    edge, budget = limits
    if size is None:
        return budget
    return _claude_patches(*_claude_resized(*size, edge, budget))


# -- Google Gemini ----------------------------------------------------------------------

#: Gemini 3 and later: tokens per image by ``media_resolution`` (unspecified is high for images).
_GEMINI_RESOLUTION = {"low": 280, "medium": 560, "high": 1120, "ultra_high": 2240}
#: Gemini's image token: one tile, one small image, or (Gemini 2.5) any image.
_GEMINI_TILE = 258
_GEMINI_MODEL = re.compile(r"gemini-(\d+)(?:\.(\d+))?(?![\d.])")


def gemini_generation(model: object) -> tuple[int, int] | None:
    """``gemini_generation("models/gemini-2.5-flash-lite")`` -> ``(2, 5)``; None for a model whose
    name gives none (``gemini-flash-latest``, ``gemma-3-27b-it``)."""
    if not isinstance(model, str):
        return None
    found = _GEMINI_MODEL.match(model.rsplit("/", 1)[-1].lower())
    return (int(found[1]), int(found[2] or 0)) if found is not None else None


def _gemini_tiles(width: int, height: int, whole: int) -> int:
    """Both sides at most 384 px: one tile; else tiles whose side is the shorter side / 1.5 kept
    within 256-768 px, plus ``whole`` more (Gemini 2.0's scaled whole image)."""
    if width <= 384 and height <= 384:
        return _GEMINI_TILE
    tile = min(768, max(256, int(min(width, height) / 1.5)))
    return _GEMINI_TILE * (math.ceil(width / tile) * math.ceil(height / tile) + whole)


def gemini_tokens(model: str | None, size: Size | None, resolution: str | None = None) -> int:
    """``gemini_tokens("gemini-2.0-flash", (640, 480))`` -> 1290: what an image costs, by the model's
    generation (docs/budget.md, "Gemini"). Gemini 3 and later charge by ``media_resolution``;
    Gemini 2.5 258 whatever the size; Gemini 2.0 258 a tile and one more for the whole image;
    earlier models 258 a tile. A model whose generation is unknown is charged the most of them."""
    width, height = size if size is not None else (UNKNOWN_SIDE, UNKNOWN_SIDE)
    generation = gemini_generation(model)
    by_resolution = _GEMINI_RESOLUTION.get((resolution or "high").lower().removeprefix("media_resolution_"), 1120)
    if generation is None:
        return max(by_resolution, _gemini_tiles(width, height, 1))
    if generation >= (3, 0):
        return by_resolution
    if generation >= (2, 5):
        return _GEMINI_TILE
    return _gemini_tiles(width, height, 1 if generation >= (2, 0) else 0)
