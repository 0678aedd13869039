"""Real servers the tests start themselves, on free loopback ports in temp dirs, stopped by PID.

One place for what several test packages need: a free port, waiting for a server to answer,
stopping a process, and a throwaway ``redis-server`` (the ``redis_url`` fixture in
``tests/conftest.py``; tests/facts and tests/ops use it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["REQUIRE_REDIS", "RedisServer", "free_port", "redis_server", "stop", "wait_for"]

#: CI installs redis-server and redis-py and sets this: their tests must then run, not skip.
REQUIRE_REDIS = os.environ.get("CTXGUARD_REQUIRE_REDIS") == "1"
REDIS_START_TIMEOUT = 10.0


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2) -> Any:
    """``condition()``'s first truthy result; an ``OSError`` (not listening yet) counts as not yet.
    ``timeout`` is a hang guard, not a performance claim."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = condition()
        except OSError:
            result = None
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def stop(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it is still there after ``timeout`` (this process only, by PID)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def _answers_ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64).startswith(b"+PONG")


class RedisServer(NamedTuple):
    proc: subprocess.Popen[bytes]
    url: str  # redis://127.0.0.1:PORT/0


@contextmanager
def redis_server(binary: str, workdir: Path) -> Iterator[RedisServer]:
    """A throwaway ``redis-server`` (no persistence, in ``workdir``), stopped on exit; a test that
    kills or freezes (``SIGSTOP``) one starts its own (the ``private_redis`` fixture)."""
    log = workdir / "redis.log"
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", "",
             "--appendonly", "no", "--daemonize", "no"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
            return _answers_ping(port)

        try:
            wait_for("redis-server to answer PING", ready, timeout=REDIS_START_TIMEOUT, interval=0.02)
        except AssertionError as exc:
            raise RuntimeError(f"{exc}:\n{log.read_text(errors='replace')}") from None
        yield RedisServer(proc, f"redis://127.0.0.1:{port}/0")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)  # a test may have left it stopped
        stop(proc, timeout=5)
