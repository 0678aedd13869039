"""Peak memory and throughput of ``ctxguard check`` over large captures.

Writes captures of 10k and 100k request lines (1,000 conversations, each body a
sliding window of 12 messages, a fact event every 10 turns), runs the real
``ctxguard check`` command on each in a subprocess, and reports the child's peak
RSS (``ru_maxrss``) and lines per second. Constant memory shows as the same
peak RSS for 10x the lines.

    .venv/bin/python bench/check_memory.py [--lines 10000,100000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def write_capture(path: str, lines: int, conversations: int = 1000) -> int:
    system = {"role": "system", "content": "You are the order assistant of Acme Shop. Be brief and exact."}
    with open(path, "w", encoding="utf-8") as f:
        for n in range(lines):
            cid, turn = f"conv-{n % conversations}", n // conversations + 1
            history = []
            for t in range(max(1, turn - 5), turn + 1):
                history.append({"role": "user", "content": f"turn {t}: where is order A-{n % conversations:04d}?"})
                history.append({"role": "assistant", "content": f"Order A-{n % conversations:04d} ships soon ({t})."})
            body = {"model": "gpt-4o", "max_tokens": 512, "messages": [system, *history[:-1]]}
            if turn % 10 == 1:
                fact = {"id": "order_id", "value": f"A-{n % conversations:04d}"}
                f.write(json.dumps({"conversation_id": cid, "fact": fact}) + "\n")
            f.write(json.dumps({"conversation_id": cid, "turn": turn, "provider": "openai", "body": body}) + "\n")
    return os.path.getsize(path)


def measure(path: str) -> tuple[int, float, float]:
    """(exit code, seconds, peak RSS of the child in MiB) of one ``ctxguard check`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "ctxguard.cli", "check", path], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if out.returncode == 2:
        raise SystemExit(out.stderr)
    # ru_maxrss of children is the maximum over all waited-for children: run the largest last.
    return out.returncode, elapsed, max(peak, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", default="10000,100000")
    args = parser.parse_args()
    sizes = sorted(int(x) for x in args.lines.split(","))
    print(f"{'lines':>8} {'file MB':>8} {'seconds':>8} {'lines/s':>8} {'peak RSS MiB':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for lines in sizes:
            path = os.path.join(tmp, f"cap-{lines}.jsonl")
            size = write_capture(path, lines)
            _, seconds, rss = measure(path)
            print(f"{lines:>8} {size / 1e6:>8.1f} {seconds:>8.1f} {lines / seconds:>8.0f} {rss:>13.1f}", flush=True)
            os.unlink(path)


if __name__ == "__main__":
    main()
