"""prometheus_client multiprocess mode, with real worker OS processes (gunicorn-style).

Each worker is a separate interpreter started with ``PROMETHEUS_MULTIPROC_DIR``
set, as a pre-forking server would start it: it instruments ctxguard and makes
real openai SDK calls to one FakeLLM in this process. The counts must add up
across workers, both through a ``MultiProcessCollector`` built here and through
the ``metrics_port`` endpoint of whichever worker serves it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from ctxguard.testing import FakeLLM
from tests.servers import free_port

WORKERS = 3
CALLS = {"provider": "openai", "operation": "chat"}
VIOLATIONS = {"check": "system_at_head", "provider": "openai"}

# argv: base_url, number of calls, metrics port ("" for none).
# Prints one line when done: "serving" or "not-serving"; a serving worker then
# waits for a line on stdin before exiting, so it can be scraped.
WORKER = textwrap.dedent(
    """
    import sys

    import openai

    import ctxguard
    from ctxguard import _instrument, _isolation, intercept

    errors = []
    _isolation.add_error_hook(lambda where, exc: errors.append((where, repr(exc))))
    base_url, calls, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ctxguard.instrument(digest_key="k", metrics_port=int(port) if port else None)
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=20)
    for _ in range(calls):
        # The head is a user message: system_at_head fails on every call.
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}, {"role": "system", "content": "be brief"}]
        )
    if errors:
        sys.exit(f"ctxguard swallowed internal errors: {errors}")
    installation = intercept.active()
    serving = any(getattr(close, "func", None) is _instrument._stop_serving for close in installation.closing)
    print("serving" if serving else "not-serving", flush=True)
    if serving:
        sys.stdin.readline()
    ctxguard.uninstrument()
    """
)


@pytest.fixture
def multiproc_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "prom"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    return directory


@pytest.fixture
def spawn(multiproc_dir: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Started workers, every one stopped at teardown whatever the outcome."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        # Each runs in its own session (start_new_session=True): its group id is its pid,
        # and killing the group also stops any worker it forked.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)


def _start(
    procs: list[subprocess.Popen[str]], multiproc_dir: Path, base_url: str, calls: int, port: int | None = None
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXGUARD_", "OTEL_"))}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc_dir)
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, base_url, str(calls), "" if port is None else str(port)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    procs.append(proc)
    return proc


def _status(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """The worker's one status line, or a failure carrying its stderr."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            pytest.fail(f"worker {proc.pid} printed nothing within {timeout} s")
    line = proc.stdout.readline().strip()
    if not line:
        proc.wait(10)
        pytest.fail(f"worker {proc.pid} exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
    return line


def test_counts_add_up_across_worker_processes(
    fake_llm: FakeLLM, multiproc_dir: Path, spawn: list[subprocess.Popen[str]]
) -> None:
    workers = [_start(spawn, multiproc_dir, fake_llm.base_url, calls=i + 1) for i in range(WORKERS)]
    for proc in workers:
        assert _status(proc) == "not-serving"
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    assert len(fake_llm.requests) == 1 + 2 + 3

    # One mmap file per worker process per metric type (counter, histogram).
    pids = {int(p.stem.rsplit("_", 1)[1]) for p in multiproc_dir.glob("counter_*.db")}
    assert pids == {proc.pid for proc in workers}

    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    value = registry.get_sample_value
    assert value("ctxguard_calls_total", CALLS) == 6
    assert value("ctxguard_violations_total", VIOLATIONS) == 6
    assert value("ctxguard_checks_total", {"check": "system_at_head", "outcome": "fail"}) == 6
    # Histograms aggregate too, buckets included.
    assert value("ctxguard_guard_duration_seconds_count", {}) == 6
    assert value("ctxguard_payload_tokens_count", {"provider": "openai"}) == 6
    assert value("ctxguard_payload_tokens_bucket", {"provider": "openai", "le": "+Inf"}) == 6
    # Series pre-created at zero in every worker are still there, still zero (SPEC §4).
    assert value("ctxguard_calls_total", {"provider": "anthropic", "operation": "chat"}) == 0
    assert value("ctxguard_blocked_total", {"check": "system_at_head"}) == 0
    assert value("ctxguard_evictions_total", {"kind": "system"}) == 0
    assert value("ctxguard_lossy_summaries_total", {}) == 0
    assert value("ctxguard_pinned_tokens_count", {}) == 0
    assert value("ctxguard_guard_errors_total", {"where": "checks"}) == 0


def test_metrics_port_serves_the_aggregate_of_all_workers(
    fake_llm: FakeLLM, multiproc_dir: Path, spawn: list[subprocess.Popen[str]]
) -> None:
    """Every worker asks for the same port, as they would under gunicorn: one serves, none fails."""
    port = free_port()
    workers = [_start(spawn, multiproc_dir, fake_llm.base_url, calls=i + 1, port=port) for i in range(WORKERS)]
    statuses = [_status(proc) for proc in workers]
    assert sorted(statuses) == ["not-serving"] * (WORKERS - 1) + ["serving"]
    server = workers[statuses.index("serving")]
    for proc in workers:
        if proc is not server:  # exited workers' counts stay in the aggregate
            assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""

    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("ctxguard_calls_total", tuple(sorted(CALLS.items())))] == 6
    assert samples[("ctxguard_violations_total", tuple(sorted(VIOLATIONS.items())))] == 6
    # Only the aggregate is served: no per-process duplicates of a series.
    assert body.count('ctxguard_calls_total{operation="chat",provider="openai"}') == 1

    assert server.stdin is not None
    server.stdin.write("\n")
    server.stdin.flush()
    assert server.wait(30) == 0, server.stderr.read() if server.stderr else ""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # uninstrument() in the worker closed the endpoint
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1)
        except OSError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the metrics endpoint outlived its worker")


