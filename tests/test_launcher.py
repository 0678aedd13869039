"""``opentelemetry-instrument python app.py`` activates ctxguard (SPEC §2).

The end-to-end tests run the REAL OpenTelemetry launcher on an app that contains
no ctxguard code, in a subprocess, against a ``FakeLLM`` started here. They are
skipped when ``opentelemetry-instrument`` (opentelemetry-instrumentation) or
opentelemetry-distro is not installed, unless ``CTXGUARD_REQUIRE_LAUNCHER=1``
(then they fail).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, NoReturn

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard.testing import FakeLLM

REQUIRE = os.environ.get("CTXGUARD_REQUIRE_LAUNCHER") == "1"
LAUNCHER = Path(sys.executable).parent / "opentelemetry-instrument"
MARK = "CTXGUARD-LAUNCHER-RESULT "
TIMEOUT = 60

# The example app: plain OpenAI SDK code. Nothing in it imports ctxguard; it only reads
# the Prometheus registry (and an exception's class name) to report what happened.
APP = '''\
import json
import os

import openai
import prometheus_client

result = {"reply": None, "error": None}
client = openai.OpenAI(base_url=os.environ["APP_LLM_BASE_URL"], api_key="x", max_retries=0)
try:
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Where is my parcel?"}],  # no system message
    )
    result["reply"] = completion.choices[0].message.content
except Exception as exc:
    result["error"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
result["violations"] = prometheus_client.REGISTRY.get_sample_value(
    "ctxguard_violations_total", {"check": "system_at_head", "provider": "openai"}
)
print("''' + MARK + '''" + json.dumps(result), flush=True)
'''


def _unavailable(reason: str) -> NoReturn:
    if REQUIRE:
        pytest.fail(f"{reason} (CTXGUARD_REQUIRE_LAUNCHER=1)")
    pytest.skip(reason)


def _require_instrumentation() -> None:
    if importlib.util.find_spec("opentelemetry.instrumentation") is None:
        _unavailable("opentelemetry-instrumentation is not installed (pip install opentelemetry-instrumentation)")


def _require_launcher() -> Path:
    _require_instrumentation()
    if not LAUNCHER.is_file():
        _unavailable(f"the OpenTelemetry launcher is not installed: no {LAUNCHER}")
    if importlib.util.find_spec("opentelemetry.distro") is None:
        _unavailable("opentelemetry-distro is not installed (the launcher would configure no SDK)")
    return LAUNCHER


RunApp = Callable[..., tuple[dict[str, Any], subprocess.CompletedProcess[str]]]


@pytest.fixture
def run_app(tmp_path: Path, llm: FakeLLM) -> RunApp:
    """Run the example app (under the launcher unless ``launcher=False``); its result and the process."""
    app = tmp_path / "app.py"
    app.write_text(APP, encoding="utf-8")

    def run(*, launcher: bool = True, **env: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
        # The test process's own CTXGUARD_*/OTEL_* settings must not leak into the app.
        child_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CTXGUARD_", "OTEL_")) and k.upper() != "PROMETHEUS_MULTIPROC_DIR"
        }
        child_env.update(
            APP_LLM_BASE_URL=llm.base_url,
            OTEL_TRACES_EXPORTER="console",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
            CTXGUARD_DIGEST_KEY="k",
        )
        child_env.update(env)
        argv = [sys.executable, str(app)]
        if launcher:
            argv.insert(0, str(_require_launcher()))
        proc = subprocess.run(
            argv, cwd=tmp_path, env=child_env, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
        assert proc.returncode == 0, f"app exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
        assert len(lines) == 1, f"no result line\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        return json.loads(lines[0][len(MARK) :]), proc

    return run


# -- the real launcher, end to end ------------------------------------------------


def test_launcher_activates_ctxguard_in_observe_mode(run_app: RunApp, llm: FakeLLM) -> None:
    result, proc = run_app()
    assert result["violations"] == 1.0, proc.stderr
    assert '"violations": 1.0' in proc.stdout
    # Observe mode: the request went out and the app got its answer.
    assert result["error"] is None
    assert result["reply"] == "ok 1"
    assert len(llm.requests) == 1
    # ctxguard's span went to the tracer provider the launcher configured (console exporter).
    assert '"name": "chat gpt-4o-mini"' in proc.stdout
    assert re.search(r'"ctxguard\.violations": \[\s*"system_at_head"\s*\]', proc.stdout), proc.stdout


def test_launcher_honours_enforce_mode_from_env(run_app: RunApp, llm: FakeLLM) -> None:
    result, proc = run_app(CTXGUARD_MODE="enforce", OTEL_TRACES_EXPORTER="none")
    assert result["error"] is not None, proc.stderr
    assert result["error"].rsplit(".", 1)[-1] == ctxguard.ContextViolation.__name__
    assert result["error"].split(".", 1)[0] == "ctxguard"
    assert result["reply"] is None
    assert llm.requests == []  # blocked before it was sent


def test_launcher_with_ctxguard_disabled_is_a_no_op(run_app: RunApp, llm: FakeLLM) -> None:
    result, proc = run_app(CTXGUARD_DISABLED="1", OTEL_TRACES_EXPORTER="none")
    assert result["violations"] is None, proc.stdout
    assert result["reply"] == "ok 1"
    assert len(llm.requests) == 1


def test_launcher_skips_ctxguard_when_otel_disables_it(run_app: RunApp, llm: FakeLLM) -> None:
    """The entry point is named ``ctxguard``: the standard OTel switch turns it off by that name."""
    result, proc = run_app(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="ctxguard", OTEL_TRACES_EXPORTER="none")
    assert result["violations"] is None, proc.stdout
    assert result["reply"] == "ok 1"


def test_launcher_with_a_mistyped_variable_still_guards_the_app(run_app: RunApp, llm: FakeLLM) -> None:
    """The environment never stops ctxguard (nor the app): the variable is ignored (with one warning on
    the ``ctxguard`` logger, tests/test_config.py)."""
    result, proc = run_app(CTXGUARD_METRICS_PORT="not-a-port", OTEL_TRACES_EXPORTER="none")
    assert result["reply"] == "ok 1", proc.stderr
    assert result["error"] is None
    assert result["violations"] == 1.0  # guarded
    assert len(llm.requests) == 1


def test_the_app_alone_has_no_ctxguard(run_app: RunApp, llm: FakeLLM) -> None:
    """Control: without the launcher the same app counts nothing (no ctxguard code in it)."""
    result, _ = run_app(launcher=False, OTEL_TRACES_EXPORTER="none")
    assert result["violations"] is None
    assert result["reply"] == "ok 1"


# -- packaging and the instrumentor in process -------------------------------------


def test_entry_point_is_registered() -> None:
    eps = entry_points(group="opentelemetry_instrumentor", name="ctxguard")
    assert [ep.value for ep in eps] == ["ctxguard.instrumentor:CtxguardInstrumentor"]


def test_importing_ctxguard_does_not_import_opentelemetry_instrumentation() -> None:
    code = (
        "import sys, ctxguard, ctxguard.testing\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry.instrumentation'))\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def instrumentor() -> Iterator[Any]:
    _require_instrumentation()
    from ctxguard.instrumentor import CtxguardInstrumentor

    inst = CtxguardInstrumentor()
    try:
        yield inst
    finally:
        if inst.is_instrumented_by_opentelemetry:
            inst.uninstrument()


def test_instrumentor_passes_keywords_through(instrumentor: Any, client: openai.OpenAI, monkeypatch: Any) -> None:
    monkeypatch.delenv("CTXGUARD_DISABLED", raising=False)
    monkeypatch.delenv("CTXGUARD_MODE", raising=False)
    assert tuple(instrumentor.instrumentation_dependencies()) == ()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()

    guard = instrumentor.instrument(
        tracer_provider=provider, registry=registry, digest_key="k", meter_provider=object()  # the last is ignored
    )
    assert isinstance(guard, ctxguard.Guard)
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    labels = {"check": "system_at_head", "provider": "openai"}
    assert registry.get_sample_value("ctxguard_violations_total", labels) == 1.0
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None and tuple(span.attributes["ctxguard.violations"]) == ("system_at_head",)

    instrumentor.uninstrument()
    assert not instrumentor.is_instrumented_by_opentelemetry
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert registry.get_sample_value("ctxguard_violations_total", labels) == 1.0  # wrappers removed
    assert len(exporter.get_finished_spans()) == 1
    provider.shutdown()


def test_instrumentor_swallows_and_reports_its_failures(
    instrumentor: Any, internal_errors: list[tuple[str, BaseException]], monkeypatch: Any
) -> None:
    monkeypatch.delenv("CTXGUARD_DISABLED", raising=False)
    assert instrumentor.instrument(registry=CollectorRegistry(), mode="panic") is None  # nothing reaches the launcher
    assert [(where, type(exc)) for where, exc in internal_errors] == [("config", ValueError)]
    internal_errors.clear()
    instrumentor.uninstrument()
