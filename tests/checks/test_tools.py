"""``tool_pairs_intact``, table-driven: small payloads read by each provider's own adapter and the
guard's measurer, against the violations expected (a history trimmed through a tool exchange is
what the check is for); and, against an independent orphan checker, random trims of tool
conversations."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxguard.checks import CHECKS, Context, Skip, check_caches
from ctxguard.checks.tools import ELSEWHERE, tool_pairs_intact
from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.memo import Memo
from ctxguard.payload import Message, Payload
from ctxguard.policy import Policy
from ctxguard.providers import anthropic, google_genai, openai
from ctxguard.tokens import Calibration, EstimateCounter
from tests.builder.helpers import anthropic_problems, openai_orphans
from tests.conftest import KEY

CTX = Context(policy=Policy(), pinned=None, pinned_tokens=0, budget="n/a", first_system=None,
              in_conversation=False, facts="n/a", caches=check_caches())
MEASURER = Measurer(Digester(KEY), EstimateCounter(), Calibration())
ADAPTERS = {"chat": (openai.ADAPTER, "chat.completions"), "responses": (openai.ADAPTER, "responses"),
            "anthropic": (anthropic.ADAPTER, "messages"), "gemini": (google_genai.ADAPTER, "generate_content")}


def payload(api: str, kwargs: dict[str, Any], memo: Memo | None = None) -> Payload:
    adapter, name = ADAPTERS[api]
    return MEASURER.measure(adapter.normalise(name, kwargs, memo), memo)


def verdict(api: str, kwargs: dict[str, Any]) -> list[str] | str:
    """The violations' details, or ``skip: <reason>``."""
    result = tool_pairs_intact(payload(api, kwargs), CTX)
    if isinstance(result, Skip):
        return f"skip: {result.reason}"
    assert all(v.check == "tool_pairs_intact" and v.fact_id is None for v in result)
    return [v.detail for v in result]


# -- OpenAI Chat Completions -------------------------------------------------------------

SYSTEM = {"role": "system", "content": "You are the order assistant."}
USER = {"role": "user", "content": "where is order A-1041?"}


def calls(*ids: str, name: str = "lookup") -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": name, "arguments": '{"order": "A-1041"}'}} for i in ids]}


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": '{"status": "shipped"}'}


ANSWER = {"role": "assistant", "content": "It shipped."}


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [SYSTEM, USER, *messages]}


CHAT_CASES = {
    "no tools at all": (chat(ANSWER), []),
    "one call, its result": (chat(calls("call_a"), result("call_a"), ANSWER), []),
    "parallel calls, results in another order": (
        chat(calls("call_a", "call_b", "call_c"), result("call_c"), result("call_a"), result("call_b"), ANSWER), []),
    "two exchanges": (chat(calls("call_a"), result("call_a"), calls("call_b"), result("call_b"), ANSWER), []),
    "the result trimmed": (
        chat(calls("call_a"), ANSWER), ["tool call call_a (message 2) has no result right after it"]),
    "the call trimmed": (
        {"model": "gpt-4o", "messages": [SYSTEM, result("call_a"), ANSWER, USER]},
        ["tool result call_a (message 1) answers no call right before it"]),
    "parallel calls, one result trimmed": (
        chat(calls("call_a", "call_b"), result("call_b"), ANSWER),
        ["tool call call_a (message 2) has no result right after it"]),
    "a call last, nothing after it": (
        chat(calls("call_a")), ["tool call call_a (message 2) has no result right after it"]),
    "a user message between the call and its result": (
        chat(calls("call_a"), USER, result("call_a")),
        ["tool call call_a (message 2) has no result right after it",
         "tool result call_a (message 4) answers no call right before it"]),
    "one exchange's result trimmed before the next call": (
        chat(calls("call_a"), calls("call_b"), result("call_b"), ANSWER),
        ["tool call call_a (message 2) has no result right after it"]),
    "results after the next call's": (
        chat(calls("call_a"), calls("call_b"), result("call_b"), result("call_a"), ANSWER),
        ["tool call call_a (message 2) has no result right after it",
         "tool result call_a (message 5) answers no call right before it"]),
    "a result twice": (
        chat(calls("call_a"), result("call_a"), result("call_a"), ANSWER),
        ["tool result call_a (message 4) answers no call right before it"]),
    "the result before its call": (
        chat(result("call_a"), calls("call_a"), ANSWER),
        ["tool result call_a (message 2) answers no call right before it",
         "tool call call_a (message 3) has no result right after it"]),
    "an id of 40 characters is whole": (
        chat(calls("call_" + "x" * 35), ANSWER),
        [f"tool call call_{'x' * 35} (message 2) has no result right after it"]),
    "a long id is cut": (
        chat(calls("call_" + "x" * 100), ANSWER),
        [f"tool call call_{'x' * 34}… (message 2) has no result right after it"]),
    "legacy function calling": (
        chat({"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": "{}"}},
             {"role": "function", "name": "lookup", "content": "shipped"}, ANSWER), []),
    "legacy function calling, the result trimmed": (
        chat({"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": "{}"}}, ANSWER),
        ["tool call 'lookup' (message 2) has no result right after it"]),
    "a named user message is no result": (chat({"role": "user", "name": "ann", "content": "hi"}, ANSWER), []),
}


