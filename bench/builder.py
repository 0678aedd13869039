"""Time of ``ContextBuilder.build`` for 20, 200 and 2000-message histories, warm caches.

    python bench/builder.py [--quick] [--json PATH]

Method: one history per size (user and assistant messages of ~370 distinct
characters, a complete tool exchange every tenth message), five active facts, a
summary, the keyword-overlap middle on (no ``retrieve`` callable), ``tail_tokens=3000``,
``retrieved_tokens=1500``, inside ``ctxguard.conversation`` with ``instrument()``
active (so the guard's token cache is the one used, as in an app). Each size is built
a few times first (the token and word caches warm up, as they do when a conversation
grows by one turn per call), then timed per call with ``perf_counter_ns``, gc off.
Prints the median, p95 and mean per build.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from typing import Any

import prometheus_client

import ctxguard

SIZES = (20, 200, 400, 2000)  # 400 messages = 200 user/assistant turns
ROUNDS = {20: 2000, 200: 1000, 400: 500, 2000: 100}


def history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while len(out) < n:
        i = len(out)
        if i % 10 == 8:
            call = f"call_{i}"
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "track", "arguments": f'{{"order": {i}}}'}}]})
            out.append({"role": "tool", "tool_call_id": call, "content": f"parcel {i} is in transit via hub {i % 7}"})
            continue
        role = "user" if i % 2 == 0 else "assistant"
        words = " ".join(f"w{i}x{k}" for k in range(40))
        out.append({"role": role, "content": f"message {i} about order A-{1000 + i}: {words}"})
    return out[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="divide rounds by 10")
    parser.add_argument("--json", metavar="PATH", help="write the numbers as JSON")
    args = parser.parse_args()
    ctxguard.instrument(registry=prometheus_client.CollectorRegistry(), digest_key=b"bench")
    builder = ctxguard.ContextBuilder("gpt-4o", system="You are the order assistant.",
                                      budget=ctxguard.Budget(reserved_output=2000),
                                      pinned=ctxguard.Pinned(max_tokens=400), tail_tokens=3000, retrieved_tokens=1500)
    results: dict[str, Any] = {"python": sys.version.split()[0], "quick": args.quick, "sizes": {}}
    with ctxguard.conversation("bench-builder"):
        for k, value in enumerate(("A-1041", "Pune", "1,249.50 EUR", "+91 98200 12345", "gold tier")):
            ctxguard.record_fact(f"fact_{k}", value)
        summary = "Order A-1041 ships to Pune; refund of 1,249.50 EUR agreed; gold tier customer."
        for n in SIZES:
            messages = history(n)
            new = f"and what about order A-{1000 + n // 3} and hub 3?"
            for _ in range(5):
                builder.build(messages, new, summary=summary)
            rounds = max(ROUNDS[n] // (10 if args.quick else 1), 10)
            samples = []
            gc.disable()
            try:
                for _ in range(rounds):
                    started = time.perf_counter_ns()
                    builder.build(messages, new, summary=summary)
                    samples.append(time.perf_counter_ns() - started)
            finally:
                gc.enable()
            samples.sort()
            row = {"rounds": rounds, "median_us": statistics.median(samples) / 1000,
                   "p95_us": samples[int(len(samples) * 0.95) - 1] / 1000, "mean_us": statistics.fmean(samples) / 1000}
            results["sizes"][n] = row
            print(f"{n:>5} messages: median {row['median_us']:8.1f} µs   p95 {row['p95_us']:8.1f} µs   "
                  f"mean {row['mean_us']:8.1f} µs   ({rounds} builds)")
    ctxguard.uninstrument()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
