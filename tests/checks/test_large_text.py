"""A message too large to normalise whole (over ``LARGE_TEXT`` characters) is searched a chunk
at a time: the same verdicts, in memory bounded by the chunk (issue 21, point 4)."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

import ctxguard
import ctxguard.facts.matching as matching
from ctxguard.digest import Digester
from ctxguard.facts.matching import LARGE_TEXT, Chunked, normalise

SYSTEM = {"role": "system", "content": "You are terse."}
PIECES = ["pune", "Pune", "PUNE", "ACC-7731", " ", "\n", "\t  ", "\u00a0", "ﬁ", "Zürich", "ship", "to", "x", "ß",
          "Straße", "\uff21\uff23\uff23", "-", "7731", "06", ".", "2026-12-03", "(415)", "FR76", ",", "\uff10\uff16"]
VALUES = ["pune", "acc-7731", "ship to", "to pune", "zürich", "fi", "strasse", "ss", "x x", "acc", "ship to pune"]
NUMBERS = ["77317731", "773177317731", "0677317731", "7731773106", "415773177", "fr7677317731773177317731",
           "06067731"]


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(PIECES), max_size=80), chunk=st.integers(1, 24))
def test_a_chunked_search_finds_what_a_search_of_the_normalised_text_finds(parts, chunk):
    saved = matching._CHUNK, matching._OVERLAP
    # Chunks of a few characters: every boundary case. The overlap holds the longest number (48
    # characters) and the edges a chunk does not read numbers from (16 on each side).
    matching._CHUNK, matching._OVERLAP = chunk, 96
    try:
        text = "".join(parts)
        whole = normalise(text)
        one_by_one = {v: v in Chunked(text) for v in VALUES}
        numbers_one_by_one = {n: Chunked(text).has_number(n) for n in NUMBERS}
        together = Chunked(text)
        together.search(VALUES, NUMBERS)
    finally:
        matching._CHUNK, matching._OVERLAP = saved
    assert one_by_one == {v: v in whole for v in VALUES} == {v: v in together for v in VALUES}
    in_whole = matching.numbers(text)
    assert numbers_one_by_one == {n: n in in_whole for n in NUMBERS} == {n: together.has_number(n) for n in NUMBERS}


def test_a_large_text_digests_as_it_would_whole():
    digester = Digester(b"k")
    text = "x" * (3 * LARGE_TEXT + 7) + "é\ud800"
    assert digester.text(text) == digester.bytes(text.encode("utf-8", "surrogatepass"))
    assert digester.texts(("user", "\x1f", text)) == digester.text("user\x1f" + text)


def large(tail: str) -> str:
    return ("Row of a large document, nothing in it.\n" * (2 * LARGE_TEXT // 40)) + tail


def test_facts_in_a_large_message_are_judged_without_normalising_it_whole(harness, client, monkeypatch):
    harness.start(mode="observe")
    seen: list[int] = []
    real = matching.normalise

    def measured(text: str) -> str:
        seen.append(len(text))
        return real(text)

    monkeypatch.setattr(matching, "normalise", measured)
    with ctxguard.conversation("large-1"):
        ctxguard.record_fact("order", "A-1041-large")
        ctxguard.record_fact("city", "Pune")
        client.chat.completions.create(model="gpt-4.1", messages=[  # a window of a million tokens
            SYSTEM, {"role": "user", "content": large("Deliver order A-1041-LARGE to\n  pune.")}])
    span = harness.spans()[-1]
    assert list(span.attributes["ctxguard.violations"]) == []
    assert sorted(span.attributes["ctxguard.facts.present"]) == ["city@1", "order@1"]
    assert max(seen, default=0) <= LARGE_TEXT  # the 2 MB text never normalised in one piece


def test_a_fact_missing_from_a_large_message_fails_and_a_leak_search_it_skipped_says_so(harness, client):
    harness.start(mode="observe")
    ctxguard.record_fact("order", "B-2041-other", conversation="someone-else")
    with ctxguard.conversation("large-2"):
        ctxguard.record_fact("order", "A-1041-large")
        client.chat.completions.create(model="gpt-4.1", messages=[  # a window of a million tokens
            SYSTEM, {"role": "user", "content": large("Nothing about orders here.")}])
    span = harness.spans()[-1]
    assert list(span.attributes["ctxguard.violations"]) == ["fact_present"]
    skipped = list(span.attributes["ctxguard.checks.skipped"])
    assert any(s.startswith("fact_scoped: 1 message(s) over") for s in skipped), skipped


def test_a_large_message_costs_ctxguard_a_fraction_of_its_size_in_memory(harness, client, monkeypatch):
    """Peak memory of ctxguard's own work on a call carrying 16 MB (before sending, and on the
    body sent): a few chunks (a slice, its lower-cased copy, its encoding), not a size that
    grows with the text. It used to be several copies of it: normalised, case-folded, split
    into words, encoded for the digest."""
    from ctxguard.call import Call
    from ctxguard.guard import Guard

    peaks: list[int] = []

    def measured(method):  # type: ignore[no-untyped-def]
        def run(*args, **kwargs):  # type: ignore[no-untyped-def]
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            try:
                return method(*args, **kwargs)
            finally:
                peaks.append(tracemalloc.get_traced_memory()[1] - before)
        return run

    monkeypatch.setattr(Guard, "before", measured(Guard.before))
    monkeypatch.setattr(Call, "wire", measured(Call.wire))
    content = large("Deliver order A-1041-large.") * 8
    harness.start(mode="observe")
    ctxguard.record_fact("order", "B-2041-other", conversation="someone-else")  # leaks are looked for
    with ctxguard.conversation("large-3"):
        ctxguard.record_fact("order", "A-1041-large")
        tracemalloc.start()
        try:
            client.chat.completions.create(model="gpt-4.1", messages=[SYSTEM, {"role": "user", "content": content}])
        finally:
            tracemalloc.stop()
    assert len(peaks) == 2  # before sending, and the body sent
    assert max(peaks) < 4 * LARGE_TEXT < len(content) // 2, (peaks, len(content))