@pytest.mark.parametrize(("kwargs", "expected"), CHAT_CASES.values(), ids=CHAT_CASES.keys())
def test_chat_completions(kwargs: dict[str, Any], expected: list[str]) -> None:
    assert verdict("chat", kwargs) == expected


# -- OpenAI Responses --------------------------------------------------------------------

def fc(call_id: str, kind: str = "function_call") -> dict[str, Any]:
    item = {"type": kind, "call_id": call_id, "name": "lookup", "id": f"fc_{call_id}"}
    item["input" if kind == "custom_tool_call" else "arguments"] = '{"order": "A-1041"}'
    return item


def fco(call_id: str, kind: str = "function_call_output") -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "output": "shipped"}


REASONING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look it up"}]}
SAID = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]}


def responses(*items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "instructions": "You are the order assistant.",
            "input": [{"role": "user", "content": "where is order A-1041?"}, *items], **extra}


RESPONSES_CASES = {
    "no tools at all": (responses(SAID), []),
    "a call and its output": (responses(REASONING, fc("call_a"), fco("call_a"), SAID), []),
    "items between a call and its output": (responses(fc("call_a"), REASONING, SAID, fco("call_a")), []),
    "parallel calls, outputs in another order": (
        responses(fc("call_a"), fc("call_b"), fco("call_b"), fco("call_a")), []),
    "an output trimmed": (
        responses(fc("call_a"), fc("call_b"), fco("call_a"), SAID),
        ["tool call call_b (message 3) has no result after it"]),
    "a call trimmed": (responses(fco("call_a"), SAID), ["tool result call_a (message 2) answers no call before it"]),
    "an output before its call": (
        responses(fco("call_a"), fc("call_a")),
        ["tool result call_a (message 2) answers no call before it",
         "tool call call_a (message 3) has no result after it"]),
    "custom tools": (responses(fc("call_a", "custom_tool_call"), fco("call_a", "custom_tool_call_output")), []),
    "a custom tool's output trimmed": (
        responses(fc("call_a", "custom_tool_call"), SAID), ["tool call call_a (message 2) has no result after it"]),
    "a server-run tool is not paired": (
        responses({"type": "web_search_call", "id": "ws_1", "status": "completed"}, SAID), []),
    "previous_response_id: the call is in the previous response": (
        responses(fco("call_a"), previous_response_id="resp_1"),
        "skip: history is provider-managed (previous_response_id)"),
    "previous_response_id: a call of this input without its output": (
        responses(fc("call_b"), previous_response_id="resp_1"),
        ["tool call call_b (message 2) has no result after it"]),
    "previous_response_id, no tools": (
        responses(previous_response_id="resp_1"), "skip: history is provider-managed (previous_response_id)"),
    "an item_reference may be the call": (
        responses({"type": "item_reference", "id": "fc_call_a"}, fco("call_a")), f"skip: {ELSEWHERE}"),
    "an item_reference without a type": (responses({"id": "fc_call_a"}, fco("call_a")), f"skip: {ELSEWHERE}"),
    "an item_reference may be the output": (
        responses(fc("call_a"), {"type": "item_reference", "id": "fco_1"}), f"skip: {ELSEWHERE}"),
}


@pytest.mark.parametrize(("kwargs", "expected"), RESPONSES_CASES.values(), ids=RESPONSES_CASES.keys())
def test_responses(kwargs: dict[str, Any], expected: list[str] | str) -> None:
    assert verdict("responses", kwargs) == expected


# -- Anthropic Messages ------------------------------------------------------------------

def tool_use(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, *(
        {"type": "tool_use", "id": i, "name": "lookup", "input": {"order": "A-1041"}} for i in ids)]}


