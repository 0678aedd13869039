"""The framework matrix's one procedure: play an app's scripted scenario twice against fresh
loopback fakes, uninstrumented then instrumented, and hold what ctxguard recorded against
what went over the wire.

``play(harness, scenario)`` checks, for every path of every framework:

- the app's result and the request bodies that arrived are identical with and without ctxguard;
- exactly one ctxguard span per request that reached the server, matched by the keyed digest of
  the body that arrived (``ctxguard.wire.hash``), and ``ctxguard.head.role`` is that body's head;
- ``ctxguard_guard_errors_total`` stays 0 (swallowed errors fail the test anyway: tests/conftest.py);
- with ``framework_spans`` (the spans a framework records itself, through the global tracer
  provider: ``global_spans()``): each call's usage is on exactly one span, ctxguard's or an
  enclosing framework span;
- last, the reply attributes of each call equal what the server returned for its request.

Each failure has its own ``AssertionError`` subclass, so a test that fails today because of a
known ctxguard bug is ``xfail(raises=...)`` for exactly that failure, and fails for any other.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ctxguard.digest import Digester
from ctxguard.testing import FakeLLM, RecordedRequest, ServedResponse
from ctxguard.testing.plugin import GuardHarness
from tests.conftest import KEY, guard_spans

#: Import names of the frameworks this run must test: absent, they fail instead of skipping.
REQUIRED = frozenset(os.environ.get("CTXGUARD_REQUIRE_FRAMEWORKS", "").split())


def framework(name: str) -> ModuleType:
    """Import a framework for a test module: skipped when absent, unless this run requires it."""
    if name not in REQUIRED:
        return pytest.importorskip(name)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(f"{name} is not importable ({exc}) and CTXGUARD_REQUIRE_FRAMEWORKS names it", pytrace=False)


class SpanMismatch(AssertionError):
    """Spans and requests that reached the server are not one to one."""


class ReplyMismatch(AssertionError):
    """A span's reply attributes differ from what the server returned for its request."""


class UsageNotOnOneSpan(AssertionError):
    """A call's usage (``gen_ai.usage.*``) is on none of its spans, or on more than one."""


class EvictionNotNamed(AssertionError):
    """An eviction was counted but the span of its request does not name it (``ctxguard.evicted``)."""


# -- what the server returned ------------------------------------------------------------

REPLY_KEYS = ("gen_ai.response.id", "gen_ai.response.model", "gen_ai.response.finish_reasons",
              "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")


def served(response: ServedResponse) -> dict[str, Any]:
    """The reply attributes a span must carry for what the server answered (the fake's own
    record of it: nothing for an error status)."""
    if response.status != 200:
        return {}
    reported = response.usage is not None  # a chat stream without include_usage reports none
    out = {"gen_ai.response.id": response.id, "gen_ai.response.model": response.model,
           "gen_ai.response.finish_reasons": response.finish_reasons or None,
           "gen_ai.usage.input_tokens": response.input_tokens if reported else None,
           "gen_ai.usage.output_tokens": response.output_tokens if reported else None}
    return {key: value for key, value in out.items() if value is not None}


# -- the body that arrived ---------------------------------------------------------------

def head_role(request: RecordedRequest) -> str:
    """The role of the first thing the model reads in ``request``'s body, stated independently of
    ctxguard's readers: Chat ``messages[0]``; Responses ``instructions`` or the first input item;
    Anthropic ``system`` or ``messages[0]``; Gemini ``systemInstruction`` or ``contents[0]``."""
    body = request.json
    route = request.path.split("?", 1)[0]
    if route.endswith("/responses"):
        if body.get("instructions"):
            return "system"
        first = body["input"] if isinstance(body["input"], str) else body["input"][0]
        if isinstance(first, str):
            return "user"
        return first.get("role") or ("tool" if first.get("type", "").endswith("_output") else "assistant")
    if route.endswith("/messages"):
        system = body.get("system")
        texts = [system] if isinstance(system, str) else [b.get("text", "") for b in system or ()]
        return "system" if any(t.strip() for t in texts) else body["messages"][0]["role"]
    if route.endswith(("generateContent", "streamGenerateContent")):
        system = body.get("systemInstruction") or body.get("system_instruction") or {}
        if any(part.get("text", "").strip() for part in system.get("parts", ())):
            return "system"
        role = body["contents"][0].get("role", "user")
        return "assistant" if role == "model" else str(role)
    return str(body["messages"][0]["role"])


# -- normalising results -----------------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
#: Keys whose values are clock readings, never the same twice (as are elapsed times, ``timedelta``:
#: pydantic-ai 2.78 added each response's ``duration``).
CLOCK_KEYS = frozenset({"created", "created_at", "completed_at", "timestamp"})


