"""Measuring a request (ctxguard/measure.py): a growing conversation counts only its new messages."""

from __future__ import annotations

from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.payload import RequestView
from ctxguard.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, Calibration, EstimateCounter


class CountingCounter(EstimateCounter):
    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return super().count(text)


def test_growing_conversation_counts_only_new_messages():
    counter = CountingCounter()
    measurer = Measurer(Digester(b"k"), counter, Calibration())
    items = [("system", "sys", (), "message", 0)]
    for turn in range(50):
        items = [*items, ("user", f"message {turn}", (), "message", 0)]
        before = counter.calls
        payload = measurer.measure(RequestView("openai", "chat", "gpt-4o", items))
        assert counter.calls - before == (2 if turn == 0 else 1)
        assert payload.tokens == sum(m.tokens for m in payload.messages) + REPLY_PRIMING


# -- a bound payload (lazy tokenizer): its text scaled, its fixed tokens as they are -------------

def _lazy() -> Measurer:
    return Measurer(Digester(b"k"), EstimateCounter(), Calibration(), exact=EstimateCounter)


IMAGE = 765  # a 1024x1024 picture at OpenAI's high detail: tokens, whatever counts the text


def _view(model: str, text: str, cost: int = 0) -> RequestView:
    return RequestView("openai", "chat", model, [("user", text, (), "message", cost)])


def test_a_bound_payload_shows_an_images_tokens_unscaled():
    """Before any report a bound shows four bytes a token of text; an image's tokens stay tokens
    (a quarter of them was shown before the fix: 774 became 196)."""
    payload = _lazy().measure(_view("gpt-4o", "what is this?", IMAGE))
    assert payload.basis == "bound" and payload.tokens_source == "estimate"
    fixed = MESSAGE_OVERHEAD + IMAGE + REPLY_PRIMING
    assert payload.fixed == fixed and payload.raw_tokens == len("what is this?") + fixed
    assert payload.tokens == round(len("what is this?") / 4) + fixed


def test_calibration_learns_tokens_a_byte_of_text_not_of_images():
    """Reports on pictures teach what the model's text costs a byte: less the fixed tokens, over the
    text's bytes. Learnt over the whole bound instead, a text-only call showed 8,606 for its 8,006 (with
    80 tokens of text beside the picture, 3.4x them); a picture beside less text teaches nothing
    (``test_a_short_text_beside_fixed_tokens_teaches_nothing``)."""
    measurer, text = _lazy(), "word " * 8_000  # 40,000 bytes, 8,000 tokens (the fake provider's count below)
    fixed = MESSAGE_OVERHEAD + REPLY_PRIMING
    for _ in range(Calibration.MIN_REPORTS):
        payload = measurer.measure(_view("m", text, IMAGE))
        measurer.observe(payload, 8_000 + IMAGE + fixed)
    plain = measurer.measure(_view("m", text))
    assert plain.tokens_source == "calibrated" and plain.scale == 0.2
    assert plain.tokens == 8_000 + fixed
    assert plain.ceiling == plain.bound  # fewer tokens than bytes: the bound is the ceiling


def test_the_ceiling_scales_the_text_where_the_provider_counts_more_tokens_than_bytes():
    measurer = _lazy()
    fixed = MESSAGE_OVERHEAD + REPLY_PRIMING
    for _ in range(Calibration.MIN_REPORTS):
        measurer.observe(measurer.measure(_view("m", "ok " * 40)), 240 + fixed)  # 2 a byte
    payload = measurer.measure(_view("m", "hello", IMAGE))
    assert payload.scale == 2.0
    assert payload.tokens == payload.ceiling == 10 + IMAGE + fixed


def test_a_report_below_the_fixed_tokens_teaches_nothing():
    measurer = _lazy()
    for _ in range(Calibration.MIN_REPORTS):
        measurer.observe(measurer.measure(_view("m", "what is this?", IMAGE)), 100)
    assert measurer.measure(_view("m", "what is this?")).tokens_source == "estimate"


def _learnt(measurer: Measurer, model: str) -> tuple[float | None, float | None]:
    """The factors ``model`` has learnt: the byte bounds', and the exact count's once the reports
    waiting for it are counted."""
    measurer.resolve()
    return measurer.bounds.factor(model), measurer.calibration.factor(model)


