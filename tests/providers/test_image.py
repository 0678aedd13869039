"""Image sizes read from headers, and the providers' documented image token formulas.

Headers are built byte by byte from the format specifications (no imaging library); the
formula cases are the worked examples the providers publish (docs/budget.md lists the pages).
"""

from __future__ import annotations

import base64
import struct

import pytest

from ctxguard.providers import _image
from ctxguard.providers._image import (
    ANTHROPIC_HIGH_RES,
    anthropic_tokens,
    gemini_generation,
    gemini_tokens,
    openai_tokens,
    size_of_base64,
    size_of_bytes,
    size_of_url,
)
from ctxguard.providers._read import family


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0" + b"\0" * 64


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\xf7\x00\x00" + b"\0" * 32


def riff(chunk: bytes, body: bytes) -> bytes:
    payload = b"WEBP" + chunk + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


def webp_lossy(width: int, height: int) -> bytes:  # VP8: frame tag, start code, 14-bit sizes
    return riff(b"VP8 ", b"\x30\x01\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height) + b"\0" * 16)


def webp_lossless(width: int, height: int) -> bytes:  # VP8L: signature, 14 bits each of size - 1
    bits = (width - 1) | ((height - 1) << 14)
    return riff(b"VP8L", b"\x2f" + struct.pack("<I", bits) + b"\0" * 16)


def webp_extended(width: int, height: int) -> bytes:  # VP8X: flags, reserved, 24 bits each of size - 1
    return riff(b"VP8X", b"\x10\0\0\0" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little"))


def segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def jpeg(width: int, height: int, frame: int = 0xC0, before: bytes = b"") -> bytes:
    app0 = segment(0xE0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0")
    dqt = segment(0xDB, b"\0" + bytes(64))
    sof = segment(frame, b"\x08" + struct.pack(">HH", height, width) + b"\x03\x01\x22\0\x02\x11\x01\x03\x11\x01")
    return b"\xff\xd8" + app0 + before + dqt + sof + segment(0xDA, b"\x03\x01\0\x02\x11\x03\x11\0\x3f\0") + b"\0" * 64


def exif_and_icc() -> bytes:
    """What a phone photo carries before its frame header: EXIF with a thumbnail, an ICC profile."""
    return segment(0xE1, b"Exif\0\0" + bytes(30_000)) + segment(0xE2, b"ICC_PROFILE\0\x01\x01" + bytes(3_000))


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(3008, 2000), (3008, 2000)),
        (gif(320, 240), (320, 240)),
        (webp_lossy(1024, 768), (1024, 768)),
        (webp_lossless(1, 16384), (1, 16384)),
        (webp_extended(4000, 3000), (4000, 3000)),
        (jpeg(597, 566), (597, 566)),
        (jpeg(1920, 1080, frame=0xC2), (1920, 1080)),  # progressive
        (jpeg(640, 480, frame=0xC1), (640, 480)),  # extended sequential
        (jpeg(4032, 3024, before=exif_and_icc()), (4032, 3024)),
        (jpeg(800, 600, before=b"\xff\xff\xff"), (800, 600)),  # fill bytes before a marker
    ],
    ids=["png", "gif", "webp-vp8", "webp-vp8l", "webp-vp8x", "jpeg", "jpeg-progressive", "jpeg-sof1",
         "jpeg-exif-icc", "jpeg-fill"],
)
def test_size_from_the_header_of_bytes_and_of_base64(data, size):
    assert size_of_bytes(data) == size
    assert size_of_base64(base64.b64encode(data).decode()) == size


#: The first characters of an 8x8 PNG as the google-genai SDK sent it (URL-safe base64, a ``-``
#: in the header's CRC): tests/data/recorded/openinference.jsonl, "describe-image-false".
RECORDED_URLSAFE_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAIAQMAAAD-wSzIAAAABlBMVEX___-_"


def test_url_safe_base64_is_read_like_standard_base64():
    """The google-genai SDK sends inline bytes in URL-safe base64 (``-`` and ``_`` for ``+`` and
    ``/``). Read as standard base64, a ``-`` or ``_`` near the header lost the size and the image was
    charged its bound: that PNG, 2,348 tokens counted against 277 reported."""
    assert size_of_base64(RECORDED_URLSAFE_PNG) == (8, 8)
    # 1023 x 767 puts ``_`` and ``-`` where every format keeps its size.
    for data in (png(1023, 767), jpeg(1023, 767, before=exif_and_icc()), webp_extended(1023, 767),
                 webp_lossless(1023, 767), gif(1023, 767)):
        encoded = base64.urlsafe_b64encode(data).decode()
        assert encoded != base64.b64encode(data).decode()
        assert size_of_base64(encoded) == size_of_base64(base64.b64encode(data).decode()) == (1023, 767)


def test_a_huffman_table_is_not_taken_for_a_frame_header():
    """DHT (C4) sits in the C0-CF range but is no frame: its bytes are not a size."""
    dht = segment(0xC4, b"\x00" + bytes([0x10] * 16) + bytes(16))
    assert size_of_bytes(jpeg(333, 222, before=dht)) == (333, 222)


