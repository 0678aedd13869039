"""The fleet workload's cost per served call in one process, in CPU instructions (valgrind) or thread CPU.

    PYTHONPATH=$PWD .venv/bin/python bench/fleet_instructions.py [--calls 500] [--warm 800] [--memory]
    PYTHONPATH=$PWD .venv/bin/python bench/fleet_instructions.py --time [--rounds 3]
    PYTHONPATH=$PWD .venv/bin/python bench/fleet_instructions.py --sdk-after [--calls 3000]
    PYTHONPATH=$PWD .venv/bin/python bench/fleet_instructions.py --sdk-wrapped [--calls 1200]

``bench/fleet_load.py`` measures a worker's CPU under load, which moves by ±1 ms between runs of
the same code; this counts what ctxguard's hooks cost for the same workload, the same on every
run, so that a cut of a few percent can be seen. It plays ``bench/workload_memory.py``'s workload
(conversations of 16 turns, sliding histories of 10-40 messages, one fact each, a worker's quarter
of the turns, 8 conversations in flight) through the guard's hooks as the openai wrapper calls
them, with a ``RedisLedger`` shared with "another worker" on a throwaway redis-server (``--memory``:
the in-process ledger). After ``--warm`` served calls, the next ``--calls`` are counted: each runs
inside a libffi call that callgrind is told to collect in (``PYTHONHASHSEED=0``, gc off while
counting), so start-up and warm-up are left out. What the workload's own ``call`` does around the
hooks (appending messages, the body's ``json.dumps``) is in the count too, the same on both sides
of a comparison. Redis's own work is another process's, and the system calls are the kernel's:
neither is counted.

``--time``: no valgrind, ``time.thread_time`` over each round of ``--calls`` served calls (µs a
call); it moves with the machine's load.

``--sdk-after``: whether ctxguard's work slows the SDK call that follows it, in one process: bare
openai calls of 20 messages to a loopback FakeLLM (no ctxguard around them), every other one right
after one served fleet call through the guard's hooks (the in-process ledger), ``--calls`` in all,
interleaved; the SDK call's thread CPU, median of each kind. In the fleet the SDK's own part of a
request takes 0.4-0.6 ms more with ctxguard (docs/performance.md, "The floor"); this tells whether
a lone process shows it.

``--sdk-wrapped``: the same question the fleet asks, in one process: openai calls of 20 messages (in
a conversation with a fact) through ctxguard's instrumentation, interleaved by batches with calls
with it uninstrumented; each call's thread CPU less ctxguard's hooks (``Guard.before``,
``observe_answer``, the wire hooks: what ``bench/fleet_load.py`` takes off its "model call"), medians.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import os
import random
import re
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # after PYTHONPATH: a checkout given there is the one measured
sys.path.append(str(ROOT / "bench"))

from workload_memory import call, fleet_guard, workload  # noqa: E402  # bench/workload_memory.py


def child(warm: int, calls: int, rounds: int, redis: bool, counted: bool) -> None:
    with ExitStack() as stack:
        g, other = fleet_guard(stack, redis)
        rng = random.Random(1)
        turns = workload(0, 16, (10, 40), 8)

        def serve(n: int, inside: bool) -> float:
            served, spent = 0, 0.0
            while served < n:
                c, message = next(turns)
                here = rng.random() < 0.25
                if not here:
                    call(g, c, message, here, other)
                    continue
                began = time.thread_time()
                if inside:  # callgrind counts inside ffi_call only
                    ctypes.CFUNCTYPE(None)(functools.partial(call, g, c, message, here, other))()
                else:
                    call(g, c, message, here, other)
                spent += time.thread_time() - began
                served += 1
            return spent / n

        serve(warm, False)
        if counted:
            gc.disable()
            serve(calls, True)
            return
        for r in range(rounds):
            print(f"round {r}: {serve(calls, False) * 1e6:.1f} µs a served call", flush=True)


def _sdk_client(stack: ExitStack) -> tuple[Any, list[dict[str, str]]]:
    """An openai client of a loopback FakeLLM (stopped with ``stack``) and 20 messages to send it."""
    import openai

    from ctxguard.testing.fake.server import FakeLLM

    llm = FakeLLM()
    llm.start()
    stack.callback(llm.stop)
    client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
    messages = [{"role": "system", "content": "You are terse."}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about order A-1234, delivery"}
        for i in range(20)]
    return client, messages


def sdk_after(calls: int) -> None:
    import statistics

    with ExitStack() as stack:
        client, messages = _sdk_client(stack)
        g, other = fleet_guard(stack, False)
        rng = random.Random(1)
        turns = workload(0, 16, (10, 40), 8)

        def served() -> None:
            while True:
                c, message = next(turns)
                here = rng.random() < 0.25
                call(g, c, message, here, other)
                if here:
                    return

        def sdk() -> float:
            began = time.thread_time()
            client.chat.completions.create(model="gpt-4o-mini", messages=messages)
            return time.thread_time() - began

        for _ in range(300):  # warm: both the caches and the client
            served()
            sdk()
        alone, after = [], []
        for n in range(calls):
            if n % 2:
                alone.append(sdk())
            else:
                served()
                after.append(sdk())
        print(f"the SDK call alone: {statistics.median(alone) * 1e6:,.0f} µs; right after a served call's hooks: "
              f"{statistics.median(after) * 1e6:,.0f} µs (medians of {len(alone):,} each)")


def sdk_wrapped(calls: int) -> None:
    import statistics

    import ctxguard
    import ctxguard.intercept as intercept
    from ctxguard.intercept import wire

    hooks = [0.0]

    def timed(function):  # type: ignore[no-untyped-def]
        def timing(*args, **kwargs):  # type: ignore[no-untyped-def]
            began = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                hooks[0] += time.thread_time() - began
        return timing

    originals = intercept.observe_answer, wire._observe, wire._answered
    with ExitStack() as stack:
        client, messages = _sdk_client(stack)

        def batch(n: int) -> list[float]:
            parts = []
            for i in range(n):
                hooks[0] = 0.0
                began = time.thread_time()
                with ctxguard.conversation("sdk-part"):
                    client.chat.completions.create(model="gpt-4o-mini",
                                                   messages=[*messages, {"role": "user", "content": f"turn {i}"}])
                parts.append(time.thread_time() - began - hooks[0])
            return parts

        bare, wrapped = [], []
        for _ in range(6):
            batch(50)
            bare += batch(calls // 6)
            ctxguard.instrument(mode="observe")
            installed = intercept.active()
            assert installed is not None
            installed.guard.before = timed(installed.guard.before)  # type: ignore[method-assign]
            intercept.observe_answer, wire._observe, wire._answered = (timed(f) for f in originals)
            with ctxguard.conversation("sdk-part"):
                ctxguard.record_fact("order", "A-1234")
            batch(50)
            wrapped += batch(calls // 6)
            ctxguard.uninstrument()
            intercept.observe_answer, wire._observe, wire._answered = originals
        print(f"the SDK's part of a call: {statistics.median(bare) * 1e6:,.0f} µs uninstrumented, "
              f"{statistics.median(wrapped) * 1e6:,.0f} µs instrumented less ctxguard's hooks "
              f"(medians of {len(bare):,} each)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, help="served calls counted (default 500; a round with --time; "
                                                   "SDK calls with --sdk-after, default 3000)")
    parser.add_argument("--warm", type=int, default=800, help="served calls before counting")
    parser.add_argument("--memory", action="store_true", help="the in-process ledger, no Redis")
    parser.add_argument("--time", action="store_true", help="thread CPU a call, no valgrind")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, with --time")
    parser.add_argument("--sdk-after", action="store_true", help="the SDK call's CPU alone and after ctxguard's work")
    parser.add_argument("--sdk-wrapped", action="store_true",
                        help="the SDK's part of a call instrumented (less the hooks) and uninstrumented")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sdk_after:
        sdk_after(args.calls or 3000)
        return 0
    if args.sdk_wrapped:
        sdk_wrapped(args.calls or 1200)
        return 0
    args.calls = args.calls or 500
    if args.child or args.time:
        child(args.warm, args.calls, args.rounds, not args.memory, counted=args.child)
        return 0
    import ctxguard

    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--toggle-collect=ffi_call*",
           sys.executable, __file__, "--child", "--calls", str(args.calls), "--warm", str(args.warm),
           *(["--memory"] if args.memory else [])]
    out = subprocess.run(cmd, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        print(out.stderr[-4000:], file=sys.stderr)
        return 1
    print(f"ctxguard from {Path(ctxguard.__file__).parent.parent}; {'in-process' if args.memory else 'Redis'} ledger")
    print(f"{int(found.group(1)) / args.calls:,.0f} instructions a served call ({args.calls} calls after {args.warm})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
