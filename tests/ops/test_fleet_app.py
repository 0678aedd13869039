"""A real multi-worker app end to end: ``examples/fleet_app`` under gunicorn (4 sync workers, its own
``gunicorn.conf.py``), ctxguard in every worker with a ``RedisLedger`` on a real redis-server, the
model a FakeLLM in this process, Prometheus scraping the app's ``/metrics`` and evaluating the
shipped rules, Alertmanager calling a webhook. One worker is SIGKILLed in the middle of a call.

When ctxguard counts a call: ``ctxguard_calls_total`` (and every check outcome) before the request
is sent (``Recorder.start``), ``ctxguard_guard_duration_seconds`` when the call ends
(``Recorder.end``). Each count is written through at once to the worker's mmap file
(``ctxguard/telemetry/metrics.py``), which outlives the worker. So a worker killed while it
waits for the model has counted that call, and not its end.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

import ctxguard
from ctxguard.testing import FakeLLM, RecordedRequest, Reply
from tests.ops.conftest import JOB, ROOT, Stack
from tests.servers import stop, wait_for

APP = ROOT / "examples" / "fleet_app"
WORKERS = 4
HANG_GUARD = 30.0  # seconds: no wait in this module is a timing claim


@dataclass
class Held:
    """A request the fake model holds, unanswered, until ``released``; ``pid``: the worker that sent it."""

    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    pid: int = 0


class Gate:
    """The fake model's replies: ``re: <last message>``; a message named with ``hold`` waits
    for its release before it is answered, so the worker that sent it stays mid-request."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}

    def hold(self, message: str) -> Held:
        self._held[message] = held = Held()
        return held

    def release_all(self) -> None:
        for held in self._held.values():
            held.released.set()

    def __call__(self, request: RecordedRequest) -> Reply:
        message = request.json["messages"][-1]["content"]
        held = self._held.get(message)
        if held is not None:
            held.pid = int(request.headers["x-worker-pid"])
            held.arrived.set()
            held.released.wait(HANG_GUARD)
        return Reply(text=f"re: {message}")


@dataclass
class Fleet:
    url: str
    llm: FakeLLM
    gate: Gate
    multiproc_dir: Path
    redis_url: str

    def chat(self, conversation: str, message: str, facts: dict[str, str] | None = None) -> dict[str, Any]:
        body = json.dumps({"conversation": conversation, "message": message, "facts": facts or {}}).encode()
        req = urllib.request.Request(f"{self.url}/chat", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=HANG_GUARD) as response:
            assert response.status == 200
            return dict(json.loads(response.read()))

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=HANG_GUARD) as response:
            text = response.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def total(self, name: str, **labels: str) -> float:
        """A metric summed over the series whose labels include ``labels``, all workers together."""
        return sum(v for (n, ls), v in self.scrape().items() if n == name and set(labels.items()) <= set(ls))

    def worker_pids(self) -> set[int]:
        """The running workers, by the app's live gauge (a dead worker's series goes with child_exit)."""
        return {int(dict(ls)["pid"]) for (n, ls), _ in self.scrape().items() if n == "fleet_app_worker_up"}

    def model_calls_by_worker(self) -> Counter[int]:
        """Chat requests the fake model received, by the worker that sent them."""
        chats = (r for r in self.llm.requests if r.path.endswith("/chat/completions"))
        return Counter(int(r.headers["x-worker-pid"]) for r in chats)


def calls_in_file_of(multiproc_dir: Path, pid: int, tmp: Path) -> float:
    """``ctxguard_calls_total`` as one worker's own counter file holds it (read alone)."""
    alone = tmp / f"worker-{pid}"
    alone.mkdir()
    shutil.copy(multiproc_dir / f"counter_{pid}.db", alone)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(alone))  # type: ignore[no-untyped-call]
    return sum(s.value for family in registry.collect() for s in family.samples if s.name == "ctxguard_calls_total")


