"""What ``instrument()`` costs a process that has not used the SDKs yet: it imports none of their
lazily loaded modules, and a call site whose module the SDK loads later is still guarded; nor
tiktoken while byte bounds decide the verdicts (bench/footprint.py measures the memory and time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

_LATE_SITE = textwrap.dedent("""
    import json, sys
    import openai
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import ctxguard
    from ctxguard.testing import FakeLLM

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = set(sys.modules)
    ctxguard.instrument(tracer_provider=provider, registry=__import__("prometheus_client").CollectorRegistry())
    added = sorted(m for m in set(sys.modules) - before if m.split(".")[0] == "openai")
    late = "openai.resources.responses.responses"
    loaded_early = late in sys.modules
    with FakeLLM() as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
        client.responses.create(model="gpt-4o", input="hello")  # the SDK imports the module now
    spans = [s for s in exporter.get_finished_spans() if "ctxguard.payload.hash" in (s.attributes or {})]
    print(json.dumps({"added": added, "loaded_early": loaded_early, "loaded": late in sys.modules,
                      "spans": len(spans), "tiktoken": "tiktoken" in sys.modules,
                      "source": spans[0].attributes["ctxguard.payload.tokens_source"] if spans else None}))
""")


def test_instrument_imports_no_sdk_module_and_guards_a_site_loaded_later() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CTXGUARD_TOKENIZER"}  # lazy, the default
    out = subprocess.run([sys.executable, "-c", _LATE_SITE], capture_output=True, text=True, timeout=120, check=True,
                         env=env)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["added"] == []  # instrument() loaded no module of the SDK
    assert not found["loaded_early"] and found["loaded"]
    assert found["spans"] == 1  # the Responses call, whose module came after instrument(), is guarded
    # Far from its window, the call's verdicts were proven by its bytes: tiktoken (~40 MB) not loaded.
    assert not found["tiktoken"] and found["source"] == "estimate"
