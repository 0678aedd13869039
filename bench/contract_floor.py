"""What the contract's outputs alone cost per call, next to ctxguard, a bare span and the peer.

    python bench/contract_floor.py [--sizes 20] [--rounds 400] [--runs 3]

SPEC §4 and §5 ask for outputs on every call, whatever the checks found: one span
carrying the GenAI and ``ctxguard.*`` attributes, the response's attributes, and the
Prometheus series (calls, one outcome per check, the token, budget, pinned and duration
histograms). This benchmark prices those outputs with no inspection at all.

The "contract outputs" arm is a wrapt wrapper that replays, on every call, exactly what
ctxguard emitted for the same payload on a real guarded call made beforehand: the same
attribute dicts (copied, not rebuilt), the same metric cells and observations through
the same ``Metrics.add``, a span started, made current and ended on the same provider,
and the response read for its ``gen_ai.response.*`` attributes. It normalises nothing,
digests nothing, counts no tokens, runs no check and does not observe the wire. Any
implementation of the contract that uses the OpenTelemetry SDK for its spans pays at
least this, however fast its inspection; the difference between it and ctxguard is
what ctxguard's inspection costs in situ.

Arms, timed in rounds with rotating order as in bench/overhead.py (same mock
transport, same span pipeline, gc off in timed loops):

* bare: the original ``create``;
* ctxguard: ``client.chat.completions.create`` under ``ctxguard.instrument()``, every
  check on, in a conversation;
* span: a wrapper that only records a bare span (bench/overhead.py's floor);
* contract outputs: the replay described above;
* peer: OpenTelemetry's own openai instrumentation, when installed
  (bench/requirements-peer.txt);
* fused inspection + outputs (``--fused``): bench/fused_inspection.py's one-function
  inspection of the common shape (wire digest included), then the replay: the cheapest
  ctxguard conceivable for this payload, as an overhead over the bare call.

Each arm's "own" time is its wrapper's time outside the SDK call: ctxguard's is its
``ctxguard_guard_duration_seconds`` (span end excluded), less what the replays add to
that histogram as ctxguard would (before 2026-11-30 it was not taken out, and ctxguard's
own time read ~75 µs high, ~130 µs with the fused arm); the others' are timed around the
wrapped call.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, cast

import openai
import prometheus_client
import wrapt
from openai.resources.chat.completions.completions import Completions
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

import ctxguard
from ctxguard.guard import Guard
from ctxguard.intercept.answers import HttpResults, observe_answer
from ctxguard.providers import openai as openai_provider
from ctxguard.record import _reply_attributes
from ctxguard.telemetry.metrics import Hist
from ctxguard.telemetry.spans import set_attributes

sys.path.insert(0, str(Path(__file__).parent))
import overhead as ov

NO_HTTP = HttpResults()  # the result types whose HTTP response is read: none here (a parsed answer)

ADAPTER = openai_provider.ADAPTER
API = "chat.completions"
#: The durations replays add to ctxguard's duration histogram (ns), as ctxguard would: they
#: are not ctxguard's own time, so they are taken out of it.
REPLAYED_NS: list[int] = []


class Outputs:
    """Everything ctxguard emitted for one call, kept to be emitted again as is."""

    def __init__(self, guard: Guard, kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        call = guard.before(openai_provider.PROVIDER, API, kwargs)
        assert call is not None and not call.verdict.violations, "the replayed call must pass every check"
        call.wire(body)
        m = guard.metrics
        verdict = call.verdict
        payload, ctx = verdict.payload, verdict.ctx
        assert ctx is not None and not isinstance(ctx.budget, str) and ctx.pinned is not None
        self.name = f"{payload.operation} {payload.model}"
        self.start_attrs = guard._recorder._attributes(verdict)
        self.cells = [m.calls_at[(payload.provider, payload.operation)]]
        self.cells += [m.checks_at[(o.check, o.outcome)] for o in verdict.outcomes]
        self.observed: list[tuple[Hist, float]] = [
            (m.tokens_h[payload.provider], payload.tokens),
            (m.utilization_h[payload.provider], ctx.budget.utilization),
            (m.pinned_h, ctx.pinned_tokens),
        ]
        # counts answer_consistent: its cell joins the late ones
        observe_answer(call, openai_provider.SITES[0], response, NO_HTTP)
        self.late_attrs = dict(call.trace.attrs)
        self.late_cells = [m.checks_at[(check, "pass")] for check in ("wire_intact",)]
        self.late_cells.append(m.checks_at[("answer_consistent", "skip")])
        self.metrics = m


def replay(
    outputs: Outputs, tracer: Any, spent: list[int], inspect: Callable[[dict[str, Any]], object] | None = None
) -> Callable[..., Any]:
    """A wrapt wrapper emitting ``outputs`` around each call, as ctxguard's wrapper would;
    ``inspect(kwargs)`` first, when given (the fused arm)."""
    m = outputs.metrics

    def wrapper(wrapped: Any, instance: Any, call_args: Any, kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        if inspect is not None:
            inspect(kwargs)
        m.add(outputs.cells, outputs.observed)
        span = tracer.start_span(outputs.name, kind=SpanKind.CLIENT)
        token = otel_context.attach(trace.set_span_in_context(span))
        if span.is_recording():
            set_attributes(span, dict(outputs.start_attrs))
        t1 = time.perf_counter_ns()
        try:
            result = wrapped(*call_args, **kwargs)
        finally:
            t2 = time.perf_counter_ns()
            otel_context.detach(token)
        late = dict(outputs.late_attrs)
        reply = ADAPTER.read_response(API, result)
        if reply is not None:
            late.update(_reply_attributes(reply))
        set_attributes(span, late)
        span.end()
        t3 = time.perf_counter_ns()
        m.add(outputs.late_cells, ((m.duration_h, (t1 - t0 + t3 - t2) / 1e9),))
        REPLAYED_NS.append(t1 - t0 + t3 - t2)
        spent.append(t1 - t0 + time.perf_counter_ns() - t2)
        return result

    return wrapper


def same_cells(m: Any, guarded: Callable[[], object], replayed: Callable[[], object]) -> None:
    """The replay adds to the same series (the same cells: counters, histogram buckets, sums) as a
    guarded call, but the duration histogram's, whose bucket depends on the time taken. The
    amounts added to sums may differ: calibration still moves the token estimate a little."""
    duration = set(range(m.duration_h[0], m.duration_h[0] + len(m.duration_h[1]) + 2))

    def changed(fn: Callable[[], object]) -> dict[int, float]:
        before = list(m._cells)
        fn()
        return {i: v - before[i] for i, v in enumerate(m._cells) if v != before[i] and i not in duration}

    a, b = changed(guarded), changed(replayed)
    assert a.keys() == b.keys(), (a, b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20", help="comma-separated message counts")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument(
        "--fused", action="store_true", help="add bench/fused_inspection.py's inspection before the replay (an arm)"
    )
    args = parser.parse_args()

    original = Completions.__dict__["create"]
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ov.DropExporter()))
    peer = None if args.no_peer else ov.peer_instrumentation(original, provider)
    registry = prometheus_client.CollectorRegistry()
    policy = ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800))
    guard = ctxguard.instrument(policy=policy, registry=registry, tracer_provider=provider, digest_key=ov.KEY)
    assert guard is not None, "ctxguard disabled (CTXGUARD_DISABLED?)"
    ov.keep_bare_calls_bare()
    orig: Callable[..., object] = cast(Any, Completions.create).__wrapped__
    assert orig is original
    http_client = ov.http_lib.Client(transport=ov.http_lib.MockTransport(ov.handler))
    client = openai.OpenAI(api_key="x", base_url=ov.BASE_URL, max_retries=0, http_client=http_client)
    chat: Any = client.chat.completions
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
    tracer = provider.get_tracer("floor")
    span_spent: list[int] = []
    contract_spent: list[int] = []
    fused_spent: list[int] = []

    def self_ns() -> float:
        return (registry.get_sample_value("ctxguard_guard_duration_seconds_sum") or 0.0) * 1e9

    print("| msgs | arm | overhead µs, median per run | own µs, mean per run | overhead / contract |")
    print("|---:|---|---|---|---:|")
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            kwargs: dict[str, Any] = {
                "model": ov.MODEL,
                "messages": [ov.system_message(pinned), *(ov.message(i) for i in range(1, size))],
            }
            body = json.dumps(kwargs).encode()
            with ctxguard.conversation(f"floor-{size}"):
                response = orig(chat, **kwargs)
                for _ in range(3):  # calibrated from the response's usage, as in steady state
                    chat.create(**kwargs)
                outputs = Outputs(guard, kwargs, body, response)
                contract = wrapt.FunctionWrapper(original, replay(outputs, tracer, contract_spent))
                span = wrapt.FunctionWrapper(original, ov.recording_span(tracer, spent=span_spent))
                arms: dict[str, Callable[[], object]] = {
                    "bare": partial(orig, chat, **kwargs),
                    "ctxguard": partial(chat.create, **kwargs),
                    "span": partial(span, chat, **kwargs),
                    "contract outputs": partial(contract, chat, **kwargs),
                }
                if peer is not None:
                    arms["peer"] = partial(peer[0], chat, **kwargs)
                if args.fused:
                    import fused_inspection  # imports this module: only when asked for

                    fused = fused_inspection.Fused(guard)
                    instruction = fused_inspection.instruction_of(kwargs)
                    fused_call = wrapt.FunctionWrapper(
                        original,
                        replay(outputs, tracer, fused_spent, partial(fused.call, body=body, instruction=instruction)),
                    )
                    arms["fused inspection + outputs"] = partial(fused_call, chat, **kwargs)
                same_cells(outputs.metrics, arms["ctxguard"], arms["contract outputs"])
                for _ in range(100):
                    for fn in arms.values():
                        fn()
                over: dict[str, list[float]] = {k: [] for k in arms if k != "bare"}
                own: dict[str, list[float]] = {k: [] for k in over}
                for _ in range(args.runs):
                    span_spent.clear()
                    contract_spent.clear()
                    fused_spent.clear()
                    if peer is not None:
                        peer[1].clear()
                    REPLAYED_NS.clear()
                    before = self_ns()
                    gc.collect()
                    gc.disable()
                    try:
                        fns = list(arms.values())
                        rows = [ov.one_round(fns, r % len(fns)) for r in range(args.rounds)]
                    finally:
                        gc.enable()
                    columns = dict(zip(arms, zip(*rows, strict=True), strict=True))
                    for name in over:
                        diff = [b - a for a, b in zip(columns["bare"], columns[name], strict=True)]
                        over[name].append(statistics.median(diff) / 1000)
                    own["ctxguard"].append((self_ns() - before - sum(REPLAYED_NS)) / args.rounds / 1000)
                    own["span"].append(statistics.mean(span_spent) / 1000)
                    own["contract outputs"].append(statistics.mean(contract_spent) / 1000)
                    if fused_spent:
                        own["fused inspection + outputs"].append(statistics.mean(fused_spent) / 1000)
                    if peer is not None:
                        peer_own = (t - i for t, i in zip(columns["peer"], peer[1], strict=True))
                        own["peer"].append(statistics.mean(peer_own) / 1000)
            floor = statistics.median(over["contract outputs"])
            for name in over:
                ratio = statistics.median(over[name]) / floor
                print(
                    f"| {size} | {name} | {' / '.join(f'{v:.0f}' for v in over[name])} "
                    f"| {' / '.join(f'{v:.0f}' for v in own[name])} | {ratio:.2f}x |"
                )
    finally:
        ctxguard.uninstrument()
        provider.shutdown()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
