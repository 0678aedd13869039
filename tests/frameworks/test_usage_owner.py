"""Exactly one span per call carries ``gen_ai.usage.*``, whatever encloses it (issue 40, point 2),
with the frameworks whose own tracing records a call's usage, traced as an app traces them: one
global OpenTelemetry tracer provider.

- Strands opens its ``chat`` span around each model call and records the usage on it: ctxguard's
  span, its child, leaves the usage to it.
- Google ADK opens ``generate_content <model>`` around each model call, and records the usage on
  it: the same.
- Agno streams through the anthropic SDK's ``messages.stream``: ctxguard's span stops being
  current when the manager is returned, and the SDK's own span (which records usage) opens later,
  in ``__enter__``, as the root of another trace. It is not beneath ctxguard's span, so ctxguard's
  keeps the usage: its trace has it once, and so has the SDK's.

Each test holds, per request that reached the fake: one ctxguard span (matched by the digest of
the body that arrived), the span that carries the usage in its trace is the one named above, it is
the only one there, and its numbers are what the server answered.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from tests.frameworks.helpers import Played, framework, matched_spans, run

USAGE = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
#: Operations whose span sums the usage of the calls beneath it (Strands' ``invoke_agent`` span of an
#: agent run): an aggregate by the conventions, not a second record of one call.
AGGREGATES = frozenset({"invoke_agent", "invoke_workflow"})
SYSTEM = "You are the order assistant of a parcel shop."
QUESTIONS = ["Where is my parcel?", "When will it arrive?"]


class _ToTheTest(SpanProcessor):
    """Hands the spans the app's global provider ends to the running test's exporter."""

    def __init__(self) -> None:
        self.exporter: Any = None

    def on_end(self, span: ReadableSpan) -> None:
        if self.exporter is not None:
            self.exporter.export((span,))


_TO_THE_TEST = _ToTheTest()


@pytest.fixture
def traced(harness) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """The app's global tracer provider (set once a process, as apps do), its spans in the harness's
    exporter beside ctxguard's."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    if _TO_THE_TEST not in getattr(provider._active_span_processor, "_span_processors", ()):
        provider.add_span_processor(_TO_THE_TEST)  # type: ignore[attr-defined]
    _TO_THE_TEST.exporter = harness.exporter
    try:
        yield harness
    finally:
        _TO_THE_TEST.exporter = None


def usage_owners(harness, played: Played) -> list[ReadableSpan]:  # type: ignore[no-untyped-def]
    """Per request, the one span of its ctxguard span's trace that carries a call's usage (not an
    aggregate's), holding what the server answered; fails unless there is exactly one."""
    spans = harness.spans()
    owners = []
    for i, (ours, sent) in enumerate(zip(matched_spans(harness, played), played.sent, strict=True)):
        carrying = [s for s in spans if s.context.trace_id == ours.context.trace_id
                    and any(k in (s.attributes or {}) for k in USAGE)
                    and s.attributes.get("gen_ai.operation.name") not in AGGREGATES]
        assert len(carrying) == 1, f"request {i + 1}: usage on {[s.name for s in carrying]}"
        (owner,) = carrying
        assert (owner.attributes["gen_ai.usage.input_tokens"], owner.attributes["gen_ai.usage.output_tokens"]) == (
            sent.input_tokens, sent.output_tokens), f"request {i + 1}"
        owners.append(owner)
    return owners


def guarded(harness, scenario) -> tuple[Played, list[ReadableSpan]]:  # type: ignore[no-untyped-def]
    """``scenario`` under ctxguard (observe mode): what was played, and ctxguard's span per request."""
    harness.start(mode="observe")
    played = run(scenario)
    assert played.requests, "the scenario sent nothing"
    return played, matched_spans(harness, played)


def test_strands_chat_span_keeps_the_usage(traced):
    strands = framework("strands")
    from strands.models.openai import OpenAIModel

    def scenario(llm):  # type: ignore[no-untyped-def]
        llm.script(*["Your parcel is on its way."] * len(QUESTIONS))
        model = OpenAIModel(client_args={"base_url": llm.base_url, "api_key": "t", "max_retries": 0},
                            model_id="gpt-4o")
        agent = strands.Agent(model=model, system_prompt=SYSTEM, callback_handler=None)
        return [str(agent(question)) for question in QUESTIONS]

    played, ours = guarded(traced, scenario)
    owners = usage_owners(traced, played)
    for span, owner in zip(ours, owners, strict=True):
        assert owner.name == "chat" and owner.instrumentation_scope.name.startswith("strands")
        assert span.parent is not None and span.parent.span_id == owner.context.span_id
        assert span.attributes["gen_ai.response.id"]  # the rest of the answer is still ctxguard's


def test_adks_generate_content_span_keeps_the_usage(traced):
    framework("google.adk")
    from google.adk.agents import LlmAgent
    from google.adk.models.google_llm import Gemini
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    def scenario(llm):  # type: ignore[no-untyped-def]
        llm.script(*["Your parcel is on its way."] * len(QUESTIONS))
        os.environ.setdefault("GOOGLE_API_KEY", "t")
        agent = LlmAgent(name="orders", instruction=SYSTEM,
                         model=Gemini(model="gemini-2.5-flash", base_url=llm.gemini_base_url))
        runner = InMemoryRunner(agent=agent, app_name="orders")

        async def talk() -> list[str]:
            session = await runner.session_service.create_session(app_name="orders", user_id="u")
            said = []
            for question in QUESTIONS:
                message = types.Content(role="user", parts=[types.Part(text=question)])
                async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
                    if event.content and event.content.parts:
                        said.extend(p.text for p in event.content.parts if p.text)
            return said

        return asyncio.run(talk())

    played, ours = guarded(traced, scenario)
    owners = usage_owners(traced, played)
    for span, owner in zip(ours, owners, strict=True):
        assert owner.name == "generate_content gemini-2.5-flash"
        assert span.parent is not None and span.parent.span_id == owner.context.span_id


def test_agnos_anthropic_stream_keeps_the_usage_on_ctxguards_span(traced):
    framework("agno")
    from agno.agent import Agent
    from agno.models.anthropic import Claude

    def scenario(llm):  # type: ignore[no-untyped-def]
        llm.script(*["Your parcel is on its way."] * len(QUESTIONS))
        model = Claude(id="claude-sonnet-4-20250514", api_key="t",
                       client_params={"base_url": llm.anthropic_base_url, "max_retries": 0})
        agent = Agent(model=model, instructions=SYSTEM, telemetry=False)
        said = []
        for question in QUESTIONS:
            said.append("".join(str(e.content) for e in agent.run(question, stream=True) if e.content))
        return said

    played, ours = guarded(traced, scenario)
    owners = usage_owners(traced, played)
    assert owners == ours
    sdk = [s for s in traced.spans() if s.instrumentation_scope.name == "com.anthropic.sdk.python"]
    assert len(sdk) == len(played.requests), "the anthropic SDK records its own span of each request"
    assert all(s.context.trace_id not in {o.context.trace_id for o in ours} for s in sdk)
