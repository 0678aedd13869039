"""Exactly one span per call carries ``gen_ai.usage.*`` when the call's request leaves after
ctxguard's span stopped being current (issue 40, point 2): Agno streams through the anthropic
SDK's ``messages.stream``, whose manager ctxguard returns (its span no longer current) and which
sends in ``__enter__``, where the SDK's own span (it records usage) opens as the root of another
trace. That span did not start beneath ctxguard's, so ctxguard's keeps the usage: its trace has
it once, and so has the SDK's. (Strands' and ADK's spans around the call, which keep the usage
themselves, are checked by their matrix tests: ``play(..., framework_spans=...)``.)
"""

from __future__ import annotations

import inspect

import pytest

from tests.frameworks.helpers import framework, matched_spans, run

USAGE = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
SYSTEM = "You are the order assistant of a parcel shop."
QUESTIONS = ["Where is my parcel?", "When will it arrive?"]


def test_agnos_anthropic_stream_keeps_the_usage_on_ctxguards_span(harness):
    framework("agno")
    anthropic = framework("anthropic")
    if "open_telemetry" not in inspect.signature(anthropic.Anthropic.__init__).parameters:
        pytest.skip("this anthropic release records no spans of its own (0.x)")
    from agno.agent import Agent
    from agno.models.anthropic import Claude

    def scenario(llm):  # type: ignore[no-untyped-def]
        llm.script(*["Your parcel is on its way."] * len(QUESTIONS))
        model = Claude(id="claude-sonnet-4-20250514", api_key="t",
                       client_params={"base_url": llm.anthropic_base_url, "max_retries": 0,
                                      "open_telemetry": {"tracer_provider": harness.tracer_provider}})
        agent = Agent(model=model, instructions=SYSTEM, telemetry=False)
        return ["".join(str(e.content) for e in agent.run(q, stream=True) if e.content) for q in QUESTIONS]

    harness.start(mode="observe")
    played = run(scenario)
    ours = matched_spans(harness, played)  # one ctxguard span per request that arrived
    spans = harness.spans()
    sdk = [s for s in spans if s.instrumentation_scope.name == "com.anthropic.sdk.python"]
    assert len(sdk) == len(played.requests), "the anthropic SDK records its own span of each request"
    for i, (span, sent) in enumerate(zip(ours, played.sent, strict=True)):
        carrying = [s for s in spans if s.context.trace_id == span.context.trace_id
                    and any(k in (s.attributes or {}) for k in USAGE)]
        assert carrying == [span], f"request {i + 1}: usage on {[s.name for s in carrying]}"
        assert (span.attributes[USAGE[0]], span.attributes[USAGE[1]]) == (sent.input_tokens, sent.output_tokens)
    assert not {s.context.trace_id for s in sdk} & {s.context.trace_id for s in ours}
