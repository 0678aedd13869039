"""Hostile scale: many facts, a value shared by many conversations, huge contents.

Each cell drives the real ``openai.OpenAI`` client on an in-process mock transport (the
``overhead.py`` harness), every check on, and reads ctxguard's own time per call from
``ctxguard_guard_duration_seconds`` (its time before the request leaves and at the end;
the SDK's and the transport's time are not in it).

* ``facts``: 1,000 active facts of one conversation on a 20-message payload, every value
  carried (spread over the messages, 50 per message): all fact checks pass. Target: own
  time <= 5 ms per call.
* ``missing``: the same 1,000 facts, none carried: 1,000 ``fact_present`` violations per
  call. Reported: own time and WARNING lines logged per call.
* ``wire``: 1,000 facts carried in one 4,000-line tool result (the case that was
  O(facts x lines)).
* ``shared``: one value recorded in 100,000 other conversations and carried by this one's
  payload (a leak seen by every one of them): own time per call.
* ``huge``: one call with a 100 MB user message carrying its conversation's fact at the end
  (another conversation's value recorded too),
  instrumented and not, each in a fresh process: wall time of the call and the process's
  peak RSS. Targets: <= 2x the time, <= 1.2x the peak RSS.

    python bench/hostile.py [--cells facts,missing,wire,shared,huge] [--mb 100]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead as bench

http_lib: Any = bench.http_lib  # type: ignore[attr-defined]  # httpx2 (openai 3.x) or httpx
DURATION = "ctxguard_guard_duration_seconds_sum"
COUNT = "ctxguard_guard_duration_seconds_count"


class Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += 1


def _client() -> tuple[Any, Any, Any]:
    import openai
    import prometheus_client
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import ctxguard

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(bench.DropExporter()))
    registry = prometheus_client.CollectorRegistry()
    guard = ctxguard.instrument(registry=registry, tracer_provider=provider, digest_key=b"bench")
    assert guard is not None, "ctxguard disabled (CTXGUARD_DISABLED?)"
    bench.keep_bare_calls_bare()
    http_client = http_lib.Client(transport=http_lib.MockTransport(bench.handler))
    client = openai.OpenAI(api_key="x", base_url=bench.BASE_URL, max_retries=0, http_client=http_client)
    return client, registry, provider


def _own_ms(registry: Any, call: Any, rounds: int) -> float:
    for _ in range(3):
        call()
    before = registry.get_sample_value(DURATION) or 0.0
    count = registry.get_sample_value(COUNT) or 0.0
    for _ in range(rounds):
        call()
    calls = (registry.get_sample_value(COUNT) or 0.0) - count
    assert calls == rounds, f"{calls} calls recorded, not {rounds}"
    return ((registry.get_sample_value(DURATION) or 0.0) - before) * 1e3 / rounds


def cell_facts(carried: bool, rounds: int) -> dict[str, Any]:
    import ctxguard

    client, registry, provider = _client()
    counting = Counting()
    logging.getLogger("ctxguard").addHandler(counting)
    conv = f"hostile-{'facts' if carried else 'missing'}"
    values = [f"ACC-{k:05d}-{conv}" for k in range(1000)]
    msgs = [bench.system_message(""), *(bench.message(i) for i in range(1, 20))]
    if carried:
        for k, value in enumerate(values):
            i = 1 + k % 19
            msgs[i] = {**msgs[i], "content": f"{msgs[i]['content']} [{value}]"}
    try:
        with ctxguard.conversation(conv):
            for k, value in enumerate(values):
                ctxguard.record_fact(f"account_{k}", value)
            logged = counting.lines
            own = _own_ms(registry, lambda: client.chat.completions.create(model=bench.MODEL, messages=msgs), rounds)
            per_call = (counting.lines - logged) / (rounds + 3)
        fails = registry.get_sample_value("ctxguard_violations_total", {"check": "fact_present", "provider": "openai"})
    finally:
        ctxguard.uninstrument()
        provider.shutdown()
    return {"own_ms": own, "warnings_per_call": per_call, "fact_present_fails": fails or 0.0}


def cell_wire(rounds: int) -> dict[str, Any]:
    import ctxguard

    client, registry, provider = _client()
    values = [f"ACC-{k:05d}-wire" for k in range(1000)]
    lines = [f"row {n}: {bench.text(n)[:60]}" for n in range(4000)]
    for k, value in enumerate(values):
        lines[k * 4] += f" {value}"
    msgs: list[Any] = [
        bench.system_message(""),
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "rows", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "\n".join(lines)},
    ]
    for k, value in enumerate(values):
        ctxguard.record_fact(f"account_{k}", value, conversation="hostile-wire")
    own, wire = _timed(client, registry, provider, "hostile-wire", msgs, rounds,
                       ("ctxguard_checks_total", {"check": "wire_intact", "outcome": "pass"}))
    return {"own_ms": own, "wire_intact_passes": wire}


def _timed(client: Any, registry: Any, provider: Any, conversation_id: str, msgs: list[Any], rounds: int,
           sample: tuple[str, dict[str, str]]) -> tuple[float, float]:
    """(own ms per call, then ``sample``'s value), and ctxguard uninstrumented."""
    import ctxguard

    try:
        with ctxguard.conversation(conversation_id):
            own = _own_ms(registry, lambda: client.chat.completions.create(model=bench.MODEL, messages=msgs), rounds)
        return own, registry.get_sample_value(*sample) or 0.0
    finally:
        ctxguard.uninstrument()
        provider.shutdown()


def cell_shared(conversations: int, rounds: int) -> dict[str, Any]:
    import ctxguard

    client, registry, provider = _client()
    value = "ACC-77310-shared"
    for n in range(conversations):
        ctxguard.record_fact("account", value, conversation=f"other-{n}")
    msgs = [bench.system_message(""), *(bench.message(i) for i in range(1, 20))]
    msgs[5] = {**msgs[5], "content": f"{msgs[5]['content']} [{value}]"}
    own, scoped = _timed(client, registry, provider, "hostile-shared", msgs, rounds,
                         ("ctxguard_violations_total", {"check": "fact_scoped", "provider": "openai"}))
    return {"own_ms": own, "fact_scoped_fails": scoped}


def huge_child(mb: int, instrumented: bool) -> dict[str, Any]:
    """In a fresh process: one call carrying ``mb`` MB, its wall time and the peak RSS."""
    import openai

    if instrumented:
        import ctxguard

        client, _registry, provider = _client()
        ctxguard.record_fact("order", "A-1041-huge", conversation="hostile-huge")
        ctxguard.record_fact("order", "B-2041-other", conversation="hostile-other")  # a value to look for as a leak
    else:
        http_client = http_lib.Client(transport=http_lib.MockTransport(bench.handler))
        client = openai.OpenAI(api_key="x", base_url=bench.BASE_URL, max_retries=0, http_client=http_client)
        provider = None
    line = bench.text(1)[:99] + "\n"
    content = line * (mb * 1_000_000 // len(line)) + "Deliver order A-1041-huge."  # the fact, carried, at the end
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}]
    client.chat.completions.create(model=bench.MODEL, messages=[{"role": "user", "content": "warm"}])
    started = time.perf_counter()
    if instrumented:
        import ctxguard

        with ctxguard.conversation("hostile-huge"):
            client.chat.completions.create(model=bench.MODEL, messages=msgs)
    else:
        client.chat.completions.create(model=bench.MODEL, messages=msgs)
    wall = time.perf_counter() - started
    if provider is not None:
        provider.shutdown()
    return {"wall_s": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def cell_huge(mb: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in ("bare", "guarded"):
        runs = []
        for _ in range(2):
            proc = subprocess.run(
                [sys.executable, __file__, "--huge-child", side, "--mb", str(mb)],
                capture_output=True, text=True, check=True,
            )
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        out[side] = {"wall_s": min(r["wall_s"] for r in runs), "peak_rss_mb": min(r["peak_rss_mb"] for r in runs)}
    out["time_ratio"] = out["guarded"]["wall_s"] / out["bare"]["wall_s"]
    out["rss_ratio"] = out["guarded"]["peak_rss_mb"] / out["bare"]["peak_rss_mb"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", default="facts,missing,wire,shared,huge")
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--huge-child", choices=("bare", "guarded"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.huge_child:
        print(json.dumps(huge_child(args.mb, args.huge_child == "guarded")))
        return 0
    cells = args.cells.split(",")
    result: dict[str, Any] = {}
    if "facts" in cells:
        result["facts"] = cell_facts(True, args.rounds)
    if "missing" in cells:
        result["missing"] = cell_facts(False, args.rounds)
    if "wire" in cells:
        result["wire"] = cell_wire(args.rounds)
    if "shared" in cells:
        result["shared"] = cell_shared(args.conversations, args.rounds)
    if "huge" in cells:
        result["huge"] = cell_huge(args.mb)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