@pytest.fixture(scope="module")
def fleet(stack: Stack, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("fleet")
    multiproc_dir = tmp / "prometheus"
    multiproc_dir.mkdir()
    gate = Gate()
    with FakeLLM(reply=gate) as llm:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXGUARD_", "OTEL_", "OPENAI_"))}
        env.update(
            PROMETHEUS_MULTIPROC_DIR=str(multiproc_dir),
            CTXGUARD_DIGEST_KEY="fleet-secret",
            REDIS_URL=redis_url,
            # The fact checks are asserted below, on a machine whose two cores also run Redis and
            # the test workers: a read must not miss its 3 ms for want of CPU (tests/facts test the
            # default's promise).
            FLEET_LEDGER_READ_TIMEOUT="1.0",
            OPENAI_BASE_URL=llm.base_url,
            OPENAI_API_KEY="offline",
            FLEET_HISTORY="rotating",
        )
        log = tmp / "gunicorn.log"
        with log.open("wb") as out:
            # Its own session: the master's pid is the group of every worker it forks.
            master = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", str(APP / "gunicorn.conf.py"),
                 "--bind", f"127.0.0.1:{stack.app_port}", "--control-socket", str(tmp / "gunicorn.ctl")],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        f = Fleet(f"http://127.0.0.1:{stack.app_port}", llm, gate, multiproc_dir, redis_url)
        try:
            wait_for(f"{WORKERS} workers serving", lambda: master.poll() is not None or len(f.worker_pids()) == WORKERS)
            assert master.poll() is None, log.read_text()
            yield f
        finally:
            gate.release_all()
            stop(master)  # SIGTERM: gunicorn stops its workers and waits for them
            with contextlib.suppress(ProcessLookupError):
                os.killpg(master.pid, signal.SIGKILL)  # any worker it left behind


def test_a_killed_worker_costs_only_its_own_request_and_the_totals_stay_exact(
    fleet: Fleet, tmp_path: Path
) -> None:
    """docs/operations.md, "gunicorn / uvicorn workers": its recipe is examples/fleet_app, which the
    ``fleet`` fixture runs as the recipe says (the environment, ``gunicorn -c gunicorn.conf.py``)."""
    calls_before = fleet.total("ctxguard_calls_total")
    ended_before = fleet.total("ctxguard_guard_duration_seconds_count")
    turns: list[tuple[str, Future[dict[str, Any]]]] = []
    with ThreadPoolExecutor(8) as pool:
        def load(first: int, last: int) -> None:
            for i in range(first, last):
                turns.append((f"question {i}", pool.submit(fleet.chat, f"load-{i}", f"question {i}")))

        load(0, 20)
        for _, answer in turns:
            answer.result(HANG_GUARD)
        doomed, bystander = fleet.gate.hold("hold, then die"), fleet.gate.hold("hold, then answer")
        doomed_turn = pool.submit(fleet.chat, "doomed", "hold, then die")
        assert doomed.arrived.wait(HANG_GUARD)
        turns.append(("hold, then answer", pool.submit(fleet.chat, "bystander", "hold, then answer")))
        assert bystander.arrived.wait(HANG_GUARD)
        assert bystander.pid != doomed.pid  # a sync worker serves one request at a time
        load(20, 60)
        wait_for("load answered while two workers are mid-request", lambda: sum(a.done() for _, a in turns) >= 30)

        os.kill(doomed.pid, signal.SIGKILL)
        with pytest.raises((OSError, http.client.HTTPException)):  # the connection died with the worker
            doomed_turn.result(HANG_GUARD)
        fleet.gate.release_all()

        def replaced() -> set[int] | None:
            pids = fleet.worker_pids()
            return pids if len(pids) == WORKERS and doomed.pid not in pids else None

        pids = wait_for("gunicorn to replace the killed worker", replaced)
        load(60, 80)
        answers = [(expected, answer.result(HANG_GUARD)) for expected, answer in turns]

    # Every other request, the bystander that was mid-request on another worker included: 200, right reply.
    assert [a["reply"] for _, a in answers] == [f"re: {expected}" for expected, _ in answers]
    completed = len(answers)
    assert completed == 81
    assert {a["worker"] for _, a in answers} <= pids | {doomed.pid}

    # Counted before sending: the 81 completed calls and the killed one, which the dead worker
    # counted before the model held it. Its counter file outlives it, and the sum reads it.
    assert fleet.total("ctxguard_calls_total") - calls_before == completed + 1
    # Counted at the end of a call: the killed call never ended.
    assert fleet.total("ctxguard_guard_duration_seconds_count") - ended_before == completed
    by_worker = fleet.model_calls_by_worker()
    dead_counted = calls_in_file_of(fleet.multiproc_dir, doomed.pid, tmp_path)
    assert dead_counted == by_worker[doomed.pid]  # what it completed before dying, and the killed call
    assert fleet.total("ctxguard_calls_total") == sum(by_worker.values())
    assert fleet.total("ctxguard_guard_errors_total") == 0  # no internal error swallowed in any worker


