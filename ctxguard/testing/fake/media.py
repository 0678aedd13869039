"""What the fake server charges a picture, as each provider's documentation prices one by its size.

Restated from the providers' pages, not imported from ``ctxguard.providers``: a fake that shared
ctxguard's own pricing would agree with it by construction and hide its mistakes. Standard library
only; the image is decoded here (a fake may), only its header read.

* OpenAI ("Images and vision", Calculating costs): tile models fit the image in 2048 px, bring its
  short side down to 768 px, and charge a base plus a price per 512-px tile (``low`` detail: the
  base); patch models charge 32-px patches, at most 1,536, times a multiplier.
* Anthropic and Claude on Bedrock ("Vision", Evaluate image size): width x height / 750 after the
  image is brought within 1,568 px a side and 1.15 megapixels.
* Gemini ("Image understanding", Technical details): 258 when both sides are at most 384 px, else
  258 a tile, a tile's side the shorter side / 1.5 kept within 256-768 px; Gemini 3, 1,120.
* Mistral (Pixtral, "Vision"): a token per 16-px patch and one more per row, within 1,024 px a side.
* Cohere (Command A Vision, "Image inputs"): ``low`` 256; else 256 per 512-px tile plus, when there
  is more than one tile, a 256-token thumbnail, within 2,048 px a side.
* Ollama: what the model's vision encoder makes of any image (576 for LLaVA's 24 x 24 grid, 256 for
  Gemma 3's), not the size.

A part whose image cannot be read (a remote URL, a file id, audio, a PDF) costs ``FLAT``. One function a
provider, ``(model, part) -> tokens``, ``part`` the JSON object holding the picture as it arrived: a
wire format prices with its provider's (Chat Completions and Responses both with ``openai``).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["FLAT", "anthropic", "cohere", "flat", "gemini", "image_size", "mistral", "ollama", "openai"]

#: A media part whose pixels the fake cannot read: what it has always charged.
FLAT = 85

_DATA_URL = re.compile(r"data:[^;,]*(?:;[^,]*)?;base64,(.*)", re.S)
_B64 = re.compile(r"[A-Za-z0-9+/=_-]{16,}")
#: Base64 characters decoded of an image: its header (and a JPEG's metadata before its frame header).
_HEAD = 4 * 65536

# OpenAI: model prefix -> (base, per tile) or (multiplier,) for patch models; longest prefix wins.
_OPENAI_TILES = {
    "gpt-4o": (85, 170), "gpt-4.1": (85, 170), "gpt-4.5": (85, 170), "chatgpt-4o": (85, 170),
    "gpt-4o-mini": (2833, 5667), "o1": (75, 150), "o3": (75, 150), "gpt-5": (70, 140),
    "computer-use": (65, 129),
}
_OPENAI_PATCHES = {"gpt-4.1-mini": 1.62, "gpt-4.1-nano": 2.46, "gpt-5-mini": 1.62, "gpt-5-nano": 2.46,
                   "o4-mini": 1.72}
_OLLAMA = {"llava": 576, "bakllava": 576, "gemma3": 256, "llama3.2-vision": 1601, "qwen2.5vl": 1024}


def _prefix(model: str, table: Mapping[str, Any]) -> str | None:
    name = model.rsplit("/", 1)[-1].lower()
    found = [key for key in table if name.startswith(key)]
    return max(found, key=len) if found else None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF, WebP or JPEG header; None for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
        if chunk == b"VP8 ":
            w, h = struct.unpack("<HH", data[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if chunk == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        return None
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        i += 2 + struct.unpack(">H", data[i + 2:i + 4])[0]
    return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _decoded(text: str) -> bytes | None:
    match = _DATA_URL.match(text)
    body = match.group(1) if match else text if _B64.fullmatch(text) else None
    if body is None:
        return None
    body = body[:_HEAD]
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_" if "-" in body or "_" in body else None)
    except (binascii.Error, ValueError):
        return None


def _part_size(part: Any) -> tuple[int, int] | None:
    for text in _strings(part):
        data = _decoded(text)
        if data is not None:
            size = image_size(data)
            if size is not None and size[0] > 0 and size[1] > 0:
                return size
    return None


def _detail(part: Any) -> str:
    if isinstance(part, Mapping):
        for key, v in part.items():
            if key == "detail" and isinstance(v, str):
                return v
            found = _detail(v)
            if found:
                return found
    return ""


def _fit(w: float, h: float, side: float) -> tuple[float, float]:
    scale = min(1.0, side / w, side / h)
    return w * scale, h * scale


def flat(part: Any) -> int:
    """What a part costs whatever it holds: ``tokens``' price where a format gives none."""
    return FLAT


