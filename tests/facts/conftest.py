"""A real ``redis-server`` for the Redis fact store's tests: one per test session, and one
per test for the tests that kill or freeze it.

Skipped when ``redis-server`` or redis-py is missing, unless
``CTXGUARD_REQUIRE_REDIS=1`` (CI sets it after installing both), in which case a
missing server fails the run instead of silently skipping the store's tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NamedTuple, NoReturn

import pytest

REQUIRE = os.environ.get("CTXGUARD_REQUIRE_REDIS") == "1"
START_TIMEOUT = 10.0


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unavailable(reason: str) -> NoReturn:
    if REQUIRE:
        pytest.fail(f"{reason} (CTXGUARD_REQUIRE_REDIS=1)")
    pytest.skip(reason)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


class RedisServer(NamedTuple):
    proc: subprocess.Popen[bytes]
    url: str  # redis://127.0.0.1:PORT/0


@contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    """A throwaway ``redis-server`` (no persistence, in ``workdir``), stopped on exit. Tests that
    kill or freeze a server start one of their own with it."""
    try:
        import redis  # noqa: F401
    except ImportError:
        _unavailable("redis-py not installed: pip install 'ctxguard[redis]'")
    server = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if server is None:
        _unavailable("redis-server not found: apt-get install -y redis-server")
    log = workdir / "redis.log"
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(workdir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers_ping(port):
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"redis-server did not answer PING within {START_TIMEOUT}s:\n{log.read_text(errors='replace')}"
                )
            time.sleep(0.02)  # poll interval, not a wait for readiness
        yield RedisServer(proc, f"redis://127.0.0.1:{port}/0")
    finally:
        with suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # a test may have left it stopped
        _stop(proc)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a throwaway server shared by the session's tests."""
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server.url


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own, to kill or freeze (``SIGSTOP``) without touching the session's."""
    with redis_server(tmp_path) as server:
        yield server
