"""ctxguard's per-call cost in CPU instructions, counted by valgrind: the same number on every run.

    .venv/bin/python bench/instructions.py [--sizes 20,200] [--calls 10] [--grow]   # ~10 min

Time-based numbers (bench/overhead.py) move by ±20% with whatever else the machine
does; an instruction count does not, so this is the benchmark to compare two commits
with. For each payload size it runs one child process per side under
``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``, gc off), which warms its side
up with 20 calls and then makes ``--calls`` more, the only ones counted (they run
inside a libffi call that callgrind is told to collect in, so start-up and warm-up,
which vary between processes by more than a call costs, are left out):

* ``base``: bare SDK calls (the original ``create``);
* ``guarded``: instrumented calls;
* ``span``: each bare call inside one recording SDK span (start, made current,
  end), which is what any tracing instrumentation pays at least;
* ``peer``, when ``opentelemetry-instrumentation-openai-v2`` is installed
  (bench/requirements-peer.txt): the bare call under OpenTelemetry's own openai
  instrumentation, set up as in bench/overhead.py.

The count repeats to a few instructions per call between runs of the same commit
(166,145,035 and 166,145,037 for five base calls at 20 messages).

With ``--grow`` each timed call first appends one new distinct message to the
history, which starts at the given size: a growing conversation, where ctxguard
counts and digests one unseen message per call and reuses the rest; comparing a
short and a long start tells whether its per-call work grows with the history.

Per-call cost = (side - base) / calls. The SDK's own count still moves between
processes by ~0.05% of its cost (~20,000 instructions per call at 20 messages,
~200,000 at 475), so for large payloads use ``--own``: ``guarded-own`` counts
ctxguard's hooks alone (``before``, ``wire``, ``finished``, as the wrappers call
them, on the body the SDK sent and the response it parsed), ``span-own`` a bare
span's start and end alone, and ``peer-own`` (when installed) the peer's wrapper
alone, its SDK call run inside ``operator.call``, which callgrind is told to stop
counting in; the SDK calls that produce ctxguard's inputs run between the counted
ones. The setup is bench/overhead.py's: the real
openai client on an in-process mock transport, every check on, a recording
``TracerProvider`` whose exporter drops spans (here a ``SimpleSpanProcessor``, so
no background thread adds instructions at random), in a conversation. Instructions
are not time: cache misses are not in them, and in situ (right after a real SDK
call) ctxguard's code runs at roughly 0.35 µs per 1,000 instructions on this kind
of machine, against ~0.1 in a tight loop.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import operator
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

SIDES = ("base", "guarded", "span")
COUNTING = False  # inside a counted call (``own``)
OWN_SIDES = ("guarded-own", "span-own")
WARM = 20
#: ``--cache``: this machine's per-core caches (48 KiB L1d, 64 KiB L1i, 2 MiB L2), the L2 as the
#: last level: a miss there goes to the shared L3, the slow trip in situ.
CACHE_SIM = ("--cache-sim=yes", "--branch-sim=yes", "--I1=65536,16,64", "--D1=49152,12,64", "--LL=2097152,16,64")


def child(side: str, size: int, calls: int, grow: bool) -> None:
    """Runs under valgrind: warm up both paths, then ``calls`` calls of one side
    (``side@choice``: the guarded side with ``instrument(metrics=choice)``)."""
    side, _, choice = side.partition("@")
    sys.path.insert(0, str(Path(__file__).parent))
    import openai
    import overhead as ov
    import prometheus_client
    from openai.resources.chat.completions.completions import Completions
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    import ctxguard

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ov.DropExporter()))
    original = Completions.__dict__["create"]

    def uncounted(*args: Any, **kwargs: Any) -> object:
        """``original``; inside a counted call, called through ``operator.call``
        (``_operator_call`` in C, which nothing else on these paths calls): callgrind, also
        told --toggle-collect=_operator_call, stops counting inside it. (A nested libffi call
        does not toggle collection off; outside a counted call this one would toggle it on.)"""
        return operator.call(original, *args, **kwargs) if COUNTING else original(*args, **kwargs)

    peer = None
    if side.startswith("peer"):
        peer = ov.peer_instrumentation(original, provider, uncounted if side.endswith("-own") else None)
        assert peer is not None, "opentelemetry-instrumentation-openai-v2 not importable"
    policy = ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800))
    registry = prometheus_client.CollectorRegistry()
    meters = None
    if choice in ("otel", "both"):
        # A reader that is never collected here: what a call pays is the recording; an
        # export reads the cells (and the SDK's aggregations) once per interval, off the call.
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    guard = ctxguard.instrument(policy=policy, registry=registry, tracer_provider=provider, digest_key=ov.KEY,
                                metrics=choice or "prometheus", meter_provider=meters)
    assert guard is not None, "ctxguard disabled (CTXGUARD_DISABLED?)"
    ov.keep_bare_calls_bare()
    orig = Completions.create.__wrapped__  # type: ignore[attr-defined]
    sent: list[bytes] = []

    def handler(request: Any) -> Any:
        sent.append(request.content)
        return ov.handler(request)

    http_client = ov.http_lib.Client(transport=ov.http_lib.MockTransport(handler))
    client = openai.OpenAI(api_key="x", base_url=ov.BASE_URL, max_retries=0, http_client=http_client)
    chat = client.chat.completions
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
    messages = [ov.system_message(pinned), *(ov.message(i) for i in range(1, size))]
    tracer = provider.get_tracer("bench")

    def spanned(history: list[dict[str, str]]) -> object:
        span = tracer.start_span(f"chat {ov.MODEL}", kind=trace.SpanKind.CLIENT)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return orig(chat, model=ov.MODEL, messages=history)
        finally:
            otel_context.detach(token)
            span.end()

    sides = {
        "base": lambda history: orig(chat, model=ov.MODEL, messages=history),
        "guarded": lambda history: chat.create(model=ov.MODEL, messages=history),
        "span": spanned,
    }
    if peer is not None:
        sides["peer"] = lambda history: peer[0](chat, model=ov.MODEL, messages=history)
    if side.endswith("-own"):
        own(side, guard, tracer, lambda history: (orig(chat, model=ov.MODEL, messages=history), sent.pop()),
            messages, calls, grow, peer=(lambda kwargs: peer[0](chat, **kwargs)) if peer is not None else None)
        return
    gc.disable()
    with ctxguard.conversation("bench"):
        run = sides[side]
        for history in warm_up(messages, grow):
            run(history)

        def timed() -> None:
            history = messages
            for i in range(calls):
                if grow:
                    history = [*history, ov.message(200_000 + i)]
                run(history)

        # Called through libffi so that callgrind, told --toggle-collect=ffi_call, counts
        # only the timed calls: start-up and warm-up differ between processes by more
        # than a call costs.
        ctypes.CFUNCTYPE(None)(timed)()


def warm_up(messages: list[dict[str, str]], grow: bool) -> list[list[dict[str, str]]]:
    """The warm-up calls' histories: ``messages`` WARM times, or when growing, five histories
    that grow into ``messages`` one message at a time, as the counted calls then go on to
    (an unchanged history resent first would make the first grown body a one-off miss of
    the wire digest's resume point, counted against the first call)."""
    if not grow:
        return [messages] * WARM
    n = len(messages)
    return [messages[: n - k] for k in range(min(5, n - 2), 0, -1)] + [messages]


def own(side: str, guard: Any, tracer: Any, send: Callable[[Any], tuple[Any, bytes]],
        messages: list[dict[str, str]], calls: int, grow: bool,
        peer: Callable[[dict[str, Any]], object] | None = None) -> None:
    """ctxguard's hooks alone (``before``, ``wire``, ``finished``), or a bare span's start and
    end alone, each counted call in its own libffi call: the SDK's calls, which give the
    body sent and the response, run between them, uncounted. ``peer-own``: a whole call
    under the peer's wrapper, whose SDK call runs inside ``operator.call``, where callgrind's
    collection toggles off again: its wrapper's work alone is counted."""
    global COUNTING
    import openai
    import overhead as ov
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    import ctxguard
    from ctxguard.intercept.answers import returned
    from ctxguard.providers import openai as openai_provider

    # The call site's object, as the wrapper passes it: its client's identity is read per call.
    resource = openai.OpenAI(api_key="bench", base_url="http://127.0.0.1:9/v1").chat.completions

    def guarded(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        call = guard.before(openai_provider.PROVIDER, "chat.completions", kwargs, instance=resource)
        call.wire(body)
        returned(call, openai_provider.SITES[0], response)

    def spanned(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        span = tracer.start_span(f"chat {ov.MODEL}", kind=trace.SpanKind.CLIENT)
        token = otel_context.attach(trace.set_span_in_context(span))
        otel_context.detach(token)
        span.end()

    def peered(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        assert peer is not None
        peer(kwargs)

    run = {"guarded-own": guarded, "span-own": spanned, "peer-own": peered}[side]
    counted = ctypes.CFUNCTYPE(None)
    gc.disable()
    with ctxguard.conversation("bench"):
        response, body = send(messages)
        for history in warm_up(messages, grow):
            if grow:
                response, body = send(history)
            run({"model": ov.MODEL, "messages": history}, body, response)
        history = messages
        for i in range(calls):
            if grow:
                history = [*history, ov.message(200_000 + i)]
            response, body = send(history)
            kwargs = {"model": ov.MODEL, "messages": history}
            COUNTING = True
            counted(lambda: run(kwargs, body, response))()  # noqa: B023 (called at once)
            COUNTING = False


def count(side: str, size: int, calls: int, grow: bool, cache: bool = False) -> dict[str, int]:
    """Events of ``calls`` timed calls of ``side`` (a child process under callgrind): ``Ir``
    (instructions), and with ``cache`` the simulated cache misses as well."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--toggle-collect=ffi_call*",
           "--toggle-collect=_operator_call", *(CACHE_SIM if cache else ()),
           sys.executable, __file__,
           "--child", side, str(size), str(calls), "grow" if grow else "fixed"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    events = re.search(r"Events *: ([\w ]+)", out.stderr)
    found = re.search(r"Collected : ([\d ]+)", out.stderr)
    if events is None or found is None:
        raise RuntimeError(f"no event counts from callgrind:\n{out.stderr[-2000:]}")
    return dict(zip(events.group(1).split(), map(int, found.group(1).split()), strict=True))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "grow")
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20,200", help="payload sizes in messages (default 20,200)")
    parser.add_argument("--calls", type=int, default=10, help="counted calls per side (default 10)")
    parser.add_argument("--grow", action="store_true", help="append one new message per call (from each size)")
    parser.add_argument("--own", action="store_true", help="count ctxguard's hooks and a bare span alone, no SDK")
    parser.add_argument("--cache", action="store_true", help="also simulate the caches: misses per call, by level")
    parser.add_argument("--metrics", default="", metavar="CHOICES",
                        help="with --own: also count ctxguard with instrument(metrics=C) for each C of a comma list "
                             "(prometheus,otel,both), in the same run")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind not found (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    sides = OWN_SIDES if args.own else SIDES
    peer = importlib.util.find_spec("opentelemetry.instrumentation.openai_v2") is not None
    if peer:
        sides = (*sides, "peer-own" if args.own else "peer")
    choices = [c for c in args.metrics.split(",") if c]
    if choices and not args.own:
        parser.error("--metrics needs --own")
    sides = (*sides, *(f"guarded-own@{c}" for c in choices))
    jobs = [(side, size) for size in sizes for side in sides]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        events = dict(
            zip(jobs, pool.map(lambda job: count(*job, args.calls, args.grow, args.cache), jobs), strict=True)
        )
    totals = {job: e["Ir"] for job, e in events.items()}
    if args.grow:
        print(f"growing: each of the {args.calls} calls adds one new message to a history of the size given\n")
    if args.own:
        print("ctxguard's hooks alone (before + wire + finished), a bare span alone"
              f"{' and the peer wrapper alone' if peer else ''}, no SDK call counted\n")
    peer_head = " | OpenTelemetry openai-v2 instructions/call | ctxguard/peer" if peer else ""
    print(f"| msgs | ctxguard instructions/call | bare recording span instructions/call | ratio{peer_head} |")
    print("|---:|---:|---:|---:|" + ("---:|---:|" if peer else ""))
    per_call: dict[int, float] = {}
    for size in sizes:
        if args.own:
            guarded, span = totals[("guarded-own", size)] / args.calls, totals[("span-own", size)] / args.calls
        else:
            guarded = (totals[("guarded", size)] - totals[("base", size)]) / args.calls
            span = (totals[("span", size)] - totals[("base", size)]) / args.calls
        per_call[size] = guarded
        peer_cells = ""
        if peer:
            if args.own:
                peered = totals[("peer-own", size)] / args.calls
            else:
                peered = (totals[("peer", size)] - totals[("base", size)]) / args.calls
            peer_cells = f" | {peered:,.0f} | {guarded / peered:.2f}x"
        print(f"| {size} | {guarded:,.0f} | {span:,.0f} | {guarded / span:.1f}x{peer_cells} |")
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        per = (per_call[hi] - per_call[lo]) / (hi - lo)
        print(f"\nper message beyond {lo}: {per:,.0f} instructions")
    if choices:
        print("\n| msgs | metrics= | ctxguard instructions/call | vs the default (Prometheus cells) |")
        print("|---:|---|---:|---:|")
        for size in sizes:
            for c in choices:
                n = totals[(f"guarded-own@{c}", size)] / args.calls
                print(f"| {size} | {c} | {n:,.0f} | {n - per_call[size]:+,.0f} |")
    if args.cache:
        cache_table(events, sizes, args.calls, args.own)
    return 0


def cache_table(events: dict[tuple[str, int], dict[str, int]], sizes: list[int], calls: int, own: bool) -> None:
    """Simulated misses per call by side (``CACHE_SIM``); without ``--own``, less the bare calls'."""
    print("\n| msgs | side | instructions | L1i misses | L1d misses | L2 misses (to L3) | branches mispredicted |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for size in sizes:
        base = events.get(("base", size)) if not own else None
        for (side, n), e in events.items():
            if n != size or side == "base":
                continue
            row = {k: (v - (base[k] if base else 0)) / calls for k, v in e.items()}
            print(
                f"| {size} | {side} | {row['Ir']:,.0f} | {row['I1mr']:,.0f} | {row['D1mr'] + row['D1mw']:,.0f} "
                f"| {row['ILmr'] + row['DLmr'] + row['DLmw']:,.0f} | {row['Bcm'] + row['Bim']:,.0f} |"
            )


if __name__ == "__main__":
    sys.exit(main())
