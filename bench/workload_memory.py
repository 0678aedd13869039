"""What one fleet worker keeps, call after call: the fleet workload in one process, under tracemalloc.

``bench/fleet_load.py`` sees a worker's resident set grow; this finds what grows. It plays the
same workload through the guard's own hooks, as the openai wrapper calls them (``Guard.before``,
``Call.wire`` with the body the SDK would send, ``Call.end``), with no SDK and no HTTP: a call
costs ctxguard's work alone, so tens of thousands of calls take a minute or two.

The workload (``bench/fleet_load.py``'s): conversations of ``--turns`` turns, each keeping a
sliding history of 10-40 messages (drawn per conversation, full from the first turn), the system
prompt first; turn 0 records one fact, which every user message mentions; ``--active``
conversations in flight at once, their turns interleaved. A worker of a fleet of four serves a
quarter of the turns (``--share 0.25``): the turns it does not serve still move the history on,
and their facts are recorded by another worker. With ``--redis`` (a throwaway redis-server) the
ledger is a ``RedisLedger`` shared as in the fleet example: facts recorded elsewhere are published
by a second ledger (another origin, as another worker) and arrive in this one's ``DigestIndex``;
without it, the in-memory ledger records every fact here.

Printed every ``--every`` calls: the memory tracemalloc sees retained (after ``gc.collect()``),
the bytes each cache counts for itself, its entries, and its hit rate since the last line. With
``--growth``, the allocation sites that grew most between the last two points (what does not
level off).

    .venv/bin/python bench/workload_memory.py [--calls 20000] [--share 0.25] [--cache-bytes N] [--redis]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # after PYTHONPATH: a checkout given there is the one measured

from opentelemetry.trace import NoOpTracerProvider  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from workload import QUESTIONS, earlier_messages, next_question, user_message  # noqa: E402  # bench/workload.py

import ctxguard  # noqa: E402
from ctxguard import cache as cache_mod  # noqa: E402
from ctxguard import measure as measure_mod  # noqa: E402
from ctxguard.config import Config  # noqa: E402
from ctxguard.guard import Guard  # noqa: E402
from ctxguard.payload import Answer  # noqa: E402
from ctxguard.providers.openai import PROVIDER  # noqa: E402

MODEL = "gpt-4o-mini"
MiB = 1024 * 1024
SYSTEM = {"role": "system", "content": "You are the support assistant of Acme Shop. Be brief and exact."}


class Conversation:
    def __init__(self, n: int, rng: random.Random, history: tuple[int, int], turns: int) -> None:
        self.id = f"c{n}"
        self.order = f"A-{rng.randrange(10**5):05d}"
        self.keep = rng.randint(*history)
        self.turn, self.turns = 0, turns
        self.messages = earlier_messages(rng, self.id, self.order, self.keep)  # a conversation that has been going on


def workload(seed: int, turns: int, history: tuple[int, int], active: int) -> Iterator[tuple[Conversation, str]]:
    """(conversation, its next user message), ``active`` conversations interleaved, endlessly."""
    rng = random.Random(seed)
    made = 0
    live: list[Conversation] = []
    while True:
        while len(live) < active:
            live.append(Conversation(made, rng, history, turns))
            made += 1
        c = live[rng.randrange(len(live))]
        yield c, user_message(c.id, c.order, next_question(QUESTIONS, c.id, c.turn), c.turn)
        c.turn += 1
        if c.turn == c.turns:
            live.remove(c)


def call(g: Guard, c: Conversation, message: str, served: bool, other: Any) -> None:
    """One turn: the app appends the user message, keeps its last ``keep``, sends them after the
    system prompt (if this process serves the turn), and appends the answer."""
    c.messages.append({"role": "user", "content": message})
    del c.messages[: len(c.messages) - c.keep]
    answer = f"Thanks, I have looked into it: {message[:48]}. It ships from Pune on Thursday."
    with ctxguard.conversation(c.id):
        if c.turn == 0:
            if served or other is None:
                ctxguard.record_fact("order_id", c.order)
            else:
                other(c)
        if served:
            kwargs = {"model": MODEL, "messages": [SYSTEM, *c.messages]}
            made = g.before(PROVIDER, "chat.completions", kwargs)
            assert made is not None
            made.wire(json.dumps(kwargs).encode())
            made.end("complete", Answer(model=MODEL, text=answer, input_tokens=40 * len(kwargs["messages"]),
                                        output_tokens=24))
    c.messages.append({"role": "assistant", "content": answer})
    del c.messages[: len(c.messages) - c.keep]


class Hits:
    """Hit counts of every ``TwoGenerationCache`` and of the memos (messages reused / messages read)."""

    def __init__(self) -> None:
        self.gets: Counter[int] = Counter()
        self.hits: Counter[int] = Counter()
        self.puts: Counter[int] = Counter()
        self.reused = self.read = self.looked_up = 0
        get, put, common = cache_mod.TwoGenerationCache.get, cache_mod.TwoGenerationCache.put, measure_mod._common

        def counting_get(cache: Any, key: Any) -> Any:
            value = get(cache, key)
            self.gets[id(cache)] += 1
            self.hits[id(cache)] += value is not None
            return value

        def counting_put(cache: Any, key: Any, value: Any) -> None:
            self.puts[id(cache)] += 1
            put(cache, key, value)

        def counting_common(items: list[Any], kept: list[Any]) -> int:
            n = common(items, kept)
            self.reused += n
            return n

        def counting_resumed(items: list[Any], memo: Any, generation: int) -> Any:
            found = resumed(items, memo, generation)
            self.read += len(items)
            self.looked_up += len(items) - found[0]  # the rest are looked up in the message readings
            return found

        resumed = measure_mod._resumed
        cache_mod.TwoGenerationCache.get = counting_get  # type: ignore[method-assign]
        cache_mod.TwoGenerationCache.put = counting_put  # type: ignore[method-assign]
        measure_mod._common = counting_common
        measure_mod._resumed = counting_resumed


def caches(g: Guard) -> dict[str, Any]:
    """Every bounded store a worker keeps, by name (what docs/operations.md, "Memory", lists)."""
    from ctxguard.facts import SINKS
    from ctxguard.providers import _read

    inspector, basis = g._inspector, g.measurer._basis
    found: dict[str, Any] = {
        "message readings": basis.messages,
        "recurring texts": basis.texts,
        "memos": inspector.memos._memos,
        "conversation memory": inspector.memory._states,
        "wire digests": g._stages.wire_digests._kept,
        "fact texts": inspector._fact_texts,
        "pinned blocks": inspector._blocks,
        "wire needles": inspector.check_caches.needles,
        "wire wholes": inspector.check_caches.wholes,
        "tool runs": inspector.check_caches.runs,
        "tool readings and renderings": _read._RENDERINGS,
        "exported ids": g.ids._cache,
        "value index (own facts)": SINKS.index._values,
        "stage checkpoints": SINKS.stages._pending,
        "warning limits": g._recorder.warnings._buckets,
    }
    ledger = SINKS.ledger
    if hasattr(ledger, "_facts"):
        found["memory ledger"] = ledger._facts
    if SINKS.shared is not None:
        found["fleet index (others' facts)"] = SINKS.shared.index._values
        found["fleet index word digests"] = SINKS.shared.index._messages
    return found


def size(store: Any) -> tuple[int, int]:
    """(bytes it counts, entries)."""
    if isinstance(store, cache_mod.TwoGenerationCache):
        return store.bytes, len(store._new) + len(store._old)
    return getattr(store, "bytes", 0), len(store)


def retained(base: int) -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - base


def fleet_guard(stack: ExitStack, redis: bool) -> tuple[Guard, Any]:
    """A guard as a fleet worker has it, and what records a fact in "another worker" (None without
    ``redis``: the in-memory ledger, every fact recorded here). With ``redis``: a throwaway
    redis-server (stopped with ``stack``), a ``RedisLedger`` shared with a second one that publishes
    the facts other workers record, which arrive in this one's ``DigestIndex`` as digests."""
    if not redis:
        return Guard(Config.resolve(digest_key=b"fleet-bench"), registry=CollectorRegistry(),
                     tracer_provider=NoOpTracerProvider()), None
    from ctxguard.facts import FactEvent
    from tests.servers import redis_server

    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    server = stack.enter_context(redis_server(shutil.which("redis-server") or "redis-server", tmp))
    ledger = ctxguard.RedisLedger(server.url, read_timeout=1.0)
    elsewhere = ctxguard.RedisLedger(server.url)  # another worker: its facts arrive as digests
    stack.callback(elsewhere.close)
    stack.callback(ledger.close)

    def other(c: Conversation) -> None:
        elsewhere.append(FactEvent((c.id, None), "order_id", c.order))

    g = Guard(Config.resolve(digest_key=b"fleet-bench"), registry=CollectorRegistry(),
              tracer_provider=NoOpTracerProvider(), ledger=ledger)
    from ctxguard.facts import SINKS  # the guard's (instrumenting replaces it)

    assert SINKS.shared is not None
    elsewhere.share(g.measurer.digester)
    return g, other


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000, help="calls this process serves")
    parser.add_argument("--share", type=float, default=0.25, help="the fraction of turns this process serves")
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--history", default="10-40")
    parser.add_argument("--active", type=int, default=32, help="conversations in flight at once")
    parser.add_argument("--cache-bytes", type=int, default=0, help="CTXGUARD_CACHE_BYTES (default: its default)")
    parser.add_argument("--max-conversations", type=int, default=0, help="CTXGUARD_MAX_CONVERSATIONS")
    parser.add_argument("--every", type=int, default=2_000, help="a line every N calls")
    parser.add_argument("--redis", action="store_true", help="a RedisLedger shared with another 'worker'")
    parser.add_argument("--growth", action="store_true", help="the sites that grew most between the last two lines")
    parser.add_argument("--no-trace", action="store_true", help="no tracemalloc (hit rates and counted bytes only)")
    args = parser.parse_args()
    shortest, longest = (int(n) for n in args.history.split("-"))
    if args.cache_bytes:
        os.environ["CTXGUARD_CACHE_BYTES"] = str(args.cache_bytes)
    if args.max_conversations:
        os.environ["CTXGUARD_MAX_CONVERSATIONS"] = str(args.max_conversations)
    with ExitStack() as stack:
        g, other = fleet_guard(stack, args.redis)
        hits = Hits()
        stores = caches(g)
        rng = random.Random(1)
        turns = workload(0, args.turns, (shortest, longest), args.active)
        print(f"budget {g.config.cache_bytes / MiB:.0f} MiB, {g.config.max_conversations:,} conversations, "
              f"share {args.share}, {'RedisLedger' if args.redis else 'MemoryLedger'}")
        if not args.no_trace:
            gc.collect()
            tracemalloc.start(8 if args.growth else 1)
        base = tracemalloc.get_traced_memory()[0] if not args.no_trace else 0
        served = 0
        snapshots: list[Any] = []
        last_gets: Counter[int] = Counter()
        last_hits: Counter[int] = Counter()
        last_reused = last_read = 0
        started = time.perf_counter()
        header = False
        while served < args.calls:
            c, message = next(turns)
            here = rng.random() < args.share
            call(g, c, message, here, other)
            if not here:
                continue
            served += 1
            if served % args.every:
                continue
            now = retained(base) if not args.no_trace else 0
            row = {}
            stores = caches(g)
            readings = stores["message readings"]
            # Measurer.measure looks the young generation up inline: its hits are the look-ups less
            # the readings made (each one put).
            hits.gets[id(readings)], hits.hits[id(readings)] = hits.looked_up, hits.looked_up - hits.puts[id(readings)]
            for name, store in stores.items():
                counted, entries = size(store)
                gets = hits.gets[id(store)] - last_gets[id(store)]
                got = hits.hits[id(store)] - last_hits[id(store)]
                row[name] = (counted, entries, f"{100 * got / gets:.0f}%" if gets else "")
            memo = (hits.reused - last_reused) / max(1, hits.read - last_read)
            last_gets, last_hits = Counter(hits.gets), Counter(hits.hits)
            last_reused, last_read = hits.reused, hits.read
            if not header:
                print("| calls | retained MiB | counted MiB | " + " | ".join(row) + " | memo reuse |")
                print("|---:|---:|---:|" + "---:|" * (len(row) + 1))
                header = True
            counted_total = sum(r[0] for r in row.values())
            print(f"| {served:,} | {now / MiB:.1f} | {counted_total / MiB:.1f} | "
                  + " | ".join(f"{r[0] / MiB:.2f} MiB, {r[1]:,} {r[2]}" for r in row.values())
                  + f" | {100 * memo:.0f}% |", flush=True)
            if args.growth:
                snapshots = [*snapshots[-1:], tracemalloc.take_snapshot()]
        seconds = time.perf_counter() - started
        print(f"\n{served:,} calls in {seconds:.0f} s; tracemalloc peak {tracemalloc.get_traced_memory()[1] / MiB:.1f}"
              " MiB")
        if args.growth and len(snapshots) == 2:
            print("\nGrew most between the last two lines (tracemalloc, by traceback):")
            for stat in snapshots[1].compare_to(snapshots[0], "traceback")[:12]:
                print(f"\n{stat.size_diff / 1024:+,.0f} KiB, {stat.count_diff:+,} blocks")
                for line in stat.traceback.format(limit=8):
                    print("   ", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
