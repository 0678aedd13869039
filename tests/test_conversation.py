"""Conversation scope, per-conversation diffs and evictions (counted once)."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, deque

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import ctxguard
from ctxguard import Pinned, Policy, render_pinned
from ctxguard.conversation import ConversationMemory, _changes, current_conversation
from ctxguard.digest import Digester
from ctxguard.payload import ROLES, Message, Payload
from tests.conftest import traced

SYSTEM = {"role": "system", "content": "You are the order assistant."}
BLOCK = {"role": "system", "content": render_pinned({"order_id": "A-1041"}, max_tokens=100)}


def user(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"question {i}"}


def test_scope_is_a_context_manager_and_decorator():
    assert current_conversation() is None
    with ctxguard.conversation("a", tenant="t1"):
        assert current_conversation() == ("a", "t1")
        with ctxguard.conversation("b"):
            assert current_conversation() == ("b", None)
        assert current_conversation() == ("a", "t1")
    assert current_conversation() is None

    @ctxguard.conversation("dec")
    def sync_fn():
        return current_conversation()

    assert sync_fn() == ("dec", None)
    assert sync_fn() == ("dec", None)  # re-entrant: a fresh scope per call

    @ctxguard.conversation("adec")
    async def async_fn():
        await asyncio.sleep(0)
        return current_conversation()

    assert asyncio.run(async_fn()) == ("adec", None)
    assert current_conversation() is None


def test_scope_is_isolated_between_tasks_and_threads():
    seen: dict[str, object] = {}

    async def task(name: str):
        async with ctxguard.conversation(name):
            await asyncio.sleep(0.01)
            seen[name] = current_conversation()

    async def both():
        await asyncio.gather(task("t1"), task("t2"))

    asyncio.run(both())
    assert seen == {"t1": ("t1", None), "t2": ("t2", None)}

    def worker(name: str):
        with ctxguard.conversation(name):
            threading.Event().wait(0.01)
            seen[name] = current_conversation()

    threads = [threading.Thread(target=worker, args=(f"th{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(seen[f"th{i}"] == (f"th{i}", None) for i in range(4))


def test_diff_against_previous_payload(harness, client):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(1)])
        first = harness.spans()[-1].attributes
        client.chat.completions.create(
            model="gpt-4o", messages=[SYSTEM, user(2), {"role": "assistant", "content": "a"}, user(3)]
        )
    a = harness.spans()[-1].attributes
    assert "ctxguard.prev.hash" not in first
    assert a["ctxguard.prev.hash"] == first["ctxguard.payload.hash"]
    assert a["ctxguard.messages.added"] == 3
    assert a["ctxguard.messages.dropped"] == 1
    assert harness.metric("ctxguard_messages_dropped_total", role="user") == 1
    assert harness.metric("ctxguard_messages_dropped_total", role="system") == 0


def test_a_grown_history_adds_what_was_appended_and_drops_nothing(harness, client):
    harness.start(mode="observe")
    ok = {"role": "assistant", "content": "ok"}
    history = [SYSTEM, user(1), ok]
    with ctxguard.conversation("c"):
        client.chat.completions.create(model="gpt-4o", messages=history)
        history += [user(2), ok]  # a repeat of a message already sent counts as added
        client.chat.completions.create(model="gpt-4o", messages=history)
        client.chat.completions.create(model="gpt-4o", messages=history)  # resent unchanged
    grown, resent = (s.attributes for s in harness.spans()[-2:])
    assert (grown["ctxguard.messages.added"], grown["ctxguard.messages.dropped"]) == (2, 0)
    assert (resent["ctxguard.messages.added"], resent["ctxguard.messages.dropped"]) == (0, 0)


def test_repeated_identical_messages_are_counted_as_a_multiset(harness, client):
    harness.start(mode="observe")
    ok = {"role": "assistant", "content": "ok"}
    with ctxguard.conversation("c"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(1), ok, user(2), ok])
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(2), ok])
    assert harness.spans()[-1].attributes["ctxguard.messages.dropped"] == 2
    assert harness.metric("ctxguard_messages_dropped_total", role="assistant") == 1


def test_repeats_on_both_sides_are_matched_one_for_one(harness, client):
    """Three "ok"s sent, two resent: one dropped, though the text is still in the payload."""
    harness.start(mode="observe")
    ok = {"role": "user", "content": "ok"}
    with ctxguard.conversation("c"):
        x = {"role": "assistant", "content": "x"}
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, ok, x, ok, ok])
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, ok, ok, user(9)])
    a = harness.spans()[-1].attributes
    assert (a["ctxguard.messages.added"], a["ctxguard.messages.dropped"]) == (1, 2)
    assert harness.metric("ctxguard_messages_dropped_total", role="user") == 1
    assert harness.metric("ctxguard_messages_dropped_total", role="assistant") == 1
    with ctxguard.conversation("d"):  # a repeat only now: the second "ok" is new
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, ok, x])
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, ok, ok])
    a = harness.spans()[-1].attributes
    assert (a["ctxguard.messages.added"], a["ctxguard.messages.dropped"]) == (1, 1)


def test_a_system_message_moved_off_the_head_is_not_evicted(harness, client):
    """The rotating-buffer bug moves the instruction, or loses it: only losing it is an eviction."""
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(1)])
        client.chat.completions.create(model="gpt-4o", messages=[user(1), SYSTEM, user(2)])
        assert list(harness.spans()[-1].attributes["ctxguard.violations"]) == ["system_at_head"]
        assert harness.metric("ctxguard_evictions_total", kind="system") == 0
        client.chat.completions.create(model="gpt-4o", messages=[user(1), user(2)])
    assert harness.metric("ctxguard_evictions_total", kind="system") == 1


def test_evictions_are_counted_once_per_disappearance(harness, client):
    harness.start(mode="observe", policy=Policy(pinned=Pinned()))
    with ctxguard.conversation("c"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, BLOCK, user(1)])
        client.chat.completions.create(model="gpt-4o", messages=[user(1), user(2)])
        assert list(harness.spans()[-1].attributes["ctxguard.evicted"]) == ["system", "pinned"]
        client.chat.completions.create(model="gpt-4o", messages=[user(2), user(3)])
        assert list(harness.spans()[-1].attributes["ctxguard.evicted"]) == []
        assert harness.metric("ctxguard_evictions_total", kind="system") == 1
        assert harness.metric("ctxguard_evictions_total", kind="pinned") == 1
        assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="openai") == 2
        # It comes back, then vanishes again: a new eviction.
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, BLOCK, user(4)])
        client.chat.completions.create(model="gpt-4o", messages=[user(5)])
    assert harness.metric("ctxguard_evictions_total", kind="system") == 2
    with ctxguard.conversation("other"):  # a conversation that never had a system prompt evicts nothing
        client.chat.completions.create(model="gpt-4o", messages=[user(1)])
        client.chat.completions.create(model="gpt-4o", messages=[user(2)])
    assert harness.metric("ctxguard_evictions_total", kind="system") == 2


def test_conversation_id_callable_is_the_fallback(harness, client):
    harness.start(mode="observe", conversation_id=lambda kwargs: kwargs.get("user"))
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(1)], user="customer-7")
    client.chat.completions.create(model="gpt-4o", messages=[user(1)], user="customer-7")
    assert harness.spans()[-1].attributes["gen_ai.conversation.id"] == "customer-7"
    assert harness.metric("ctxguard_evictions_total", kind="system") == 1
    with ctxguard.conversation("scoped"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM], user="customer-7")
    assert harness.spans()[-1].attributes["gen_ai.conversation.id"] == "scoped"


def test_the_conversation_used_last_is_the_one_kept(harness, client, monkeypatch):
    monkeypatch.setenv("CTXGUARD_MAX_CONVERSATIONS", "2")
    harness.start(mode="observe")
    for name in ("a", "b", "a", "c", "a", "b"):  # "c" pushes out "b", used less recently than "a"
        with ctxguard.conversation(name):
            client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(1)])
    remembered = ["ctxguard.prev.hash" in s.attributes for s in harness.spans()]
    assert remembered == [False, False, True, False, True, False]


def test_a_conversation_id_must_be_a_non_empty_string():
    for bad in ("", None, 41):
        with pytest.raises(ValueError):
            ctxguard.conversation(bad)  # type: ignore[arg-type]


def test_async_with_restores_the_outer_scope():
    async def main() -> list[object]:
        seen = []
        async with ctxguard.conversation("outer"):
            async with ctxguard.conversation("inner"):
                seen.append(current_conversation())
            seen.append(current_conversation())
        seen.append(current_conversation())
        return seen

    assert asyncio.run(main()) == [("inner", None), ("outer", None), None]


def test_fact_locations_per_conversation_are_bounded():
    memory = ConversationMemory()
    locations = memory.fact_locations(("c", None))
    locations.update((f"f{i}@1", "digest") for i in range(4 * 1024))
    assert len(memory.fact_locations(("c", None))) == 4 * 1024  # at the bound: kept
    locations["one-more@1"] = "digest"
    assert memory.fact_locations(("c", None)) == {}  # over it: started afresh


@pytest.mark.parametrize("found", ["", 42, None])
def test_a_conversation_id_callback_returning_no_id_leaves_the_call_unscoped(harness, client, found):
    harness.start(mode="observe", conversation_id=lambda kwargs: found)
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(1)])
    a = harness.spans()[-1].attributes
    assert "gen_ai.conversation.id" not in a
    assert "system_stable: no conversation id (use ctxguard.conversation())" in a["ctxguard.checks.skipped"]


def test_calls_without_facts_count_no_fact_eviction(harness, client):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        for i in range(3):
            client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(i)])
    assert harness.metric("ctxguard_evictions_total", kind="fact") == 0


def test_memory_is_bounded_lru():
    memory = ConversationMemory(max_conversations=3)
    from ctxguard.payload import Payload

    def payload(digest: str) -> Payload:
        return Payload("openai", "chat", "m", [], [], digest, 0, 0, "estimate", 0, None, False, None, None)

    for i in range(5):
        memory.observe((f"c{i}", None), payload(f"d{i}"), pinned=False)
    assert len(memory) == 3
    assert memory.observe(("c0", None), payload("x"), pinned=False).prev_hash is None  # forgotten
    assert memory.observe(("c4", None), payload("y"), pinned=False).prev_hash == "d4"


@pytest.mark.parametrize("maxlen", [4, 6, 9])
def test_rotating_buffer_flip_point_is_the_first_headless_call(harness, client, maxlen):
    """The deque(maxlen=N) bug: detected on exactly the first call whose head is not system."""
    harness.start(mode="observe")
    history: deque[dict[str, str]] = deque([SYSTEM], maxlen=maxlen)
    first_headless = flagged = None
    with ctxguard.conversation(f"buffer-{maxlen}"):
        for turn in range(1, 2 * maxlen):
            history.append(user(turn))
            payload = list(history)
            client.chat.completions.create(model="gpt-4o", messages=payload)
            if first_headless is None and payload[0]["role"] != "system":
                first_headless = turn
            a = harness.spans()[-1].attributes
            if flagged is None and "system_at_head" in a["ctxguard.violations"]:
                flagged = turn
                assert list(a["ctxguard.evicted"]) == ["system"]
            history.append({"role": "assistant", "content": f"answer {turn}"})
    assert first_headless is not None
    assert flagged == first_headless
    assert harness.metric("ctxguard_evictions_total", kind="system") == 1


def test_policy_can_be_replaced_at_run_time(harness, llm, client):
    guard = harness.start(mode="enforce")
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(1)])
    guard.policy = Policy(pinned=Pinned())
    with pytest.raises(ctxguard.ContextViolation):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user(1)])
    assert len(llm.requests) == 1


DIGESTER = Digester(b"k")


def _payload(roles_texts: list[tuple[str, str]], digest: str) -> Payload:
    messages = [Message(role, text, DIGESTER.text(f"{role}\x1f{text}"), 1) for role, text in roles_texts]
    return Payload("openai", "chat", "m", messages, [m.digest for m in messages], digest, 0, 0, "estimate", 0,
                   None, False, None, None)


def test_the_memory_keeps_digests_not_texts():
    memory = ConversationMemory()
    with traced() as retained:
        for i in range(20):
            memory.observe((f"c{i}", None), _payload([("user", f"{i} " + "x" * 100_000)], f"d{i}"), pinned=False)
        kept = retained()
    assert kept < 20 * 2048  # 20 messages of 100 KB seen; what is left is their conversations' digests


def test_the_memory_fed_ten_times_its_budget_keeps_at_most_its_budget():
    budget = 32 * 1024
    memory = ConversationMemory(max_bytes=budget)
    with traced() as retained:
        for i in range(40):  # 40 conversations of 1,000 messages: 8 bytes each, 320 KB
            memory.observe((f"c{i}", None), _payload([("user", f"{i}.{n}") for n in range(1_000)], f"d{i}"),
                           pinned=False)
        kept = retained()
    assert memory.bytes <= budget and kept <= budget
    assert 0 < len(memory) < 40


def test_dropped_messages_are_counted_by_their_role_in_the_previous_payload():
    memory = ConversationMemory()
    scope = ("c", None)
    memory.observe(scope, _payload([("system", "s"), ("user", "a"), ("narrator", "b"), ("user", "c")], "d1"),
                   pinned=False)
    diff = memory.observe(scope, _payload([("system", "s"), ("user", "c"), ("user", "e")], "d2"), pinned=False)
    assert (diff.added, diff.dropped) == (1, {"user": 1, "other": 1})  # a role outside ROLES counts as other


def test_a_raised_max_conversations_is_honoured_whatever_the_byte_budget(harness, monkeypatch):
    """CTXGUARD_MAX_CONVERSATIONS asks for that many conversations: each of up to ~25 messages is
    given room, even past the memory's share of CTXGUARD_CACHE_BYTES."""
    monkeypatch.setenv("CTXGUARD_MAX_CONVERSATIONS", "2000")
    monkeypatch.setenv("CTXGUARD_CACHE_BYTES", str(1024 * 1024))  # its share holds ~240 of them
    guard = harness.start(mode="observe")
    memory = guard._inspector.memory
    for i in range(2000):
        memory.observe((f"c{i}", None), _payload([("user", f"question {i}")] * 20, f"d{i}"), pinned=False)
    assert len(memory) == 2000
    assert memory.observe(("c0", None), _payload([], "x"), pinned=False).prev_hash == "d0"


