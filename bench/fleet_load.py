"""The fleet example under load, with ctxguard and without: worker memory, CPU and Redis traffic.

What an operator measures (issue 43): ``examples/fleet_app`` under gunicorn (``--workers`` sync
workers, prometheus-client's multiprocess files, a ``RedisLedger``), ctxguard's FakeLLM as the
model, conversations driven by a pool of ``--concurrency`` client threads. Everything runs on
loopback, on free ports, in a temporary directory: a ``redis-server`` and the FakeLLM (its own
process) for the whole bench, a fresh gunicorn master per run. Runs alternate between ctxguard
on and ``CTXGUARD_DISABLED=1``, round by round, the order flipped every round.

The workload: conversations of ``--turns`` turns, each with a history of 10-40 messages
(``--history``) that slides: the app keeps the last N messages of each conversation (its N drawn
per conversation; the bench fills the history before the run, as for a conversation that has
been going on), and sends the system prompt plus those N. The first turn records one fact
(``order_id``), which every user message mentions. Each client thread takes the next
conversation and plays its turns one after the other, so turns of a conversation never overlap
and land on whichever worker is free. The FakeLLM answers with a sentence of ~120 characters.

Per run, from ``/proc`` and Redis, after a warm-up of ``--warmup`` requests (other conversations):
* worker CPU per request: utime + stime of every worker (all its threads) over the measured
  requests, divided by them; redis-server's the same way;
* Redis commands per request: ``INFO commandstats`` before and after (``info`` itself left out),
  and, for the difference with ctxguard, the commands that make it;
* the resident set of each worker, sampled every ``--sample-every`` requests, so the growth and
  its plateau show; and the throughput;
* worker CPU by thread (``/proc/<pid>/task/<tid>/schedstat``: the main thread, and ctxguard's
  reader, which Python 3.11 leaves named ``python``), and the main thread's CPU in nested parts of
  a request (``time.thread_time`` around the WSGI request, the model call, ctxguard's hooks, the
  ledger read, the app's own Redis writes): direct measurements, which the load does not blur
  as it blurs a difference of two runs.

Reported: medians over the rounds (and the spread), per concurrency, with ctxguard, without, and
the difference; then RSS over time. ``--cache-bytes`` sets ``CTXGUARD_CACHE_BYTES`` for the runs
with ctxguard. ``--profile``: one more pair of runs (with, without; not in the table) with
cProfile on in every worker while measured, and where the worker CPU goes, a request, by area
(ctxguard's modules, the SDK, the HTTP client, Flask, redis-py, ...) with and without: the
profiler's own cost inflates every area, by the function calls it sees, so read the split as
proportions. ``--py-spy``: one more pair, with ``py-spy record`` (non-blocking, 500 Hz) on every
worker, each main-thread sample charged to its innermost frame of ctxguard or of the host (``HOST``).

    .venv/bin/python bench/fleet_load.py [--requests 2000] [--concurrency 8,32] [--rounds 3]
                                         [--workers 4] [--turns 16] [--history 10-40]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pstats
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # after PYTHONPATH: a checkout given there is the one measured

import redis  # noqa: E402
from workload import QUESTIONS, earlier_messages, next_question, user_message  # noqa: E402  # bench/workload.py

import ctxguard  # noqa: E402
from tests.servers import free_port, redis_server, stop, wait_for  # noqa: E402

APP = ROOT / "examples" / "fleet_app"
#: Where the measured ctxguard lives: the workers and the FakeLLM import that one.
CHECKOUT = Path(ctxguard.__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1024 * 1024
HANG_GUARD = 60.0  # seconds: no wait here is a timing claim

#: The model: one sentence about the last message, ~120 characters.
FAKE = r"""
import sys, time
from ctxguard.testing import FakeLLM, Reply

def reply(request):
    last = request.json["messages"][-1]["content"]
    return Reply(text=f"Thanks, I have looked into it: {last[:48]}. It ships from Pune on Thursday.")

with FakeLLM(reply=reply) as llm:
    print(llm.base_url, flush=True)
    while sys.stdin.readline():  # clear on demand; EOF (the bench gone) ends it
        llm.clear()
"""

#: The app module gunicorn serves: the example, unchanged, except that a conversation keeps the
#: number of messages its id ends with (``~h<N>``) instead of the example's fixed 6; and a file
#: per worker once it is ready.
WRAPPER = r"""
import atexit, gc, json, os, signal, time

if os.environ.get("FLEET_BENCH_LEDGER") == "memory":  # instrument(ledger=None): the in-process ledger
    import ctxguard
    ctxguard.RedisLedger = lambda *args, **kwargs: None
if os.environ.get("FLEET_BENCH_FACTS") == "off":  # the app records no fact: ctxguard's floor without them
    import ctxguard
    ctxguard.record_fact = lambda *args, **kwargs: None

import app as fleet

_gc = {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0]}
_began = [0.0]

def _gc_timing(phase, info):
    if phase == "start":
        _began[0] = time.thread_time()  # CPU: the wall clock counts a loaded machine's waits
    else:
        _gc["collections"][info["generation"]] += 1
        _gc["seconds"][info["generation"]] += time.thread_time() - _began[0]

