"""``ctxguard.wire.hash`` resumed from the previous body: always the digest of the whole body."""

from __future__ import annotations

import openai
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxguard
from ctxguard.digest import Digester
from ctxguard.testing import FakeLLM
from ctxguard.wiredigest import MIN_BYTES, WireDigests, common_prefix
from tests.conftest import KEY

DIGESTER = Digester(KEY)

edits = st.one_of(
    st.tuples(st.just("append"), st.binary(min_size=0, max_size=3000)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=500)),
    st.tuples(st.just("replace"), st.integers(0, 10**6), st.binary(min_size=1, max_size=50)),
    st.tuples(st.just("cut"), st.integers(0, 10**6)),
    st.tuples(st.just("same"),),
)


def apply(body: bytes, edit: tuple) -> bytes:
    kind = edit[0]
    if kind == "append":
        return body + edit[1]
    if kind == "insert":
        at = edit[1] % (len(body) + 1)
        return body[:at] + edit[2] + body[at:]
    if kind == "replace":
        at = edit[1] % (len(body) + 1)
        return body[:at] + edit[2] + body[at + len(edit[2]):]
    if kind == "cut":
        return body[: edit[1] % (len(body) + 1)]
    return body


@settings(max_examples=60, deadline=None)
@given(start=st.binary(min_size=1, max_size=64).map(lambda seed: (seed * MIN_BYTES)[: MIN_BYTES + 7 * len(seed)]),
       steps=st.lists(st.tuples(st.sampled_from(["a", "b", None]), edits), max_size=12),
       budget=st.sampled_from([3 * MIN_BYTES, 64 * MIN_BYTES]))
def test_every_digest_equals_the_digest_of_the_whole_body(start: bytes, steps: list, budget: int):
    digests = WireDigests(DIGESTER, max_bytes=budget)
    bodies = {"a": start, "b": start[::-1], None: start}
    for scope, edit in steps:
        bodies[scope] = apply(bodies[scope], edit)
        assert digests.digest(scope, bodies[scope]) == DIGESTER.bytes(bodies[scope])
        assert digests._kept.bytes <= budget and digests._kept.bytes == sum(len(k.body) for k in digests._kept.values())


@given(a=st.binary(max_size=200), b=st.binary(max_size=200))
def test_common_prefix(a: bytes, b: bytes):
    naive = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    assert common_prefix(a, b, 0) == naive
    assert common_prefix(a, b, naive // 2) == naive


def test_a_growing_conversation_resumes_instead_of_rehashing(harness, llm: FakeLLM, client: openai.OpenAI):
    harness.start(mode="observe")
    history = [{"role": "system", "content": "You are the order assistant. " * 200}]
    with ctxguard.conversation("grow"):
        for turn in range(12):
            history.append({"role": "user", "content": f"question {turn}: " + "where is it? " * 40})
            client.chat.completions.create(model="gpt-4o", messages=history, max_tokens=50)
            history.append({"role": "assistant", "content": f"answer {turn}"})
    spans = [s.attributes["ctxguard.wire.hash"] for s in harness.spans()]
    assert spans == [DIGESTER.bytes(r.body) for r in llm.requests]
    kept = harness.guard._stages.wire_digests._kept[("grow", None)]
    body, resumed_at = kept.body, kept.offset
    assert body == llm.requests[-1].body
    assert resumed_at > len(body) * 0.9  # the last body shared all but its new message with the one before


def test_kept_bodies_stay_within_their_budget_least_recent_first():
    digests = WireDigests(DIGESTER, max_bytes=10_000)
    for scope in ("a", "b", "c"):
        digests.digest(scope, bytes([ord(scope)]) * 4_500)
    assert list(digests._kept) == ["b", "c"] and digests._kept.bytes == 9_000
    digests.digest("b", b"b" * 4_600)  # b is now the most recent
    digests.digest("d", b"d" * 4_500)
    assert list(digests._kept) == ["b", "d"]
    assert digests.digest("x", b"x" * 20_000) == DIGESTER.bytes(b"x" * 20_000)  # over the budget: not kept
    assert "x" not in digests._kept
