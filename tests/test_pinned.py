"""Rendering the pinned block and finding it in a payload (ctxguard/pinned.py)."""

from __future__ import annotations

import pytest

from ctxguard import render_pinned
from ctxguard.pinned import find_block
from ctxguard.tokens import EstimateCounter


def test_render_pinned_drops_oldest_whole_and_parses_back():
    facts = {f"fact_{i}": f"value number {i}" for i in range(30)}
    block = render_pinned(facts, max_tokens=60)
    assert EstimateCounter().count(block) <= 60 or len(block) < 400
    lines = block.split("\n")
    assert lines[-1] == "[end of Pinned facts]"
    kept = lines[1:-1]
    assert kept and kept[-1] == "fact_29: value number 29"  # newest kept, oldest dropped
    assert all(": value number " in line for line in kept)  # never cut mid-entry
    assert lines[0] == f"[Pinned facts: {len(kept)} entries]"
    assert render_pinned(facts, max_tokens=10_000, max_entries=2).count("\n") == 3
    assert "a b" in render_pinned({"k": "a\nb"}, max_tokens=100)  # one line per entry


def test_render_pinned_edges():
    assert render_pinned({"city": "Pune"}, max_tokens=100).startswith("[Pinned facts: 1 entry]\n")
    assert render_pinned({"city": "Pune"}, max_tokens=100, max_entries=0) == "[Pinned facts: 0 entries]\n" \
        "[end of Pinned facts]"
    assert render_pinned({}, max_tokens=1)  # the smallest cap still renders the empty block
    for bad in ({"max_tokens": 0}, {"max_tokens": 100, "max_entries": -1}, {"max_tokens": 100, "marker": ""}):
        with pytest.raises(ValueError):
            render_pinned({"city": "Pune"}, **bad)


def test_render_pinned_keeps_as_many_newest_facts_as_fit_exactly():
    class Chars:
        name = "chars"

        def count(self, text: str) -> int:
            return len(text)

    facts = {"a": "1", "b": "2", "c": "3"}
    two = render_pinned({"b": "2", "c": "3"}, max_tokens=10_000, counter=Chars())
    assert render_pinned(facts, max_tokens=len(two), counter=Chars()) == two  # exactly at the cap: kept
    one = render_pinned({"c": "3"}, max_tokens=10_000, counter=Chars())
    assert render_pinned(facts, max_tokens=len(two) - 1, counter=Chars()) == one


def test_find_block_intact_and_cut():
    from ctxguard.payload import Message

    block = render_pinned({"a": "1", "b": "2"}, max_tokens=100)
    ok = find_block([Message("system", "intro\n" + block + "\nrest", "d", 1)], "Pinned facts")
    assert ok is not None and ok.rendered and ok.intact and ok.entries == 2
    cut = find_block([Message("system", block[:-5], "d", 1)], "Pinned facts")
    assert cut is not None and cut.intact is False
    assert find_block([Message("user", "nothing here", "d", 1)], "Pinned facts") is None
