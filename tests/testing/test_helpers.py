"""The retention-test helpers, each shown catching the bug it exists for, and passing
the fixed app. The apps talk to the loopback fake through the real openai SDK; the
helpers read the bodies that arrived there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

import ctxguard
from ctxguard.testing import (
    ClaimsMismatch,
    FactLost,
    FakeLLM,
    assert_claims,
    assert_fact_survives,
    find_flip_point,
    payload_contains,
)

SYSTEM = "You are the delivery assistant. The customer lives in Lyon."


class App:
    """A chat app with a pluggable history policy: ``trim(messages) -> messages``."""

    def __init__(self, client: openai.OpenAI, trim: Callable[[list[dict[str, str]]], list[dict[str, str]]]) -> None:
        self.client, self.trim = client, trim
        self.messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]

    def turn(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        self.messages = self.trim(self.messages)
        reply = self.client.chat.completions.create(model="gpt-4o", messages=self.messages)
        self.messages.append({"role": "assistant", "content": reply.choices[0].message.content or "ok"})


def fixed_window(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    return messages[-7:]  # the bug: the system prompt is one of the 7


def token_budget(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    while sum(len(m["content"]) for m in messages) > 900:  # the bug: drops from the front, system first
        messages = messages[1:]
    return messages


def keep_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    return [messages[0], *messages[1:][-6:]]


def runner(llm: FakeLLM, client: openai.OpenAI, trim: Any) -> Callable[..., Any]:
    def build(n: int, verbosity: int = 1) -> Any:
        app = App(client, trim)
        for i in range(n):
            app.turn(f"message {i} " + "please hurry " * (5 * verbosity))
        return llm.requests[-1]

    return build


def has_system(request: Any) -> bool:
    return payload_contains(request, "The customer lives in Lyon")


# -- payload_contains ------------------------------------------------------------------


def test_payload_contains_reads_what_the_model_reads(llm: FakeLLM, client: openai.OpenAI):
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Ship to  LYON, 69002"}])
    request = llm.requests[0]
    assert payload_contains(request, "lyon, 69002")
    assert payload_contains(request.json, "ship to lyon") and payload_contains(request.body, "Ship to Lyon")
    assert not payload_contains(request, "Pune")
    assert not payload_contains(request, "gpt-4o-mini")  # a parameter, not something the model reads
    assert payload_contains({"system": "Be brief.", "messages": []}, "be brief")  # Anthropic's system
    with pytest.raises(ValueError, match="too short"):
        payload_contains(request, "ly")


# -- find_flip_point -------------------------------------------------------------------


def test_flip_point_of_a_fixed_window_is_the_same_whatever_the_verbosity(llm: FakeLLM, client: openai.OpenAI):
    flip = find_flip_point(runner(llm, client, fixed_window), [1, 2, 3, 4, 5, 6], has_system)
    assert flip.length == 4 and flip.signature == "fixed-window"
    assert flip.by_verbosity == {1: 4, 4: 4}
    assert str(flip) == "flip point: length 4 (fixed-window)"


def test_flip_point_of_token_trimming_moves_with_verbosity(llm: FakeLLM, client: openai.OpenAI):
    flip = find_flip_point(runner(llm, client, token_budget), range(1, 12), has_system)
    assert flip.signature == "token-budget"
    short, long = flip.by_verbosity[1], flip.by_verbosity[4]
    assert long is not None and short is not None and long < short
    assert flip.length == long


def test_flip_point_holds_for_the_fixed_app(llm: FakeLLM, client: openai.OpenAI):
    flip = find_flip_point(runner(llm, client, keep_system), [2, 8, 16], has_system)
    assert flip.length is None and flip.signature == "holds"


def test_flip_point_without_verbosity_cannot_name_the_policy(llm: FakeLLM, client: openai.OpenAI):
    build = runner(llm, client, fixed_window)
    flip = find_flip_point(lambda n: build(n), [2, 4, 6], has_system)
    assert (flip.length, flip.signature) == (4, "unknown")
    with pytest.raises(ValueError):
        find_flip_point(build, [], has_system)


# -- assert_claims ---------------------------------------------------------------------


def test_assert_claims_accepts_matching_claims_in_any_form():
    assert_claims([("city", "LYON"), ("order", "A-1041")], {"city": "Lyon", "order": "A-1041"})
    assert_claims([{"claim": "city", "value": "Lyon"}], {"city": "Lyon"})
    assert_claims({"qty": 3}, {"qty": "3"})


def test_assert_claims_rejects_each_kind_of_problem_in_a_stable_order():
    with pytest.raises(ClaimsMismatch) as caught:
        assert_claims(
            [("city", "Pune"), ("coupon", "SAVE10"), ("order", "A-1041"), ("order", "A-1041"), ("phone", "555-0100")],
            {"city": "Lyon", "order": "A-1041", "email": "a@b.c", "phone": "555-0199"},
            stale={"city": ["Pune"]},
        )
    assert [(p.kind, p.claim) for p in caught.value.problems] == [
        ("duplicate", "order"), ("stale", "city"), ("wrong", "phone"), ("missing", "email"), ("unexpected", "coupon"),
    ]
    assert str(caught.value) == (
        "claims do not match:\n"
        "  duplicate order: claimed 2 times ('A-1041', 'A-1041')\n"
        "  stale city: got 'Pune', an earlier value; expected 'Lyon'\n"
        "  wrong phone: got '555-0100', expected '555-0199'\n"
        "  missing email: expected 'a@b.c'\n"
        "  unexpected coupon: 'SAVE10'"
    )
    assert isinstance(caught.value, AssertionError)


@pytest.mark.parametrize("stale", [{"city": "Pune"}, {"city": ["Mumbai", "Pune"]}, {"city": ("Pune",)}])
def test_assert_claims_takes_one_stale_value_or_several(stale):
    """docs/testing.md: ``stale={"city": "Pune"}`` is the value Pune, not the letters P, u, n, e (before: 'wrong')."""
    with pytest.raises(ClaimsMismatch, match="stale city"):
        assert_claims([("city", "Pune")], {"city": "Lyon"}, stale=stale)
    with pytest.raises(ClaimsMismatch, match="stale total"):  # a number is one value too
        assert_claims([("total", "1249")], {"total": 1299}, stale={"total": 1249})


def test_assert_claims_compares_a_grouped_number_in_any_grouping():
    assert_claims([("phone", "06.12.34.56.78")], {"phone": "06 12 34 56 78"})


def test_assert_claims_without_stale_history_calls_a_reverted_value_wrong():
    with pytest.raises(ClaimsMismatch, match="wrong city"):
        assert_claims([("city", "Pune")], {"city": "Lyon"})
    with pytest.raises(TypeError, match="claim 0"):
        assert_claims(["city=Lyon"], {"city": "Lyon"})


# -- assert_fact_survives --------------------------------------------------------------


def sweep(llm: FakeLLM, client: openai.OpenAI, trim: Any) -> Callable[[int], Any]:
    def run(n: int) -> list[Any]:
        start = len(llm.requests)
        app = App(client, trim)
        for i in range(n):
            app.turn(f"message {i}")
        return llm.requests[start:]

    return run


def test_fact_survival_sweep_catches_the_rotating_buffer(llm: FakeLLM, client: openai.OpenAI):
    with pytest.raises(FactLost) as caught:
        assert_fact_survives(sweep(llm, client, fixed_window), "lives in Lyon", label="home city")
    assert (caught.value.length, caught.value.turn, caught.value.survived) == (4, 4, [])
    assert str(caught.value) == "home city lost in the 4-turn conversation (absent from request 4)"

    def wider(messages: list[dict[str, str]]) -> list[dict[str, str]]:
        return messages[-11:]

    with pytest.raises(FactLost) as caught:
        assert_fact_survives(lambda n: sweep(llm, client, wider)(n)[-1], "lives in Lyon")
    assert (caught.value.length, caught.value.turn, caught.value.survived) == (8, None, [4])
    assert str(caught.value) == "the fact lost in the 8-turn conversation; it survived 4 turns"


def test_fact_survival_sweep_passes_the_fixed_app(llm: FakeLLM, client: openai.OpenAI):
    assert_fact_survives(sweep(llm, client, keep_system), "lives in Lyon")
    assert len(llm.requests) == 4 + 8 + 16 + 32


# -- the ctxguard_guard fixture in collect mode -----------------------------------------


@pytest.mark.ctxguard(mode="collect", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
def test_collect_mode_lets_calls_through_and_collects_violations(fake_llm: FakeLLM, ctxguard_guard):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert len(fake_llm.requests) == 1  # sent, not blocked
    assert [v.check for v in ctxguard_guard.violations] == ["system_at_head", "pinned_present"]
    assert ctxguard_guard.guard.config.mode == "observe"


def test_enforce_is_the_default_mode(fake_llm: FakeLLM, ctxguard_guard):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)
    with pytest.raises(ctxguard.ContextViolation):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert fake_llm.requests == []
    assert [v.check for v in ctxguard_guard.violations] == ["system_at_head"]