def _gc_stats():
    with open(os.path.join(os.environ["FLEET_BENCH_READY"], f"{os.getpid()}.gc"), "w") as f:
        json.dump({**_gc, "parts": _parts}, f)

gc.callbacks.append(_gc_timing)

def _push(key, message):
    fleet.store.rpush(key, json.dumps(message))
    fleet.store.ltrim(key, -int(key.rsplit("~h", 1)[1]), -1)

fleet._push = _push
app = fleet.app

# Thread CPU spent in parts of a request (time.thread_time, not the profiler's per-call cost), nested:
# the WSGI request, the app's model call (the SDK, and ctxguard around it), ctxguard's hooks before
# the call and on its answer, the app's own Redis writes.
_parts = {}

def _timed(name, function):
    def timed(*args, **kwargs):
        began = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            _parts[name] = _parts.get(name, 0.0) + time.thread_time() - began
    return timed

app.wsgi_app = _timed("request", app.wsgi_app)
fleet.client.chat.completions.create = _timed("model call", fleet.client.chat.completions.create)
_placebo_us = int(os.environ.get("FLEET_BENCH_PLACEBO_US", "0"))
if _placebo_us:  # no ctxguard: as much CPU of plain Python before each model call, over a working set
    import hashlib, random
    _rng = random.Random(os.getpid())
    _set = {str(i): os.urandom(48).hex() for i in range(int(os.environ.get("FLEET_BENCH_PLACEBO_KEYS", "0")))}
    _keys = list(_set) or ["0"]
    _set = _set or {"0": "x" * 96}

    def _burn():
        end = time.thread_time() + _placebo_us / 1e6
        while time.thread_time() < end:
            for _ in range(20):
                hashlib.blake2b(_set[_keys[_rng.randrange(len(_keys))]].encode(), digest_size=16).digest()

    _call = fleet.client.chat.completions.create
    _burn = _timed("placebo", _burn)

    def _with_placebo(*args, **kwargs):
        _burn()
        return _call(*args, **kwargs)

    fleet.client.chat.completions.create = _with_placebo
if os.environ.get("FLEET_BENCH_PLACEBO_READ"):  # no ctxguard: one more Redis read before each model call
    _read_call = fleet.client.chat.completions.create
    _extra_read = _timed("placebo", lambda key: fleet.store.lrange(key, 0, -1))

    def _with_read(*args, **kwargs):
        _extra_read("fleet:bench:placebo")
        return _read_call(*args, **kwargs)

    fleet.client.chat.completions.create = _with_read
fleet._push = _timed("app's history writes", _push)
try:
    from ctxguard import intercept
    _installed = intercept.active()
except Exception:
    _installed = None
if _installed is not None and os.environ.get("FLEET_BENCH_HOOKS") == "removed":
    # ctxguard imported, instrumented and then uninstrumented: its modules and what instrument()
    # left in the process (its threads, caches, metrics), no wrapper on any call
    import ctxguard
    ctxguard.uninstrument()
    _installed = None
if _installed is not None and os.environ.get("FLEET_BENCH_HOOKS") == "none":
    # ctxguard installed, its wrappers in place, but its hooks do nothing: no call is guarded
    _installed.guard.before = lambda *args, **kwargs: None
    from ctxguard.intercept import wire as _wire
    _wire._observe = lambda *args, **kwargs: None
    _wire._answered = lambda *args, **kwargs: None
    _installed = None
if _installed is not None and os.environ.get("FLEET_BENCH_HOOKS", "").startswith("floor"):
    # What any ctxguard meeting the contract does on every call, and nothing more: its wrappers,
    # the conversation's facts read from the ledger (the fact checks need them before the send),
    # the call's metrics (a cell per check's outcome and the token histogram). No inspection.
    from datetime import datetime, timezone
    from ctxguard.checks import CHECKS as _checks
    _guard = _installed.guard
    _sinks, _m = _guard._inspector.facts, _guard._recorder.metrics
    _floor_parts = os.environ["FLEET_BENCH_HOOKS"].partition("-")[2]  # "": both; "ledger" or "metrics": that one

    def _floor(provider, api, kwargs, *args, **kwargs_):
        scope = _guard._scope(kwargs)
        try:
            if scope is not None and _floor_parts != "metrics":
                _sinks.ledger.state(scope, datetime.now(timezone.utc))
        except Exception:  # past the read timeout: the call goes on without its facts, as ctxguard's does
            pass
        if _floor_parts != "ledger":
            cells = [_m.calls_at[("openai", "chat")]] + [_m.checks_at[(name, "pass")] for name in _checks]
            _m.add(cells, [(_m.tokens_h["openai"], 100)])
        return None

    _guard.before = _timed("ctxguard before", _floor)
    from ctxguard.intercept import wire as _wire
    _wire._observe = lambda *args, **kwargs: None
    _wire._answered = lambda *args, **kwargs: None
    _installed = None
if _installed is not None:
    _installed.guard.before = _timed("ctxguard before", _installed.guard.before)
    intercept.observe_answer = _timed("ctxguard answer", intercept.observe_answer)
    import ctxguard.facts.redis as _redis
    _redis.RedisLedger.state = _timed("ctxguard ledger read", _redis.RedisLedger.state)
    from ctxguard.intercept import wire as _wire
    _wire._observe = _timed("ctxguard wire: sent", _wire._observe)
    _wire._answered = _timed("ctxguard wire: answer", _wire._answered)