def tool_result(*ids: str, text: str | None = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": i, "content": [{"type": "text", "text": "shipped"}]} for i in ids]
    if text is not None:
        blocks.append({"type": "text", "text": text})
    return {"role": "user", "content": blocks}


CLAUDE_ANSWER = {"role": "assistant", "content": "It shipped."}


def claude(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-20250514", "max_tokens": 300, "system": "You are the order assistant.",
            "messages": [{"role": "user", "content": "where is order A-1041?"}, *messages]}


ANTHROPIC_CASES = {
    "no tools at all": (claude(CLAUDE_ANSWER), []),
    "a tool_use and its result": (claude(tool_use("toolu_a"), tool_result("toolu_a"), CLAUDE_ANSWER), []),
    "parallel, results in another order, text after them": (
        claude(tool_use("toolu_a", "toolu_b"), tool_result("toolu_b", "toolu_a", text="thanks"), CLAUDE_ANSWER), []),
    "parallel, one result trimmed": (
        claude(tool_use("toolu_a", "toolu_b"), tool_result("toolu_b"), CLAUDE_ANSWER),
        ["tool call toolu_a (message 2) has no result right after it"]),
    "the results a turn late": (
        claude(tool_use("toolu_a"), {"role": "user", "content": "hurry"}, CLAUDE_ANSWER, tool_result("toolu_a")),
        ["tool call toolu_a (message 2) has no result right after it",
         "tool result toolu_a (message 5) answers no call right before it"]),
    "history cut after the tool_use": (
        {**claude(), "messages": [tool_result("toolu_a"), CLAUDE_ANSWER, {"role": "user", "content": "and?"}]},
        ["tool result toolu_a (message 1) answers no call right before it"]),
    "a server tool's result is in the same message": (
        claude({"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_a", "name": "web_search", "input": {"query": "A-1041"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_a", "content": []},
            {"type": "text", "text": "It shipped."}]}), []),
}


@pytest.mark.parametrize(("kwargs", "expected"), ANTHROPIC_CASES.values(), ids=ANTHROPIC_CASES.keys())
def test_anthropic(kwargs: dict[str, Any], expected: list[str]) -> None:
    assert verdict("anthropic", kwargs) == expected


# -- Gemini ------------------------------------------------------------------------------

def model_calls(*calls: tuple[str, str | None]) -> dict[str, Any]:
    return {"role": "model", "parts": [{"function_call": {"name": name, "args": {"order": "A-1041"},
                                                          **({"id": i} if i else {})}} for name, i in calls]}


def responses_of(*results: tuple[str, str | None]) -> dict[str, Any]:
    return {"role": "user", "parts": [
        {"function_response": {"name": name, "response": {"status": "shipped"}, **({"id": i} if i else {})}}
        for name, i in results]}


def gemini(*contents: Any, **config: Any) -> dict[str, Any]:
    return {"model": "gemini-2.5-flash", "contents": ["where is order A-1041?", *contents],
            "config": {"system_instruction": "You are the order assistant.", **config}}


GEMINI_ANSWER = {"role": "model", "parts": [{"text": "It shipped."}]}

GEMINI_CASES = {
    "no tools at all": (gemini(GEMINI_ANSWER), []),
    "by name": (gemini(model_calls(("lookup", None)), responses_of(("lookup", None)), GEMINI_ANSWER), []),
    "an id'd call answered by name (the SDK's own function calling)": (
        gemini(model_calls(("lookup", "fc-1")), responses_of(("lookup", None)), GEMINI_ANSWER), []),
    "by id, in another order": (
        gemini(model_calls(("lookup", "fc-1"), ("track", "fc-2")),
               responses_of(("track", "fc-2"), ("lookup", "fc-1")), GEMINI_ANSWER), []),
    "ids that do not match": (
        gemini(model_calls(("lookup", "fc-1")), responses_of(("lookup", "fc-9")), GEMINI_ANSWER),
        ["tool result fc-9 (message 3) answers no call right before it",
         "tool call fc-1 (message 2) has no result right after it"]),
    "a response to another function": (
        gemini(model_calls(("lookup", None)), responses_of(("track", None)), GEMINI_ANSWER),
        ["tool result 'track' (message 3) answers no call right before it",
         "tool call 'lookup' (message 2) has no result right after it"]),
    "two calls of one function, one response": (
        gemini(model_calls(("lookup", None), ("lookup", None)), responses_of(("lookup", None)), GEMINI_ANSWER),
        ["tool call 'lookup' (message 2) has no result right after it"]),
    "the call trimmed": (
        {"model": "gemini-2.5-flash", "contents": [responses_of(("lookup", None)), GEMINI_ANSWER]},
        ["tool result 'lookup' (message 0) answers no call right before it"]),
    "bare function_call parts are a model turn": (
        {"model": "gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": "where is it?"}]},
                                                   {"function_call": {"name": "lookup", "args": {}}},
                                                   responses_of(("lookup", None))]}, []),
    "cached_content, no tools": (
        gemini(GEMINI_ANSWER, cached_content="cachedContents/1"), "skip: history is provider-managed (cached_content)"),
}