# Keys of zeros and ones, so that one is often found across two others (a match to look past).
key = st.builds(lambda bits, role: bytes(bits) + bytes((role,)),
                st.lists(st.integers(0, 1), min_size=7, max_size=7), st.integers(0, len(ROLES) - 1))
keys = st.lists(key, max_size=12)


@settings(max_examples=1000, deadline=None)
@given(prev=keys, now=keys, shared=keys, head=keys)
@example(prev=[bytes(8), bytes(5) + b"\x01\x00\x00"], now=[bytes(6) + b"\x01\x00", bytes(4) + b"\x01\x00\x00\x00"],
         shared=[], head=[])
def test_the_diff_is_the_multiset_difference(prev, now, shared, head):
    """Whatever the shape (trimmed at the front, grown, edited, repeats), added and dropped-by-role
    are those of the multisets: the shortcut for a shared head and a shared run never changes them."""
    for before, after in ((prev, now), (head + prev + shared, head + shared + now), (head + shared, head + now)):
        lost, gained = Counter(before) - Counter(after), Counter(after) - Counter(before)
        by_role: dict[str, int] = {}
        for key, count in lost.items():
            by_role[ROLES[key[-1]]] = by_role.get(ROLES[key[-1]], 0) + count
        assert _changes(b"".join(before), b"".join(after)) == (sum(gained.values()), by_role)
