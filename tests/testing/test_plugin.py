"""The pytest plugin's ``ctxguard_guard`` harness: each test's guard reports into sinks of its own."""

from __future__ import annotations

import openai
import pytest

from ctxguard.testing import FakeLLM
from ctxguard.testing.plugin import GuardHarness
from tests.telemetry.test_meter import otel_series, sdk_points

HEAD = ("ctxguard.violations", (("check", "system_at_head"), ("provider", "openai")))


@pytest.mark.parametrize("metrics", ["otel", "both"])
def test_each_harness_counts_from_zero_in_every_metrics_mode(fake_llm: FakeLLM, metrics: str) -> None:
    """Two tests in a row, as the fixture runs them: the second sees its own violation only."""
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)
    for _ in range(2):
        harness = GuardHarness()
        harness.start(mode="collect", metrics=metrics)
        try:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
            points, _ = sdk_points(harness.metric_reader)
            assert otel_series(points)[HEAD] == 1
            if metrics == "both":
                assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="openai") == 1
        finally:
            harness.stop()