def test_a_short_text_beside_fixed_tokens_teaches_nothing():
    """What teaches calibration (docs/budget.md): a report whose text, the fixed tokens off, is at
    least 64 tokens and ten times the fixed ones. Below that an error in the fixed tokens assumed
    decides the ratio (a template framing a message with fewer tokens than ctxguard assumes made a
    short prompt's ratio 0.375, then a long prompt was shown at 0.375 of its text), so those reports
    are not learnt, by either counter; a model none of whose reports teach is not calibrated, neither
    within range nor out of it. One report past each threshold teaches."""
    fixed = MESSAGE_OVERHEAD + REPLY_PRIMING
    text, pictured = "word " * 50, "word " * 6_200  # 63 and 7,750 estimated tokens; 250 and 31,000 bytes
    for measurer in (_lazy(), Measurer(Digester(b"k"), EstimateCounter(), Calibration())):
        for _ in range(Calibration.WINDOW):
            measurer.observe(measurer.measure(_view("m", text)), 63 + fixed)  # 63 tokens of text: too few
            measurer.observe(measurer.measure(_view("p", pictured, IMAGE)), 7_709 + IMAGE + fixed)  # < 10x
            # 50 tokens for 7,750 counted: over-counted past the bound, were it learnt
            measurer.observe(measurer.measure(_view("o", pictured)), 50 + fixed)
        assert _learnt(measurer, "m") == _learnt(measurer, "p") == _learnt(measurer, "o") == (None, None)
        assert measurer.out_of_range("o") is None and measurer.measure(_view("o", text)).out_of_range is None
        assert measurer.measure(_view("m", text)).tokens_source == "estimate"
        for _ in range(Calibration.MIN_REPORTS):
            measurer.observe(measurer.measure(_view("m", text)), 64 + fixed)
            measurer.observe(measurer.measure(_view("p", pictured, IMAGE)), 7_710 + IMAGE + fixed)
        assert _learnt(measurer, "m") == (64 / 250, 64 / 63)
        assert _learnt(measurer, "p") == (7_710 / 31_000, 7_710 / 7_750)
        assert measurer.measure(_view("m", text)).tokens_source == "calibrated"


# -- a counted payload (eager tokenizer): its text calibrated, its fixed tokens as they are -------

def test_a_counted_payload_calibrates_its_text_not_its_images():
    """The exact path learns and shows as the bound path does: a report less the fixed tokens over
    the count less them. Learnt over the whole count instead, the factor below was 1.19, and a
    text-only call showed 11,864 for the 12,006 the provider counts; an image beside a short text, 926."""
    measurer = Measurer(Digester(b"k"), EstimateCounter(), Calibration())
    fixed = MESSAGE_OVERHEAD + REPLY_PRIMING
    for _ in range(Calibration.MIN_REPORTS):  # 10,000 estimated tokens of text; the provider says 12,000
        payload = measurer.measure(_view("m", "word " * 8_000, IMAGE))
        assert payload.basis == "estimate" and payload.fixed == IMAGE + fixed
        measurer.observe(payload, 12_000 + IMAGE + fixed)
    assert measurer.calibration.factor("m") == 1.2
    plain = measurer.measure(_view("m", "word " * 8_000))
    assert plain.tokens_source == "calibrated" and plain.tokens == 12_000 + fixed
    short = measurer.measure(_view("m", "word " * 8, IMAGE))  # 10 tokens of text, then the image's
    assert short.tokens == 12 + IMAGE + fixed


def test_a_report_below_the_fixed_tokens_teaches_the_exact_count_nothing():
    measurer = Measurer(Digester(b"k"), EstimateCounter(), Calibration())
    for _ in range(Calibration.MIN_REPORTS):
        measurer.observe(measurer.measure(_view("m", "what is this?", IMAGE)), 100)
    assert measurer.calibration.factor("m") is None


