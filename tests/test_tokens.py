"""Token counting (ctxguard/tokens.py): calibration from reported usage, and the models a tokenizer is exact for."""

from __future__ import annotations

import pytest

from ctxguard.tokens import Calibration, EstimateCounter
from tests.conftest import prose


def test_calibration_from_reported_usage(harness, llm, client):
    from ctxguard.testing import Reply

    harness.start(mode="observe")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello there " * 40}]
    # 129 for 81 tokens of text and 9 of framing: the text's factor (129 - 9) / 81 is within the bounds,
    # and its 120 tokens are enough to teach it (at least 64, and ten times the framing).
    for _ in range(Calibration.MIN_REPORTS):
        llm.script(Reply(text="a", input_tokens=129))
        client.chat.completions.create(model="gpt-4o", messages=messages)
        first = harness.spans()[-1].attributes
        assert first["ctxguard.payload.tokens_source"] in ("tiktoken", "estimate")  # not enough reports yet
    client.chat.completions.create(model="gpt-4o", messages=messages)
    calibrated = harness.spans()[-1].attributes
    assert calibrated["ctxguard.payload.tokens_source"] == "calibrated"
    assert calibrated["ctxguard.payload.tokens"] == 129  # the count the provider reported for it
    c = Calibration()
    for _ in range(Calibration.MIN_REPORTS):
        c.observe("m", 100, 100_000)
    assert c.factor("m") == 4.0  # bounded


@pytest.mark.parametrize("tokenizer", ["lazy", "eager"])
def test_a_model_counted_past_what_calibration_corrects_is_said_so_never_silently(
    harness, llm, client, caplog, internal_errors, tokenizer
):
    """Issue 39: a provider reporting far more than ctxguard counts (a template it adds, as Cohere's
    once was uncounted) is not silently under-counted at the calibration's bound: one warning for the
    model, one count in ctxguard_guard_errors_total{where="tokens"}, and every later call's span
    says its count is under-counted while the reports stay so; whichever counter counts (byte
    bounds, lazy, or the exact one)."""
    import logging

    from ctxguard.testing import Reply

    harness.start(mode="observe", tokenizer=tokenizer)
    caplog.set_level(logging.WARNING, logger="ctxguard")
    # Command R7B answered "hello" with 496 input tokens: its template, which ctxguard did not count.
    messages = [{"role": "user", "content": "hello"}]
    for _ in range(Calibration.MIN_REPORTS + 3):
        llm.script(Reply(text="a", input_tokens=496))
        client.chat.completions.create(model="gpt-4o", messages=messages)
    last = harness.spans()[-1].attributes
    assert last["ctxguard.payload.tokens_out_of_range"] == "under-counted"
    assert "ctxguard.payload.tokens_out_of_range" not in harness.spans()[0].attributes
    said = [r.getMessage() for r in caplog.records if "past what calibration corrects" in r.getMessage()]
    assert len(said) == 1 and "gpt-4o is under-counted" in said[0]
    assert harness.metric("ctxguard_guard_errors_total", where="tokens") == 1
    assert [where for where, _ in internal_errors] == ["tokens"]
    internal_errors.clear()


def _calibrated(reports: list[float], *, exact: bool = False) -> float | None:
    c = Calibration(exact=lambda model: exact)
    for ratio in reports:
        c.observe("m", 1000, round(1000 * ratio))
    return c.factor("m")


def test_calibration_waits_for_enough_reports():
    assert _calibrated([1.2] * (Calibration.MIN_REPORTS - 1)) is None
    assert _calibrated([1.2] * Calibration.MIN_REPORTS) == 1.2


@pytest.mark.parametrize("odd", [0.003, 100.0], ids=["10 tokens for 3000", "a hundredfold"])
@pytest.mark.parametrize("at", ["first", "among them", "last"])
def test_one_odd_report_never_moves_the_factor_outside_the_others(odd, at):
    normal = [1.18, 1.2, 1.21, 1.19, 1.22, 1.2]
    reports = {"first": [odd, *normal], "among them": [*normal[:3], odd, *normal[3:]], "last": [*normal, odd]}[at]
    factor = _calibrated(reports)
    assert factor is not None and min(normal) <= factor <= max(normal)


def test_calibration_follows_the_model_over_its_last_reports():
    """Old reports age out: a model that changed how it counts is followed, not averaged forever."""
    assert _calibrated([2.0] * 20 + [1.1] * Calibration.WINDOW) == 1.1