def test_a_data_url_is_read_in_place():
    """The base64 after the comma is read where it is: offsets past the prefix, no copy of it."""
    encoded = base64.b64encode(jpeg(640, 360, before=exif_and_icc())).decode()
    assert size_of_base64("data:image/jpeg;base64," + encoded, len("data:image/jpeg;base64,")) == (640, 360)
    assert size_of_base64("xyz" + base64.encodebytes(png(8, 4)).decode(), 3) == (8, 4)


def test_base64_is_decoded_only_around_the_header_fields(monkeypatch):
    """The frame header 33 KB in (behind EXIF and ICC) costs a few small decodes, not the image."""
    data = base64.b64encode(jpeg(4032, 3024, before=exif_and_icc()) + bytes(3_000_000)).decode()
    decoded: list[int] = []
    real = _image.binascii.a2b_base64

    def counting(text: str) -> bytes:
        decoded.append(len(text))
        return real(text)

    monkeypatch.setattr(_image.binascii, "a2b_base64", counting)
    assert size_of_base64(data) == (4032, 3024)
    assert sum(decoded) < 200 and len(decoded) < 10


def test_wrapped_base64_lines_are_read():
    encoded = base64.encodebytes(jpeg(1234, 567, before=exif_and_icc())).decode()  # a newline every 76 chars
    assert "\n" in encoded[:100]
    assert size_of_base64(encoded) == (1234, 567)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x89PNG\r\n\x1a\n", b"not an image at all", png(0, 10), jpeg(10, 10)[:60], b"\xff\xd8\xff" + bytes(40),
     b"RIFF\0\0\0\0WEBPVP8 " + bytes(8)],
    ids=["empty", "png-signature-only", "text", "png-zero-width", "jpeg-cut-before-frame", "jpeg-no-segments",
         "webp-cut"],
)
def test_unreadable_headers_give_no_size(data):
    assert size_of_bytes(data) is None
    assert size_of_base64(base64.b64encode(data).decode()) is None


def test_base64_that_is_not_base64_gives_no_size():
    assert size_of_base64("/9j/" + "!" * 40) is None


def test_data_urls_are_read_and_remote_urls_never_fetched():
    encoded = base64.b64encode(png(64, 32)).decode()
    assert size_of_url(f"data:image/png;base64,{encoded}") == (64, 32)
    assert size_of_url(f"data:image/jpeg;base64,{encoded}") == (64, 32)  # the header, not the label, decides
    assert size_of_url(f"data:image/png,{encoded}") is None  # not base64
    assert size_of_url("https://example.com/cat.png") is None


# -- OpenAI ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "detail", "size", "tokens"),
    [
        ("gpt-4o", "high", (1024, 1024), 765),  # the guide's examples: 4 tiles x 170 + 85
        ("gpt-4o", "high", (2048, 4096), 1105),  # 1024 x 2048, then 768 x 1536: 6 tiles
        ("gpt-4o-2024-08-06", "auto", (597, 566), 765),  # no resize: 2 x 2 tiles
        ("gpt-4o", "low", (4096, 8192), 85),
        ("gpt-4o-mini", None, (1, 1), 2833 + 5667),
        ("gpt-4.1", "high", (512, 512), 85 + 170),
        ("gpt-5", "high", (1024, 1024), 70 + 4 * 140),
        ("gpt-5.1", "low", (1024, 1024), 70),
        ("o1", "high", (512, 512), 75 + 150),
        ("gpt-5.4", "high", (1024, 1024), 1229),  # patches: 32 x 32 x 1.2
        ("gpt-5.4", "high", (2048, 2048), 3000),  # 4,096 patches over the 2,500 budget: 1600 x 1600
        ("gpt-5.4-mini", "auto", (1024, 1024), 1229),
        ("gpt-4.1-mini", "auto", (1024, 1024), 1659),  # 1,024 patches x 1.62: not gpt-4.1's tiles
        ("gpt-4.1-nano", "high", (1800, 2400), 3572),  # the earlier guide's 1,452 patches x 2.46
        ("o4-mini", "high", (1024, 1024), 1762),
        ("gpt-5-mini", "low", (1024, 1024), 1229),
        ("gpt-5.5", "low", (1024, 1024), 308),  # low fits in 512 x 512: 256 patches
    ],
)
def test_openai_formulas_match_the_guides_examples(model, detail, size, tokens):
    assert openai_tokens(model, detail, size) == tokens


def test_openai_image_of_unknown_size_costs_the_most_the_formula_charges():
    """A remote URL or file id: the most an image up to 2048 px a side costs (768 x 2048: 8 tiles)."""
    assert openai_tokens("gpt-4o", "auto", None) == 85 + 8 * 170
    assert openai_tokens("gpt-4o", "low", None) == 85
    assert openai_tokens("gpt-4o-mini", "high", None) == 2833 + 8 * 5667
    assert openai_tokens("gpt-5.4", "high", None) == 3000
    assert openai_tokens("gpt-4.1-mini", "high", None) == 6636  # 64 x 64 patches x 1.62


