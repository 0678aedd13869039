"""The inspector (ctxguard/inspection.py) alone: a request's kwargs in, a Verdict out; nothing
recorded, no SDK, no server. (End to end, through the real SDKs: tests/providers, tests/checks.)"""

from __future__ import annotations

import pytest

from ctxguard import facts
from ctxguard.config import Config
from ctxguard.guard import inspector_for
from ctxguard.payload import Answer
from ctxguard.policy import Pinned, Policy
from ctxguard.providers import BY_DISTRIBUTION
from ctxguard.tokens import tiktoken_installed

OPENAI = BY_DISTRIBUTION["openai"]
SYSTEM = {"role": "system", "content": "You are the order assistant."}


def _inspector():  # type: ignore[no-untyped-def]
    return inspector_for(Config(digest_key=b"k"), facts.Sinks())


def test_a_request_becomes_a_verdict_with_one_outcome_per_before_send_check():
    inspector = _inspector()
    payload = inspector.measure(OPENAI, "chat.completions",
                                {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, ("c1", None))
    assert payload is not None and payload.provider == "openai" and payload.tokens > 0
    verdict = inspector.inspect(payload, ("c1", None), Policy(pinned=Pinned()))
    failed = {o.check for o in verdict.outcomes if o.outcome == "fail"}
    assert failed == {"system_at_head", "pinned_present"}
    assert {o.check for o in verdict.outcomes} >= {"system_at_head", "payload_under_budget", "tool_pairs_intact"}
    assert [v.check for v in verdict.violations] == sorted(failed, key=[o.check for o in verdict.outcomes].index)


def test_the_conversation_memory_sees_an_eviction_between_two_verdicts():
    inspector = _inspector()
    scope = ("c2", None)
    first = inspector.inspect(inspector.measure(OPENAI, "chat.completions", {  # type: ignore[arg-type]
        "model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": "hi"}]}, scope), scope, Policy())
    second = inspector.inspect(inspector.measure(OPENAI, "chat.completions", {  # type: ignore[arg-type]
        "model": "gpt-4o", "messages": [{"role": "user", "content": "and?"}]}, scope), scope, Policy())
    assert first.diff is not None and second.diff is not None
    assert "system" in second.diff.evicted and not first.diff.evicted


def test_the_checks_after_sending_are_added_late_once_each():
    inspector = _inspector()
    scope = ("c3", None)
    verdict = inspector.inspect(inspector.measure(OPENAI, "chat.completions", {  # type: ignore[arg-type]
        "model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": "hi"}]}, scope), scope, Policy())
    wire = inspector.wire(verdict, b'{"messages": [{"role": "system", "content": "You are the order assistant."}]}')
    answer = inspector.answer(verdict, Answer(text="It ships tomorrow."), "")
    assert [o.check for o in wire] == ["wire_intact"] and [o.outcome for o in wire] == ["pass"]
    assert [(o.check, o.outcome) for o in answer] == [
        ("answer_consistent", "skip"),  # no facts
        ("provider_kept_all", "skip")]  # no input count
    assert [o.check for o in verdict.late] == ["wire_intact", "answer_consistent", "provider_kept_all"]
    unseen = inspector.wire_not_observed(verdict, "the body sent was not observed")
    assert [(o.check, o.outcome, o.reason) for o in unseen] == [
        ("wire_intact", "skip", "the body sent was not observed")]


@pytest.mark.skipif(not tiktoken_installed(), reason="counted exactly with tiktoken")
def test_an_answer_check_the_byte_bounds_cannot_decide_is_judged_on_the_exact_count(monkeypatch):
    """A report far below what a request counted in bytes shows has the request counted exactly for
    the answer's checks (``NEEDS_EXACT``); the verdict's payload, recorded on the span, stays as sent."""
    monkeypatch.delenv("CTXGUARD_TOKENIZER", raising=False)
    inspector = inspector_for(Config(digest_key=b"k", tokenizer="lazy"), facts.Sinks())
    long = {"role": "user", "content": "The parcel left the depot in Lyon on Monday. " * 200}
    scope = ("c4", None)
    verdict = inspector.inspect(inspector.measure(OPENAI, "chat.completions", {  # type: ignore[arg-type]
        "model": "gpt-4o", "messages": [SYSTEM, long]}, scope), scope, Policy())
    assert verdict.payload.basis == "bound"
    kept = inspector.answer(verdict, Answer(input_tokens=verdict.payload.tokens), "")
    assert [(o.check, o.outcome) for o in kept][-1] == ("provider_kept_all", "pass")
    assert verdict.payload.basis == "bound"  # passed on the bytes: nothing counted exactly
    cut = inspector.answer(verdict, Answer(input_tokens=100), "")
    assert [(o.check, o.outcome) for o in cut][-1] == ("provider_kept_all", "fail")
    assert cut[-1].violations[0].detail.startswith("100 input tokens reported for ")
    assert verdict.payload.basis == "bound"
    assert inspector.measurer.counter.name == "tiktoken"  # loaded for it, from now on counting exactly


def test_a_request_the_provider_module_cannot_read_is_no_verdict_and_counted(internal_errors):
    inspector = _inspector()
    broken = BY_DISTRIBUTION["openai"].adapter

    class Broken:
        def normalise(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("a reader bug")

    import dataclasses

    provider = dataclasses.replace(OPENAI, adapter=Broken())  # type: ignore[arg-type]
    assert inspector.measure(provider, "chat.completions", {"model": "gpt-4o", "messages": []}, None) is None
    assert [where for where, _ in internal_errors] == ["normalise"]
    internal_errors.clear()
    assert broken is OPENAI.adapter


@pytest.mark.skipif(not tiktoken_installed(), reason="counted exactly with tiktoken")
def test_a_report_of_a_cut_prompt_teaches_the_calibration_nothing(monkeypatch):
    """A server cutting every prompt to a tenth would teach the calibration that the model's text
    costs a tenth of its count (and, past its bounds, that ctxguard over-counts the model): the
    reports ``provider_kept_all`` fails are not learnt from; the others are."""
    monkeypatch.delenv("CTXGUARD_TOKENIZER", raising=False)
    inspector = inspector_for(Config(digest_key=b"k", tokenizer="eager"), facts.Sinks())
    long = {"role": "user", "content": "The parcel left the depot in Lyon on Monday. " * 200}
    scope = ("c5", None)
    verdict = inspector.inspect(inspector.measure(OPENAI, "chat.completions", {  # type: ignore[arg-type]
        "model": "gpt-4o", "messages": [SYSTEM, long]}, scope), scope, Policy())
    whole = verdict.payload.raw_tokens
    for _ in range(8):
        assert inspector.answer(verdict, Answer(input_tokens=whole // 10), "")[-1].outcome == "fail"
    assert inspector.measurer.calibration.factor("gpt-4o") is None
    for _ in range(5):
        assert inspector.answer(verdict, Answer(input_tokens=whole), "")[-1].outcome == "pass"
    assert inspector.measurer.calibration.factor("gpt-4o") == 1.0
