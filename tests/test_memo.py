"""Reusing the previous call's reading (ctxguard.memo) never changes what a call is judged on.

The oracle: every call is also read and measured from scratch, without a memo, by a
second Measurer with the same key; the two payloads must be identical, whatever the
app did to its message list between calls (append, drop, edit a dict in place, swap
a content for an equal or a different string, insert a message of another shape).
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import openai
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxguard
from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.memo import Memo, Memos
from ctxguard.providers import anthropic as anthropic_provider
from ctxguard.providers import openai as openai_provider
from ctxguard.tokens import Calibration, EstimateCounter
from tests.conftest import KEY, race, traced

TEXTS = ["hello", "Ship to Lyon", "Ship to Pune", "ok", "", "a\nb", "déjà vu"]
ROLES = ["system", "user", "assistant", "tool", "x" * 40]
message = st.builds(lambda r, t: {"role": r, "content": t}, st.sampled_from(ROLES), st.sampled_from(TEXTS))
odd = st.sampled_from([
    {"role": "user", "content": [{"type": "text", "text": "Ship to Lyon"}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "Ship to Pune"},
    {"role": "user", "content": "hi", "name": "ann"},
    {"role": "user"},
    # Kept by the memo as trees: a dict where text is read, and numbers, which it must not keep.
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "function": {"name": "f", "arguments": {
        "b": "Lyon", "a": "Pune"}}}]},
    {"role": "user", "content": {"b": "Lyon", "a": "Pune"}},
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", "input": {"n": 1, "city": "Lyon"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "text", "text": "Ship to Lyon"}]}]},
    {"role": "user", "content": [{"type": {"odd": "kind"}, "text": None}]},
])
edit = st.one_of(
    st.tuples(st.just("append"), st.one_of(message, odd)),
    st.tuples(st.just("pop"), st.integers(0, 30)),
    st.tuples(st.just("in_place"), st.integers(0, 30), st.sampled_from(TEXTS)),
    st.tuples(st.just("equal_copy"), st.integers(0, 30)),  # same value, another str object
    st.tuples(st.just("insert"), st.integers(0, 30), st.one_of(message, odd)),
    st.tuples(st.just("add_key"), st.integers(0, 30)),  # a plain dict gains a key in place
    st.tuples(st.just("as_tuple"),),
    st.tuples(st.just("nested_in_place"), st.integers(0, 30), st.sampled_from(TEXTS)),  # a string deep inside
    st.tuples(st.just("reorder"), st.integers(0, 30)),  # every dict of a message rebuilt, keys reversed: equal
    st.tuples(st.just("retype"), st.integers(0, 30), st.sampled_from([True, 1.0, 2, "1"])),  # 1 == 1.0 == True
)


def _leaves(node: Any, kinds: tuple[type, ...]) -> list[tuple[Any, Any]]:
    """(container, key) of every value of one of ``kinds`` inside ``node``'s nested dicts and lists."""
    found: list[tuple[Any, Any]] = []
    pairs = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in pairs:
        if isinstance(value, kinds):
            found.append((node, key))
        else:
            found.extend(_leaves(value, kinds))
    return found


def _reversed(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _reversed(node[k]) for k in reversed(list(node))}
    if isinstance(node, list):
        return [_reversed(v) for v in node]
    return node


def apply(history: list[Any], step: tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
    kind = step[0]
    if kind == "append":
        history.append(copy.deepcopy(step[1]))
    elif kind == "pop" and history:
        history.pop(step[1] % len(history))
    elif kind == "in_place" and history:
        m = history[step[1] % len(history)]
        m["content"] = step[2]  # the app edits the dict it sent last time
    elif kind == "equal_copy" and history:
        m = history[step[1] % len(history)]
        if isinstance(m.get("content"), str):
            m["content"] = "".join(list(m["content"]))  # equal value, new object
    elif kind == "insert":
        history.insert(step[1] % (len(history) + 1), copy.deepcopy(step[2]))
    elif kind == "add_key" and history:
        history[step[1] % len(history)]["name"] = "ann"
    elif kind == "as_tuple":
        return tuple(history)
    elif kind == "nested_in_place" and history:
        m = history[step[1] % len(history)]
        inner = [(c, k) for c, k in _leaves(m, (str,)) if c is not m]  # the top level is "in_place"'s
        if inner:
            container, key = inner[step[1] % len(inner)]
            container[key] = step[2]
    elif kind == "reorder" and history:
        i = step[1] % len(history)
        history[i] = _reversed(history[i])
    elif kind == "retype" and history:
        numbers = _leaves(history[step[1] % len(history)], (int, float))
        if numbers:
            container, key = numbers[0]
            container[key] = step[2]
    return history


def measurer() -> Measurer:
    return Measurer(Digester(KEY), EstimateCounter(), Calibration())


def fields(payload: ctxguard.guard.Payload) -> tuple[Any, ...]:
    return (payload.messages, payload.digests, payload.digest, payload.tokens, payload.unreadable)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(edit, max_size=40), anthropic=st.booleans())