def test_reports_waiting_for_the_exact_count_are_counted_less_their_fixed_tokens():
    """Reports on bound payloads wait for the exact counter, then teach what an eager process learns
    (the test above): 1.2, not the 1.19 of the image-inclusive ratio."""
    measurer = _lazy()
    fixed = MESSAGE_OVERHEAD + REPLY_PRIMING
    for _ in range(Calibration.MIN_REPORTS):
        payload = measurer.measure(_view("m", "word " * 8_000, IMAGE))
        assert payload.basis == "bound"
        measurer.observe(payload, 12_000 + IMAGE + fixed)
    assert measurer.calibration.factor("m") is None
    measurer.resolve()
    assert measurer.calibration.factor("m") == 1.2
    late = measurer.measure(_view("m", "word " * 8, IMAGE))
    assert (late.basis, late.tokens) == ("estimate", 12 + IMAGE + fixed)


def test_the_shown_counts_follow_shown_and_ceiling(internal_errors):
    """``Measurer._shown`` shows a calibrated payload by ``shown`` under its ``ceiling``, on both paths;
    reports 8x the count are held to 4x, and the model is said out of range (once a measurer)."""
    from ctxguard.measure import CountOutOfRange, ceiling, shown

    fixed = MESSAGE_OVERHEAD + REPLY_PRIMING
    for measurer in (_lazy(), Measurer(Digester(b"k"), EstimateCounter(), Calibration())):
        for _ in range(Calibration.MIN_REPORTS):  # 2 tokens a byte; 8x the estimate, held to 4
            measurer.observe(measurer.measure(_view("m", "word " * 800, IMAGE)), 8_000 + IMAGE + fixed)
        payload = measurer.measure(_view("m", "a longer text " * 9, IMAGE))
        bounds = measurer.bounds.factor("m")
        assert payload.ceiling == ceiling(payload.bound, payload.fixed, bounds) > payload.bound
        factor = measurer.calibration.factor("m") if payload.basis != "bound" else bounds
        expected = min(shown(payload.raw_tokens, payload.fixed, factor), payload.ceiling)
        assert payload.tokens == expected and payload.tokens_source == "calibrated"
        # The count (8x short) is past what calibration corrects; the bytes (2 tokens a byte) are not.
        assert payload.out_of_range == (None if payload.basis == "bound" else "under-counted")
    assert [(where, type(exc)) for where, exc in internal_errors] == [("tokens", CountOutOfRange)]
    internal_errors.clear()


def test_a_providers_own_framing_replaces_openais():
    """``RequestView.message_framing`` / ``reply_priming``: a provider whose prompt format frames a
    message with other than OpenAI Chat's 3 tokens, or primes the reply with other than 3, is
    counted with its own, on both counters (exact and byte bounds), as fixed tokens."""
    from ctxguard.digest import Digester
    from ctxguard.measure import Measurer
    from ctxguard.payload import RequestView
    from ctxguard.tokens import BOUND, MESSAGE_OVERHEAD, REPLY_PRIMING, Calibration, EstimateCounter

    assert (RequestView("p", "chat", "m", []).message_framing, RequestView("p", "chat", "m", []).reply_priming) == (
        MESSAGE_OVERHEAD, REPLY_PRIMING)
    items = [("system", "Be brief.", (), "message", 0), ("user", "Hi", (), "message", 0)]
    for counter in (EstimateCounter(), BOUND):
        measurer = Measurer(Digester(b"k"), counter, Calibration())
        plain = measurer.measure(RequestView("p", "chat", "m", list(items)))
        framed = measurer.measure(RequestView("p", "chat", "m", list(items), message_framing=7, reply_priming=1))
        assert framed.raw_tokens - plain.raw_tokens == (7 - 3) * 2 + (1 - 3)
        assert framed.fixed - plain.fixed == (7 - 3) * 2 + (1 - 3)
        assert framed.bound - plain.bound == (7 - 3) * 2 + (1 - 3)


def test_calibration_refines_and_never_rescues():
    """A model whose reports stay past the bounds is said out of range while they do: its factor is a
    bound (half its reports or more were past it), not a correction; back within, it is not."""
    calibration = Calibration()
    for _ in range(Calibration.MIN_REPORTS):
        calibration.observe("cohere-like", 100, 600)  # 6x: more than calibration corrects
    assert calibration.factor("cohere-like") == Calibration.HIGH
    assert calibration.outside("cohere-like") == "under-counted"
    for _ in range(Calibration.WINDOW):
        calibration.observe("cohere-like", 100, 110)
    assert calibration.outside("cohere-like") is None and calibration.factor("cohere-like") == 1.1
    for _ in range(Calibration.MIN_REPORTS):
        calibration.observe("over", 1000, 100)
    assert calibration.outside("over") == "over-counted"
    for _ in range(Calibration.MIN_REPORTS):
        calibration.observe("fine", 100, 130)
    assert calibration.outside("fine") is None and calibration.outside(None) is None


