"""``ctxguard demo``: the "system prompt vanished at message N" bug, found by ctxguard.

A small chat app talks to a built-in fake model through the real openai SDK.
The buggy version keeps its system prompt as element zero of a
``deque(maxlen=N)``, so the buffer silently evicts it once the conversation is
long enough; the fixed version keeps the instruction outside the buffer. Every
line below is read back from the span ctxguard emitted for that call.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from .. import _instrument, conversation, record_fact, render_pinned
from ..budget import Budget
from ..builder import ContextBuilder
from ..policy import Pinned, Policy
from ..testing.fake_llm import FakeLLM

SYSTEM = "You are the order assistant of Acme Shop. Answer in one short paragraph."
FACTS = {"order_id": "A-1041", "shipping_city": "Pune"}
BUFFER = 6


def _system_message() -> dict[str, str]:
    return {"role": "system", "content": SYSTEM + "\n\n" + render_pinned(FACTS, max_tokens=200)}


class BuggyChat:
    """History in one rotating buffer, system prompt as its first element."""

    def __init__(self) -> None:
        self.history: deque[dict[str, str]] = deque([_system_message()], maxlen=BUFFER)

    def payload(self, user: str) -> list[dict[str, str]]:
        self.history.append({"role": "user", "content": user})
        return list(self.history)

    def remember(self, answer: str) -> None:
        self.history.append({"role": "assistant", "content": answer})


class FixedChat(BuggyChat):
    """The fix: ``ctxguard.ContextBuilder`` builds every payload (system first, the pinned
    facts rebuilt from the ledger, the verbatim tail sized in tokens)."""

    def __init__(self) -> None:
        self.builder = ContextBuilder(
            "gpt-4o", system=SYSTEM, budget=Budget(reserved_output=200), pinned=Pinned(max_tokens=200),
            tail_tokens=80,
        )
        self.log: list[dict[str, str]] = []
        self.recorded = False

    def payload(self, user: str) -> list[dict[str, str]]:
        if not self.recorded:  # the app tells ctxguard its facts once; the builder pins them every call
            for fact_id, value in FACTS.items():
                record_fact(fact_id, value)
            self.recorded = True
        messages = self.builder.build(self.log, {"role": "user", "content": user})
        self.log.append({"role": "user", "content": user})
        return messages

    def remember(self, answer: str) -> None:
        self.log.append({"role": "assistant", "content": answer})


def _turns(
    name: str, chat: BuggyChat, client: Any, exporter: InMemorySpanExporter, turns: int, out: Callable[[str], None]
) -> int | None:
    flip = None
    with conversation(f"demo-{name}"):
        for turn in range(1, turns + 1):
            exporter.clear()
            reply = client.chat.completions.create(
                model="gpt-4o", messages=chat.payload(f"Question {turn}: where is my order?"), max_tokens=200
            )
            chat.remember(reply.choices[0].message.content or "")
            attrs = exporter.get_finished_spans()[-1].attributes or {}
            violations = [str(v) for v in attrs.get("ctxguard.violations", ())]  # type: ignore[union-attr]
            evicted = [str(v) for v in attrs.get("ctxguard.evicted", ())]  # type: ignore[union-attr]
            head = attrs.get("ctxguard.head.role", "?")
            if flip is None and "system_at_head" in violations:
                flip = turn
            out(
                f"  turn {turn:>2}  head={head!s:<9} tokens={attrs.get('ctxguard.payload.tokens', 0):>4}  "
                f"violations={','.join(violations) or '-'}  evicted={','.join(evicted) or '-'}"
            )
    return flip


def run_demo(*, turns: int = 8, serve: int | None = None, out: Callable[[str], None] = print) -> int:
    import openai

    started = time.perf_counter()
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    _instrument.uninstrument()
    _instrument.instrument(
        policy=Policy(pinned=Pinned(max_tokens=200)),
        registry=registry,
        tracer_provider=tracer_provider,
        digest_key=b"ctxguard-demo",
    )
    try:
        with FakeLLM() as llm, openai.OpenAI(base_url=llm.base_url, api_key="demo", max_retries=0) as client:
            out(f"buggy app: system prompt stored in deque(maxlen={BUFFER})")
            flip = _turns("buggy", BuggyChat(), client, exporter, turns, out)
            out(f"flip point: turn {flip}" if flip else "flip point: none (system prompt kept)")
            out("fixed app: payloads built by ctxguard.ContextBuilder")
            fixed_flip = _turns("fixed", FixedChat(), client, exporter, turns, out)
            out(f"flip point: turn {fixed_flip}" if fixed_flip else "flip point: none (system prompt kept)")
    finally:
        _instrument.uninstrument()
        tracer_provider.shutdown()

    out("metric totals:")
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.value:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out(f"  {sample.name}{{{labels}}} {sample.value:g}")
    out(f"done in {time.perf_counter() - started:.2f}s")
    if serve is not None:
        import signal

        from prometheus_client import start_http_server

        # Ctrl-C (and SIGTERM) stop it even when started with SIGINT ignored, as background
        # jobs of a non-interactive shell are.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.default_int_handler)
        server, _thread = start_http_server(serve, addr="127.0.0.1", registry=registry)
        out(f"serving /metrics on http://127.0.0.1:{server.server_port}/metrics (Ctrl-C to stop)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            server.shutdown()
    return 0