@pytest.mark.parametrize(("kwargs", "expected"), GEMINI_CASES.values(), ids=GEMINI_CASES.keys())
def test_gemini(kwargs: dict[str, Any], expected: list[str] | str) -> None:
    assert verdict("gemini", kwargs) == expected


# -- the neutral form --------------------------------------------------------------------

def test_the_check_is_registered_and_reads_only_the_neutral_form() -> None:
    assert CHECKS["tool_pairs_intact"] is tool_pairs_intact
    messages = [Message("assistant", "lookup {}", "d1", 5, tool_refs=("id:tool_call=c1", "id:tool_call:lookup")),
                Message("tool", "shipped", "d2", 5, tool_refs=("id:tool_result=c1",)),
                Message("user", "", "d3", 5, tool_refs=("id:tool_result:lookup",))]
    made = Payload("any", "chat", None, messages, ["d1", "d2", "d3"], "d", 15, 15, "estimate", 0, None, False,
                   None, None, first_tool=0)
    assert tool_pairs_intact(made, CTX) == []
    made.tool_results = "later"
    assert tool_pairs_intact(made, CTX) == []
    del messages[1]
    later = Payload("any", "chat", None, messages, ["d1", "d3"], "d", 10, 10, "estimate", 0, None, False, None, None,
                    first_tool=0, tool_results="later")
    assert [v.detail for v in tool_pairs_intact(later, CTX)] == ["tool call c1 (message 0) has no result after it"]


def test_a_message_keeps_its_tool_refs_and_nothing_else() -> None:
    made = payload("chat", chat({"role": "user", "name": "ann", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]},
        calls("call_a", "call_b"), result("call_a"), result("call_b"), ANSWER))
    assert [m.tool_refs for m in made.messages] == [
        (), (), (), ("id:tool_call=call_a", "id:tool_call=call_b"), ("id:tool_result=call_a",),
        ("id:tool_result=call_b",), ()]


def test_the_verdict_is_the_same_through_a_memo() -> None:
    """The memo reuses the previous call's reading of the leading messages: the tool refs come
    with it (they are in the Items), so a trimmed history is judged the same either way."""
    memo = Memo()
    history = [calls("call_a"), result("call_a"), ANSWER, USER, calls("call_b", "call_c"), result("call_b"),
               result("call_c"), ANSWER]
    for start in (0, 1, 4, 2):  # each history grows one message a call, as a chat's does
        for end in range(start, len(history) + 1):
            kwargs = chat(*history[start:end])
            made = payload("chat", kwargs, memo)
            assert made.first_tool == next((i for i, m in enumerate(made.messages) if m.tool_refs), None)
            assert tool_pairs_intact(made, CTX) == tool_pairs_intact(payload("chat", kwargs), CTX)


# -- random trims against independent oracles ----------------------------------------------

def chat_conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM]
    n = 0
    for _ in range(turns):
        messages.append(USER)
        for _ in range(rng.randrange(3)):  # tool rounds in this turn
            ids = [f"call_{n + k}" for k in range(rng.randrange(1, 4))]
            n += len(ids)
            messages.append(calls(*ids))
            messages.extend(result(i) for i in rng.sample(ids, len(ids)))
        messages.append(ANSWER)
    return messages


def claude_conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    n = 0
    for _ in range(turns):
        messages.append({"role": "user", "content": "and now?"})
        for _ in range(rng.randrange(3)):
            ids = [f"toolu_{n + k}" for k in range(rng.randrange(1, 4))]
            n += len(ids)
            messages.append(tool_use(*ids))
            messages.append(tool_result(*rng.sample(ids, len(ids))))
        messages.append(CLAUDE_ANSWER)
    return messages


def trim(rng: random.Random, messages: list[dict[str, Any]], how: str) -> list[dict[str, Any]]:
    """What history trimmers do: keep a tail, drop a window, or drop messages here and there; and
    what other history editors do: insert a message (a reminder, a summary), swap two."""
    n = len(messages)
    if how == "tail":
        return messages[rng.randrange(n + 1):]
    if how == "window":
        a = rng.randrange(n + 1)
        b = rng.randrange(a, n + 1)
        return messages[:a] + messages[b:]
    if how == "insert":
        at = rng.randrange(n + 1)
        return [*messages[:at], {"role": "user", "content": "(earlier turns summarised)"}, *messages[at:]]
    if how == "swap" and n > 1:
        at = rng.randrange(n - 1)
        return [*messages[:at], messages[at + 1], messages[at], *messages[at + 2:]]
    return [m for m in messages if rng.random() > 0.2]