def test_a_memo_gives_the_payload_read_from_scratch(steps: list[tuple[Any, ...]], anthropic: bool) -> None:
    same_as_from_scratch(steps, anthropic)


TOOL_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"n": 1}}]}
ARGS_DICT = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c2", "function": {"name": "f", "arguments": {"b": "Lyon", "a": "Pune"}}}]}
TOOL_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}


def test_kept_tool_messages_are_read_again_when_they_change_deep_inside_or_read_the_same_when_equal() -> None:
    """The cases the property above reaches only by chance, each spelled out."""
    for anthropic, steps in [
        # 1 == True == 1.0, yet a tool input reads as "1", "true" or "1.0": numbers are never kept.
        (True, [("append", TOOL_USE), ("retype", 1, True), ("retype", 1, 1.0)]),
        # A string deep inside a kept message, edited in place.
        (False, [("append", TOOL_CALL), ("nested_in_place", 1, "Ship to Lyon"), ("append", TOOL_CALL)]),
        # Equal dicts with their keys in another order read the same.
        (False, [("append", ARGS_DICT), ("reorder", 1), ("append", ARGS_DICT)]),
        (True, [("append", {"role": "user", "content": {"b": "Lyon", "a": "Pune"}}), ("reorder", 1)]),
    ]:
        same_as_from_scratch([("append", {"role": "system", "content": "Be brief."}), *steps], anthropic)


def same_as_from_scratch(steps: list[tuple[Any, ...]], anthropic: bool) -> None:
    """Apply ``steps`` to a history, one call after each: the memo's payload must equal one
    read from scratch, and stay unchanged afterwards."""
    adapter = anthropic_provider.ADAPTER if anthropic else openai_provider.ADAPTER
    api = "messages" if anthropic else "chat.completions"
    extra: dict[str, Any] = {"system": "Be brief.", "max_tokens": 10} if anthropic else {}
    memo, with_memo, scratch = Memo(), measurer(), measurer()
    history: list[Any] = []
    judged: list[tuple[Any, tuple[Any, ...]]] = []
    for step in steps:
        sent = apply(history, step)
        kwargs = {"model": "gpt-4o", "messages": sent, **extra}
        fresh = scratch.measure(adapter.normalise(api, kwargs))
        reused = with_memo.measure(adapter.normalise(api, kwargs, memo), memo)
        assert fields(reused) == fields(fresh), step
        judged.append((reused, copy.deepcopy(fields(fresh))))
    # The memo shares its lists with the payloads it made: no later call may change one.
    for reused, expected in judged:
        assert fields(reused) == expected


def test_concurrent_calls_of_one_conversation_each_get_the_payload_read_from_scratch() -> None:
    """Two calls of one conversation at once share its memo: each reads an old or a new
    state, never a mix, and never changes what the other was given."""
    adapter, memo, with_memo, scratch = openai_provider.ADAPTER, Memo(), measurer(), measurer()
    failures: list[str] = []

    def converse(name: str) -> None:
        # The same history in every thread (a retried or fanned-out call), now and then with
        # a message of the thread's own at the end: the threads keep resuming each other's state.
        history: list[dict[str, str]] = [{"role": "system", "content": "Be brief."}]
        for turn in range(200):
            history = [*history, {"role": "user", "content": f"turn {turn}"}]
            own = [{"role": "assistant", "content": f"{name} at {turn}"}] if turn % 3 == 0 else []
            kwargs = {"model": "gpt-4o", "messages": history + own}
            reused = with_memo.measure(adapter.normalise("chat.completions", kwargs, memo), memo)
            expected = fields(scratch.measure(adapter.normalise("chat.completions", kwargs)))
            if fields(reused) != expected:
                failures.append(f"{name} turn {turn}")

    race(*(partial(converse, name) for name in ("ann", "bob", "cy")))
    assert not failures, failures[:5]


