"""Fork safety (ctxguard/forksafe.py): a child forked while other threads are mid-call finishes
guarded calls of its own, whatever lock those threads held at the fork."""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
import time
from datetime import datetime, timezone
from typing import Any

import openai
import pytest
from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard import forksafe
from ctxguard.facts.ledger import FactEvent
from tests.servers import free_port

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Ship to Lyon"}]
FORKS = 24


def _call(completions: Any, conversation: str, instrumented: bool) -> None:
    if not instrumented:  # the probe without ctxguard: nothing of it runs
        completions.create(model="gpt-4o", messages=MESSAGES)
        return
    with ctxguard.conversation(conversation):
        ctxguard.record_fact("city", "Lyon")
        completions.create(model="gpt-4o", messages=MESSAGES)


def _child(completions: Any, instrumented: bool, stacks: Any) -> None:  # pragma: no cover - in the child
    """One call and ``uninstrument()``, under an alarm: exits 0 when they returned, 1 when one
    raised; a deadlock is ended by the alarm, after every thread's stack is written to ``stacks``."""
    code = 1
    try:
        out = open(stacks / f"{os.getpid()}.txt", "w")  # noqa: SIM115 - open until os._exit
        faulthandler.dump_traceback_later(18, file=out)
        signal.alarm(20)
        _call(completions, "forked", instrumented)
        ctxguard.uninstrument()  # the parent's /metrics thread is not here: nothing may wait for it
        code = 0
    finally:
        os._exit(code)


@pytest.mark.parametrize("instrumented", [False, True], ids=["plain", "instrumented"])
def test_children_forked_under_concurrent_calls_finish_a_call(llm, redis_url, tmp_path, instrumented):
    """Capture, a Redis ledger and the metrics server on; two threads calling in a loop; twelve
    forks. Every child finishes a guarded call of its own (before: 3-5 of 12 hung for ever in
    the capture writer's lock, inherited held). The plain run is the same probe without ctxguard:
    what a child uses of the SDK is made before the forks (Python's own import and
    ``cached_property`` locks are not ctxguard's to reset)."""
    ledger = ctxguard.RedisLedger(redis_url, prefix=f"fork{os.getpid()}")
    if instrumented:
        ctxguard.instrument(registry=CollectorRegistry(), digest_key=b"k", ledger=ledger, metrics_port=free_port(),
                            capture_path=str(tmp_path / "capture.jsonl"))
    stop = threading.Event()
    forked_client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    completions = forked_client.chat.completions  # resolved here: the children only call it
    with openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as warm:  # its connection stays here
        _call(warm.chat.completions, "warm-up", instrumented)  # the SDK's lazy imports and model builds, done

    def calls(n: int) -> None:
        with openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as client:
            while not stop.is_set():
                _call(client.chat.completions, f"thread-{n}", instrumented)

    threads = [threading.Thread(target=calls, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    children = []
    try:
        for _ in range(FORKS):
            time.sleep(0.01)
            pid = os.fork()
            if pid == 0:  # pragma: no cover
                _child(completions, instrumented, tmp_path)
            children.append(pid)
        outcomes = {}
        deadline = time.monotonic() + 30
        while len(outcomes) < len(children) and time.monotonic() < deadline:
            for pid in children:
                if pid not in outcomes:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        outcomes[pid] = os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join()
        for pid in children:
            if pid not in outcomes:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        ledger.close()
        forked_client.close()
    hung = len(children) - len(outcomes)
    stacks = "".join(f"\n--- child {pid}:\n" + (tmp_path / f"{pid}.txt").read_text()
                     for pid, code in outcomes.items() if code != 0 and (tmp_path / f"{pid}.txt").exists())
    assert hung == 0 and set(outcomes.values()) == {0}, (
        f"{hung} of {FORKS} children hung; exit codes {outcomes}{stacks}")


def test_a_lock_held_at_the_fork_is_free_in_the_child():
    held = forksafe.lock()
    held.acquire()
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        os._exit(0 if held.acquire(timeout=2) else 1)
    held.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("pool", ["_client", "_reads"])
def test_a_ledger_whose_pool_lock_was_held_at_the_fork_answers_in_the_child(redis_url, pool):
    """A thread holds the lock of one of the ledger's connection pools while the process forks:
    the child's ledger still reads and writes (redis-py before 8.2 resets an inherited pool under
    that lock; the ledger gives the child pools of its own)."""
    ledger = ctxguard.RedisLedger(redis_url, prefix=f"forkpool{os.getpid()}", read_timeout=5.0)  # not a timing test
    ledger.state(("warm", None), datetime.now(timezone.utc))  # both pools have a connection
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with getattr(ledger, pool).connection_pool._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover
            signal.alarm(10)
            try:
                ledger.append(FactEvent(scope=("child", None), fact_id="city", value="Lyon"))
                os._exit(0 if "city" in ledger.state(("child", None), datetime.now(timezone.utc)).active else 1)
            finally:
                os._exit(2)
    finally:
        release.set()
        holder.join()
    _, status = os.waitpid(pid, 0)
    ledger.close()
    assert os.waitstatus_to_exitcode(status) == 0
