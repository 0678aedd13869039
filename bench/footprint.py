"""What ``import ctxguard; ctxguard.instrument()`` adds to a process: resident memory and time.

Each sample is a fresh interpreter that imports openai and an OpenTelemetry SDK tracer provider
(what the app has anyway), then, timed, imports and instruments ctxguard (lazy tokenizer, the
default; or ``CTXGUARD_TOKENIZER=eager``; or nothing, the baseline), then makes ``--calls`` chat
calls to a loopback FakeLLM run by this script (usage that grows with the input). Bytecode is
cached (in a temporary directory) as after a pip install. RSS is the resident set from
/proc/self/statm, read after a gc.collect(). The variants run interleaved, round by round, and
the report gives medians over ``--rounds``: RSS after instrument() and after the calls, both less
the baseline's at the same point, and the import + instrument time.

    .venv/bin/python bench/footprint.py [--rounds 5] [--calls 200] [--messages 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import gc, json, os, sys, time
def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
variant, calls, size, url = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r0 = rss()
t0 = time.perf_counter()
if variant != "baseline":
    import ctxguard
    ctxguard.instrument()
t1 = time.perf_counter()
r1 = rss()
client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
history = [{"role": "system", "content": "You are the order assistant of Acme Shop. Be brief."}]
for n in range(calls):
    history.append({"role": "user", "content": f"turn {n}: where is order A-{n:04d}? It was due on Monday."})
    client.chat.completions.create(model="gpt-4o", messages=history[-size:], max_tokens=200)
    history.append({"role": "assistant", "content": f"Order A-{n:04d} ships on Thursday from Pune."})
r2 = rss()
print(json.dumps({"instrument_mb": (r1 - r0) / 2**20, "calls_mb": (r2 - r0) / 2**20, "seconds": t1 - t0,
                  "tiktoken_loaded": "tiktoken" in sys.modules}))
"""

VARIANTS = {"baseline": {}, "lazy": {"CTXGUARD_TOKENIZER": "lazy"}, "eager": {"CTXGUARD_TOKENIZER": "eager"}}


#: Bytecode cached, as a pip install leaves it (this machine sets PYTHONDONTWRITEBYTECODE): in a
#: directory of its own, out of the tree.
_PYCACHE = os.path.join(tempfile.gettempdir(), "ctxguard-footprint-pycache")


def sample(variant: str, calls: int, size: int, url: str) -> dict[str, float]:
    env = {**os.environ, **VARIANTS[variant], "PYTHONPYCACHEPREFIX": _PYCACHE}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, variant, str(calls), str(size), url], env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--messages", type=int, default=20, help="messages resent per call")
    args = parser.parse_args()
    from ctxguard.testing import FakeLLM  # in this process: the children import only what they measure

    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with FakeLLM() as llm:
        for variant in VARIANTS:  # warm the bytecode caches
            sample(variant, 1, args.messages, llm.base_url)
        for _ in range(args.rounds):
            for variant in VARIANTS:
                runs[variant].append(sample(variant, args.calls, args.messages, llm.base_url))
    base = runs["baseline"]
    print(f"{args.rounds} rounds, {args.calls} calls of {args.messages} messages; medians, less the baseline")
    print(f"{'variant':<8} {'instrument() MB':>16} {'after calls MB':>15} {'import+instrument s':>20} {'tiktoken':>9}")
    for variant in ("lazy", "eager"):
        got = runs[variant]
        inst = statistics.median(g["instrument_mb"] - b["instrument_mb"] for g, b in zip(got, base, strict=True))
        after = statistics.median(g["calls_mb"] - b["calls_mb"] for g, b in zip(got, base, strict=True))
        secs = statistics.median(g["seconds"] - b["seconds"] for g, b in zip(got, base, strict=True))
        loaded = sum(bool(g["tiktoken_loaded"]) for g in got)
        print(f"{variant:<8} {inst:>16.1f} {after:>15.1f} {secs:>20.3f} {loaded:>6}/{len(got)}")


if __name__ == "__main__":
    main()
