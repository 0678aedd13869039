"""Per-stage cost of ctxguard's pipeline at 20 messages, in a tight loop.

    .venv/bin/python bench/stages.py [MESSAGES]     # default 20

Each line is the mean over 20,000 runs of one stage, warmed up, gc off, with the
same client, payload and span pipeline as bench/overhead.py (every check on, a
recording SDK tracer whose exporter drops spans). A tight loop keeps ctxguard's code
and data in the CPU caches, so every stage costs 2.5-4x more in situ (right after a
real SDK call): use this for where the time goes, bench/overhead.py for what an app
sees.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import prometheus_client
from openai.resources.chat.completions.completions import Completions
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

import ctxguard
from ctxguard.checks.wire import wire_intact
from ctxguard.inspection import Verdict
from ctxguard.intercept.answers import HttpResults, observe_answer
from ctxguard.memo import Memo
from ctxguard.providers import openai as openai_provider
from ctxguard.record import CallTelemetry

sys.path.insert(0, str(Path(__file__).parent))
import overhead as ov

NO_HTTP = HttpResults()  # the result types whose HTTP response is read: none here (a parsed answer)

ADAPTER = openai_provider.ADAPTER
SIZE = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def mean_us(fn: Callable[[], object], n: int = 20_000) -> float:
    for _ in range(2_000):
        fn()
    gc.disable()
    try:
        started = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return (time.perf_counter_ns() - started) / n / 1000
    finally:
        gc.enable()


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ov.DropExporter()))
    guard = ctxguard.instrument(policy=ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800)),
                                registry=prometheus_client.CollectorRegistry(), tracer_provider=provider,
                                digest_key=b"bench")
    assert guard is not None
    ov.keep_bare_calls_bare()
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
    kwargs: dict[str, Any] = {"model": "gpt-4o",
                              "messages": [ov.system_message(pinned), *(ov.message(i) for i in range(1, SIZE))]}
    body = json.dumps(kwargs).encode()
    client = openai.OpenAI(api_key="x", base_url=ov.BASE_URL, max_retries=0,
                           http_client=ov.http_lib.Client(transport=ov.http_lib.MockTransport(ov.handler)))
    response = Completions.create.__wrapped__(client.chat.completions, **kwargs)  # type: ignore[attr-defined]
    view = ADAPTER.normalise("chat.completions", kwargs)
    rows: list[tuple[str, float]] = []

    with ctxguard.conversation("bench-stages"):
        def whole() -> None:
            call = guard.before(openai_provider.PROVIDER, "chat.completions", kwargs)
            assert call is not None
            call.wire(body)
            observe_answer(call, openai_provider.SITES[0], response, NO_HTTP)

        payload = guard.measurer.measure(view)

        def evaluate() -> Verdict:
            return guard._inspector.inspect(payload, ("bench-stages", None), guard.policy)

        judged = evaluate()
        recorder = guard._recorder

        def record() -> None:
            t = CallTelemetry()
            recorder.start(t, judged, None)
            recorder.end(t, judged, 0.0, None, None)

        sent = guard.before(openai_provider.PROVIDER, "chat.completions", kwargs)
        assert sent is not None and sent.verdict.ctx is not None
        ctx = sent.verdict.ctx

        def wire() -> None:
            sent.wire_hash = None
            sent.wire(body)

        tracer = recorder.tracer
        memo = Memo()
        guard.measurer.measure(ADAPTER.normalise("chat.completions", kwargs, memo), memo)

        def remembered() -> None:
            guard.measurer.measure(ADAPTER.normalise("chat.completions", kwargs, memo), memo)

        agent = {"model": "gpt-4o", "messages": ov.agent_messages(SIZE)}
        agent_memo = Memo()
        guard.measurer.measure(ADAPTER.normalise("chat.completions", agent, agent_memo), agent_memo)

        def agent_remembered() -> None:
            guard.measurer.measure(ADAPTER.normalise("chat.completions", agent, agent_memo), agent_memo)

        def bare_span() -> None:
            tracer.start_span("x", kind=SpanKind.CLIENT).end()
        rows += [
            ("whole call (before + wire + finished)", mean_us(whole)),
            ("normalise (provider module)", mean_us(lambda: ADAPTER.normalise("chat.completions", kwargs))),
            ("measure (cached digests and counts)", mean_us(lambda: guard.measurer.measure(view))),
            ("normalise + measure, history resent (conversation memo)", mean_us(remembered)),
            ("  the same, an agent's history (tool calls and results)", mean_us(agent_remembered)),
            ("evaluate (pinned, budget, diff, facts, checks)", mean_us(evaluate)),
            ("record (span start/attributes/end, metrics, events)", mean_us(record)),
            ("  of which: span attributes dict", mean_us(lambda: recorder._attributes(judged))),
            ("  of which: bare SDK span start + end", mean_us(bare_span)),
            ("wire (body digest, wire_intact, outcome)", mean_us(wire)),
            ("  of which: keyed digest of the body", mean_us(lambda: guard.measurer.digester.bytes(body))),
            ("  of which: wire_intact", mean_us(lambda: wire_intact(payload, ctx, body))),
            ("reading the response", mean_us(lambda: ADAPTER.read_response("chat.completions", response))),
        ]
    ctxguard.uninstrument()
    print(f"{SIZE} messages, body {len(body)} bytes; mean µs per run, tight loop")
    for name, us in rows:
        print(f"{name:<58} {us:8.1f}")


if __name__ == "__main__":
    main()
