"""A worker's memory levels off (issue 43): once ctxguard's caches hold their budget
(``CTXGUARD_CACHE_BYTES``), a further 10,000 calls of the fleet workload grow the memory
tracemalloc sees retained by less than 1 MiB, however many conversations come and go.

In process, through the guard's own hooks as the openai wrapper calls them (``Guard.before``,
``Call.wire`` with the body the SDK would send, ``Call.end`` with its answer), not through the
openai SDK and the fake over HTTP: 15,000 calls under tracemalloc would take minutes that way,
and the SDK keeps nothing per call, so what is retained is ctxguard's either way.
``bench/fleet_load.py`` measures the same plateau on the real fleet (gunicorn, the SDK, Redis).

The workload is bench/fleet_load.py's in miniature: conversations whose history slides (10 to 40
messages kept, drawn per conversation), one fact each recorded on the first turn and named in
every user message, eight in flight at once; short conversations (4 turns) so that 2,500 new
ones arrive while it is measured: a memory kept per conversation outside the budget shows. The
fact ledger and the value index are bounded by counts, not bytes (docs/facts.md): they are
given counts this workload fills too.
"""

from __future__ import annotations

import json
import random

import ctxguard
from ctxguard import MemoryLedger
from ctxguard import facts as facts_mod
from ctxguard.payload import Answer
from ctxguard.providers.openai import PROVIDER as OPENAI
from ctxguard.tokens import EstimateCounter
from tests.conftest import traced

BUDGET = 1024 * 1024
MODEL = "gpt-4o-mini"
SYSTEM = {"role": "system", "content": "You are the support assistant of Acme Shop. Be brief and exact."}


class Conversation:
    def __init__(self, n: int, rng: random.Random) -> None:
        self.id = f"c{n}"
        self.order = f"A-{rng.randrange(10**6):06d}"
        self.keep = rng.randint(10, 40)
        self.turn = 0
        self.messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"earlier {i} on {self.order}"}
                         for i in range(self.keep)]


def test_after_the_budget_is_reached_ten_thousand_more_calls_keep_under_a_mebibyte(harness, monkeypatch):
    monkeypatch.setenv("CTXGUARD_CACHE_BYTES", str(BUDGET))
    guard = harness.start(mode="observe", ledger=MemoryLedger(max_conversations=64))
    assert guard.config.cache_bytes == BUDGET
    facts_mod.SINKS.index.max_entries = 64
    guard.measurer.counter = EstimateCounter()  # what it keeps is the same; tiktoken is only slower
    rng = random.Random(43)
    made = 0
    live: list[Conversation] = []

    def call() -> None:
        nonlocal made
        while len(live) < 8:
            live.append(Conversation(made, rng))
            made += 1
        c = live[rng.randrange(len(live))]
        message = f"about order {c.order}: where is it now? (turn {c.turn} of {c.id})"
        c.messages = [*c.messages, {"role": "user", "content": message}][-c.keep:]
        kwargs = {"model": MODEL, "messages": [SYSTEM, *c.messages]}
        with ctxguard.conversation(c.id):
            if c.turn == 0:
                ctxguard.record_fact("order_id", c.order)
            made_call = guard.before(OPENAI, "chat.completions", kwargs)
            assert made_call is not None
            made_call.wire(json.dumps(kwargs).encode())
            answer = f"Order {c.order} ships on Thursday."
            made_call.end("complete", Answer(model=MODEL, text=answer, input_tokens=made_call.verdict.payload.tokens,
                                             output_tokens=8))
        c.messages = [*c.messages, {"role": "assistant", "content": answer}][-c.keep:]
        c.turn += 1
        if c.turn == 4:
            live.remove(c)

    with traced() as retained:
        for n in range(5_000):  # the budget is reached well before (the memory keeps ~250 conversations)
            call()
            if n % 500 == 0:
                harness.exporter.clear()  # the test's span exporter keeps every span
        harness.exporter.clear()
        reached = retained()
        for n in range(10_000):
            call()
            if n % 500 == 0:
                harness.exporter.clear()
        harness.exporter.clear()
        grown = retained() - reached
    assert reached > BUDGET // 2  # the caches did fill: what is measured is past that
    assert grown < 1024 * 1024, f"{grown / 1024:.0f} KiB more after 10,000 calls"
    violations = sum(s.value for m in harness.registry.collect() if m.name == "ctxguard_violations"
                     for s in m.samples if s.name == "ctxguard_violations_total")
    assert violations == 0  # every call carried its fact: nothing but the caches to keep
