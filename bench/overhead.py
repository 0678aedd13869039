"""Per-call overhead of ctxguard over the bare openai SDK, measured in one process.

Method
------
* The real ``openai.OpenAI`` client runs on an in-process ``MockTransport``
  (``httpx2`` for openai 3.x, ``httpx`` for 1.x): no sockets, the handler returns
  a valid ``chat.completion`` (its usage grown with the body sent). Both sides therefore pay the full SDK cost
  (request building, JSON encoding, response parsing); only ctxguard differs.
* ctxguard is instrumented once with every check on (pinned block, system at
  head, budget), a private Prometheus registry and an OpenTelemetry SDK
  ``TracerProvider`` whose ``BatchSpanProcessor`` feeds an exporter that drops
  spans (spans are really recorded). Content capture is off. Calls run inside
  ``ctxguard.conversation(...)`` so the conversation diff runs as well.
* Baseline (A) = the original function, ``Completions.create.__wrapped__``,
  called directly; instrumented (B) = ``client.chat.completions.create``; the
  floor (C) = the original under a wrapt wrapper that only records a bare span
  on the same provider (what any span-recording instrumentation pays at least).
  Each round times A, B and C once with ``perf_counter_ns``, rotating which goes
  first, so drift cancels; overhead is the per-round difference B - A, the
  span's C - A. Everything is warmed up first, and gc is disabled inside timed
  loops.
* Fixed sizes (2/20/200/2000 messages, ~370 distinct characters each, a system
  message holding a pinned block first) resend the same payload each round, as
  an app resending history does. The growing conversation appends one new
  message per turn, so ctxguard pays for exactly one unseen message per call.
* "ctxguard self" is ctxguard's own account of its time (the
  ``ctxguard_guard_duration_seconds`` histogram: before() + finished(), span end
  excluded). Once the SDK call takes tens of ms, its jitter exceeds ctxguard's
  cost and the A/B difference gets noisy; the self time stays steady.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import openai
import prometheus_client
import wrapt
from openai.resources.chat.completions.completions import Completions
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

import ctxguard
import ctxguard.tokens
from ctxguard.telemetry.spans import set_attributes

try:
    import httpx2 as http_lib
except ImportError:  # openai 1.x
    import httpx as http_lib  # type: ignore[no-redef, import-not-found, unused-ignore]

MODEL = "gpt-4o"
BASE_URL = "http://bench.invalid/v1"
KEY = b"bench"
SIZES = (2, 20, 200, 2000)
ROUNDS = {2: 400, 20: 400, 200: 200, 2000: 40}
TURNS = 500
WINDOWS = ((1, 50), (201, 250), (451, 500))
WORDS = "order parcel courier refund warehouse invoice customer address delivery tracking status".split()  # noqa: SIM905
_CHOICE = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
#: The answer, its usage left to fill in: input tokens grow with what was sent (body bytes // 4),
#: as a provider's do. A fixed count would be a server that cut most of the prompt
#: (``provider_kept_all``) or a count ctxguard is far out of range of, and the runs would
#: measure a violation's path.
_ANSWER = json.dumps(
    {"id": "chatcmpl-bench", "object": "chat.completion", "created": 1_700_000_000, "model": MODEL}
    | {"choices": [_CHOICE], "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 0}}
).replace('"prompt_tokens": 0', '"prompt_tokens": %d').replace('"total_tokens": 0', '"total_tokens": %d')

Message = dict[str, str]


class DropExporter(SpanExporter):
    """Accepts every span and throws it away."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def completion(request: Any) -> bytes:
    """A ``chat.completion`` answering "ok", its input tokens the request's body bytes // 4."""
    prompt = len(request.content) // 4
    return (_ANSWER % (prompt, prompt + 1)).encode()


def handler(request: Any) -> Any:
    return http_lib.Response(200, content=completion(request), headers={"content-type": "application/json"})


def text(i: int) -> str:
    """~370 characters, distinct for each index."""
    body = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(60))
    return f"Message {i}: {body}"[:370]


def message(i: int) -> Message:
    return {"role": "user" if i % 2 else "assistant", "content": text(i)}