HOW = st.sampled_from(["tail", "window", "scattered", "insert", "swap"])


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), turns=st.integers(1, 5), how=HOW)
def test_random_trims_of_a_chat_agree_with_the_orphan_oracle(seed: int, turns: int, how: str) -> None:
    rng = random.Random(seed)
    messages = trim(rng, chat_conversation(rng, turns), how)
    found = tool_pairs_intact(payload("chat", {"model": "gpt-4o", "messages": messages}), CTX)
    assert not isinstance(found, Skip)
    assert bool(found) == bool(openai_orphans(messages)), (messages, found)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), turns=st.integers(1, 5), how=HOW)
def test_random_trims_of_a_claude_conversation_agree_with_the_orphan_oracle(seed: int, turns: int, how: str) -> None:
    rng = random.Random(seed)
    messages = trim(rng, claude_conversation(rng, turns), how)
    found = tool_pairs_intact(payload("anthropic", {"model": "claude-sonnet-4-20250514", "max_tokens": 300,
                                                    "messages": messages}), CTX)
    orphans = [p for p in anthropic_problems(messages) if p.startswith(("tool_use", "tool_result"))]
    assert not isinstance(found, Skip)
    assert bool(found) == bool(orphans), (messages, found)


# -- a growing conversation is judged from where its previous call left off ------------------

CHAT_PARTS = [USER, ANSWER, calls("c1"), calls("c2", "c3"), result("c1"), result("c2"), result("c3"),
              {"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": "{}"}},
              {"role": "function", "name": "lookup", "content": "shipped"}]
RESPONSES_PARTS = [SAID, REASONING, fc("c1"), fc("c2"), fco("c1"), fco("c2"), {"type": "item_reference", "id": "x"}]


@settings(max_examples=200, deadline=None)
@given(picks=st.lists(st.integers(0, 99), max_size=14), api=st.sampled_from(["chat", "responses"]),
       flips=st.sets(st.integers(0, 13)))
def test_a_growing_conversation_is_judged_as_if_afresh(picks: list[int], api: str, flips: set[int]) -> None:
    """Each call's payload begins with all of the previous one's messages: the check resumes from
    its previous run, and must find what it finds when it reads the whole payload."""
    memo = Memo()
    parts = CHAT_PARTS if api == "chat" else RESPONSES_PARTS
    grown = [parts[pick % len(parts)] for pick in picks]
    for end in range(len(grown) + 1):
        if api == "chat":
            kwargs = chat(*grown[:end])
        else:  # now and then with previous_response_id: the same messages, judged otherwise
            kwargs = responses(*grown[:end], **({"previous_response_id": "resp_1"} if end in flips else {}))
        afresh = tool_pairs_intact(payload(api, kwargs), CTX)
        assert tool_pairs_intact(payload(api, kwargs, memo), CTX) == afresh, grown[:end]
        assert tool_pairs_intact(payload(api, kwargs, memo), CTX) == afresh, grown[:end]  # the same again


def test_a_growing_conversation_is_read_from_where_its_previous_call_left_off() -> None:
    """Not read again: a payload that begins with all of the previous call's messages is judged on
    what it adds, from the state the previous call ended in (its orphans included)."""
    memo = Memo()
    earlier = payload("chat", chat(calls("call_a"), ANSWER), memo)
    orphan = "tool call call_a (message 2) has no result right after it"
    found = tool_pairs_intact(earlier, CTX)
    assert isinstance(found, list) and [v.detail for v in found] == [orphan]
    found.clear()  # what a check returns is the caller's: the state kept is not changed with it
    again = tool_pairs_intact(payload("chat", chat(calls("call_a"), ANSWER), memo), CTX)
    assert isinstance(again, list) and [v.detail for v in again] == [orphan]
    again.clear()
    later = payload("chat", chat(calls("call_a"), ANSWER, USER, calls("call_b")), memo)
    assert later.extends == earlier.digest
    n = len(earlier.messages)
    blank = dataclasses.replace(later, messages=[Message("user", "", "d", 1)] * n + later.messages[n:])
    assert [v.detail for v in tool_pairs_intact(blank, CTX)] == [
        orphan, "tool call call_b (message 5) has no result right after it"]
    assert tool_pairs_intact(dataclasses.replace(later, extends=None, first_tool=5), CTX) == [
        v for v in tool_pairs_intact(blank, CTX) if "call_b" in v.detail]