_profile = []

def _gc_reset(*_):  # the bench's signal at the start of what it measures
    _gc["collections"], _gc["seconds"] = [0, 0, 0], [0.0, 0.0, 0.0]
    _parts.clear()
    if os.environ.get("FLEET_BENCH_PROFILE") and not _profile:
        import cProfile
        _profile.append(cProfile.Profile(time.thread_time))  # CPU, not the wait for the next request
        _profile[0].enable()

def _profile_stats():
    if _profile:
        _profile[0].disable()
        _profile[0].dump_stats(os.path.join(os.environ["FLEET_BENCH_READY"], f"{os.getpid()}.prof"))

signal.signal(signal.SIGRTMIN, _gc_reset)  # gunicorn leaves it alone
atexit.register(_gc_stats)  # gunicorn's worker exits through sys.exit() on SIGTERM
atexit.register(_profile_stats)

open(os.path.join(os.environ["FLEET_BENCH_READY"], str(os.getpid())), "w").close()
"""

#: What a run sets in the workers' environment, by the variant's name.
VARIANTS: dict[str, dict[str, str]] = {
    "with": {},
    "without": {"CTXGUARD_DISABLED": "1"},
    # ctxguard with its in-process ledger (the app records the same facts): no Redis on the call path.
    "memory-ledger": {"FLEET_BENCH_LEDGER": "memory"},
    # ctxguard with no fact recorded (and the in-process ledger): every check but the fact checks'.
    "no-facts": {"FLEET_BENCH_LEDGER": "memory", "FLEET_BENCH_FACTS": "off"},
    # no ctxguard, and the app spends 1 ms of thread CPU in plain Python before each model call (what
    # ctxguard's hooks take): does the SDK's part of the call grow as it does with ctxguard?
    "placebo": {"CTXGUARD_DISABLED": "1", "FLEET_BENCH_PLACEBO_US": "1000"},
    # ctxguard's wrappers around the SDK's call and its HTTP send, its hooks doing nothing
    "wrappers-only": {"FLEET_BENCH_LEDGER": "memory", "FLEET_BENCH_HOOKS": "none"},
    # ctxguard imported, instrument() then uninstrument(): no wrapper
    "removed": {"FLEET_BENCH_LEDGER": "memory", "FLEET_BENCH_HOOKS": "removed"},
    # the floor of any ctxguard meeting the contract: its wrappers, the ledger's read, the metrics
    "floor": {"FLEET_BENCH_HOOKS": "floor"},
    # the floor's two parts apart: the ledger's read alone; the metrics alone (the in-process ledger)
    "floor-ledger": {"FLEET_BENCH_HOOKS": "floor-ledger"},
    "floor-metrics": {"FLEET_BENCH_LEDGER": "memory", "FLEET_BENCH_HOOKS": "floor-metrics"},
    # no ctxguard, and the app makes one more Redis round trip (an LRANGE) before each model call
    "placebo-read": {"CTXGUARD_DISABLED": "1", "FLEET_BENCH_PLACEBO_READ": "1"},
    "placebo-half": {"CTXGUARD_DISABLED": "1", "FLEET_BENCH_PLACEBO_US": "500"},
    # the same over 15 MiB of strings it digests at random (ctxguard's caches' size)
    "placebo-15mib": {"CTXGUARD_DISABLED": "1", "FLEET_BENCH_PLACEBO_US": "1000", "FLEET_BENCH_PLACEBO_KEYS": "65000"},
}


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of ``pid``: its name and the CPU seconds it ran (``schedstat``: nanoseconds, where
    ``stat``'s clock ticks are 10 ms, coarse for a thread that runs 0.1 ms a request)."""
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with suppress(FileNotFoundError, ProcessLookupError):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                threads[int(tid)] = (name, int(f.read().split()[0]) / 1e9)
    return threads


