"""``ctxguard.ViolationSampler`` (ctxguard/telemetry/sampling.py): beside a 1% ratio sampler,
every call whose before-send checks failed exports its span, about 1% of the clean ones do, and
a violating span keeps its place in the app's trace. The real openai SDK over loopback HTTP."""

from __future__ import annotations

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard import Budget, Policy, ViolationSampler

SHORT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
LONG = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "word " * 2000}]
CLEAN, VIOLATING = 300, 40


def _provider(sampler):  # type: ignore[no-untyped-def]
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _guarded(provider):  # type: ignore[no-untyped-def]
    return ctxguard.instrument(mode="observe", registry=CollectorRegistry(), tracer_provider=provider,
                               digest_key=b"ctxguard-tests", policy=Policy(budget=Budget(window=1000)))


def test_every_violating_call_is_exported_and_about_one_percent_of_the_clean_ones(llm):
    provider, exporter = _provider(ViolationSampler(ParentBased(TraceIdRatioBased(0.01))))
    _guarded(provider)
    try:
        with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
            for i in range(CLEAN + VIOLATING):
                client.chat.completions.create(model="gpt-4o", messages=LONG if i % 8 == 0 and i < 8 * VIOLATING
                                               else SHORT)
    finally:
        ctxguard.uninstrument()
    spans = [s for s in exporter.get_finished_spans() if s.attributes.get("ctxguard.payload.hash")]
    violating = [s for s in spans if "payload_under_budget" in s.attributes.get("ctxguard.violations", ())]
    clean = [s for s in spans if not s.attributes.get("ctxguard.violations")]
    assert len(violating) == VIOLATING
    assert len(clean) <= 15  # 1% of 300 is 3; P(more than 15) is ~1e-7


def test_a_violating_span_keeps_its_parent_in_the_app_trace_even_when_the_parent_is_not_sampled(llm):
    provider, exporter = _provider(ViolationSampler(ParentBased(ALWAYS_OFF)))
    _guarded(provider)
    tracer = provider.get_tracer("app")
    try:
        with (openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client,
              tracer.start_as_current_span("handle request") as parent):
            client.chat.completions.create(model="gpt-4o", messages=LONG)
            client.chat.completions.create(model="gpt-4o", messages=SHORT)
    finally:
        ctxguard.uninstrument()
    spans = exporter.get_finished_spans()
    assert [s.attributes["ctxguard.violations"] for s in spans] == [("payload_under_budget",)]
    (span,) = spans
    assert not parent.is_recording()
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id


def test_the_base_sampler_decides_every_span_without_a_violation():
    sampler = ViolationSampler(ALWAYS_OFF)
    decided = [sampler.should_sample(None, 1, "chat gpt-4o", attributes={"ctxguard.violations": names}).decision
               for names in ((), ("x",))]
    assert [d.is_sampled() for d in decided] == [False, True]
    assert "AlwaysOffSampler" in sampler.get_description()