def openai(model: str, part: Any) -> int:
    """OpenAI (Chat Completions and Responses): tiles by model and ``detail``, or patches."""
    size = _part_size(part)
    if size is None:
        return FLAT
    patches = _prefix(model, _OPENAI_PATCHES)
    tiles = _prefix(model, _OPENAI_TILES)
    if patches is not None and (tiles is None or len(patches) >= len(tiles)):
        w, h = size
        n = math.ceil(w / 32) * math.ceil(h / 32)
        if n > 1536:  # shrunk to be covered by 1,536 patches at most
            shrink = math.sqrt(1536 * 32 * 32 / (w * h))
            n = min(1536, math.ceil(w * shrink / 32) * math.ceil(h * shrink / 32))
        return math.ceil(n * _OPENAI_PATCHES[patches])
    base, tile = _OPENAI_TILES[tiles or "gpt-4o"]
    if _detail(part) == "low":
        return base
    fw, fh = _fit(*size, 2048)
    short = min(fw, fh)
    if short > 768:
        fw, fh = fw * 768 / short, fh * 768 / short
    return base + tile * math.ceil(fw / 512) * math.ceil(fh / 512)


def anthropic(model: str, part: Any) -> int:
    """Anthropic, and Claude on Bedrock: pixels / 750 within 1,568 px a side and 1.15 megapixels."""
    size = _part_size(part)
    if size is None:
        return FLAT
    w, h = _fit(*size, 1568)
    pixels = w * h
    if pixels > 1_150_000:
        shrink = math.sqrt(1_150_000 / pixels)
        w, h = w * shrink, h * shrink
    return max(1, round(int(w) * int(h) / 750))


def gemini(model: str, part: Any) -> int:
    """Gemini: 258 a tile (one up to 384 px a side); Gemini 3, 1,120."""
    size = _part_size(part)
    if size is None:
        return FLAT
    if model.rsplit("/", 1)[-1].lower().startswith("gemini-3"):
        return 1120
    w, h = size
    if w <= 384 and h <= 384:
        return 258
    tile = min(768, max(256, math.floor(min(w, h) / 1.5)))
    return 258 * math.ceil(w / tile) * math.ceil(h / tile)


def mistral(model: str, part: Any) -> int:
    """Mistral (Pixtral): a token a 16-px patch and one a row, within 1,024 px a side."""
    size = _part_size(part)
    if size is None:
        return FLAT
    w, h = _fit(*size, 1024)
    rows = math.ceil(h / 16)
    return math.ceil(w / 16) * rows + rows


def cohere(model: str, part: Any) -> int:
    """Cohere: ``low`` 256; else 256 a 512-px tile and, for more than one tile, a 256-token thumbnail,
    within 2,048 px a side."""
    size = _part_size(part)
    if size is None:
        return FLAT
    if _detail(part) == "low":
        return 256
    w, h = _fit(*size, 2048)
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return 256 * tiles + (256 if tiles > 1 else 0)


def ollama(model: str, part: Any) -> int:
    """Ollama: what the model's vision encoder makes of any picture, whatever its size."""
    found = _prefix(model, _OLLAMA)
    return _OLLAMA[found] if found is not None else 576