def agent_messages(n: int) -> list[Any]:
    """``n`` messages of a tool-using agent's history: after the system message, turns of
    a user message, a tool call, its result, and the assistant's answer."""
    history: list[Any] = [{"role": "system", "content": text(0)}]
    i = 1
    while len(history) < n:
        call_id = f"call_{i}"
        history += [
            {"role": "user", "content": text(i)},
            {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": "lookup_order", "arguments": json.dumps({"order_id": f"A-{i}"})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": text(i + 1)},
            {"role": "assistant", "content": text(i + 2)},
        ]
        i += 4
    return history[:n]


def system_message(pinned: str) -> Message:
    return {"role": "system", "content": f"{text(0)}\n\n{pinned}"}


def timed(fn: Callable[[], object]) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def median_after(before: Callable[[], object], fn: Callable[[], object], runs: int) -> float:
    """Median µs of ``fn``, each run timed right after an untimed ``before()`` (gc left as it is)."""
    times = []
    for _ in range(runs):
        before()
        times.append(timed(fn))
    return statistics.median(times) / 1000


def one_round(arms: Sequence[Callable[[], object]], first: int) -> list[int]:
    """ns of one call of each arm, in the arms' order, starting the round with arm ``first``."""
    times = [0] * len(arms)
    for k in range(len(arms)):
        i = (first + k) % len(arms)
        times[i] = timed(arms[i])
    return times


def interleave(
    base: Callable[[], object],
    inst: Callable[[], object],
    rounds: int,
    floor: Callable[[], object] | None = None,
    peer: Callable[[], object] | None = None,
) -> dict[str, list[int]]:
    """Time ``rounds`` rounds of the baseline, the instrumented call and, if given, the floor
    (a bare recording span) and a peer instrumentation, rotating which goes first; ns per call."""
    extra = {"floor_overhead": floor, "peer_overhead": peer}
    extra = {k: arm for k, arm in extra.items() if arm is not None}
    arms = [base, inst, *extra.values()]
    gc.collect()
    gc.disable()
    try:
        columns = list(zip(*(one_round(arms, r % len(arms)) for r in range(rounds)), strict=True))  # type: ignore[arg-type]
    finally:
        gc.enable()
    a, b = columns[0], columns[1]
    raw = {"baseline": list(a), "instrumented": list(b), "overhead": [y - x for x, y in zip(a, b, strict=True)]}
    for key, column in zip(extra, columns[2:], strict=True):
        raw[key] = [y - x for x, y in zip(a, column, strict=True)]
        if key == "peer_overhead":
            raw["peer"] = list(column)
    return raw


def keep_bare_calls_bare() -> None:
    """The benches' bare calls run the SDK's original function while ctxguard is instrumented. A
    model request that bypassed its call site is guarded from the wire (ctxguard.providers'
    ``_unguarded``): the baseline would then be a guarded call, and its state (memos, digests)
    would move the guarded side's. Here it stays bare: no request path is a model endpoint's.
    (Commits before the ``Installation`` (3ff1f86) asked ``wire.on_unguarded`` instead; setting it
    too keeps the script running against them, ``PYTHONPATH=<checkout>``.)"""
    from ctxguard.intercept import wire

    wire.MODEL_PATHS = ()
    wire.on_unguarded = None  # type: ignore[attr-defined]


