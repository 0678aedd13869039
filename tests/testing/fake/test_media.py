"""The fake server charges a picture as its provider's documentation prices one, by its size, through
the real SDKs over loopback HTTP (ctxguard/testing/fake/media.py).

A flat price (85 tokens a picture, whatever its size, as the fake charged before) reported less
than ctxguard's own price for most pictures, so a report on a request with one fell below its fixed
tokens and taught the calibration nothing: the tests of calibration never saw a picture.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import openai
import pytest

from ctxguard.testing.fake import FakeLLM, media
from ctxguard.testing.fake.media import FLAT, image_size
from tests.providers.test_image import jpeg, png
from tests.testing.fake.helpers import anthropic_client, gemini_client

PROMPT = "what is in this picture?"


def b64(image: bytes) -> str:
    return base64.b64encode(image).decode()


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00" * 8


def webp(width: int, height: int) -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4 + (width - 1).to_bytes(3, "little") \
        + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


@pytest.mark.parametrize("make", [png, jpeg, gif, webp])
def test_the_fake_reads_a_pictures_size_from_its_header(make) -> None:
    assert image_size(make(1234, 567)) == (1234, 567)
    assert image_size(b"%PDF-1.7\n") is None


def chat(client: openai.OpenAI, llm: FakeLLM, model: str, image: dict[str, Any] | None) -> int:
    content: list[Any] = [{"type": "text", "text": PROMPT}]
    if image is not None:
        content.append({"type": "image_url", "image_url": image})
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}])
    assert r.usage is not None and r.usage.prompt_tokens == llm.responses[-1].input_tokens
    return r.usage.prompt_tokens


def test_openai_charges_tiles_by_size_and_detail(llm: FakeLLM, client: openai.OpenAI) -> None:
    square = f"data:image/png;base64,{b64(png(1024, 1024))}"
    base = chat(client, llm, "gpt-4o", None)
    assert chat(client, llm, "gpt-4o", {"url": square, "detail": "high"}) - base == 85 + 4 * 170
    assert chat(client, llm, "gpt-4o", {"url": square, "detail": "low"}) - base == 85
    tall = f"data:image/jpeg;base64,{b64(jpeg(2048, 4096))}"  # 1024 x 2048, then 768 x 1536: 2 x 3 tiles
    assert chat(client, llm, "gpt-4o", {"url": tall}) - base == 85 + 6 * 170
    assert chat(client, llm, "gpt-4o-mini", {"url": square}) - base == 2833 + 4 * 5667
    assert chat(client, llm, "gpt-4.1-mini", {"url": square}) - base == 1659  # 32 x 32 patches x 1.62
    # A picture the fake cannot see (a remote URL) is charged the flat price.
    assert chat(client, llm, "gpt-4o", {"url": "https://example.com/cat.png"}) - base == FLAT


def test_responses_charges_an_input_image(llm: FakeLLM, client: openai.OpenAI) -> None:
    def prompt(image: str | None) -> int:
        content: list[Any] = [{"type": "input_text", "text": PROMPT}]
        if image is not None:
            content.append({"type": "input_image", "image_url": image, "detail": "auto"})
        r = client.responses.create(model="gpt-4.1", input=[{"role": "user", "content": content}])
        assert r.usage is not None
        return r.usage.input_tokens

    assert prompt(f"data:image/png;base64,{b64(png(512, 512))}") - prompt(None) == 85 + 170


def test_anthropic_charges_pixels_over_750_within_its_limits(llm: FakeLLM) -> None:
    with anthropic_client(llm) as c:
        def prompt(image: bytes | None) -> int:
            content: list[Any] = [{"type": "text", "text": PROMPT}]
            if image is not None:
                content.insert(0, {"type": "image", "source": {
                    "type": "base64", "media_type": "image/png", "data": b64(image)}})
            m = c.messages.create(model="claude-sonnet-4-5", max_tokens=50,
                                  messages=[{"role": "user", "content": content}])
            return int(m.usage.input_tokens)

        base = prompt(None)
        assert prompt(png(1000, 1000)) - base == 1333
        assert prompt(png(200, 200)) - base == 53
        # 3000 x 1000: 1568 x 522.67 first, within 1.15 megapixels: 1568 x 522 / 750.
        assert prompt(png(3000, 1000)) - base == round(1568 * 522 / 750)


def test_gemini_charges_258_a_tile(llm: FakeLLM) -> None:
    from google.genai import types

    gemini = gemini_client(llm)

    def prompt(image: bytes | None, model: str = "gemini-2.5-flash") -> int:
        contents: list[Any] = [PROMPT]
        if image is not None:
            contents.append(types.Part.from_bytes(data=image, mime_type="image/png"))
        r = gemini.models.generate_content(model=model, contents=contents)
        return int(r.usage_metadata.prompt_token_count)

    base = prompt(None)
    assert prompt(png(300, 200)) - base == 258
    assert prompt(png(1000, 1000)) - base == 4 * 258  # tiles of 666 px: 2 x 2
    assert prompt(png(300, 200), "gemini-3-pro-preview") - prompt(None, "gemini-3-pro-preview") == 1120


def test_other_providers_formulas() -> None:
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(png(1024, 1024))}"}}
    assert media.mistral("pixtral-12b", part) == 64 * 64 + 64  # a token a 16-px patch, one a row
    assert media.cohere("command-a-vision", part) == 256 * 4 + 256
    assert media.cohere("command-a-vision", {**part, "image_url": {**part["image_url"], "detail": "low"}}) == 256
    one = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(png(1, 1))}", "detail": "high"}}
    assert media.cohere("command-a-vision", one) == 256  # one tile: no thumbnail
    assert media.ollama("llava:7b", b64(png(1024, 1024))) == 576
    pdf = {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{b64(b'%PDF-1.7' * 8)}"}}
    assert media.openai("gpt-4o", pdf) == FLAT