# -- text sent but not read (``RequestView.not_read``): off the count, the message as sent ---------

THOUGHT = "<think>\nThe user wants one word: okay\n</think>\n\n"  # 48 characters: four an estimated token


def _answered(not_read: dict[int, str] | None = None, answer: str = THOUGHT + "ok",
              ask: str = "Reply with ok") -> RequestView:
    view = RequestView("aws.bedrock", "chat", "m", [("user", ask, (), "message", 0),
                                                    ("assistant", answer, (), "message", 0),
                                                    ("user", "Again", (), "message", 0)])
    view.not_read.update(not_read or {})
    return view


def test_text_not_read_comes_off_the_count_and_leaves_the_message_as_sent():
    """An earlier answer's thinking the model skips is counted as if the answer had been sent without
    it, counted exactly or in bounds, and digested as sent: the conversation memory sees the message
    the previous call sent, not one dropped and another added."""
    assert len(THOUGHT) % 4 == 0
    for measurer in (Measurer(Digester(b"k"), EstimateCounter(), Calibration()), _lazy()):
        skipping, whole, bare = (measurer.measure(view) for view in (
            _answered({1: THOUGHT}), _answered(), _answered(answer="ok")))
        assert skipping.digests == whole.digests != bare.digests and skipping.digest == whole.digest
        assert skipping.messages == whole.messages
        assert (skipping.raw_tokens, skipping.tokens, skipping.bound, skipping.ceiling) == (
            bare.raw_tokens, bare.tokens, bare.bound, bare.ceiling)
        assert skipping.raw_tokens < whole.raw_tokens


def test_reports_waiting_for_the_exact_count_leave_the_text_not_read_out():
    """A report on a bound payload is counted, once the exact counter is there, without the text its
    model did not read: it teaches what the report on the answer sent bare teaches."""
    lazy, eager = _lazy(), Measurer(Digester(b"k"), EstimateCounter(), Calibration())
    ask = "Reply with ok to each of these. " * 10  # 80 estimated tokens: a report of 150 teaches
    for _ in range(Calibration.MIN_REPORTS):
        payload = lazy.measure(_answered({1: THOUGHT}, ask=ask))
        assert payload.basis == "bound"
        lazy.observe(payload, 150)
        eager.observe(eager.measure(_answered(answer="ok", ask=ask)), 150)
    lazy.resolve()
    assert lazy.calibration.factor("m") == eager.calibration.factor("m") is not None


# -- a model whose tokenizer reads text at a documented ratio to cl100k's: the calibration's prior ----

def _claude(model: str, text: str = "word " * 80):
    from ctxguard.providers.anthropic import ADAPTER

    return ADAPTER.normalise("messages", {"model": model, "max_tokens": 10, "system": "Be brief.",
                                          "messages": [{"role": "user", "content": text}]})


def test_claudes_newer_tokenizer_is_shown_on_the_first_call_and_not_again_once_calibrated():
    """Opus 4.8 and Sonnet 5 read text at ``NEWER_TOKENIZER`` times cl100k's count: the first call shows
    the text at it (counted, or bound at four bytes a token), its fixed tokens as they are; the reports
    teach calibration from the unscaled counts, so after five the learnt factor (1.3) is shown alone, not
    the ratio on top of it (169% of the text's count instead of 130%)."""
    from ctxguard.measure import shown
    from ctxguard.providers.anthropic import NEWER_TOKENIZER

    assert NEWER_TOKENIZER == 1.3
    for model in ("claude-opus-4-8", "us.anthropic.claude-sonnet-5-v1:0"):
        counted = Measurer(Digester(b"k"), EstimateCounter(), Calibration()).measure(_claude(model))
        text = counted.raw_tokens - counted.fixed  # 100 estimated tokens of the message, 2 of the system's
        said = round(text * 1.3) + counted.fixed  # what the provider reports: the text at its tokenizer's
        for measurer in (Measurer(Digester(b"k"), EstimateCounter(), Calibration()), _lazy()):
            first = measurer.measure(_claude(model))
            assert first.fixed == counted.fixed
            if first.basis == "bound":
                assert first.view is not None and first.view.text_scale == 1.3
                assert first.tokens == shown(first.raw_tokens, first.fixed, 0.25 * 1.3) and first.scale == 0.25 * 1.3
                assert first.tokens_source == "estimate"
            else:
                assert first.tokens == said and first.scale == 1.3 and first.tokens_source == EstimateCounter.name
            for _ in range(Calibration.MIN_REPORTS):
                measurer.observe(measurer.measure(_claude(model)), said)
            after = measurer.measure(_claude(model))
            assert after.tokens_source == "calibrated" and after.tokens == said, (model, after.basis)
            measurer.resolve()  # the bounds' waiting reports counted: the exact calibration learns 1.3
            assert abs(measurer.calibration.factor(model) - 1.3) < 0.01
            assert measurer.measure(_claude(model)).tokens == said