def recording_span(
    tracer: Any, attributes: dict[str, Any] | None = None, spent: list[int] | None = None
) -> Callable[..., Any]:
    """A wrapt wrapper that only starts a span, makes it current, (sets ``attributes``), calls
    through, and ends it: the floor of any instrumentation that records a span per call.
    ``spent``: gets the wrapper's own ns per call (all but the wrapped call)."""

    def wrapper(wrapped: Any, instance: Any, call_args: Any, kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        span = tracer.start_span("chat gpt-4o", kind=SpanKind.CLIENT)
        token = otel_context.attach(trace.set_span_in_context(span))
        if attributes is not None:
            set_attributes(span, dict(attributes))
        t1 = time.perf_counter_ns()
        try:
            return wrapped(*call_args, **kwargs)
        finally:
            t2 = time.perf_counter_ns()
            otel_context.detach(token)
            span.end()
            if spent is not None:
                spent.append(t1 - t0 + time.perf_counter_ns() - t2)

    return wrapper


def peer_instrumentation(
    original: Callable[..., object], provider: TracerProvider, around: Callable[..., object] | None = None
) -> tuple[Callable[..., object], list[int], str] | None:
    """OpenTelemetry's own openai instrumentation (``opentelemetry-instrumentation-openai-v2``,
    not a dependency: see docs/performance.md), its chat wrapper alone around ``original``:
    spans recorded on ``provider``, metrics on an SDK ``MeterProvider`` with an in-memory
    reader, no logs pipeline (its per-message events go to the no-op logger), content capture
    off, its defaults otherwise. Returns the wrapped function (call it ``fn(chat, ...)``), a
    list that gets the ns of each call it wraps, and its version; None when not installed.
    ``around``: what its wrapper calls instead of ``original`` (the list then stays empty).
    Instrumented and uninstrumented again at once, before ctxguard: only its wrapper is kept."""
    try:
        from importlib.metadata import version

        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor  # type: ignore[import-not-found]
    except ImportError as exc:
        print(f"peer arm left out: {exc}", file=sys.stderr)
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(
        tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()])
    )
    try:
        wrapper = Completions.__dict__["create"]._self_wrapper
    finally:
        instrumentor.uninstrument()
    assert Completions.__dict__["create"] is original, "the peer's uninstrument() did not restore create"
    inner: list[int] = []

    def timed_original(*args: Any, **kwargs: Any) -> object:
        t0 = time.perf_counter_ns()
        try:
            return original(*args, **kwargs)
        finally:
            inner.append(time.perf_counter_ns() - t0)

    wrapped = wrapt.FunctionWrapper(around or timed_original, wrapper)
    return (lambda chat, **kw: wrapped.__get__(chat, Completions)(**kw)), inner, version(
        "opentelemetry-instrumentation-openai-v2"
    )


