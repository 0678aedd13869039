"""Property: over random conversations, budgets and fact sets, every built payload passes
the guard's own checks and carries no orphaned tool call or result."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ctxguard
from ctxguard.pinned import render_pinned
from tests.builder.helpers import anthropic_problems, judge, openai_orphans

WORDS = ["order", "parcel", "refund", "invoice", "delivery", "Pune", "Mumbai", "status", "tracking", "the",
         "and", "please", "when", "A-1041", "42", "weekday", "address", "é", "📦", "\n"]
# Sizes drawn uniformly (hypothesis keeps lists short): 1 to 300 words, a few distinct ones repeated.
texts = st.builds(lambda words, n: " ".join(itertools.islice(itertools.cycle(words), n)),
                  st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), st.integers(1, 300))
PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])
_ids = itertools.count()


@st.composite
def history(draw: st.DrawFn, anthropic: bool) -> list[dict[str, Any]]:
    """Plain turns, complete tool exchanges, and the broken ones an app may have stored."""
    out: list[dict[str, Any]] = []
    kinds = ["user", "assistant", "tools", "tools", "pending", "partial", "stray"]
    for _ in range(draw(st.integers(0, 60))):
        kind = draw(st.sampled_from(kinds))
        if kind in ("user", "assistant"):
            out.append({"role": kind, "content": draw(texts)})
            continue
        ids = [f"call_{next(_ids)}" for _ in range(draw(st.integers(1, 3)))]
        answered = ids if kind == "tools" else ids[1:] if kind == "partial" else []
        if kind == "stray":
            ids, answered = [], [f"call_{next(_ids)}"]
        if anthropic:
            if ids:
                out.append({"role": "assistant", "content": [
                    {"type": "text", "text": draw(texts)},
                    *({"type": "tool_use", "id": i, "name": "lookup", "input": {"q": draw(texts)}} for i in ids)]})
            if answered:
                out.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": draw(texts)} for i in answered]})
        else:
            if ids:
                out.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "lookup", "arguments": json.dumps(draw(texts))}}
                    for i in ids]})
            results = draw(st.permutations(answered))
            out.extend({"role": "tool", "tool_call_id": i, "content": draw(texts)} for i in results)
    return out


facts = st.dictionaries(st.sampled_from([f"fact_{i}" for i in range(12)]),
                        st.lists(st.sampled_from(WORDS[:14]), min_size=1, max_size=6).map("-".join), max_size=12)


@st.composite
def setups(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "window": draw(st.integers(1_500, 12_000)),
        "reserved_output": draw(st.integers(0, 1_000)),
        "reserved_reasoning": draw(st.sampled_from([0, 0, 200, 700])),
        "history_max": draw(st.sampled_from([None, None, 300, 2_000])),
        "pinned_tokens": draw(st.integers(20, 300)),
        "max_entries": draw(st.sampled_from([None, None, 3])),
        "tail_tokens": draw(st.one_of(st.integers(1, 4_000), st.just(1_000_000))),  # or: the window binds
        "retrieved_tokens": draw(st.integers(0, 1_500)),
        "facts": draw(facts),
        "revised": draw(facts),
        "summary": draw(st.one_of(st.none(), texts)),
        "memory": draw(st.one_of(st.none(), st.dictionaries(st.sampled_from(["lang", "tier", "tone"]), texts))),
        "new": draw(texts.filter(str.strip)),
    }


def run(harness: Any, setup: dict[str, Any], messages: list[dict[str, Any]], anthropic: bool) -> None:
    budget = ctxguard.Budget(window=setup["window"], reserved_output=setup["reserved_output"],
                             reserved_reasoning=setup["reserved_reasoning"], history_max=setup["history_max"])
    pinned = ctxguard.Pinned(max_tokens=setup["pinned_tokens"], max_entries=setup["max_entries"])
    guard = harness.guard
    guard.policy = ctxguard.Policy(pinned=pinned, budget=budget)
    model = "claude-sonnet-4" if anthropic else "gpt-4o"
    builder = ctxguard.ContextBuilder(model, system="You are the order assistant.", budget=budget, pinned=pinned,
                                      tail_tokens=setup["tail_tokens"], retrieved_tokens=setup["retrieved_tokens"])
    with ctxguard.conversation(f"prop-{next(_ids)}"):
        for fact_id, value in [*setup["facts"].items(), *setup["revised"].items()]:
            ctxguard.record_fact(fact_id, value)
        active = {**setup["facts"], **setup["revised"]}
        args = dict(summary=setup["summary"], memory=setup["memory"])
        try:
            if anthropic:
                request = builder.build_anthropic(messages, setup["new"], **args)
                kwargs = {"model": model, "system": request.system, "messages": request.messages}
            else:
                out = builder.build(messages, setup["new"], **args)
                kwargs = {"model": model, "messages": out}
        except ctxguard.BudgetError as exc:
            assert all(term in str(exc) for term in exc.terms)
            event("fixed parts over the budget")
            return
        outcomes = judge(guard, kwargs, "anthropic" if anthropic else "openai")
        sent = len(kwargs["messages"])
        event("history messages left out" if sent < len(messages) else "every history message sent")

    for check in ("system_at_head", "pinned_present", "pinned_capped", "pinned_intact", "payload_under_budget"):
        assert outcomes[check].outcome == "pass", (check, outcomes[check])
    block = render_pinned(active, max_tokens=pinned.max_tokens, max_entries=pinned.max_entries)
    pinned_ids = {fid for fid, value in active.items() if f"\n{fid}: {value}\n" in block}
    assert not {v.fact_id for v in outcomes["fact_present"].violations} & pinned_ids
    if anthropic:
        assert anthropic_problems(kwargs["messages"]) == []
    else:
        assert openai_orphans(kwargs["messages"]) == []
        kept = [next(i for i, h in enumerate(messages) if h is m) for m in out if any(h is m for h in messages)]
        assert kept == sorted(kept)  # the tail keeps the history's order
        assert out[-1]["content"] == setup["new"]


@pytest.fixture
def guarded_harness(harness: Any) -> Any:
    harness.start(mode="enforce")
    return harness


@PROPERTY
@given(setup=setups(), messages=history(anthropic=False))
def test_openai_payloads_pass_every_check(guarded_harness: Any, setup: dict[str, Any],
                                          messages: list[dict[str, Any]]) -> None:
    run(guarded_harness, setup, messages, anthropic=False)


@PROPERTY
@given(setup=setups(), messages=history(anthropic=True))
def test_anthropic_payloads_pass_every_check(guarded_harness: Any, setup: dict[str, Any],
                                             messages: list[dict[str, Any]]) -> None:
    run(guarded_harness, setup, messages, anthropic=True)
