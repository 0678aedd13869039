"""Images are charged what their provider's formula says for their size, through the real SDKs
over loopback HTTP; their message digests keep the documented canonical form (docs/privacy.md).

Each call of a comparison uses its own model string: calibration (learnt per model from the
fake server's usage) never moves the counts being compared.
"""

from __future__ import annotations

import base64

import anthropic
import pytest

import ctxguard
from tests.conftest import message_digest
from tests.providers.test_image import jpeg, png

PROMPT = "what is this?"


@pytest.fixture(autouse=True, params=["lazy", "eager"])
def tokenizer(request, monkeypatch) -> str:
    """Each test under both tokenizers: an image's tokens are tokens whether the text beside it is
    counted exactly or as its bytes (docs/budget.md, "What the span shows")."""
    monkeypatch.setenv("CTXGUARD_TOKENIZER", request.param)
    return request.param


def data_url(image: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(image).decode()}"


def payload_tokens(harness) -> list[int]:
    key = "ctxguard.payload.tokens"
    return [s.attributes[key] for s in harness.spans() if key in s.attributes]


def chat_image(url: str, detail: str | None = None) -> dict:
    image: dict = {"url": url} if detail is None else {"url": url, "detail": detail}
    return {"role": "user", "content": [{"type": "text", "text": PROMPT}, {"type": "image_url", "image_url": image}]}


TEXT_ONLY = {"role": "user", "content": [{"type": "text", "text": PROMPT}]}


def test_chat_image_is_charged_by_its_size_and_detail(harness, llm, client):
    harness.start(mode="observe")
    square = data_url(png(1024, 1024))
    calls = [("gpt-4o", TEXT_ONLY), ("gpt-4o-2024-08-06", chat_image(square)),
             ("gpt-4o-2024-11-20", chat_image(square, "low")),
             ("gpt-4o-2024-05-13", chat_image(data_url(jpeg(2048, 4096), "image/jpeg"), "high")),
             ("gpt-4o-mini", chat_image(data_url(png(1, 1))))]
    for model, message in calls:
        client.chat.completions.create(model=model, messages=[message])
    base, *rest = payload_tokens(harness)
    assert [t - base for t in rest] == [765, 85, 1105, 2833 + 5667]


def test_responses_input_image_on_a_patch_model(harness, llm, client):
    harness.start(mode="observe")
    for model, image in [("gpt-5.4", None), ("gpt-5.4-2026-03-05", data_url(png(1024, 1024)))]:
        content: list = [{"type": "input_text", "text": PROMPT}]
        if image is not None:
            content.append({"type": "input_image", "image_url": image, "detail": "high"})
        client.responses.create(model=model, input=[{"role": "user", "content": content}])
    base, with_image = payload_tokens(harness)
    assert with_image - base == 1229  # 32 x 32 patches x 1.2


def test_an_image_in_a_tool_result_is_charged(harness, llm, client):
    """A function call's output may carry images (Responses API): they cost like any other."""
    harness.start(mode="observe")
    for model, output in [("gpt-4.1", []), ("gpt-4.1-2025-04-14", [
            {"type": "input_image", "image_url": data_url(png(512, 512)), "detail": "auto"}])]:
        client.responses.create(model=model, input=[
            {"type": "function_call", "call_id": "c1", "name": "snap", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1",
             "output": [{"type": "input_text", "text": "ok"}, *output]},
        ])
    base, with_image = payload_tokens(harness)
    assert with_image - base == 85 + 170


def test_the_image_message_digest_is_the_documented_canonical_form(harness, llm, client):
    """The cost is carried beside the message, never inside what is digested."""
    harness.start(mode="observe")
    url = data_url(png(640, 480))
    client.chat.completions.create(model="gpt-4o", messages=[chat_image(url)])
    hashes = list(harness.spans()[-1].attributes["ctxguard.message.hashes"])
    assert hashes == [message_digest("user", PROMPT, (url,))]


def test_a_conversation_switching_model_is_charged_the_new_models_price(harness, llm, client):
    """The reading of a kept message is reused across calls, but what its image costs depends on the
    model: a call on another model reads it again."""
    harness.start(mode="observe")
    history = [{"role": "system", "content": "Describe images."}, chat_image(data_url(png(512, 512)))]
    with ctxguard.conversation("switch"):
        client.chat.completions.create(model="gpt-4o", messages=history)
        client.chat.completions.create(model="gpt-4o-mini", messages=history)
    gpt4o, mini = payload_tokens(harness)
    assert mini - gpt4o == (2833 + 5667) - (85 + 170)


@pytest.fixture
def claude(llm):
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


def claude_image(image: bytes | None, mime: str = "image/png") -> list[dict]:
    content: list[dict] = [{"type": "text", "text": PROMPT}]
    if image is not None:
        source = {"type": "base64", "media_type": mime, "data": base64.b64encode(image).decode()}
        content.insert(0, {"type": "image", "source": source})
    return [{"role": "user", "content": content}]