def summary(raw: dict[str, list[int]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, values in raw.items():
        out[f"{key}_median_us"] = statistics.median(values) / 1000
        out[f"{key}_p90_us"] = statistics.quantiles(values, n=10, method="inclusive")[8] / 1000
    return out


def main() -> int:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    parser.add_argument("--quick", action="store_true", help="divide rounds by 5")
    parser.add_argument("--json", metavar="PATH", help="write raw numbers as JSON")
    parser.add_argument("--no-peer", action="store_true", help="leave out the peer arm even when installed")
    args = parser.parse_args()
    div = 5 if args.quick else 1
    started = time.perf_counter()

    original = Completions.__dict__["create"]
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    registry = prometheus_client.CollectorRegistry()
    peer = None if args.no_peer else peer_instrumentation(original, provider)
    peer_fn, peer_inner = (peer[0], peer[1]) if peer is not None else (None, [])
    policy = ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800))  # every check on
    guard = ctxguard.instrument(policy=policy, registry=registry, tracer_provider=provider, digest_key=KEY)
    assert guard is not None, "ctxguard disabled (CTXGUARD_DISABLED?)"
    keep_bare_calls_bare()
    orig: Callable[..., object] = cast(Any, Completions.create).__wrapped__
    assert orig is original, "baseline is not the original function"
    http_client = http_lib.Client(transport=http_lib.MockTransport(handler))
    client = openai.OpenAI(api_key="x", base_url=BASE_URL, max_retries=0, http_client=http_client)
    chat: Any = client.chat.completions
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
    system = system_message(pinned)
    # The floor: the same call site under a wrapper that records a bare span (same provider).
    floor_spent: list[int] = []  # the bare span's own time per call, ns
    floor: Callable[..., object] = wrapt.FunctionWrapper(
        original, recording_span(provider.get_tracer("floor"), spent=floor_spent)
    )

    def self_us() -> float:
        """ctxguard's own time so far, as it reports it (before + finished, without the span's end)."""
        return (registry.get_sample_value("ctxguard_guard_duration_seconds_sum") or 0.0) * 1e6

    result: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "openai": openai.__version__,
        "http": http_lib.__name__,
        "tokens": ctxguard.tokens.default_counter().name,
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "peer": f"opentelemetry-instrumentation-openai-v2 {peer[2]}" if peer is not None else None,
        "sizes": {},
    }
    try:
        # Warm-up: SDK, ctxguard, tiktoken, span pipeline.
        warm = [system, *(message(i) for i in range(1, 20))]
        with ctxguard.conversation("bench-warm"):
            for _ in range(50):
                orig(chat, model=MODEL, messages=warm)
                chat.create(model=MODEL, messages=warm)
                floor(chat, model=MODEL, messages=warm)
                if peer_fn is not None:
                    peer_fn(chat, model=MODEL, messages=warm)

        for n in SIZES:
            msgs = [system, *(message(i) for i in range(1, n))]
            rounds = max(ROUNDS[n] // div, 5)
            with ctxguard.conversation(f"bench-{n}"):
                for _ in range(max(rounds // 10, 3)):
                    orig(chat, model=MODEL, messages=msgs)
                    chat.create(model=MODEL, messages=msgs)
                own = self_us()
                floor_spent.clear()
                peer_inner.clear()
                raw = interleave(
                    partial(orig, chat, model=MODEL, messages=msgs),
                    partial(chat.create, model=MODEL, messages=msgs),
                    rounds,
                    partial(floor, chat, model=MODEL, messages=msgs),
                    partial(peer_fn, chat, model=MODEL, messages=msgs) if peer_fn is not None else None,
                )
            own = (self_us() - own) / rounds
            span_own = statistics.mean(floor_spent) / 1000
            result["sizes"][str(n)] = {"rounds": rounds, **summary(raw), "self_mean_us": own, "raw_ns": raw}
            result["sizes"][str(n)] |= {"floor_self_mean_us": span_own, "self_floor_ratio": own / span_own}
            if peer_fn is not None:
                peer_own = statistics.mean(t - i for t, i in zip(raw["peer"], peer_inner, strict=True)) / 1000
                result["sizes"][str(n)] |= {"peer_self_mean_us": peer_own}
        over20 = result["sizes"]["20"]["overhead_median_us"]
        self20 = result["sizes"]["20"]["self_mean_us"]
        for n in SIZES:
            s = result["sizes"][str(n)]
            s["ratio"] = s["overhead_median_us"] / s["baseline_median_us"]
            s["floor_ratio"] = s["overhead_median_us"] / s["floor_overhead_median_us"]
            if peer_fn is not None:
                s["peer_ratio"] = s["overhead_median_us"] / s["peer_overhead_median_us"]
            if n > 20:
                s["per_msg_beyond_20_us"] = (s["overhead_median_us"] - over20) / (n - 20)
                s["self_per_msg_beyond_20_us"] = (s["self_mean_us"] - self20) / (n - 20)

        # Growing conversation: one new distinct message per turn.
        gc.collect()
        history: list[Message] = [system]
        keys: tuple[str, ...] = ("baseline", "instrumented", "overhead", "floor_overhead", "self", "floor_self")
        if peer_fn is not None:
            keys = (*keys, "peer_overhead", "peer_self")
        grow: dict[str, list[int]] = {k: [] for k in keys}
        offset = 100_000  # distinct from every message used above
        with ctxguard.conversation("bench-grow"):
            gc.disable()
            try:
                for turn in range(1, TURNS + 1):
                    history = [*history, message(offset + turn)]
                    base = partial(orig, chat, model=MODEL, messages=history)
                    inst = partial(chat.create, model=MODEL, messages=history)
                    bare = partial(floor, chat, model=MODEL, messages=history)
                    arms = [base, inst, bare]
                    if peer_fn is not None:
                        arms.append(partial(peer_fn, chat, model=MODEL, messages=history))
                    own = self_us()
                    a, b, c, *d = one_round(arms, turn % len(arms))
                    grow["baseline"].append(a)
                    grow["instrumented"].append(b)
                    grow["overhead"].append(b - a)
                    grow["floor_overhead"].append(c - a)
                    grow["self"].append(round((self_us() - own) * 1000))
                    grow["floor_self"].append(floor_spent.pop())
                    if d:
                        grow["peer_overhead"].append(d[0] - a)
                        grow["peer_self"].append(d[0] - peer_inner.pop())
            finally:
                gc.enable()
        result["growing"] = {"raw_ns": grow}
        for lo, hi in WINDOWS:
            g = result["growing"][f"{lo}-{hi}"] = summary({k: v[lo - 1 : hi] for k, v in grow.items()})
            g["floor_ratio"] = g["overhead_median_us"] / g["floor_overhead_median_us"]
            g["self_floor_ratio"] = g["self_median_us"] / g["floor_self_median_us"]
            if peer_fn is not None:
                g["peer_ratio"] = g["overhead_median_us"] / g["peer_overhead_median_us"]
    finally:
        ctxguard.uninstrument()
        provider.shutdown()
        client.close()
    assert Completions.__dict__["create"] is original, "uninstrument() did not restore create"
    result["elapsed_s"] = time.perf_counter() - started
    report(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return 0


def peer_table(first: str, rows: dict[str, dict[str, float]], own: str, own_label: str) -> None:
    print(f"| {first} | peer overhead µs med / p90 | peer own µs {own_label} | ctxguard overhead µs med "
          "| ctxguard/peer |")
    print("|---:|---:|---:|---:|---:|")
    for name, s in rows.items():
        print(
            f"| {name} | {s['peer_overhead_median_us']:.0f} / {s['peer_overhead_p90_us']:.0f} "
            f"| {s[own]:.0f} | {s['overhead_median_us']:.0f} | {s['peer_ratio']:.2f}x |"
        )


def report(r: dict[str, Any]) -> None:
    print(
        f"python {r['python']} | openai {r['openai']} ({r['http']}) | tokens: {r['tokens']} | "
        f"cpus: {r['cpus']} | {r['platform']}{' | --quick' if r['quick'] else ''}\n"
    )
    print(
        "| msgs | rounds | baseline µs med / p90 | instrumented µs med / p90 | overhead µs med / p90 "
        "| overhead/baseline | µs per msg beyond 20: overhead / self | ctxguard self µs (mean) "
        "| bare span: overhead µs med / self µs (mean) | ctxguard/span: overhead / self |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, s in r["sizes"].items():
        per = "-"
        if "per_msg_beyond_20_us" in s:
            per = f"{s['per_msg_beyond_20_us']:.2f} / {s['self_per_msg_beyond_20_us']:.2f}"
        print(
            f"| {n} | {s['rounds']} | {s['baseline_median_us']:.0f} / {s['baseline_p90_us']:.0f} "
            f"| {s['instrumented_median_us']:.0f} / {s['instrumented_p90_us']:.0f} "
            f"| {s['overhead_median_us']:.0f} / {s['overhead_p90_us']:.0f} | {s['ratio']:.1%} | {per} "
            f"| {s['self_mean_us']:.0f} | {s['floor_overhead_median_us']:.0f} / {s['floor_self_mean_us']:.0f} "
            f"| {s['floor_ratio']:.1f}x / {s['self_floor_ratio']:.1f}x |"
        )
    if r["peer"]:
        print(f"\nPeer, same rounds: {r['peer']} (span + metrics, no logs pipeline, content off)\n")
        peer_table("msgs", r["sizes"], "peer_self_mean_us", "(mean)")
    print(f"\nGrowing conversation ({TURNS} turns, +1 new message per turn, history = turn + 1 messages)\n")
    print(
        "| turns | baseline µs med | instrumented µs med | overhead µs med / p90 | ctxguard self µs med "
        "| bare span: overhead / self µs med | ctxguard/span: overhead / self |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for lo, hi in WINDOWS:
        g = r["growing"][f"{lo}-{hi}"]
        print(
            f"| {lo}-{hi} | {g['baseline_median_us']:.0f} | {g['instrumented_median_us']:.0f} "
            f"| {g['overhead_median_us']:.0f} / {g['overhead_p90_us']:.0f} | {g['self_median_us']:.0f} "
            f"| {g['floor_overhead_median_us']:.0f} / {g['floor_self_median_us']:.0f} "
            f"| {g['floor_ratio']:.1f}x / {g['self_floor_ratio']:.1f}x |"
        )
    if r["peer"]:
        print()
        windows = {f"{lo}-{hi}": r["growing"][f"{lo}-{hi}"] for lo, hi in WINDOWS}
        peer_table("turns", windows, "peer_self_median_us", "med")
    print(
        "\nctxguard self = ctxguard_guard_duration_seconds: its own before()+finished() time,"
        " span end excluded;\noverhead = instrumented - baseline per round, so it also includes"
        " the span end and cache effects;\nbare span = the same call site under a wrapper that only"
        " records a span (the floor of any span-recording instrumentation), same rounds."
    )
    if r["peer"]:
        print("peer own = the peer's wrapper time outside the SDK call (its span end included).")
    print(f"\ntotal time: {r['elapsed_s']:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