def test_only_claudes_newer_tokenizers_read_text_at_a_ratio():
    """``anthropic.text_scale``: Opus 4.7 and later, every Claude 5 (Sonnet, Opus, Fable, Mythos; any id
    form, OpenRouter's dotted minor too); not Opus 4.6, Sonnet 4.x (a date is not a version), Claude 3 or
    another vendor's model. The registry the measurer asks (``providers.text_scale``) says the same."""
    from ctxguard import providers
    from ctxguard.providers.anthropic import text_scale

    newer = ["claude-opus-4-7", "claude-opus-4-8-20260528", "claude-opus-4-9", "claude-sonnet-5", "claude-sonnet-5-5",
             "us.anthropic.claude-sonnet-5-v1:0", "anthropic.claude-opus-4-7", "claude-opus-5@default",
             "claude-fable-5",
             "claude-mythos-preview", "eu.anthropic.claude-opus-4-8-v1:0",
             "anthropic/claude-sonnet-5", "anthropic/claude-opus-4.7", "anthropic/claude-opus-4.7-fast"]
    older = ["claude-opus-4-6", "claude-opus-4-1-20250805", "claude-sonnet-4-20250514", "claude-sonnet-4-5-20250929",
             "claude-sonnet-4-6", "claude-haiku-4-5", "claude-3-7-sonnet-latest", "anthropic.claude-v2",
             "us.anthropic.claude-3-5-sonnet-20241022-v2:0", "gpt-5", None,
             "anthropic/claude-opus-4.6", "anthropic/claude-sonnet-4.5", "anthropic/claude-3.7-sonnet"]
    for scale in (text_scale, providers.text_scale):
        assert {m: scale(m) for m in newer} == dict.fromkeys(newer, 1.3)
        assert {m: scale(m) for m in older} == dict.fromkeys(older, 1.0)


def test_the_measurer_gives_every_view_its_models_tokenizer_and_an_adapters_own_scale_stands():
    """A tokenizer is the model's: ``Measurer.measure`` gives a view its model's ``text_scale``
    (``providers.text_scale``) whatever adapter read it, so the openai adapter's view of Sonnet 5 is
    shown at 1.3 as the anthropic adapter's is, and a Claude 4.5 or GPT view at 1.0. A view whose
    adapter set its scale keeps it (an adapter that knows how its route reads text)."""
    from ctxguard.measure import shown
    from ctxguard.providers.openai import ADAPTER as OPENAI

    measurer = Measurer(Digester(b"k"), EstimateCounter(), Calibration())

    def view(model: str):
        messages = [{"role": "user", "content": "word " * 80}]
        return OPENAI.normalise("chat.completions", {"model": model, "messages": messages})

    for model, scale in (("claude-sonnet-5", 1.3), ("anthropic/claude-opus-4.7", 1.3), ("claude-sonnet-4-5", 1.0),
                         ("gpt-5", 1.0)):
        read = view(model)
        assert read.text_scale is None  # the adapter leaves it to the measurer
        payload = measurer.measure(read)
        assert read.text_scale == payload.scale == scale, model
        assert payload.tokens == shown(payload.raw_tokens, payload.fixed, scale) > 0
    known = view("claude-sonnet-5")
    known.text_scale = 1.0
    payload = measurer.measure(known)
    assert known.text_scale == payload.scale == 1.0 and payload.tokens == payload.raw_tokens