def test_anthropic_image_is_charged_by_patches_within_the_models_limits(harness, llm, claude):
    harness.start(mode="observe")
    calls = [("claude-sonnet-4-5", None), ("claude-sonnet-4-5-20250929", png(1000, 1000)),
             ("claude-haiku-4-5", jpeg(3840, 2160)), ("claude-sonnet-4-6", png(200, 200)),
             ("claude-opus-4-7", None), ("claude-opus-4-7", jpeg(1920, 1080))]  # its text at its tokenizer's ratio
    for model, image in calls:
        claude.messages.create(model=model, max_tokens=100, messages=claude_image(image))
    base, *rest, opus_base, opus = payload_tokens(harness)
    assert [t - base for t in rest] + [opus - opus_base] == [1296, 1560, 64, 2691]


def test_anthropic_image_by_url_costs_the_models_budget(harness, llm, claude):
    harness.start(mode="observe")
    calls = [("claude-sonnet-4-5", False), ("claude-sonnet-4-5-20250929", True), ("claude-opus-4-8", False),
             ("claude-opus-4-8", True)]  # Opus 4.8's text at its tokenizer's ratio: its own base
    for model, by_url in calls:
        content: list[dict] = [{"type": "text", "text": PROMPT}]
        if by_url:
            content.append({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}})
        claude.messages.create(model=model, max_tokens=100, messages=[{"role": "user", "content": content}])
    base, standard, high_res_base, high_res = payload_tokens(harness)
    assert (standard - base, high_res - high_res_base) == (1568, 4784)


def test_gemini_inline_image_is_charged_by_its_generations_formula(harness, llm):
    """Gemini 2.0: 258 a tile and one more for the whole image; Gemini 2.5: 258 whatever the size."""
    genai = pytest.importorskip("google.genai", reason="google-genai is not installed (extra 'google')")
    from google.genai import types

    gemini = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})
    harness.start(mode="observe")
    for model, image in [("gemini-2.0-flash", None), ("gemini-2.0-flash-001", png(1000, 800)),
                         ("gemini-2.0-flash-002", png(300, 300)), ("gemini-2.5-flash", None),
                         ("gemini-2.5-flash-001", png(1000, 800))]:
        parts = [types.Part(text=PROMPT)]
        if image is not None:
            parts.append(types.Part.from_bytes(data=image, mime_type="image/png"))
        gemini.models.generate_content(model=model, contents=[types.Content(role="user", parts=parts)])
    # A dict part: base64, URL-safe as the SDK would send it.
    inline = {"mime_type": "image/png", "data": base64.urlsafe_b64encode(png(1000, 800)).decode()}
    gemini.models.generate_content(model="gemini-2.0-flash-003",
                                   contents=[{"role": "user", "parts": [{"text": PROMPT}, {"inline_data": inline}]}])
    base, tiles, small, base_25, flat, from_dict = payload_tokens(harness)
    assert (tiles - base, small - base, from_dict - base) == (5 * 258, 258, 5 * 258)
    assert flat - base_25 == 258


@pytest.mark.parametrize(("model", "detail", "sentences"), [("gpt-4o", None, 600), ("gpt-4o-mini", "low", 2_200)])
def test_reports_on_pictures_calibrate_what_the_text_beside_them_costs(harness, llm, client, model, detail, sentences):
    """The fake prices a picture as OpenAI does (tests/testing/fake/test_media.py), so its reports
    on requests with one teach the calibration what their text costs: from the sixth call the span
    shows what the provider reported, within a few tokens, the image's price unscaled. The fake's
    flat 85 a picture reported less than ctxguard's fixed tokens: nothing was learnt, and the gpt-4o
    calls showed an estimate; counted exactly, the image-inclusive factor scaled 765 tokens too.
    A report teaches only with ten times its fixed tokens of text beside them (docs/budget.md, "What
    teaches calibration"): 8,400 tokens of text beside gpt-4o's 765 of a picture; gpt-4o-mini's picture
    at low detail is 2,833 tokens (at high, 25,501: no request within its window teaches then)."""
    harness.start(mode="observe")
    image = chat_image(data_url(png(1024, 1024)), detail)
    shown, reported = [], []
    for turn in range(8):
        text = f"turn {turn}: " + "the parcel left the depot on Monday and should arrive by Thursday. " * (
            sentences + turn)
        client.chat.completions.create(model=model, messages=[image, {"role": "user", "content": text}])
        shown.append(harness.spans()[-1].attributes["ctxguard.payload.tokens"])
        reported.append(llm.responses[-1].input_tokens)
    sources = [s.attributes["ctxguard.payload.tokens_source"] for s in harness.spans()]
    assert sources[5:] == ["calibrated"] * 3
    assert all(abs(s - r) <= 5 for s, r in zip(shown[5:], reported[5:], strict=True)), (shown, reported)
