"""Exact only when it matters (docs/budget.md): with tiktoken loaded lazily, byte bounds decide the
verdicts they can, and the exact counts the rest. No verdict may depend on which: the same calls,
through the real SDK to the fake (whose usage grows with what was sent, so calibration learns),
give the same violations, in the same words, with tiktoken loaded eagerly and lazily."""

from __future__ import annotations

import base64
import random
from typing import Any

import pytest

import ctxguard
from ctxguard import tokens
from ctxguard.pinned import render_pinned
from ctxguard.testing import Reply
from tests.events import violation_events
from tests.providers.test_image import png

tiktoken = pytest.importorskip("tiktoken")

WINDOW = 4_000
POLICY = ctxguard.Policy(
    budget=ctxguard.Budget(window=WINDOW, history_max=3_200), pinned=ctxguard.Pinned(max_tokens=300),
)
_PROSE = ("The delivery to Pune was moved to Thursday because the warehouse closed early. "
          "Please confirm the new slot and keep the order id in your reply. ")
_CODE = "def total(items):\n    return sum(i.price * i.qty for i in items if i.qty > 0)  # 税込\n"
_CJK = "配送先の住所を変更しました。木曜日の午前中にお届けします。ご確認ください。"
_EMOJI = "👨‍👩‍👧 great 🎉🎉 thanks 👍🏽 see you 🚚💨 "
_MIXED = "Order #A-1041 → 北京 (ETA 3d) ✅ résumé naïve café — ok? "
KINDS = {"prose": _PROSE, "code": _CODE, "cjk": _CJK, "emoji": _EMOJI, "mixed": _MIXED}


