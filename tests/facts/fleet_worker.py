"""One worker process of an app that runs several, for tests/facts/test_fleet.py.

    python fleet_worker.py REDIS_URL PREFIX BASE_URL MODE

It instruments ctxguard with a ``RedisLedger`` (a shared digest key, its own registry and
in-memory span exporter), then answers one JSON command per stdin line with one JSON line:

* ``{"op": "live"}``: waits (hang guard 20 s) until its reader has loaded the shared values;
* ``{"op": "record", "conversation", "fact", "value"}`` / ``{"op": "record_many", "facts": [[id, value], ...]}``:
  records (tenant ``shop``), answers the ``time.monotonic()`` when each record was called and returned;
* ``{"op": "serve", "customer", "operator", "phone", "text", ["notes"], ["record"]}``: the app's
  turn. It records the customer's phone (unless ``record`` is false) and puts it in the payload,
  reads the notes of the last call **by operator** from the app's own Redis cache (the bug: the
  cache is keyed by operator, not by customer) unless ``notes`` is given, puts them in the
  payload too, calls the real openai SDK, and stores its own notes for that operator. Answers
  the span's facts attributes, its violation events, the ``ContextViolation`` message if
  enforce mode raised, and the Redis commands ctxguard's ledger client sent during the call;
* ``{"op": "stats"}``: the fleet index's size, when each fact id's shared value entered it,
  ``where="ledger"`` errors, the internal errors swallowed;
* ``{"op": "quit"}``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import openai
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from redis.backoff import NoBackoff
from redis.retry import Retry

import ctxguard
from ctxguard import _isolation, facts
from ctxguard.facts import shared

KEY = "fleet-test-key"
SYSTEM = {"role": "system", "content": "You are the delivery desk."}

errors: list[list[str]] = []
_isolation.add_error_hook(lambda where, exc: errors.append([where, repr(exc)]))

# When each fact id's shared value entered this process's fleet index (the freshness measurement).
added: dict[str, float] = {}
_add = shared.DigestIndex.add


def _timed_add(self: shared.DigestIndex, value: shared.SharedValue) -> None:
    _add(self, value)
    added.setdefault(value.fact_id, time.monotonic())


shared.DigestIndex.add = _timed_add  # type: ignore[method-assign]

# Every command ctxguard's ledger client sends from the thread that calls the model. The shared
# values reader's client is of this class too (the ledger makes its clients of the app's class),
# and its XREAD, on its own thread, may wake during a call: not the call's.
commands: list[str] = []


class CountingRedis(redis.Redis):
    def execute_command(self, *args: Any, **options: Any) -> Any:
        if threading.current_thread() is threading.main_thread():
            commands.append(str(args[0]).split()[0].upper())
        return super().execute_command(*args, **options)


def main() -> None:
    url, prefix, base_url, mode = sys.argv[1:5]
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    client = CountingRedis.from_url(url, socket_timeout=0.25, socket_connect_timeout=0.25, retry=Retry(NoBackoff(), 0))
    ledger = ctxguard.RedisLedger(url, prefix=prefix, client=client)
    ctxguard.instrument(mode=mode, ledger=ledger, digest_key=KEY, registry=registry, tracer_provider=tracing)
    app_cache = redis.Redis.from_url(url, socket_timeout=5)
    llm = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=20)

    def serve(cmd: dict[str, Any]) -> dict[str, Any]:
        customer, operator = cmd["customer"], cmd["operator"]
        notes_key = f"{prefix}:app:notes:{operator}"
        with ctxguard.conversation(customer, tenant="shop"):
            if cmd.get("record", True):
                ctxguard.record_fact("phone", cmd["phone"])
            notes = cmd.get("notes")
            if notes is None:
                cached = app_cache.get(notes_key)
                notes = cached.decode() if cached else None
            messages = [SYSTEM, {"role": "system", "content": f"Customer phone: {cmd['phone']}"},
                        *([{"role": "system", "content": f"Notes of the last call: {notes}"}] if notes else []),
                        {"role": "user", "content": cmd["text"]}]
            exporter.clear()
            commands.clear()
            own = registry.get_sample_value("ctxguard_guard_duration_seconds_sum") or 0.0
            started = time.monotonic()
            raised = None
            try:
                llm.chat.completions.create(model="gpt-4o", messages=messages)
            except ctxguard.ContextViolation as exc:
                raised = str(exc)
            seconds = time.monotonic() - started
            own = (registry.get_sample_value("ctxguard_guard_duration_seconds_sum") or 0.0) - own
            sent = list(commands)
            if raised is None and "notes" not in cmd:
                app_cache.set(notes_key, f"customer {customer} called, phone {cmd['phone']}")
        span = exporter.get_finished_spans()[-1]
        a = span.attributes or {}
        return {
            "violations": list(a.get("ctxguard.violations", ())),
            "leaked": list(a.get("ctxguard.facts.leaked", ())),
            "reach": a.get("ctxguard.facts.reach"),
            "skipped": list(a.get("ctxguard.checks.skipped", ())),
            "details": [dict(e.attributes or {}) for e in span.events if e.name == "ctxguard.violation"],
            "raised": raised,
            "commands": sent,
            "seconds": seconds,
            "guard_seconds": own,  # ctxguard's own part of it (ctxguard_guard_duration_seconds)
        }

    def record(conversation: str, fact_id: str, value: str) -> tuple[float, float]:
        """When record_fact was called, and when it returned (time.monotonic(): the same clock in every process)."""
        called = time.monotonic()
        ctxguard.record_fact(fact_id, value, conversation=conversation, tenant="shop")
        return called, time.monotonic()

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        reply: dict[str, Any]
        if op == "live":
            deadline = time.monotonic() + 20
            while not (facts.SINKS.shared is not None and facts.SINKS.shared.live) and time.monotonic() < deadline:
                time.sleep(0.01)
            reply = {"live": facts.SINKS.reach() == "fleet"}
        elif op == "record":
            reply = {"at": record(cmd["conversation"], cmd["fact"], cmd["value"])}
        elif op == "record_many":
            reply = {"at": {fact_id: record(cmd["conversation"], fact_id, value) for fact_id, value in cmd["facts"]}}
        elif op == "serve":
            reply = serve(cmd)
        elif op == "stats":
            reader = facts.SINKS.shared
            reply = {
                "index": len(reader.index) if reader is not None else 0,
                "added": added,
                "ledger_errors": registry.get_sample_value("ctxguard_guard_errors_total", {"where": "ledger"}),
                "errors": errors,
            }
        elif op == "quit":
            ctxguard.uninstrument()
            ledger.close()
            print(json.dumps({"errors": errors}), flush=True)
            return
        else:
            reply = {"unknown": op}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