def test_a_model_not_in_the_tables_takes_the_larger_current_rule():
    assert openai_tokens("gpt-5.3-codex", "high", (1024, 1024)) == max(765, 1229)
    assert openai_tokens("some-gateway-model", "high", (512, 512)) == max(255, 308)


def test_model_families_match_the_longest_name_and_stop_at_a_version():
    table = {"gpt-5": 1, "gpt-5-mini": 2, "gpt-4o": 3, "o3": 4}
    assert family("openai/GPT-5-mini-2025-08-07", table) == "gpt-5-mini"
    assert family("gpt-5-chat-latest", table) == "gpt-5"
    assert family("o3-pro", table) == "o3"
    assert family("gpt-5.3-codex", table) is None  # a dot: another version
    assert family("gpt-4o2", table) is None
    assert family(None, table) is None


# -- Anthropic ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "tokens"),
    [((200, 200), 64), ((1000, 1000), 1296), ((1092, 1092), 1521), ((1920, 1080), 1560), ((2000, 1500), 1564),
     ((3840, 2160), 1560)],
)
def test_anthropic_patches_match_the_vision_guide(size, tokens):
    assert anthropic_tokens(size) == tokens


@pytest.mark.parametrize(
    ("size", "tokens"), [((1920, 1080), 2691), ((2000, 1500), 3888), ((3840, 2160), 4784)],
)
def test_anthropic_high_resolution_models(size, tokens):
    assert anthropic_tokens(size, ANTHROPIC_HIGH_RES) == tokens


def test_anthropic_resize_keeps_the_aspect_within_both_limits():
    """The guide's A4 scan: both sides under 1568 px, but 2,145 patches: resized to 924 x 1307."""
    assert _image._claude_resized(1075, 1520, 1568, 1568) == (924, 1307)
    assert anthropic_tokens((1075, 1520)) == 33 * 47
    assert _image._claude_resized(3840, 2160, *ANTHROPIC_HIGH_RES) == (2576, 1449)


def test_anthropic_image_of_unknown_size_costs_the_budget():
    assert anthropic_tokens(None) == 1568
    assert anthropic_tokens(None, ANTHROPIC_HIGH_RES) == 4784


# -- Google Gemini --------------------------------------------------------------------


def test_gemini_15_small_images_are_258_and_larger_ones_258_a_tile():
    assert gemini_tokens("gemini-1.5-flash", (384, 384)) == 258
    assert gemini_tokens("gemini-1.5-flash", (385, 200)) == 2 * 258  # tiles of 256 px (the floor)
    assert gemini_tokens("gemini-1.5-flash-8b", (512, 300)) == 4 * 258
    assert gemini_tokens("models/gemini-1.5-pro", (1000, 800)) == 4 * 258  # tiles of 533 px
    assert gemini_tokens("gemini-1.5-pro", (3000, 1500)) == 4 * 2 * 258  # tiles of 768 px (the ceiling)
    assert gemini_tokens("gemini-1.5-flash", None) == 9 * 258  # unknown: a 2048 x 2048 image


def test_gemini_20_adds_a_tile_for_the_whole_image_and_25_charges_258_whatever_the_size():
    """What the recorded corpus shows (tests/data/recorded/): Gemini 2.0 charged a 640 x 480 PNG
    1,290 (four tiles of 320 px and one more) and a 3008 x 2000 one 3,354 (twelve and one); Gemini
    2.5 charged the same 640 x 480 PNG 258, an 8 x 8 one 258, and an image by URL 258."""
    assert gemini_tokens("gemini-2.0-flash", (384, 300)) == 258
    assert gemini_tokens("gemini-2.0-flash-001", (640, 480)) == 5 * 258
    assert gemini_tokens("gemini-2.0-flash", (3008, 2000)) == 13 * 258
    assert gemini_tokens("gemini-2.0-flash-lite", None) == 10 * 258  # unknown: a 2048 x 2048 image
    for size in [(8, 8), (640, 480), (3008, 2000), None]:
        assert gemini_tokens("gemini-2.5-flash", size) == gemini_tokens("models/gemini-2.5-pro", size) == 258


def test_a_gemini_model_of_unknown_generation_is_charged_the_most_of_the_rules():
    assert gemini_generation("publishers/google/models/gemini-2.5-flash-lite") == (2, 5)
    assert gemini_generation("gemini-3-pro-preview") == (3, 0)
    assert gemini_generation("gemini-flash-latest") is gemini_generation("gemma-3-27b-it") is None
    assert gemini_tokens("gemini-flash-latest", (300, 300)) == 1120
    assert gemini_tokens("gemma-3-27b-it", (3008, 2000)) == 13 * 258
    assert gemini_tokens("gemini-flash-latest", (300, 300), "MEDIA_RESOLUTION_LOW") == 280


def test_gemini_3_charges_by_media_resolution():
    assert gemini_tokens("gemini-3-pro-preview", (10, 10)) == 1120
    assert gemini_tokens("gemini-3-flash", (4000, 4000), "MEDIA_RESOLUTION_LOW") == 280
    assert gemini_tokens("gemini-3-flash", None, "medium") == 560