def _corpus() -> list[list[tuple[str, list[dict[str, Any]]]]]:
    """Conversations that grow turn by turn past the window (or stay within its bytes), one per
    model, kind and pinned-block size (bytes under its cap; bytes over but tokens under; tokens
    over): every verdict near its edge at some turn, the early turns far from all of them."""
    rng = random.Random(7)
    conversations = []
    for model in ("gpt-4", "gpt-4o"):
        for unit in KINDS.values():
            for size, reach in ((60, 0.7), (60, 5), (600, 5), (1_600, 5)):
                facts = {f"fact_{i}": (unit * 40)[i * 7: i * 7 + size // 4] for i in range(4)}
                system = "You are a support agent.\n" + render_pinned(facts, max_tokens=10_000)
                history = [{"role": "system", "content": system}]
                step = rng.randrange(500, 900)
                calls = []
                while sum(len(m["content"].encode()) for m in history) < reach * WINDOW:
                    history = [*history, {"role": "user", "content": (unit * 400)[:step]},
                               {"role": "assistant", "content": (unit * 9)[: rng.randrange(20, 200)]}]
                    calls.append((model, [*history, {"role": "user", "content": unit[:40]}]))
                conversations.append(calls)
        conversations.append(_terse(model))
        conversations.append(_skewed(model))
    conversations.append(_pictures("gpt-4o"))
    return conversations


def _pictures(model: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """A chat that sends a 1024x1024 picture a turn (765 tokens each, as the fake charges them too):
    past the window on the pictures' tokens more than on the text's bytes. A bound without the
    pictures' tokens (its text's bytes and framing only) passes its fifth call, which fails exact."""
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                   + base64.b64encode(png(1024, 1024)).decode()}}
    system = "Describe.\n" + render_pinned({"city": "Pune"}, max_tokens=100)
    history: list[dict[str, Any]] = [{"role": "system", "content": system}]
    calls = []
    for turn in range(7):
        question = {"role": "user", "content": [{"type": "text", "text": f"and this one, {turn}?"}, picture]}
        history = [*history, question, {"role": "assistant", "content": _PROSE[: 40 + 20 * turn]}]
        calls.append((model, [*history, {"role": "user", "content": "which was the brightest?"}]))
    return calls


_RARE = "𓀀𓀁𓀂𓀃𓀄𓀅𓀆𓀇 "  # hieroglyphs: four bytes each, and nearly a token a byte or two


def _skewed(model: str) -> list[tuple[str, list[dict[str, str]]]]:
    """A provider that reports twice what cl100k counts for prose (so the calibrated count doubles),
    then a text that tiktoken counts nearly a token a byte: doubled, the count would pass the
    bytes, which no byte-level tokenizer can; the ceiling holds it at the bound."""
    system = "Be skewed.\n" + render_pinned({"city": "Pune"}, max_tokens=100)
    history: list[dict[str, str]] = [{"role": "system", "content": system}]
    calls = []
    for turn in range(16):
        text = (_PROSE * 3)[:100] if turn < 10 else (_RARE * 40)[:125]
        history = [*history, {"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]
        calls.append((model, [*history, {"role": "user", "content": f"turn {turn}"}]))
    return calls


def _terse(model: str) -> list[tuple[str, list[dict[str, str]]]]:
    """A chat of short words on a provider that reads a token a byte (a byte-level model) and frames
    each message with six tokens, as the fake reports it here: more tokens reported than bytes sent,
    learnt from reports whose text is large against their framing (docs/budget.md, "What teaches
    calibration"; a chat of one-word messages taught it once, but there the framing was all of the
    ratio learnt). Each turn adds less than the ceiling's margin over the bound, so some call lands
    between the two."""
    system = "Be terse.\n" + render_pinned({"city": "Pune"}, max_tokens=100)
    history: list[dict[str, str]] = [{"role": "system", "content": system}]
    calls = []
    while sum(len(m["content"].encode()) for m in history) < 1.2 * WINDOW:
        history = [*history, {"role": "user", "content": "ok " * 14}, {"role": "assistant", "content": "k " * 20}]
        calls.append((model, [*history, {"role": "user", "content": f"turn {len(calls)}: ok ok ok ok ok ok ok"}]))
    return calls


def _reported(messages: list[dict[str, Any]]) -> int | None:
    """What the fake reports for a terse or skewed chat (None: its own count, which grows with the text)."""
    if messages[0]["content"].startswith("Be terse."):
        return sum(len(m["content"].encode()) + 6 for m in messages)
    if messages[0]["content"].startswith("Be skewed."):
        return round(0.45 * sum(len(m["content"].encode()) for m in messages))
    return None


def _run(harness, llm, client, monkeypatch, tokenizer: str):  # type: ignore[no-untyped-def]
    """Each conversation in a guard of its own, as in a fresh process: (per call, what its tokens
    came from and its violations), and how many conversations loaded the tokenizer."""
    out, loaded = [], 0
    for calls in _corpus():
        tokens.default_counter.cache_clear()
        harness.exporter.clear()
        harness.start(mode="collect", policy=POLICY, tokenizer=tokenizer)
        for model, messages in calls:
            reported = _reported(messages)
            if reported is not None:
                llm.script(Reply(text="k", input_tokens=reported))
            client.chat.completions.create(model=model, messages=messages, max_tokens=300)
        loaded += tokens.loaded_counter() is not None
        for span in harness.spans():
            found = [(e.attributes["check"], e.attributes["detail"]) for e in violation_events(span)
                     if e.name == "ctxguard.violation"]
            out.append((span.attributes["ctxguard.payload.tokens_source"], found))
    return out, loaded


def test_no_verdict_depends_on_loading_the_tokenizer_lazily(harness, llm, client, monkeypatch):
    monkeypatch.delenv("CTXGUARD_TOKENIZER", raising=False)  # the choice is the test's (CI runs one suite eager)
    lazy, lazily_loaded = _run(harness, llm, client, monkeypatch, "lazy")
    eager, _ = _run(harness, llm, client, monkeypatch, "eager")
    calls = sum(map(len, _corpus()))
    assert len(lazy) == len(eager) == calls
    assert [v for _, v in lazy] == [v for _, v in eager]  # the same checks failed, in the same words
    terse = [v for (_, v), (model, messages) in zip(eager, (c for cs in _corpus() for c in cs), strict=True)
             if _reported(messages) is not None]
    assert any(terse) and not all(terse)  # more tokens than bytes crossed the window too
    checks = {check for _, found in eager for check, _ in found}
    assert checks == {"payload_under_budget", "pinned_capped"}  # both verdicts were crossed
    failing = sum(1 for _, found in eager if found)
    assert 0 < failing < calls
    # The bounds decided many calls on their own, and the exact counts the rest.
    bound_decided = sum(1 for source, _ in lazy if source in ("estimate", "calibrated"))
    assert calls * 0.2 < bound_decided < calls
    assert 0 < lazily_loaded < len(_corpus())