def test_memos_keep_a_bounded_number_of_messages() -> None:
    memos = Memos(max_messages=100)
    adapter, m = openai_provider.ADAPTER, measurer()
    for conversation in range(10):
        memo = memos.get(conversation)
        messages = [{"role": "user", "content": f"{conversation} {i}"} for i in range(30)]
        m.measure(adapter.normalise("chat.completions", {"messages": messages}, memo), memo)
        memos.settle(conversation, memo)
        assert memos.kept <= 100
    assert len(memos) == 1  # each memo counts 61 (30 read + 30 measured + itself): only the newest fits
    assert memos.get(9).measured is not None and memos.get(0).measured is None


def test_memos_that_keep_nothing_are_bounded_too() -> None:
    """Conversations whose messages are never kept (parts, tool calls) still hold a memo each."""
    memos = Memos(max_messages=100)
    for conversation in range(1_000):
        memos.settle(conversation, memos.get(conversation))
    assert len(memos) == 100 and memos.kept == 100


def test_the_memo_used_last_is_the_one_kept() -> None:
    memos = Memos(max_messages=3)
    for key in ("a", "b", "c"):
        memos.settle(key, memos.get(key))
    a = memos.get("a")  # used again: "b" is now the oldest
    memos.settle("d", memos.get("d"))
    assert memos.get("a") is a
    assert len(memos) == 3 and memos.kept == 3


def test_a_memo_dropped_while_its_call_ran_is_not_counted_when_settled() -> None:
    memos = Memos(max_messages=2)
    early = memos.get("early")
    for key in ("b", "c", "d"):  # push "early" out while its call is still running
        memos.settle(key, memos.get(key))
    memos.settle("early", early)
    assert memos.kept == 2
    assert memos.get("early") is not early  # gone: a fresh memo


def test_the_guard_settles_its_memos_within_their_bound(harness, client: openai.OpenAI) -> None:
    guard = harness.start(mode="observe")
    guard._inspector.memos.max_messages = 50
    for conversation in range(10):
        with ctxguard.conversation(f"c{conversation}"):
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": f"{conversation} {i}"} for i in range(10)])
    assert 0 < guard._inspector.memos.kept <= 50 and len(guard._inspector.memos) < 10


def test_a_message_redacted_in_place_is_seen_on_the_next_call(harness, llm, client: openai.OpenAI) -> None:
    """The app reuses its message dicts and blanks a deleted value in place: the guard must not
    judge the next call on what the dict said before."""
    harness.start(mode="observe")
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Call me on 555-0101"}]
    with ctxguard.conversation("c-redact"):
        client.chat.completions.create(model="gpt-4o", messages=history)
        ctxguard.record_fact("phone", "555-0101")
        ctxguard.forget_fact("phone")
        history[1]["content"] = "Call me on [deleted]"
        client.chat.completions.create(model="gpt-4o", messages=history)
    spans = [s for s in harness.spans() if "ctxguard.payload.hash" in s.attributes]
    digests = [s.attributes["ctxguard.message.hashes"] for s in spans]
    assert digests[0][1] != digests[1][1]
    assert "fact_forgotten" not in spans[1].attributes["ctxguard.violations"]
    assert harness.metric("ctxguard_checks_total", check="fact_forgotten", outcome="pass") == 1


