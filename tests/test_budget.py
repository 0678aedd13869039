"""The budget equation (``budget_for``, ``evaluate``) and the model window table (ctxguard/budget.py)."""

from __future__ import annotations

import pytest

from ctxguard import Budget, budget_for
from ctxguard import budget as budget_mod
from ctxguard.budget import window_for


def test_budget_for_is_the_equation():
    b = budget_for("gpt-4o", system=1200, tools=800, retrieved=2000, reserved_output=4000, reserved_reasoning=0)
    assert b.window == 128_000
    assert b.history_available == 128_000 - 1200 - 800 - 2000 - 4000
    assert "history available" in str(b) and "reserved output" in str(b)
    assert budget_for("anything", window=1000, system=100).history_available == 900
    with pytest.raises(ValueError, match="unknown context window"):
        budget_for("mystery-model")
    with pytest.raises(ValueError):
        Budget(window=-1)
    assert budget_for("gpt-4o").history_available == 128_000  # every term defaults to 0
    for term in ("window", "system", "tools", "retrieved", "reserved_output", "reserved_reasoning"):
        with pytest.raises(ValueError, match=term):
            budget_for("gpt-4o", **{term: -1})


def test_budget_evaluate_derives_the_missing_terms_from_the_request():
    def judge(budget: Budget, model: str | None = "m", input_tokens: int = 100, max_output_tokens: int | None = None):
        ev = budget_mod.evaluate(budget, model=model, input_tokens=input_tokens, system_tokens=10, tools_tokens=5,
                                 max_output_tokens=max_output_tokens)
        assert not isinstance(ev, str), ev
        return ev

    ev = judge(Budget(window=1000))
    assert (ev.breakdown.model, ev.breakdown.reserved_output, ev.history, ev.headroom) == ("m", 0, 85, 900)
    short = judge(Budget(window=1000), model=None, input_tokens=10, max_output_tokens=50)
    assert (short.breakdown.model, short.history, short.headroom) == ("", 0, 940)  # history never below 0
    assert budget_mod.evaluate(Budget(window=0), model="m", input_tokens=1, system_tokens=0, tools_tokens=0,
                               max_output_tokens=None) == "window must be positive"
    judge(Budget(window=1))  # the smallest window is judged
    assert not judge(Budget(window=1000, history_max=85)).over_history_max  # history exactly at the cap
    assert judge(Budget(window=1000, history_max=84)).over_history_max


@pytest.mark.parametrize(("model", "window"), [
    ("gpt-4o", 128_000), ("gpt-4o-2024-08-06", 128_000), ("gpt-4-0613", 8_192), ("gpt-4.1-mini", 1_047_576),
    ("claude-sonnet-4-20250514", 200_000), ("claude-3-5-haiku-latest", 200_000), ("openai/gpt-4o", 128_000),
    ("claude-3-5-sonnet-latest", 200_000),  # retired on the API, kept: partner platforms and captures name it
    ("gemini-2.5-flash", 1_048_576), ("models/gemini-2.0-flash-001", 1_048_576), ("gemini-3-ultra", None),
    ("gpt-4o-mini-tts", None), ("gpt-4.5-turbo", None), ("", None), (None, None), (41, None), (b"gpt-4o", None),
])
def test_window_table_resolves_snapshots_and_never_guesses(model, window):
    assert window_for(model) == window


def test_a_window_the_request_sets_is_used_before_the_table_and_after_budget_window():
    """Ollama's ``num_ctx``: the server holds the prompt to it, whatever the model's own window."""
    terms = {"input_tokens": 3000, "system_tokens": 0, "tools_tokens": 0, "max_output_tokens": 100}
    ev = budget_mod.evaluate(Budget(), model="gpt-4o", request_window=2048, **terms)
    assert not isinstance(ev, str) and ev.breakdown.window == 2048 and ev.headroom < 0
    ev = budget_mod.evaluate(Budget(), model="llama3.2", request_window=2048, **terms)  # not the native 131,072
    assert not isinstance(ev, str) and ev.breakdown.window == 2048
    ev = budget_mod.evaluate(Budget(), model="acme-local:7b", request_window=2048, **terms)  # not in the table
    assert not isinstance(ev, str) and ev.breakdown.window == 2048
    ev = budget_mod.evaluate(Budget(window=8192), model="gpt-4o", request_window=2048, **terms)
    assert not isinstance(ev, str) and ev.breakdown.window == 8192  # the user's own setting wins
    ev = budget_mod.evaluate(Budget(), model="gpt-4o", **terms)
    assert not isinstance(ev, str) and ev.breakdown.window == 128_000


def test_the_request_window_reaches_the_verdict():
    from ctxguard.config import Config
    from ctxguard.guard import inspector_for
    from ctxguard.payload import RequestView
    from ctxguard.policy import Policy

    inspector = inspector_for(Config(digest_key=b"k" * 16), None)
    view = RequestView("ollama", "chat", "llama3.2", [("user", "hello " * 3000, (), "message", 0)], window=2048)
    payload = inspector.measurer.measure(view)
    assert payload.window == 2048
    verdict = inspector.inspect(payload, None, Policy())
    assert verdict.ctx is not None and verdict.ctx.budget.breakdown.window == 2048
