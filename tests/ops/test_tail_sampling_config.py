"""dashboards/otelcol-tail-sampling.yaml, the Collector tail-sampling policy docs/operations.md
ships: its structure, and that it names what ctxguard really puts on a span (the attribute and
event names are read from ctxguard, not restated)."""

from __future__ import annotations

from pathlib import Path

import yaml

from ctxguard.telemetry import spans

CONFIG = Path(__file__).resolve().parents[2] / "dashboards" / "otelcol-tail-sampling.yaml"


def test_the_tail_sampling_policy_keeps_every_violation_and_a_share_of_the_rest():
    config = yaml.safe_load(CONFIG.read_text())
    sampling = config["processors"]["tail_sampling"]
    assert sampling["decision_wait"] and sampling["num_traces"] > 0
    policies = {p["name"]: p for p in sampling["policies"]}
    kept = policies["ctxguard-violations"]
    assert kept["type"] == "ottl_condition"
    condition = kept["ottl_condition"]
    assert condition["error_mode"] == "ignore"
    assert condition["span"] == [f'Len(attributes["{spans.VIOLATIONS}"]) > 0']
    assert condition["spanevent"] == [f'name == "{spans.VIOLATION_EVENT}"']
    rest = policies["one-percent-of-the-rest"]
    assert rest["type"] == "probabilistic" and 0 < rest["probabilistic"]["sampling_percentage"] <= 100
    traces = config["service"]["pipelines"]["traces"]
    assert "tail_sampling" in traces["processors"]
    assert set(traces["receivers"]) <= set(config["receivers"]) and set(traces["exporters"]) <= set(config["exporters"])