def by_thread(pids: list[int], before: dict[int, dict[int, tuple[str, float]]],
              after: dict[int, dict[int, tuple[str, float]]]) -> Counter[str]:
    """CPU seconds over the run by thread: "main" (the worker's own), else the thread's name (a
    thread started during the run counted from 0)."""
    spent: Counter[str] = Counter()
    for pid in pids:
        for tid, (name, seconds) in after[pid].items():
            spent["main" if tid == pid else name] += seconds - before[pid].get(tid, (name, 0.0))[1]
    return spent


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def commandstats(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


@dataclass
class Conversation:
    id: str
    order: str
    turns: int


@dataclass
class Run:
    variant: str
    concurrency: int
    requests: int = 0
    seconds: float = 0.0
    cpu_ms: dict[int, float] = field(default_factory=dict)  # worker -> ms per request it served
    served: Counter[int] = field(default_factory=Counter)
    cpu_per_request_ms: float = 0.0
    redis_cpu_us: float = 0.0
    commands: Counter[str] = field(default_factory=Counter)
    boot_rss: dict[int, int] = field(default_factory=dict)
    #: (requests done by the fleet, {worker: (requests it served, rss)}) along the run.
    samples: list[tuple[int, dict[int, tuple[int, int]]]] = field(default_factory=list)
    gc_ms: float = 0.0  # the workers' time in the garbage collector, a request
    gc_full: float = 0.0  # full (generation 2) collections, per 1,000 requests
    gc_collections: list[float] = field(default_factory=list)  # per 1,000 requests, by generation
    #: With ``--profile``: the workers' profiled seconds by area, and ctxguard's functions by self time.
    areas: Counter[str] = field(default_factory=Counter)
    functions: list[tuple[float, int, str]] = field(default_factory=list)
    #: Main-thread CPU ms a request in parts of the request (the wrapper's ``_parts``).
    parts: Counter[str] = field(default_factory=Counter)
    #: Worker CPU ms a request by thread ("main", or the thread's name), from ``schedstat``.
    threads: dict[str, float] = field(default_factory=dict)
    #: With ``--py-spy``: the main threads' samples (stacks, outermost first, and their count).
    stacks: Counter[tuple[str, ...]] = field(default_factory=Counter)


class Fleet:
    """One gunicorn master and its workers for one run."""

    def __init__(self, tmp: Path, env: dict[str, str], workers: int) -> None:
        self.tmp, self.workers = tmp, workers
        tmp.mkdir()
        (tmp / "fleet_bench_app.py").write_text(WRAPPER)
        ready = tmp / "ready"
        ready.mkdir()
        (tmp / "prometheus").mkdir()
        self.port = free_port()
        env = {**env, "PROMETHEUS_MULTIPROC_DIR": str(tmp / "prometheus"), "FLEET_BENCH_READY": str(ready)}
        self.log = (tmp / "gunicorn.log").open("wb")
        self.master = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", str(APP / "gunicorn.conf.py"), "--workers", str(workers),
             "--bind", f"127.0.0.1:{self.port}", "--pythonpath", f"{tmp},{APP}", "fleet_bench_app:app"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True)
        wait_for(f"{workers} workers ready", lambda: self.master.poll() is not None
                 or len(list(ready.iterdir())) == workers, timeout=HANG_GUARD, interval=0.05)
        if self.master.poll() is not None:
            raise RuntimeError((tmp / "gunicorn.log").read_text())
        self.pids = sorted(int(p.name) for p in ready.iterdir())
        assert set(self.pids) == set(children(self.master.pid)), "a worker was replaced while starting"

    def close(self) -> None:
        if children(self.master.pid) != self.pids:
            print(f"warning: workers replaced during the run: {self.pids} -> {children(self.master.pid)}",
                  file=sys.stderr)
        stop(self.master, timeout=30)  # SIGTERM: gunicorn stops its workers and waits for them
        for pid in self.pids:  # any worker left behind (its own pid, never a group or a name)
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.log.close()


