"""What ctxguard keeps in memory stays within its budget, whatever the traffic.

    .venv/bin/python bench/memory_bound.py [--conversations 1000000] [--message-bytes 20000]
                                           [--small 100000] [--small-messages 4,40]

Every allocation made after the guard is built is traced (``tracemalloc``), and "retained"
is what is still allocated after ``gc.collect()``: what ctxguard keeps, since the driver
drops each request once its call has ended. Calls go through the guard's own hooks, as the
SDK wrappers call them (``Guard.before``, ``Call.wire`` with the body the openai SDK would
send, ``Call.answer``), with the openai adapter, every check on (a pinned block, a fact
recorded, so that the fact caches fill too), and the estimator as token counter (tiktoken
would only make a million calls slower, and keeps nothing per call).

1. Large messages: ``--conversations`` conversations, each of two calls: a system
   instruction with a pinned block and a user message of ``--message-bytes`` characters,
   then the same with an answer and a second such message added. Every message is new
   (the messages of a conversation differ from every other's), so every cache fills and
   keeps being refilled. Retained is printed ten times along the way beside the budget
   (``CTXGUARD_CACHE_BYTES``, default 64 MiB): once the caches are full it stays flat,
   under the budget. Exit status 1 if it ever goes over. ``--no-facts`` records no fact:
   the two fact caches stay empty, and a call costs a third.
2. Small payloads: ``--small`` conversations of one call each, of ``--small-messages``
   short messages (the system instruction shared, the rest new), with every conversation
   remembered (the memory's caps on conversations and bytes lifted). What the memory keeps
   per conversation is measured with the caches emptied (fresh ones put in the guard, at
   half of the conversations and at the end): the retained bytes per conversation between
   those two points, against 2 KB + 16 B a message of the last payload, and against what
   the memory counts for them (``ConversationMemory.bytes``: the bound it enforces is only
   as good as that count).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import random
import sys
import time
import tracemalloc
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard.cache import TwoGenerationCache
from ctxguard.config import Config
from ctxguard.facts.evaluate import fact_text_bytes
from ctxguard.guard import Guard
from ctxguard.measure import Measurer
from ctxguard.memo import Memos
from ctxguard.payload import Answer
from ctxguard.providers.openai import PROVIDER
from ctxguard.tokens import EstimateCounter
from ctxguard.wiredigest import WireDigests

MODEL = "gpt-4o"
MiB = 1024 * 1024
WORDS = "order parcel courier refund warehouse invoice customer address delivery tracking status".split()  # noqa: SIM905


def guard(facts: bool = True) -> Guard:
    built = Guard(Config.resolve(digest_key=b"bench"), registry=CollectorRegistry(), tracer_provider=TracerProvider(),
                  policy=ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800)))
    built.measurer.counter = EstimateCounter()
    if facts:
        with ctxguard.conversation("facts"):
            ctxguard.record_fact("shipping_city", "Pune")  # fact checks on for every call: the fact caches fill
    return built


def call(g: Guard, scope: str, messages: list[dict[str, str]]) -> None:
    kwargs = {"model": MODEL, "messages": messages}
    with ctxguard.conversation(scope):
        made = g.before(PROVIDER, "chat.completions", kwargs)
        assert made is not None
        made.wire(json.dumps(kwargs).encode())
        made.end("complete", Answer(model=MODEL, text="Your parcel ships to Pune.", input_tokens=100))


def retained(base: int) -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - base


def large(conversations: int, size: int, facts: bool) -> bool:
    g = guard(facts)
    budget = g.config.cache_bytes
    text = " ".join(random.Random(0).choice(WORDS) for _ in range(size // 6))[:size]
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
    system = {"role": "system", "content": f"You are the order assistant.\n{pinned}"}
    print(f"large: {conversations:,} conversations of two calls, messages of {size:,} characters, "
          f"{'a fact recorded' if facts else 'no fact recorded'}; budget {budget / MiB:.0f} MiB (CTXGUARD_CACHE_BYTES)")
    print("| conversations | retained MiB | peak MiB | calls/s |\n|---:|---:|---:|---:|")
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started, worst = time.perf_counter(), 0
    step = max(1, conversations // 10)
    for n in range(1, conversations + 1):
        first = {"role": "user", "content": f"{n} {text}"}
        call(g, f"c{n}", [system, first])
        call(g, f"c{n}", [system, first, {"role": "assistant", "content": "ok"},
                          {"role": "user", "content": f"{n} again {text}"}])
        if n % step == 0:
            now = retained(base)
            worst = max(worst, now)
            rate = 2 * n / (time.perf_counter() - started)
            peak = tracemalloc.get_traced_memory()[1] - base
            print(f"| {n:,} | {now / MiB:.1f} | {peak / MiB:.1f} | {rate:,.0f} |", flush=True)
    tracemalloc.stop()
    within = worst <= budget
    print(f"\nretained at most {worst / MiB:.1f} MiB: {'within' if within else 'OVER'} the budget of "
          f"{budget / MiB:.0f} MiB\n")
    return within


def drop_caches(g: Guard) -> None:
    """Fresh, empty caches and memos in ``g`` (the same budgets): what is left is the memory of the
    conversations."""
    inspector, m = g._inspector, g.measurer
    inspector.measurer = Measurer(m.digester, m.counter, m.calibration, max_bytes=g.config.cache_bytes // 4)
    inspector.memos = Memos(max_bytes=inspector.memos.max_bytes)
    inspector._fact_texts = TwoGenerationCache(20_000, inspector._fact_texts.max_bytes, fact_text_bytes)
    wire = g._stages.wire_digests
    g._stages = dataclasses.replace(g._stages, wire_digests=WireDigests(m.digester, max_bytes=wire.max_bytes))


def small(conversations: int, messages: int) -> bool:
    g = guard()
    g._inspector.memory.max_conversations = g._inspector.memory.max_bytes = 1 << 62  # remember every conversation
    system = {"role": "system", "content": "You are the order assistant. Be brief."}
    half = conversations // 2
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    at_half = counted_at_half = 0
    for n in range(1, conversations + 1):
        history: list[dict[str, Any]] = [system]
        history.extend({"role": ("user", "assistant")[i % 2], "content": f"turn {i} of {n}: where is my parcel?"}
                       for i in range(messages - 1))
        call(g, f"c{n}", history)
        if n == half:
            drop_caches(g)
            at_half, counted_at_half = retained(base), g._inspector.memory.bytes
    total = retained(base)
    drop_caches(g)
    left = retained(base)
    tracemalloc.stop()
    per = (left - at_half) / (conversations - half)
    counted = (g._inspector.memory.bytes - counted_at_half) / (conversations - half)
    allowed = 2048 + 16 * messages
    ok = per <= allowed and per <= counted
    print(f"| {conversations:,} | {messages} | {total / MiB:.1f} | {per:,.0f} | {counted:,.0f} | {allowed:,} |"
          f" {'yes' if ok else 'NO'} |", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=1_000_000, help="large: conversations (default 1M)")
    parser.add_argument("--message-bytes", type=int, default=20_000, help="large: characters a message")
    parser.add_argument("--no-facts", action="store_true",
                        help="large: record no fact (the fact caches stay empty; a call costs a third)")
    parser.add_argument("--small", type=int, default=100_000, help="small: conversations (default 100k)")
    parser.add_argument("--small-messages", default="4,40", help="small: messages a payload (default 4,40)")
    args = parser.parse_args()
    ok = True
    if args.conversations:
        ok = large(args.conversations, args.message_bytes, not args.no_facts)
    if args.small:
        print("small: every conversation remembered; bytes retained per conversation (tracemalloc), counted by "
              "the memory, and allowed (2 KB + 16 B a message)\n")
        print("| conversations | messages | retained MiB | retained B/conversation | counted B/conversation "
              "| allowed B | within |\n|---:|---:|---:|---:|---:|---:|---|")
        for messages in (int(m) for m in args.small_messages.split(",")):
            ok = small(args.small, messages) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
