"""The inspector (ctxguard/inspection.py) alone: a request's kwargs in, a Verdict out; nothing
recorded, no SDK, no server. (End to end, through the real SDKs: tests/providers, tests/checks.)"""

from __future__ import annotations

from ctxguard import facts
from ctxguard.config import Config
from ctxguard.guard import inspector_for
from ctxguard.payload import Answer
from ctxguard.policy import Pinned, Policy
from ctxguard.providers import BY_DISTRIBUTION

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
    assert [o.check for o in answer] == ["answer_consistent"] and answer[0].outcome == "skip"  # no facts
    assert [o.check for o in verdict.late] == ["wire_intact", "answer_consistent"]
    unseen = inspector.wire_not_observed(verdict, "the body sent was not observed")
    assert [(o.check, o.outcome, o.reason) for o in unseen] == [
        ("wire_intact", "skip", "the body sent was not observed")]


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