def chat(port: int, conversation: str, message: str, facts: dict[str, str]) -> int:
    """One turn; the pid of the worker that served it."""
    body = json.dumps({"conversation": conversation, "message": message, "facts": facts})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_GUARD)
    try:
        connection.request("POST", "/chat", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = response.read()
        if response.status != 200:
            raise RuntimeError(f"/chat answered {response.status}: {answer[:200]!r}")
        return int(json.loads(answer)["worker"])
    finally:
        connection.close()


def conversations(tag: str, count: int, turns: int, history: tuple[int, int], rng: random.Random,
                  store: redis.Redis) -> list[Conversation]:
    """``count`` conversations, their histories already in Redis (filled to their length)."""
    made = []
    with store.pipeline(transaction=False) as pipe:
        for n in range(count):
            keep = rng.randint(*history)
            conversation = Conversation(f"{tag}-{n}~h{keep}", f"A-{rng.randrange(10**5):05d}", turns)
            for message in earlier_messages(rng, conversation.id, conversation.order, keep):
                pipe.rpush(f"fleet:history:{conversation.id}", json.dumps(message))
            made.append(conversation)
        pipe.execute()
    return made


def drive(fleet: Fleet, plan: list[Conversation], concurrency: int, rng: random.Random, run: Run | None,
          sample_every: int) -> None:
    """Play ``plan`` with ``concurrency`` threads; into ``run``: who served what, RSS samples."""
    queue: Queue[Conversation] = Queue()
    for conversation in plan:
        queue.put(conversation)
    questions = [rng.choice(QUESTIONS) for _ in range(64)]
    lock = threading.Lock()
    done = 0
    failures: list[BaseException] = []

    def client() -> None:
        nonlocal done
        while not failures:
            try:
                conversation = queue.get_nowait()
            except Empty:
                return
            for turn in range(conversation.turns):
                message = user_message(conversation.id, conversation.order,
                                       next_question(questions, conversation.id, turn), turn)
                facts = {"order_id": conversation.order} if turn == 0 else {}
                try:
                    pid = chat(fleet.port, conversation.id, message, facts)
                except BaseException as exc:
                    failures.append(exc)
                    return
                if run is None:
                    continue
                with lock:
                    run.served[pid] += 1
                    done += 1
                    if done % sample_every == 0:
                        run.samples.append((done, {w: (run.served[w], rss(w)) for w in fleet.pids}))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed; the first: {failures[0]!r}") from failures[0]


def one_run(tmp: Path, variant: str, concurrency: int, args: argparse.Namespace, store: redis.Redis,
            redis_pid: int, env: dict[str, str], tag: str) -> Run:
    run = Run(variant, concurrency)
    store.flushall()
    rng = random.Random(tag)
    shortest, longest = (int(n) for n in args.history.split("-"))
    per = args.turns
    warm = conversations(f"{tag}-warm", -(-args.warmup // per), per, (shortest, longest), rng, store)
    plan = conversations(tag, -(-args.requests // per), per, (shortest, longest), rng, store)
    env = {**env, **VARIANTS[variant]}
    if args.cache_bytes:
        env["CTXGUARD_CACHE_BYTES"] = str(args.cache_bytes)
    fleet = Fleet(tmp / tag, env, args.workers)
    try:
        run.boot_rss = {pid: rss(pid) for pid in fleet.pids}
        drive(fleet, warm, args.concurrency_of_warmup or concurrency, rng, None, args.sample_every)
        run.samples.append((0, {w: (0, rss(w)) for w in fleet.pids}))
        for pid in fleet.pids:
            os.kill(pid, signal.SIGRTMIN)  # the wrapper's GC timing starts again
        spies = py_spies(fleet, tmp / tag) if env.get("FLEET_BENCH_PY_SPY") else {}
        cpu0 = {pid: cpu_seconds(pid) for pid in fleet.pids}
        threads0 = {pid: thread_cpu(pid) for pid in fleet.pids}
        redis0, commands0 = cpu_seconds(redis_pid), commandstats(store)
        started = time.perf_counter()
        drive(fleet, plan, concurrency, rng, run, args.sample_every)
        run.seconds = time.perf_counter() - started
        cpu1 = {pid: cpu_seconds(pid) for pid in fleet.pids}
        threads1 = {pid: thread_cpu(pid) for pid in fleet.pids}
        run.stacks = stop_spies(spies)
        redis1, commands1 = cpu_seconds(redis_pid), commandstats(store)
        run.requests = sum(run.served.values())
        if run.samples[-1][0] != run.requests:
            run.samples.append((run.requests, {w: (run.served[w], rss(w)) for w in fleet.pids}))
    finally:
        fleet.close()
    run.cpu_ms = {pid: 1000 * (cpu1[pid] - cpu0[pid]) / max(1, run.served[pid]) for pid in fleet.pids}
    run.cpu_per_request_ms = 1000 * sum(cpu1[p] - cpu0[p] for p in fleet.pids) / run.requests
    run.redis_cpu_us = 1e6 * (redis1 - redis0) / run.requests
    run.threads = {name: 1000 * seconds / run.requests
                   for name, seconds in by_thread(fleet.pids, threads0, threads1).items()}
    run.commands = commands1 - commands0
    run.commands.pop("info", None)
    stats = [json.loads((tmp / tag / "ready" / f"{pid}.gc").read_text()) for pid in fleet.pids
             if (tmp / tag / "ready" / f"{pid}.gc").exists()]
    if len(stats) == len(fleet.pids):
        run.gc_ms = 1000 * sum(sum(g["seconds"]) for g in stats) / run.requests
        run.gc_full = 1000 * sum(g["collections"][2] for g in stats) / run.requests
        run.gc_collections = [1000 * sum(g["collections"][n] for g in stats) / run.requests for n in range(3)]
        run.parts = Counter()
        for g in stats:
            run.parts.update({name: 1000 * seconds / run.requests for name, seconds in g["parts"].items()})
    profiles = [tmp / tag / "ready" / f"{pid}.prof" for pid in fleet.pids]
    if env.get("FLEET_BENCH_PROFILE") and all(p.exists() for p in profiles):
        run.areas, run.functions = where_it_goes(profiles)
    if not args.keep:
        shutil.rmtree(tmp / tag / "prometheus", ignore_errors=True)
    return run


PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
PY_SPY_RATE = 500  # samples a second of each worker


def py_spies(fleet: Fleet, tmp: Path) -> dict[int, tuple[subprocess.Popen[bytes], Path]]:
    """A ``py-spy record`` on each worker (non-blocking: it reads the worker's memory without stopping
    it), each thread's stacks, idle ones left out, until ``stop_spies``."""
    spies = {}
    for pid in fleet.pids:
        out = tmp / f"{pid}.py-spy"
        spies[pid] = (subprocess.Popen(
            [PY_SPY, "record", "--pid", str(pid), "--rate", str(PY_SPY_RATE), "--format", "raw", "--threads",
             "--nonblocking", "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out)
    time.sleep(1.0)  # attached (no wait here is a timing claim: samples before the run are not read)
    for proc, _ in spies.values():
        if proc.poll() is not None:
            raise RuntimeError(f"py-spy failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return spies


def stop_spies(spies: dict[int, tuple[subprocess.Popen[bytes], Path]]) -> Counter[tuple[str, ...]]:
    """SIGINT to each py-spy (it writes its file then); the workers' main threads' stacks, summed."""
    for proc, _ in spies.values():
        proc.send_signal(signal.SIGINT)
    stacks: Counter[tuple[str, ...]] = Counter()
    for pid, (proc, out) in spies.items():
        proc.wait(timeout=HANG_GUARD)
        for line in out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            thread, *frames = stack.split(";")
            if thread.startswith(f"thread ({pid})"):  # the main thread's tid is the pid
                stacks[tuple(frames)] += int(count)
    return stacks


#: Where a sample's time is the host's own: the SDK, its HTTP client, the web framework, the app.
HOST = frozenset({"openai", "httpx", "httpx2", "httpcore", "httpcore2", "flask", "werkzeug", "gunicorn", "app",
                  "fleet_bench_app"})


def frame_area(frame: str) -> str:
    """A py-spy frame's area: ``name (path:line)``, its path relative to ``sys.path`` -> ctxguard's
    module (or package), else the path's top-level name (a distribution, a standard library module)."""
    parts = Path(frame.rpartition(" (")[2].rpartition(":")[0]).parts
    if not parts:
        return "?"
    if parts[0] == "ctxguard":
        return "/".join(parts[:2])
    return parts[0].removesuffix(".py")


def owner(stack: tuple[str, ...]) -> str:
    """Whose work a sample is: the area of its innermost frame that is ctxguard's or the host's (what
    the standard library, redis-py, OpenTelemetry or prometheus-client do is their caller's)."""
    for frame in reversed(stack):
        area = frame_area(frame)
        if area.startswith("ctxguard") or area in HOST:
            return area
    return frame_area(stack[-1]) if stack else "?"


def report_py_spy(pair: list[Run]) -> None:
    """The main threads' samples by whose work they are (``owner``), as ms a request of the main
    thread's CPU: the share of the samples times the thread's ``schedstat`` time."""
    print(f"\n### Where the workers' main threads go, sampled (py-spy at {PY_SPY_RATE} Hz, non-blocking, "
          f"{pair[0].concurrency} clients, {pair[0].requests:,} requests)\n")
    for run in pair:
        total = sum(run.stacks.values())
        if not total:
            print(f"{run.variant}: no samples")
            continue
        ms = run.threads.get("main", 0.0) / total
        owners: Counter[str] = Counter()
        leaves: Counter[str] = Counter()
        for stack, n in run.stacks.items():
            owners[whose := owner(stack)] += n
            if whose.startswith("ctxguard"):
                leaves[frame_area(stack[-1])] += n
        ours = sum(n for area, n in owners.items() if area.startswith("ctxguard"))
        print(f"{run.variant}: {total:,} samples; CPU ms a request: main thread {run.threads.get('main', 0.0):.2f}, "
              + ", ".join(f"{k} {v:.3f}" for k, v in sorted(run.threads.items()) if k != "main")
              + f"; ctxguard's work {100 * ours / total:.1f}% of the main thread's samples ({ours * ms:.2f} ms)")
        if ours:
            print("    ctxguard's, by the innermost frame's area: "
                  + ", ".join(f"{a} {n * ms:.3f}" for a, n in leaves.most_common(16)))
        run.areas = Counter({a: n * ms for a, n in owners.items()})
    if all(r.areas for r in pair):
        a, b = pair[0].areas, pair[1].areas
        print("\n| whose work (innermost ctxguard or host frame) | with ms | without ms | difference ms |")
        print("|---|---:|---:|---:|")
        for k in sorted(set(a) | set(b), key=lambda k: -abs(a[k] - b[k])):
            if max(a[k], b[k]) >= 0.005:
                print(f"| {k} | {a[k]:.3f} | {b[k]:.3f} | {a[k] - b[k]:+.3f} |")


def area_of(filename: str) -> str:
    """Where a profiled function lives: ctxguard's module (or package), else the distribution or the
    standard library module's top-level name."""
    if filename.startswith(str(CHECKOUT / "ctxguard")):
        parts = Path(filename).relative_to(CHECKOUT).parts
        return "/".join(parts[:2])
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if filename.startswith(sys.base_prefix):
        return "stdlib " + Path(filename).relative_to(Path(sys.base_prefix, "lib")).parts[1].removesuffix(".py")
    return Path(filename).name


def where_it_goes(files: list[Path]) -> tuple[Counter[str], list[tuple[float, int, str]]]:
    """Self time by area, a C function's given to the areas of its Python callers (by the time each
    caller spent in it), and ctxguard's Python functions by self time (seconds, calls, name)."""
    stats: dict[Any, Any] = pstats.Stats(*map(str, files)).stats  # type: ignore[attr-defined]
    areas: Counter[str] = Counter()
    functions = []
    for (filename, line, name), (_, calls, self_time, _, callers) in stats.items():
        if filename == "~":  # a built-in: charged to who called it
            spent = sum(c[2] for c in callers.values()) or 1.0
            for (caller_file, _, _), c in callers.items():
                areas[area_of(caller_file) if caller_file != "~" else "C"] += self_time * c[2] / spent
            continue
        area = area_of(filename)
        areas[area] += self_time
        if area.startswith("ctxguard"):
            functions.append((self_time, calls, f"{Path(filename).relative_to(CHECKOUT)}:{line} {name}"))
    return areas, sorted(functions, reverse=True)


def report_profile(pair: list[Run]) -> None:
    with_, without = pair
    print(f"\n### Where a worker's CPU goes, a request (cProfile on thread CPU time in every worker, "
          f"{with_.concurrency} clients, {with_.requests:,} requests; profiled, so inflated: read as proportions)\n")
    print(f"Measured from /proc in these profiled runs: with {with_.cpu_per_request_ms:.2f} ms, without "
          f"{without.cpu_per_request_ms:.2f} ms a request.\n")
    per = {r.variant: {a: 1000 * t / r.requests for a, t in r.areas.items()} for r in pair}
    names = sorted(set(per["with"]) | set(per["without"]),
                   key=lambda a: -(per["with"].get(a, 0) - per["without"].get(a, 0)))
    print("| area | with ms | without ms | difference ms |")
    print("|---|---:|---:|---:|")
    for area in names:
        a, b = per["with"].get(area, 0.0), per["without"].get(area, 0.0)
        if max(a, b) >= 0.005:
            print(f"| {area} | {a:.3f} | {b:.3f} | {a - b:+.3f} |")
    print(f"| all | {sum(per['with'].values()):.3f} | {sum(per['without'].values()):.3f} | "
          f"{sum(per['with'].values()) - sum(per['without'].values()):+.3f} |")
    print("\nctxguard's functions by self time (µs a request, calls a request):\n")
    for seconds, calls, name in with_.functions[:25]:
        print(f"    {1e6 * seconds / with_.requests:7.1f}  {calls / with_.requests:6.1f}  {name}")


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def growth_per_500(run: Run) -> float:
    """MiB a worker grew per 500 requests it served, from the first sample to the last (median worker)."""
    first, last = run.samples[0][1], run.samples[-1][1]
    rates = [(last[w][1] - first[w][1]) / MiB / max(1, last[w][0]) * 500 for w in last]
    return statistics.median(rates)


def report(runs: list[Run], args: argparse.Namespace) -> None:
    digits = (0, 3, 3, 2, 0, 1, 1, 2)
    for concurrency in args.concurrency:
        groups = {v: [r for r in runs if r.concurrency == concurrency and r.variant == v] for v in args.variants}
        n = groups[args.variants[0]][0].requests
        print(f"\n### {concurrency} clients, {n:,} requests a run, {args.rounds} rounds; medians (min-max)\n")
        print("| | requests/s | worker CPU ms/request | of which GC ms/request | Redis commands/request "
              "| redis-server CPU µs/request | worker RSS at boot MiB | worker RSS at end MiB "
              "| growth MiB per 500 requests a worker |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        columns = {}
        for variant, group in groups.items():
            columns[variant] = cols = [
                [r.requests / r.seconds for r in group],
                [r.cpu_per_request_ms for r in group],
                [r.gc_ms for r in group],
                [sum(r.commands.values()) / r.requests for r in group],
                [r.redis_cpu_us for r in group],
                [statistics.median(r.boot_rss.values()) / MiB for r in group],
                [statistics.median(v[1] for v in r.samples[-1][1].values()) / MiB for r in group],
                [growth_per_500(r) for r in group],
            ]
            print(f"| {variant} | " + " | ".join(spread(c, d) for c, d in zip(cols, digits, strict=True)) + " |")
        if "without" not in groups:
            continue
        base = columns["without"]
        for variant in groups:
            if variant == "without":
                continue
            # The difference round by round (a round's runs are back to back), then its median.
            diffs = [[a - b for a, b in zip(ca, cb, strict=True)]
                     for ca, cb in zip(columns[variant], base, strict=True)]
            print(f"| {variant} - without | "
                  + " | ".join(spread(c, d) for c, d in zip(diffs, digits, strict=True)) + " |")
        for variant in groups:
            if variant == "without":
                continue
            added: Counter[str] = Counter()
            for a, b in zip(groups[variant], groups["without"], strict=True):
                for name in set(a.commands) | set(b.commands):
                    added[name] += (a.commands[name] / a.requests - b.commands[name] / b.requests) / args.rounds
            print(f"\nRedis commands a request, {variant} - without (mean of rounds): " + ", ".join(
                f"{name} {v:+.3f}" for name, v in sorted(added.items(), key=lambda kv: -abs(kv[1])) if abs(v) >= 0.001))
        print("\nWorker CPU ms a request by thread (schedstat; median of rounds; Python 3.11 names no OS "
              "thread, so ctxguard's reader is 'python'): " + "; ".join(
                  f"{variant} " + ", ".join(f"{name} {statistics.median(r.threads.get(name, 0.0) for r in group):.3f}"
                                            for name in sorted({n for r in group for n in r.threads},
                                                               key=lambda n: n != "main"))
                  for variant, group in groups.items()))
        names = sorted({n for r in runs for n in r.parts}, key=lambda n: -max(r.parts[n] for r in runs))
        print("\nMain-thread CPU ms a request in parts of it (time.thread_time, nested; median of rounds):\n")
        print("| | " + " | ".join(names) + " | main thread outside requests |")
        print("|---|" + "---:|" * (len(names) + 1))
        for variant, group in groups.items():
            print(f"| {variant} | " + " | ".join(f"{statistics.median(r.parts[n] for r in group):.3f}" for n in names)
                  + f" | {statistics.median(r.threads.get('main', 0.0) - r.parts['request'] for r in group):.3f} |")
        print("\nGC collections per 1,000 requests, generations 0/1/2 (median of rounds): " + ", ".join(
            f"{variant} " + "/".join(f"{statistics.median(r.gc_collections[n] for r in group if r.gc_collections):.1f}"
                                     for n in range(3)) for variant, group in groups.items()))
        print("\nWorker RSS (MiB, median over workers and rounds) by requests the fleet had served:\n")
        points = [s[0] for s in groups[args.variants[0]][0].samples]
        print("| requests | " + " | ".join(f"{p:,}" for p in points) + " |")
        print("|---|" + "---:|" * len(points))
        for variant, group in groups.items():
            values = [statistics.median(statistics.median(v[1] for v in r.samples[i][1].values()) / MiB
                                        for r in group) for i in range(len(points))]
            print(f"| {variant} | " + " | ".join(f"{v:.1f}" for v in values) + " |")


@contextmanager
def fake_llm(env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    proc = subprocess.Popen([sys.executable, "-c", FAKE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip(), proc
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="measured requests a run (default 2000)")
    parser.add_argument("--concurrency", default="8,32", help="client threads, one set of runs each (default 8,32)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of (with, without), order flipped each round")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--turns", type=int, default=16, help="turns a conversation")
    parser.add_argument("--history", default="10-40", help="messages a conversation keeps, drawn per conversation")
    parser.add_argument("--warmup", type=int, default=160, help="requests before measuring (other conversations)")
    parser.add_argument("--concurrency-of-warmup", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--sample-every", type=int, default=500, help="RSS sampled every N requests of the fleet")
    parser.add_argument("--read-timeout", type=float, default=0.003,
                        help="FLEET_LEDGER_READ_TIMEOUT, s (default 0.003, the example's)")
    parser.add_argument("--cache-bytes", type=int, default=0, help="CTXGUARD_CACHE_BYTES")
    parser.add_argument("--variants", default="with,without",
                        help=f"runs a round, of {', '.join(VARIANTS)} (default with,without)")
    parser.add_argument("--profile", action="store_true", help="one more pair of runs, profiled: where the CPU goes")
    parser.add_argument("--py-spy", action="store_true",
                        help="one more pair of runs, py-spy attached to each worker: the main threads' samples "
                             "with a ctxguard frame (needs py-spy: the bench extra)")
    parser.add_argument("--keep", metavar="DIR", help="keep logs (and profiles) under DIR")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.variants = args.variants.split(",")
    if unknown := set(args.variants) - set(VARIANTS):
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    if args.py_spy and not Path(PY_SPY).exists():
        parser.error(f"--py-spy: no py-spy at {PY_SPY} (pip install py-spy, or the bench extra)")
    redis_bin = shutil.which("redis-server") or "/usr/bin/redis-server"

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXGUARD_", "OTEL_", "OPENAI_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), *filter(None, [os.environ.get("PYTHONPATH")])])
    print(f"ctxguard from {CHECKOUT}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}; {args.workers} sync "
          f"workers; {args.turns} turns a conversation, histories of {args.history} messages; "
          f"CTXGUARD_CACHE_BYTES={args.cache_bytes or 'default'}")
    runs: list[Run] = []
    with ExitStack() as stack:
        tmp = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "redis").mkdir(exist_ok=True)
        server = stack.enter_context(redis_server(redis_bin, tmp / "redis"))
        store = redis.Redis.from_url(server.url)
        stack.callback(store.close)
        base_url, fake = stack.enter_context(fake_llm(env))
        env.update(REDIS_URL=server.url, CTXGUARD_DIGEST_KEY="fleet-bench", OPENAI_BASE_URL=base_url,
                   OPENAI_API_KEY="offline", FLEET_LEDGER_READ_TIMEOUT=str(args.read_timeout))
        for r in range(args.rounds):
            for concurrency in args.concurrency:
                for variant in (args.variants if r % 2 == 0 else args.variants[::-1]):
                    tag = f"r{r}-c{concurrency}-{variant}"
                    run = one_run(tmp, variant, concurrency, args, store, server.proc.pid, env, tag)
                    assert fake.stdin is not None
                    fake.stdin.write("clear\n")
                    fake.stdin.flush()
                    runs.append(run)
                    print(f"{tag}: {run.requests / run.seconds:.0f} req/s, {run.cpu_per_request_ms:.3f} ms CPU a "
                          f"request, {sum(run.commands.values()) / run.requests:.2f} Redis commands a request, RSS "
                          f"{statistics.median(v[1] for v in run.samples[-1][1].values()) / MiB:.1f} MiB", flush=True)
        def pair(flag: str, name: str) -> list[Run]:
            """One more run with and one without ctxguard, the workers told ``flag``; not in the table."""
            made = []
            for variant in ("with", "without"):
                made.append(one_run(tmp, variant, args.concurrency[0], args, store, server.proc.pid,
                                    {**env, flag: "1"}, f"{name}-c{args.concurrency[0]}-{variant}"))
                assert fake.stdin is not None
                fake.stdin.write("clear\n")
                fake.stdin.flush()
            return made

        profiled = pair("FLEET_BENCH_PROFILE", "profile") if args.profile else []
        spied = pair("FLEET_BENCH_PY_SPY", "py-spy") if args.py_spy else []
    if runs:
        report(runs, args)
    if profiled:
        report_profile(profiled)
    if spied:
        report_py_spy(spied)


if __name__ == "__main__":
    main()