def stable(value: Any, origin: str = "\0") -> Any:
    """``value`` as plain data, with what differs between two identical runs (UUIDs, clock
    readings, the fake's ``origin``: each run has its own port) replaced by placeholders."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    elif hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
        value = {k: getattr(value, k) for k in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {str(k): "<clock>" if k in CLOCK_KEYS else stable(v, origin) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [stable(v, origin) for v in value]
    if isinstance(value, (datetime, date, timedelta)):
        return "<clock>"
    if isinstance(value, str):
        return _UUID.sub("<uuid>", value.replace(origin, "<fake>"))
    return value


# -- the procedure -----------------------------------------------------------------------

@dataclass
class Played:
    """One run of a scenario: what the app got, what arrived, what the server sent back."""

    result: Any
    requests: list[RecordedRequest]
    sent: list[ServedResponse] = field(default_factory=list)
    spans: list[Any] = field(default_factory=list)  # ctxguard's, one per request, in request order

    def bodies(self) -> list[Any]:
        return [r.json for r in self.requests]


def run(scenario: Callable[[FakeLLM], Any]) -> Played:
    """``scenario`` against a fresh fake, seeded alike every run: the same requests get the same ids."""
    with FakeLLM(seed="framework-matrix") as llm:  # the same ids for the same requests, run after run
        result = stable(scenario(llm), llm.origin)
        requests = list(llm.requests)
        answered = {id(r.request): r for r in llm.responses}
    return Played(result, requests, [answered[id(request)] for request in requests])


def play(harness: GuardHarness, scenario: Callable[[FakeLLM], Any], *, concurrent: bool = False,
         then: Callable[[Played], None] | None = None, framework_spans: InMemorySpanExporter | None = None,
         **instrument: Any) -> Played:
    """Play ``scenario`` uninstrumented, then under ctxguard (observe mode, ``instrument``
    arguments), and check what ctxguard recorded (module docstring). Returns the guarded run.
    ``concurrent``: the scenario sends requests at once, so they arrive in either order.
    ``then``: the test's own checks of the guarded run, before the reply attributes'.
    ``framework_spans``: where the framework's own spans went (``global_spans()``)."""
    plain = run(scenario)
    harness.start(mode="observe", **instrument)
    guarded = run(scenario)
    assert guarded.result == plain.result, "the app's result changed under ctxguard"
    bodies = [[json.dumps(stable(b), sort_keys=True) for b in p.bodies()] for p in (plain, guarded)]
    if concurrent:
        bodies = [sorted(b) for b in bodies]
    assert bodies[1] == bodies[0], "the request bodies changed under ctxguard"
    assert guarded.requests, "the scenario sent nothing"
    spans = guarded.spans = matched_spans(harness, guarded)
    errors = sum(s.value for m in harness.registry.collect() if m.name == "ctxguard_guard_errors"
                 for s in m.samples if s.name == "ctxguard_guard_errors_total")
    assert errors == 0, f"ctxguard_guard_errors_total = {errors}"
    for i, (request, span) in enumerate(zip(guarded.requests, spans, strict=True)):
        assert span.attributes["ctxguard.head.role"] == head_role(request), f"request {i + 1}"
    if then is not None:
        then(guarded)
    carriers = spans
    if framework_spans is not None:
        carriers = usage_carriers(spans, framework_spans.get_finished_spans())
    for i, (sent, span, carrier) in enumerate(zip(guarded.sent, spans, carriers, strict=True)):
        recorded = {k: span.attributes[k] for k in REPLY_KEYS if k in span.attributes and "usage" not in k}
        recorded |= {k: carrier.attributes[k] for k in REPLY_KEYS if k in carrier.attributes and "usage" in k}
        recorded = {k: tuple(v) if k.endswith("finish_reasons") else v for k, v in recorded.items()}
        if recorded != served(sent):
            raise ReplyMismatch(f"request {i + 1} ({span.name}): span has {recorded}, server sent {served(sent)}")
    return guarded


def matched_spans(harness: GuardHarness, played: Played) -> list[Any]:
    """ctxguard's spans, one per request in request order, matched by the digest of the body
    that arrived; ``SpanMismatch`` unless they are one to one."""
    digest = Digester(KEY).bytes
    spans = guard_spans(harness)
    pool: dict[str, list[Any]] = {}
    for span in spans:
        pool.setdefault(str(span.attributes.get("ctxguard.wire.hash")), []).append(span)
    matched = []
    for i, request in enumerate(played.requests):
        candidates = pool.get(digest(request.body))
        if not candidates:
            raise SpanMismatch(f"request {i + 1} ({request.path}) has no ctxguard span: {len(spans)} spans for "
                               f"{len(played.requests)} requests")
        matched.append(candidates.pop(0))
    left = [s.name for group in pool.values() for s in group]
    if left:
        raise SpanMismatch(f"{len(left)} ctxguard spans match no request that arrived: {left}")
    return matched


_GLOBAL_SPANS: list[InMemorySpanExporter] = []


def global_spans() -> InMemorySpanExporter:
    """The spans recorded through the global tracer provider (a framework's own: Strands', ADK's),
    emptied. The global provider is set once per process: here, the first time a test asks."""
    if not _GLOBAL_SPANS:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _GLOBAL_SPANS.append(exporter)
    _GLOBAL_SPANS[0].clear()
    return _GLOBAL_SPANS[0]


#: The GenAI conventions' inference operations: a span of one of them records one call's usage (an
#: agent's ``invoke_agent`` span records the sum of its calls').
INFERENCE = frozenset({"chat", "text_completion", "generate_content"})


def usage_carriers(spans: list[Any], others: tuple[ReadableSpan, ...]) -> list[Any]:
    """For each ctxguard span, the one span of its call that carries ``gen_ai.usage.*``: itself
    or an inference span of ``others`` enclosing it; ``UsageNotOnOneSpan`` for a call with none
    or several."""
    by_id = {s.context.span_id: s for s in others}
    carriers = []
    for i, span in enumerate(spans):
        call = [span]
        parent = span.parent
        while parent is not None and parent.span_id in by_id:
            call.append(by_id[parent.span_id])
            parent = call[-1].parent
        found = [s for s in call if "gen_ai.usage.input_tokens" in (s.attributes or {})
                 and (s is span or (s.attributes or {}).get("gen_ai.operation.name") in INFERENCE)]
        if len(found) != 1:
            raise UsageNotOnOneSpan(f"request {i + 1}: usage on {len(found)} spans of {[s.name for s in call]}")
        carriers.append(found[0])
    return carriers