def test_an_exact_tokenizer_bounds_how_low_a_calibrated_count_goes():
    assert _calibrated([0.5] * 6, exact=True) == Calibration.EXACT_FLOOR
    assert _calibrated([0.5] * 6, exact=False) == 0.5
    assert _calibrated([1.3] * 6, exact=True) == 1.3  # counting more than the tokenizer is believed


def test_the_factor_is_the_median_of_the_last_window_whatever_the_order():
    """The ratios kept sorted as they come and go give the median a re-sort would, at every report."""
    import random
    from collections import deque

    rng = random.Random(7)
    c = Calibration()
    window: deque[float] = deque(maxlen=Calibration.WINDOW)
    for i in range(400):
        reported = rng.choice([1000, 1000, 1000, 1200, 1210, rng.randrange(500, 3000)])  # repeats among them
        c.observe("m", 1000, reported)
        window.append(reported / 1000)
        expected = sorted(window)[len(window) // 2] if len(window) >= Calibration.MIN_REPORTS else None
        assert c.factor("m") == expected, i


def test_a_new_exact_rule_settles_the_factors_again():
    """A factor kept while its ratios repeat still follows a counter that became exact (the lazy
    measurer's calibration is told so when the exact counter is loaded)."""
    c = Calibration()
    for _ in range(Calibration.WINDOW * 2):
        c.observe("m", 1000, 500)
    assert c.factor("m") == 0.5
    c.exact = lambda model: True
    assert c.factor("m") == Calibration.EXACT_FLOOR
    c.observe("m", 1000, 500)
    assert c.factor("m") == Calibration.EXACT_FLOOR
    c.exact = None
    assert c.factor("m") == 0.5


def test_a_tokenizer_is_exact_only_for_the_models_that_use_it():
    from ctxguard.tokens import TiktokenCounter, default_counter

    counter = default_counter()
    assert not EstimateCounter().exact("gpt-4")
    if isinstance(counter, TiktokenCounter):  # the offline cl100k_base: GPT-4 and 3.5, not 4o (o200k)
        assert counter.exact("gpt-4") and counter.exact("gpt-3.5-turbo")
        assert not counter.exact("gpt-4o") and not counter.exact("claude-sonnet-4-5") and not counter.exact("")


#: A vLLM server serving Mistral-7B-Instruct through the OpenAI SDK: ctxguard frames it as OpenAI Chat
#: (3 a message, 3 to prime the reply); its chat template writes ``[INST]``/``[/INST]`` around a user
#: turn, the system prompt into it after a blank line, and one begin-of-text (mistral-common's format;
#: docs/budget.md's Bedrock table: 2 a message, 1 once).
SERVED = "mistralai/Mistral-7B-Instruct-v0.3"


def _served_by_mistrals_template(messages: list[dict[str, str]]) -> int:
    """The input tokens such a server reports: its text (the fake's estimate) and its template's framing."""
    from ctxguard.testing.fake.tokens import text_tokens

    return sum(text_tokens(m["content"]) + (1 if m["role"] == "system" else 2) for m in messages) + 1


@pytest.mark.parametrize("tokenizer", ["lazy", "eager"])
def test_short_prompts_framed_less_than_assumed_do_not_teach_an_under_count(harness, llm, client, tokenizer):
    """Calibration refines, never rescues, and is never taught the dangerous side by noise: a server
    whose template frames a message with fewer tokens than ctxguard assumes reports a short prompt
    at little more than ctxguard's fixed tokens, so its text's ratio reads as 3 / 8. Learnt, that
    factor showed the next request, over the window, at 0.375 of its text and let it pass the budget
    check; short reports teach nothing, and the over-window request is refused."""
    import ctxguard
    from ctxguard.testing import Reply

    harness.start(mode="enforce", tokenizer=tokenizer, model_windows={"mistral-7b-instruct-v0.3": 8_192})
    short = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi to me now"}]
    for _ in range(Calibration.MIN_REPORTS + 1):
        llm.script(Reply(text="hi", input_tokens=_served_by_mistrals_template(short)))
        client.chat.completions.create(model=SERVED, messages=short, max_tokens=64)
    assert _served_by_mistrals_template(short) == 12  # 8 of text, 4 of framing: ctxguard's 9 leave 3
    long = [short[0], {"role": "user", "content": prose(12_000)}]
    sent = len(llm.requests)
    with pytest.raises(ctxguard.ContextViolation) as refused:
        client.chat.completions.create(model=SERVED, messages=long, max_tokens=64)
    assert [v.check for v in refused.value.violations] == ["payload_under_budget"]
    assert len(llm.requests) == sent  # refused before it left
