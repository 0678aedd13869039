"""Every cache is bounded in bytes (docs/operations.md, "Memory"): fed ten times its budget, it
keeps at most its budget, as it counts it and as tracemalloc measures it."""

from __future__ import annotations

import json

import pytest

import ctxguard
from ctxguard import Pinned, Policy, render_pinned
from ctxguard import pinned as pinned_mod
from ctxguard.cache import TwoGenerationCache, text_bytes
from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.payload import Answer, Message, RequestView
from ctxguard.pinned import find_block
from ctxguard.providers import _read
from ctxguard.providers.openai import PROVIDER as OPENAI
from ctxguard.telemetry.ids import ExportedIds
from ctxguard.tokens import Calibration, EstimateCounter
from tests.conftest import KEY, traced

BUDGET = 1024 * 1024
SIZE = 100_000  # characters a text: ten times the budget is a hundred of them
IDS = ExportedIds(Digester(KEY))


def text(i: int) -> str:
    return f"{i} " + "x" * SIZE


def test_a_cache_fed_ten_times_its_budget_keeps_at_most_its_budget():
    cache: TwoGenerationCache[str, str] = TwoGenerationCache(50_000, BUDGET, text_bytes)
    with traced() as retained:
        for i in range(10 * BUDGET // SIZE):
            cache.put(f"k{i}", text(i))
        kept = retained()
    assert cache.bytes <= BUDGET
    assert kept <= BUDGET
    assert cache.get(f"k{10 * BUDGET // SIZE - 1}") is not None  # the newest is kept


def test_an_entry_over_half_the_budget_is_not_cached():
    cache: TwoGenerationCache[str, str] = TwoGenerationCache(50_000, 4 * SIZE, text_bytes)
    cache.put("big", "x" * 2 * SIZE)
    cache.put("small", "x" * SIZE)
    assert cache.get("big") is None and cache.get("small") is not None


def test_a_hit_in_the_old_generation_moves_the_entry_to_the_young_one():
    cache: TwoGenerationCache[str, str] = TwoGenerationCache(2, BUDGET, text_bytes)
    cache.put("a", "1")
    cache.put("b", "2")
    cache.put("c", "3")  # young full: a and b are now the old generation
    assert cache.get("a") == "1"  # moved back into the young one
    cache.put("d", "4")  # young full again (c, a): b is dropped with the old generation
    assert cache.get("a") == "1" and cache.get("b") is None


def test_the_measurer_fed_ten_times_its_budget_keeps_at_most_its_budget():
    measurer = Measurer(Digester(KEY), EstimateCounter(), Calibration(), max_bytes=BUDGET)
    with traced() as retained:
        for i in range(10 * BUDGET // SIZE):
            measurer.measure(RequestView("openai", "chat", "gpt-4o", [("user", text(i), (), "message", 0)]))
            measurer.tokens(text(-i))  # a tool schema
        kept = retained()
    assert kept <= BUDGET


def test_the_guard_fed_ten_times_its_budget_keeps_at_most_its_budget(harness, monkeypatch):
    """Every cache and memory of a guard together, every check on (facts too, whose caches fill):
    250 conversations of two calls, each call adding a message of 20 KB, keep at most
    ``CTXGUARD_CACHE_BYTES``."""
    monkeypatch.setenv("CTXGUARD_CACHE_BYTES", str(BUDGET))
    guard = harness.start(mode="observe", policy=Policy(pinned=Pinned(max_tokens=200)))
    assert guard.config.cache_bytes == BUDGET
    guard.measurer.counter = EstimateCounter()  # what it keeps is the same; tiktoken is only slower
    with ctxguard.conversation("facts"):
        ctxguard.record_fact("shipping_city", "Pune")
    pinned = render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
    system = {"role": "system", "content": f"You are the order assistant.\n{pinned}"}

    def call(scope: str, messages: list[dict[str, str]]) -> None:
        kwargs = {"model": "gpt-4o", "messages": messages}
        with ctxguard.conversation(scope):
            made = guard.before(OPENAI, "chat.completions", kwargs)
            assert made is not None
            made.wire(json.dumps(kwargs).encode())
            # The provider's report, as near ctxguard's count as an exact tokenizer's would be.
            reported = made.verdict.payload.tokens
            made.end("complete", Answer(model="gpt-4o", text="It ships to Pune.", input_tokens=reported))

    def words(n: int) -> str:  # 20 KB of words of its own: its word set is large too
        return " ".join(f"w{n}x{i}".ljust(40, "y") for i in range(500))

    call("warm-up", [system, {"role": "user", "content": "hello"}])  # tables built once, not per call
    with traced() as retained:
        for n in range(250):
            first = {"role": "user", "content": words(n)}
            call(f"c{n}", [system, first])
            second = {"role": "user", "content": words(-n)}
            call(f"c{n}", [system, first, {"role": "assistant", "content": "ok"}, second])
        harness.exporter.clear()  # the test's span exporter keeps every span
        kept = retained()
    assert kept <= BUDGET


BLOCKS = pinned_mod.block_cache()


def _pinned(i: int) -> None:
    find_block([Message("system", f"{text(i)}\n\n[Pinned facts]\n- a: b", f"d{i}", 1)], "Pinned facts", BLOCKS)


def _rendered_and_read(i: int) -> None:
    if i % 2:
        _read.rendering(("tool", text(i)), lambda: text(-i))
    else:
        _read.tool_texts([{"name": text(i)}], lambda tools: [text(-i)])


@pytest.mark.parametrize(("cache", "feed"), [
    (BLOCKS, _pinned),
    (_read._RENDERINGS, _rendered_and_read),
    (None, lambda i: IDS.id(text(i))),
], ids=["pinned blocks", "tools rendered and read", "exported ids"])
def test_the_fixed_caches_fed_ten_times_their_budget_keep_at_most_it(cache, feed):
    """Caches outside ``CTXGUARD_CACHE_BYTES`` (docs/operations.md, "Memory"): 1 to 4 MiB each."""
    cache = cache if cache is not None else IDS._cache
    budget = cache.max_bytes
    with traced() as retained:
        for i in range(10 * budget // SIZE):
            feed(i)
        kept = retained()
    assert cache.bytes <= budget and kept <= budget



def test_the_wire_needle_caches_fed_ten_times_their_budget_keep_at_most_it():
    """``wire_intact``'s needles (instructions, blocks, fact lines as JSON may encode them) and
    wholes (fact-carrying messages): 4 MiB each unless made with a share of ``CTXGUARD_CACHE_BYTES``
    (an inspector's), however many texts just under the size past which they keep nothing."""
    from ctxguard.checks import wire

    needles, wholes = wire.needle_cache(), wire.whole_cache()
    texts = [f"{i} " + "é" * (wire._WHOLE_CACHED_CHARS - 10) for i in range(10 * 4 * BUDGET // 30_000)]
    with traced() as retained:
        for t in texts:
            assert wire._carried(t, t.encode(), needles)
            wire._whole(f"d{t[:8]}", t, wholes)
        kept = retained()
    assert needles.bytes <= 4 * BUDGET and wholes.bytes <= 4 * BUDGET
    assert kept <= 8 * BUDGET + BUDGET // 4, kept


def test_the_tool_runs_fed_ten_times_their_budget_keep_at_most_it():
    """``tool_pairs_intact``'s runs (where each payload with tool refs left off): 1 MiB, however
    many orphans they hold and however long their ids."""
    from ctxguard.checks import Context, check_caches, tools
    from ctxguard.payload import Message, Payload
    from ctxguard.policy import Policy

    ctx = Context(Policy(), None, 0, "n/a", None, False, "n/a", check_caches())
    budget = ctx.caches.runs.max_bytes
    with traced() as retained:
        for i in range(10 * budget // SIZE):  # 50 orphan calls of 2,000-character ids a payload
            messages = [Message("assistant", "", f"d{i}.{n}", 1, tool_refs=(f"id:tool_call={i}.{n}.{'x' * 2000}",))
                        for n in range(50)]
            payload = Payload("openai", "chat", None, messages, [], f"p{i}", 0, 0, "estimate", 0, None, False,
                              None, None, first_tool=0, tool_results="later")
            assert len(tools.tool_pairs_intact(payload, ctx)) == 50
            del messages, payload
        kept = retained()
    assert ctx.caches.runs.bytes <= budget and kept <= budget, kept


def test_instrument_gives_the_wire_caches_their_share_of_the_budget(harness, monkeypatch):
    """The wire caches are within ``CTXGUARD_CACHE_BYTES`` (1/32 each), not 4 MiB beside it."""
    from ctxguard.checks import wire

    monkeypatch.setenv("CTXGUARD_CACHE_BYTES", str(BUDGET))
    guard = harness.start(mode="observe")
    caches = guard._inspector.check_caches
    for i in range(200):  # 200 fact-carrying messages of 16 KB: 6 MiB as JSON escapes them
        t = f"{i} " + "é" * (wire._WHOLE_CACHED_CHARS - 10)
        wire._whole(f"d{i}", t, caches.wholes)
        wire._carried(t, t.encode(), caches.needles)
    assert caches.wholes.bytes <= BUDGET // 32
    assert caches.needles.bytes <= BUDGET // 32