def test_a_system_prompt_evicted_in_one_worker_pages_through_alertmanager(fleet: Fleet, stack: Stack) -> None:
    """Conversation memory (diffs, evictions) is per process: the eviction is counted by a worker
    that saw the conversation with its system prompt and then without it. Holding three workers
    mid-request leaves one to serve every turn; the facts are in Redis, shared by all."""
    wait_for(f"{WORKERS} workers serving", lambda: len(fleet.worker_pids()) == WORKERS)
    evicted_before = fleet.total("ctxguard_evictions_total", kind="system")
    missing_before = fleet.total("ctxguard_violations_total", check="fact_present")
    parked = [fleet.gate.hold(f"hold {i}") for i in range(WORKERS - 1)]
    with ThreadPoolExecutor(WORKERS - 1) as pool:
        waiting = [pool.submit(fleet.chat, f"parked-{i}", f"hold {i}") for i in range(WORKERS - 1)]
        for held in parked:
            assert held.arrived.wait(HANG_GUARD)
        try:
            # The app's bounded buffer holds 6 messages, the system prompt first: turn 4 goes out
            # without it, turn 5 also without turn 1 and its answer, which carried the fact.
            turns = [fleet.chat("buggy", "my order is A-1041", facts={"order_id": "A-1041"})]
            turns += [fleet.chat("buggy", f"question {n}") for n in range(2, 6)]
        finally:
            fleet.gate.release_all()
        assert [w.result(HANG_GUARD)["reply"] for w in waiting] == [f"re: hold {i}" for i in range(WORKERS - 1)]
    assert len({t["worker"] for t in turns}) == 1
    assert {t["worker"] for t in turns}.isdisjoint({held.pid for held in parked})

    assert fleet.total("ctxguard_evictions_total", kind="system") - evicted_before == 1  # an event: once
    assert fleet.total("ctxguard_violations_total", check="fact_present") - missing_before == 1  # turn 5
    import redis  # redis-py is there: the redis_url fixture skips without it

    ledger = ctxguard.RedisLedger(fleet.redis_url)
    try:  # the worker wrote the fact event where every worker reads it
        assert redis.Redis.from_url(fleet.redis_url).llen(ledger.key(("buggy", None))) == 1
    finally:
        ledger.close()
    assert fleet.total("ctxguard_guard_errors_total") == 0

    alert = wait_for("CtxguardSystemPromptEvicted at the webhook",
                     lambda: stack.firing("CtxguardSystemPromptEvicted"), timeout=90)
    assert alert["labels"]["severity"] == "critical"
    assert alert["labels"]["job"] == JOB
    assert alert["annotations"]["runbook_url"] == "docs/operations.md#ctxguardsystempromptevicted"

