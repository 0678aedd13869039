"""Per-call cost of ctxguard's facts API, measured like ``overhead.py``, in one process.

Method
------
* Same harness as ``overhead.py`` (imported): the real ``openai.OpenAI`` client on an
  in-process mock transport, every check on, a private Prometheus registry and an OTel
  SDK ``TracerProvider`` exporting to a dropping exporter. Baseline (A) is the original
  ``Completions.create.__wrapped__``; instrumented (B) is ``client.chat.completions.create``;
  A/B pairs are interleaved (``bench.interleave``), everything is warmed up first.
* Cells: payloads of 20 and 200 messages x 0, 1, 10, 50 active facts. Each cell has its
  own conversation; its N fact values (``ACC-0007-m200f50``: fixed-width tags, so no value
  is a substring of another cell's) are appended to messages spread evenly over the
  history, so every check passes: the common path is measured, and the script asserts it
  ran (``fact_present`` pass count grows by the rounds, no ``fact_*`` violation).
* Realistic multi-tenant process: 50 values of "other customers" (same ``ACC-`` format) are
  recorded in another conversation and every cell's facts are recorded before timing, so
  the cross-conversation index (keyed by a value's first word, here ``acc``) is the same
  for every cell. ``0*`` rows are timed first, before any fact exists in the process.
* fact cost = median overhead(cell) - median overhead(0 facts, same size); the "self"
  variant uses ctxguard's own time (``ctxguard_guard_duration_seconds`` sum delta / rounds),
  which is far less noisy than the A/B difference.
* ``--ids tagged`` puts the conversation's tag first instead (``m200f50-ACC-0007``), so
  no other conversation's value shares a first word with this payload: own facts only.

    python bench/facts.py [--quick] [--json PATH] [--ids shared|tagged]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from typing import Any, cast

import openai
import prometheus_client
from openai.resources.chat.completions.completions import Completions
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import ctxguard
from ctxguard.facts.index import words
from ctxguard.facts.matching import normalise

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead as bench

http_lib: Any = bench.http_lib  # type: ignore[attr-defined]  # httpx2 (openai 3.x) or httpx

SIZES = (20, 200)
FACTS = (0, 1, 10, 50)
ROUNDS = {20: 300, 200: 100}
OTHERS = 50
FACT_CHECKS = ("fact_present", "fact_current", "fact_forgotten", "fact_scoped")
PASS = {"check": "fact_present", "outcome": "pass"}
DURATION = "ctxguard_guard_duration_seconds_sum"


def tag(n: int, facts: int) -> str:
    return f"m{n:03d}f{facts:02d}"


def values(n: int, facts: int, shared: bool) -> list[str]:
    """Shared: every value's first word is ``acc``; else it is the conversation's own tag."""
    return [f"ACC-{k:04d}-{tag(n, facts)}" if shared else f"{tag(n, facts)}-ACC-{k:04d}" for k in range(facts)]


def payload(n: int, facts: list[str], pinned: str) -> list[bench.Message]:
    msgs = [bench.system_message(pinned), *(bench.message(i) for i in range(1, n))]
    for k, value in enumerate(facts):
        i = 1 + k * (n - 1) // len(facts)  # spread evenly: a search stops at its match
        msgs[i] = {**msgs[i], "content": f"{msgs[i]['content']} [{value}]"}
    return msgs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="divide rounds by 5")
    parser.add_argument("--json", metavar="PATH", help="write raw numbers as JSON")
    parser.add_argument("--ids", choices=("shared", "tagged"), default="shared", help="fact value format")
    args = parser.parse_args()
    div, shared = (5 if args.quick else 1), args.ids == "shared"
    started = time.perf_counter()

    original = Completions.__dict__["create"]
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(bench.DropExporter()))
    registry = prometheus_client.CollectorRegistry()
    policy = ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800))
    guard = ctxguard.instrument(policy=policy, registry=registry, tracer_provider=provider, digest_key=b"bench")
    assert guard is not None, "ctxguard disabled (CTXGUARD_DISABLED?)"
    bench.keep_bare_calls_bare()
    orig: Any = cast(Any, Completions.create).__wrapped__
    assert orig is original, "baseline is not the original function"
    http_client = http_lib.Client(transport=http_lib.MockTransport(bench.handler))
    client = openai.OpenAI(api_key="x", base_url=bench.BASE_URL, max_retries=0, http_client=http_client)
    chat: Any = client.chat.completions
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)

    def sample(name: str, labels: dict[str, str] | None = None) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    def violations() -> float:
        return sum(sample("ctxguard_violations_total", {"check": c, "provider": "openai"}) for c in FACT_CHECKS)

    def run_cell(n: int, facts: int, label: str) -> dict[str, Any]:
        conv = f"bench-facts-{label}-{tag(n, facts)}"
        msgs = payload(n, values(n, facts, shared), pinned)
        rounds = max(ROUNDS[n] // div, 5)
        msg_words = [words(normalise(m["content"])) for m in msgs]
        candidates = len(guard._inspector.facts.index.foreign((conv, None), msg_words))
        with ctxguard.conversation(conv):
            for _ in range(max(rounds // 10, 3)):
                orig(chat, model=bench.MODEL, messages=msgs)
                chat.create(model=bench.MODEL, messages=msgs)
            passed, own = sample("ctxguard_checks_total", PASS), sample(DURATION)
            raw = bench.interleave(
                partial(orig, chat, model=bench.MODEL, messages=msgs),
                partial(chat.create, model=bench.MODEL, messages=msgs),
                rounds,
            )
            own = (sample(DURATION) - own) * 1e6 / rounds
            passed = sample("ctxguard_checks_total", PASS) - passed
        assert violations() == 0, f"{label} {n}x{facts}: fact violations on the passing path"
        assert passed == (rounds if facts else 0), f"{label} {n}x{facts}: fact_present pass +{passed}, not {rounds}"
        cell = {"msgs": n, "facts": facts, "label": label, "rounds": rounds, "foreign_candidates": candidates}
        return cell | {"self_mean_us": own, **bench.summary(raw), "raw_ns": raw}

    result: dict[str, Any] = {"python": sys.version.split()[0], "openai": openai.__version__}
    result |= {"http": http_lib.__name__, "cpus": os.cpu_count(), "quick": args.quick, "ids": args.ids}
    try:
        warm = payload(20, [], pinned)
        with ctxguard.conversation("bench-facts-warm"):
            for _ in range(50):
                orig(chat, model=bench.MODEL, messages=warm)
                chat.create(model=bench.MODEL, messages=warm)
        cells: list[dict[str, Any]] = [run_cell(n, 0, "0*") for n in SIZES]  # no fact in the process yet
        with ctxguard.conversation("bench-facts-other-customers"):
            for k in range(OTHERS):
                ctxguard.record_fact(f"account_{k}", f"ACC-{k:04d}-other" if shared else f"other-ACC-{k:04d}")
        for n in SIZES:
            for facts in FACTS:
                with ctxguard.conversation(f"bench-facts-{facts}-{tag(n, facts)}"):
                    for k, value in enumerate(values(n, facts, shared)):
                        ctxguard.record_fact(f"account_{k}", value)
        result["index_entries"] = len(guard._inspector.facts.index)
        cells += [run_cell(n, facts, str(facts)) for n in SIZES for facts in FACTS]
    finally:
        ctxguard.uninstrument()
        provider.shutdown()
        client.close()
    assert Completions.__dict__["create"] is original, "uninstrument() did not restore create"
    for c in cells:
        ref = next(r for r in cells if r["msgs"] == c["msgs"] and r["label"] == "0")
        c["fact_cost_overhead_us"] = c["overhead_median_us"] - ref["overhead_median_us"]
        c["fact_cost_self_us"] = c["self_mean_us"] - ref["self_mean_us"]
    result["cells"] = sorted(cells, key=lambda c: (c["msgs"], c["facts"], c["label"] != "0*"))
    result["elapsed_s"] = time.perf_counter() - started
    report(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return 0


def report(r: dict[str, Any]) -> None:
    print(
        f"python {r['python']} | openai {r['openai']} ({r['http']}) | cpus: {r['cpus']}"
        f" | --ids {r['ids']}{' | --quick' if r['quick'] else ''}\n"
    )
    print("| msgs | facts | overhead µs med / p90 | fact cost µs (overhead) | ctxguard self µs | fact cost µs (self) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for c in r["cells"]:
        print(
            f"| {c['msgs']} | {c['label']} | {c['overhead_median_us']:.0f} / {c['overhead_p90_us']:.0f} "
            f"| {c['fact_cost_overhead_us']:+.0f} | {c['self_mean_us']:.0f} | {c['fact_cost_self_us']:+.1f} |"
        )
    cand = ", ".join(f"{c['msgs']}x{c['label']}: {c['foreign_candidates']}" for c in r["cells"])
    print(
        f"\n0* = timed before any fact was recorded in the process (empty cross-conversation index);"
        f"\nother rows: index of {r['index_entries']} values, foreign candidates searched per call: {cand}."
        f"\nfact cost = cell - the 0-facts row of the same size; self = ctxguard_guard_duration_seconds"
        f" (before + finished, span end excluded), mean per call."
    )
    print(f"\ntotal time: {r['elapsed_s']:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
