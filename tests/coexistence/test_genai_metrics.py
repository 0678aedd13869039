"""Beside OpenTelemetry's own openai instrumentation (openai-v2, and genai-openai, the generation
after it), in either install order, with ``metrics="both"``: the GenAI client metrics of a call are
recorded once, by the peer (whose span records the usage), never a second time by ctxguard;
ctxguard's own ``ctxguard.*`` instruments still count the call. Each order runs in a process of
its own (the peer's ``instrument()`` patches the SDK for the process)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REQUIRED = frozenset(os.environ.get("CTXGUARD_REQUIRE_INSTRUMENTATIONS", "").split())
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import openai
    from importlib import import_module
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry
    import ctxguard
    from ctxguard.testing import FakeLLM

    llm = FakeLLM().start()
    reader = InMemoryMetricReader()
    meters, tracing = MeterProvider(metric_readers=[reader]), TracerProvider()

    def peer():
        import_module(sys.argv[2]).OpenAIInstrumentor().instrument(tracer_provider=tracing, meter_provider=meters)

    def ours():
        ctxguard.instrument(registry=CollectorRegistry(), tracer_provider=tracing, meter_provider=meters,
                            metrics="both", digest_key=b"ctxguard-tests")

    for install in (peer, ours) if sys.argv[1] == "other-first" else (ours, peer):
        install()
    client = openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0)
    for n in (1, 40):
        client.chat.completions.create(model="gpt-4o", messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi " * n}])
    out = {"usage": [r.input_tokens for r in llm.responses], "records": []}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    out["records"].append({"scope": sm.scope.name, "name": m.name, "attributes": dict(p.attributes),
                                           "count": getattr(p, "count", None), "sum": getattr(p, "sum", None),
                                           "value": getattr(p, "value", None)})
    print(json.dumps(out))
    llm.stop()
""")


#: The peers (``tests/coexistence/others.py``'s names), by the module of their instrumentor.
PEERS = {"opentelemetry": "opentelemetry.instrumentation.openai_v2",
         "genai": "opentelemetry.instrumentation.genai.openai"}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is absent
        return False


@pytest.mark.parametrize("peer", list(PEERS))
@pytest.mark.parametrize("order", ["other-first", "ctxguard-first"])
def test_genai_client_metrics_are_recorded_once_beside_opentelemetrys_instrumentation(order: str, peer: str) -> None:
    if not _installed(PEERS[peer]):
        if peer in REQUIRED:
            pytest.fail(f"{PEERS[peer]} not installed (CTXGUARD_REQUIRE_INSTRUMENTATIONS)")
        pytest.skip(f"{PEERS[peer]} not installed")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, order, PEERS[peer]], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    records = out["records"]
    durations = [r for r in records if r["name"] == "gen_ai.client.operation.duration"]
    inputs = [r for r in records if r["name"] == "gen_ai.client.token.usage"
              and r["attributes"]["gen_ai.token.type"] == "input"]
    # One record per call in all, from the peer alone; the tokens as the provider reported them.
    assert sum(r["count"] for r in durations) == 2, durations
    assert all(r["scope"] != "ctxguard" for r in durations + inputs), records
    assert sum(r["sum"] for r in inputs) == sum(out["usage"]) and out["usage"][1] > out["usage"][0]
    calls = [r for r in records if r["name"] == "ctxguard.calls" and r["attributes"]["provider"] == "openai"]
    assert len(calls) == 1 and calls[0]["value"] == 2