SWITCHING_WORKER = textwrap.dedent(
    """
    import sys

    import openai
    from prometheus_client import CollectorRegistry

    import ctxguard

    client = openai.OpenAI(base_url=sys.argv[1], api_key="x", max_retries=0, timeout=20)
    a, b = CollectorRegistry(), CollectorRegistry()
    for registry in (a, b, a, None, b, None):
        ctxguard.instrument(digest_key="k", registry=registry)
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        ctxguard.uninstrument()
    # Each registry still reads the process's true count, whichever guard made it.
    for registry in (a, b):
        print(registry.get_sample_value("ctxguard_calls_total", {"provider": "openai", "operation": "chat"}))
    """
)


def test_re_instrumenting_with_other_registries_loses_no_counts(fake_llm: FakeLLM, multiproc_dir: Path) -> None:
    """In multiprocess mode values live in one mmap entry per series and process: registries
    that each kept their own collectors would overwrite each other's counts with stale ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXGUARD_", "OTEL_"))}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc_dir)
    result = subprocess.run(
        [sys.executable, "-c", SWITCHING_WORKER, fake_llm.base_url],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["6.0", "6.0"]
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    assert registry.get_sample_value("ctxguard_calls_total", CALLS) == 6


PRELOAD_MASTER = textwrap.dedent(
    """
    import os
    import sys

    import openai

    import ctxguard

    base_url, port = sys.argv[1], int(sys.argv[2])
    ctxguard.instrument(digest_key="k", metrics_port=port)  # in the master, before forking (--preload)
    children = []
    for i in range(3):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=20)
                for _ in range(i + 1):
                    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    print("ready" if codes == [0, 0, 0] else f"children failed: {codes}", flush=True)
    sys.stdin.readline()
    ctxguard.uninstrument()
    """
)


def test_preloaded_master_serves_its_forked_workers_counts(
    fake_llm: FakeLLM, multiproc_dir: Path, spawn: list[subprocess.Popen[str]]
) -> None:
    """gunicorn --preload: instrument() ran in the master; the workers are forks of it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXGUARD_", "OTEL_"))}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc_dir)
    master = subprocess.Popen(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", PRELOAD_MASTER, fake_llm.base_url, str(port)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    spawn.append(master)
    assert _status(master) == "ready"
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("ctxguard_calls_total", tuple(sorted(CALLS.items())))] == 6
    assert len(list(multiproc_dir.glob("counter_*.db"))) == 4  # master + 3 workers
    assert master.stdin is not None
    master.stdin.write("\n")
    master.stdin.flush()
    assert master.wait(30) == 0, master.stderr.read() if master.stderr else ""
