"""The request on the wire is byte for byte the same with and without ctxguard, whatever the app
passes: Chat Completions, Responses and Anthropic Messages arguments of any shape, one-shot
iterables (generators, ``map``) included, which ctxguard must never consume (the SDK would then
send them empty). A call the SDK refuses is refused the same way."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxguard
from tests.conftest import only_guard_span

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
#: How a list-valued argument is passed: as a list, a tuple, or a one-shot iterator.
carriers = st.sampled_from(["list", "tuple", "generator", "map"])


def carried(how: str, values: list[Any]) -> Any:
    """``values`` as the app passes them; a fresh iterator each time this is called."""
    if how == "tuple":
        return tuple(values)
    if how == "generator":
        return (value for value in values)
    if how == "map":
        return map(lambda value: value, values)
    return list(values)


def build(plan: Any) -> Any:
    """The app's arguments from a plan: ``("carry", how, [plans])`` becomes a list, tuple or fresh
    iterator; dicts and lists are built through."""
    if isinstance(plan, tuple) and plan and plan[0] == "carry":
        return carried(plan[1], [build(p) for p in plan[2]])
    if isinstance(plan, dict):
        return {k: build(v) for k, v in plan.items()}
    if isinstance(plan, list):
        return [build(p) for p in plan]
    return plan


def carry(elements: st.SearchStrategy[Any], max_size: int = 3, min_size: int = 0,
          how: st.SearchStrategy[str] = carriers) -> st.SearchStrategy[Any]:
    return st.tuples(st.just("carry"), how, st.lists(elements, min_size=min_size, max_size=max_size))


#: The outermost list mostly a list, so that what is inside it gets read (a one-shot outer list is
#: left unread whole).
outer = st.sampled_from(["list", "list", "list", "tuple", "generator"])


chat_part = st.fixed_dictionaries({"type": st.just("text"), "text": text})
tool_call = st.fixed_dictionaries({
    "id": st.from_regex(r"call_[a-z0-9]{4}", fullmatch=True), "type": st.just("function"),
    "function": st.fixed_dictionaries({"name": st.sampled_from(["lookup", "ship"]), "arguments": text})})
chat_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user"]),
                           "content": st.one_of(text, carry(chat_part))}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(text, st.none()),
                           "tool_calls": carry(tool_call, 2, min_size=1)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": st.just("call_1"), "content": text}),
)
chat_request = st.fixed_dictionaries({"model": st.just("gpt-4o"), "messages": carry(chat_message, 4, how=outer)},
                                     optional={"max_tokens": st.integers(1, 500)})

response_item = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "developer", "assistant"]),
                           "content": st.one_of(text, carry(st.fixed_dictionaries(
                               {"type": st.just("input_text"), "text": text})))}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": st.just("c1"),
                           "name": st.just("lookup"), "arguments": text}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": st.just("c1"), "output": text}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "id": st.just("rs_1"),
                           "summary": carry(st.fixed_dictionaries({"type": st.just("summary_text"), "text": text}))}),
)
responses_request = st.fixed_dictionaries({"model": st.just("gpt-4o"),
                                           "input": st.one_of(text, carry(response_item, how=outer))},
                                          optional={"instructions": text})

block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.just("toolu_1"), "name": st.just("lookup"),
                           "input": st.dictionaries(st.sampled_from(["q", "city"]), text, max_size=2)}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": st.just("toolu_1"),
                           "content": st.one_of(text, carry(st.fixed_dictionaries(
                               {"type": st.just("text"), "text": text})))}),
)
anthropic_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                           "content": st.one_of(text, carry(block))})
messages_request = st.fixed_dictionaries(
    {"model": st.just("claude-sonnet-4-5"), "max_tokens": st.integers(1, 500),
     "messages": carry(anthropic_message, 3, how=outer)},
    optional={"system": st.one_of(text, carry(st.fixed_dictionaries({"type": st.just("text"), "text": text})))})


def _sent(llm, send, plan) -> tuple[str, bytes | None]:
    """What went out for ``plan``'s arguments: the body, or the error the SDK raised first."""
    llm.clear()
    try:
        send(**build(plan))
    except (openai.APIStatusError, anthropic.APIStatusError):
        pass  # the fake's own refusal of an odd body: the body still went out
    except Exception as exc:  # the SDK refused the arguments: it must refuse them the same way
        return type(exc).__name__, llm.requests[0].body if llm.requests else None
    return "sent", llm.requests[0].body


def _same_with_and_without(harness, llm, send, plan) -> None:
    """``send`` looks the SDK method up at each call: bound once, it would be the one seen first."""
    ctxguard.uninstrument()
    plain = _sent(llm, send, plan)
    harness.start(mode="observe")
    assert _sent(llm, send, plan) == plain
    assert len(harness.spans()) == 1 and "ctxguard.guarded_at" not in harness.spans()[0].attributes
    harness.exporter.clear()


@pytest.fixture
def claude(llm):
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


@SETTINGS
@given(plan=chat_request)
def test_chat_completions_bodies_are_untouched(harness, llm, client, plan):
    _same_with_and_without(harness, llm, lambda **kw: client.chat.completions.create(**kw), plan)


@SETTINGS
@given(plan=responses_request)
def test_responses_bodies_are_untouched(harness, llm, client, plan):
    _same_with_and_without(harness, llm, lambda **kw: client.responses.create(**kw), plan)


@SETTINGS
@given(plan=messages_request)
def test_anthropic_bodies_are_untouched(harness, llm, claude, plan):
    _same_with_and_without(harness, llm, lambda **kw: claude.messages.create(**kw), plan)


@pytest.mark.parametrize("where", ["tool_calls", "content", "messages", "reasoning summary", "system"])
def test_a_one_shot_argument_is_left_unread_and_the_checks_say_why(harness, llm, client, claude, where):
    """Left unread: every check skips with the reason, no check fails on what it did not read
    (a generator read as ``str(generator)`` once failed ``fact_present``)."""
    harness.start(mode="observe")
    with ctxguard.conversation("one-shot"):
        ctxguard.record_fact("city", "Pune")
        if where == "tool_calls":
            calls = ({"id": "c", "type": "function", "function": {"name": "ship", "arguments": "Pune"}} for _ in "x")
            client.chat.completions.create(model="gpt-4o", messages=[
                {"role": "system", "content": "s"}, {"role": "assistant", "content": None, "tool_calls": calls}])
        elif where == "content":
            client.chat.completions.create(model="gpt-4o", messages=[
                {"role": "user", "content": ({"type": "text", "text": "Pune"} for _ in "x")}])
        elif where == "messages":
            client.chat.completions.create(model="gpt-4o", messages=({"role": "user", "content": "Pune"} for _ in "x"))
        elif where == "reasoning summary":
            client.responses.create(model="gpt-4o", input=[
                {"type": "reasoning", "id": "rs_1", "summary": ({"type": "summary_text", "text": "Pune"} for _ in "x")},
                {"role": "user", "content": "Pune"}])
        else:
            claude.messages.create(model="claude-sonnet-4-5", max_tokens=10, system=(
                {"type": "text", "text": "Pune"} for _ in "x"), messages=[{"role": "user", "content": "Pune"}])
    assert "Pune" in llm.requests[0].body.decode()  # the SDK sent the iterator's values: not consumed
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == []
    assert any("one-shot iterator" in reason for reason in a["ctxguard.checks.skipped"])