def test_a_tool_result_redacted_in_place_deep_inside_is_seen_on_the_next_call(harness, llm, client) -> None:
    """Tool calls and content parts are kept by the memo too: a value blanked in place inside a
    content part, after the SDK sent it once, must not be judged as still sent."""
    harness.start(mode="observe")
    history: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"id": "41"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "phone 555-0101"}]},
    ]
    with ctxguard.conversation("c-tool-redact"):
        client.chat.completions.create(model="gpt-4o", messages=history)
        ctxguard.record_fact("phone", "555-0101")
        ctxguard.forget_fact("phone")
        client.chat.completions.create(model="gpt-4o", messages=history)  # still sent: a leak
        history[2]["content"][0]["text"] = "phone [deleted]"
        client.chat.completions.create(model="gpt-4o", messages=history)
    assert "555-0101" in llm.requests[1].body.decode() and "555-0101" not in llm.requests[2].body.decode()
    spans = [s for s in harness.spans() if "ctxguard.payload.hash" in s.attributes]
    assert ["fact_forgotten" in s.attributes["ctxguard.violations"] for s in spans[1:]] == [True, False]
    assert spans[1].attributes["ctxguard.message.hashes"][2] != spans[2].attributes["ctxguard.message.hashes"][2]


def test_a_dict_that_will_not_serialise_is_still_read_as_text() -> None:
    """Readers render a dict as canonical JSON; one holding an object whose ``model_dump``
    fails is rendered with ``str()`` instead, never making the message unreadable."""

    class Broken:
        def model_dump(self, **_: Any) -> Any:
            raise RuntimeError("no")

        def __repr__(self) -> str:
            return "Broken()"

    content = {"note": Broken()}
    view = openai_provider.ADAPTER.normalise("chat.completions", {
        "model": "gpt-4o", "messages": [{"role": "user", "content": content}]})
    assert view.unreadable is None
    assert view.items[0][1] == str(content)


def test_memos_fed_ten_times_their_byte_budget_keep_at_most_it() -> None:
    """The texts a memo keeps alive (its copies, its readings) count against ``max_bytes``: the app
    may have dropped those messages long ago."""
    budget = 1024 * 1024
    memos = Memos(max_bytes=budget)
    uncached = Measurer(Digester(KEY), EstimateCounter(), Calibration(), max_bytes=0)  # keeps nothing itself
    with traced() as retained:
        for conversation in range(50):  # 50 conversations of two 100 KB messages: 10 MB
            messages = [{"role": "user", "content": f"{conversation}.{i} " + "x" * 100_000} for i in range(2)]
            memo = memos.get(conversation)
            kwargs = {"model": "gpt-4o", "messages": messages}
            view = openai_provider.ADAPTER.normalise("chat.completions", kwargs, memo)
            uncached.measure(view, memo)
            memos.settle(conversation, memo)
            del messages, kwargs, view
        kept = retained()
    assert memos.bytes <= budget and kept <= budget
    assert memos.get(49).measured is not None  # the newest is kept


def test_a_memo_counts_the_bytes_its_messages_keep_whatever_changed() -> None:
    """Carried on from the previous call when it resumes all of it, added up again otherwise."""
    m, memo = measurer(), Memo()
    texts = ["a" * 10, "b" * 200, "c" * 3000]
    for history in (texts, [*texts, "d" * 40], ["a" * 10, "B" * 5, "c" * 3000, "d" * 40], ["c" * 3000], []):
        messages = [{"role": "user", "content": t} for t in history]
        view = openai_provider.ADAPTER.normalise("chat.completions", {"model": "gpt-4o", "messages": messages}, memo)
        payload = m.measure(view, memo)
        assert memo.measured is not None and memo.measured[5] == sum(msg.size for msg in payload.messages)


def test_a_memo_carries_the_bound_of_the_messages_it_resumes() -> None:
    """An exactly counted payload's bound (its messages' bytes and framing), carried on from the
    previous call, is the bound it has measured from scratch, whatever changed."""
    m, memo = measurer(), Memo()
    texts = ["a" * 10, "b" * 200, "ç" * 3000]
    for history in (texts, [*texts, "d" * 40], [*texts, "d" * 40, "é" * 7], ["a" * 10, "B" * 5, "ç" * 3000], []):
        messages = [{"role": "user", "content": t} for t in history]
        kwargs = {"model": "gpt-4o", "messages": messages}
        payload = m.measure(openai_provider.ADAPTER.normalise("chat.completions", kwargs, memo), memo)
        fresh = measurer().measure(openai_provider.ADAPTER.normalise("chat.completions", kwargs))
        assert (payload.bound, payload.ceiling) == (fresh.bound, fresh.ceiling)
        assert payload.bound >= sum(len(t.encode()) for t in history)
