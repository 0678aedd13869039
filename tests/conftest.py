"""Shared fixtures. Swallowed in production, fatal in tests: every internal error
that ctxguard swallows fails the test that caused it, unless the test declares
it expects some (``internal_errors`` fixture, then drains the list)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ctxguard
from ctxguard import _isolation, budget, tokens


@pytest.fixture
def internal_errors() -> list[tuple[str, BaseException]]:
    """Errors swallowed during this test; a test that expects some empties the list."""
    return []


@pytest.fixture(autouse=True)
def _no_tokenizer_loaded() -> None:
    """Every test starts as a new process does: with no exact tokenizer loaded, so a lazy guard
    counts bounds until a verdict needs the exact counts (docs/budget.md), whatever ran before it
    (a test that loaded tiktoken would otherwise make every later guard count exactly)."""
    tokens.default_counter.cache_clear()


@pytest.fixture(autouse=True)
def _window_table_restored() -> Iterator[None]:
    """Every test gets the shipped window table and leaves it as it was: ``instrument(model_windows=)``
    and ``add_model_windows`` add to the process's table, which a later test would read."""
    saved = dict(budget.MODEL_WINDOWS)
    budget._remembered.cache_clear()
    yield
    budget.MODEL_WINDOWS.clear()
    budget.MODEL_WINDOWS.update(saved)
    budget._remembered.cache_clear()


@pytest.fixture(autouse=True)
def _fail_on_swallowed_errors(internal_errors: list[tuple[str, BaseException]]) -> Iterator[None]:
    def hook(where: str, exc: BaseException) -> None:
        internal_errors.append((where, exc))

    _isolation.add_error_hook(hook)
    try:
        yield
    finally:
        _isolation.remove_error_hook(hook)
        ctxguard.uninstrument()
    if internal_errors:
        where, exc = internal_errors[0]
        raise AssertionError(f"ctxguard swallowed an internal error in {where!r}: {exc!r}") from exc


# -- real SDK over loopback HTTP ------------------------------------------------

import hashlib  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import openai  # noqa: E402
import pytest_asyncio  # noqa: E402

from ctxguard.testing import FakeLLM  # noqa: E402
from ctxguard.testing.plugin import GuardHarness  # noqa: E402

KEY = b"ctxguard-tests"
# The openai SDK's own HTTP package (httpx on 1.x, httpx2 on 3.x).
_httpx = sys.modules[openai.DefaultHttpxClient.__mro__[1].__module__.split(".")[0]]


def redirected(llm: FakeLLM) -> openai.DefaultHttpxClient:
    """An openai SDK HTTP client that sends every request to FakeLLM, whatever host its URL names
    (the SDK still believes it talks to that host: its base URL is the provider's)."""
    fake = urlsplit(llm.base_url)

    class Redirect(_httpx.HTTPTransport):  # type: ignore[misc,name-defined]
        def handle_request(self, request):  # type: ignore[no-untyped-def]
            request.url = request.url.copy_with(scheme="http", host=fake.hostname, port=fake.port)
            return super().handle_request(request)

    return openai.DefaultHttpxClient(transport=Redirect())


def race(*targets: Callable[[], object]) -> None:
    """Run ``targets`` in threads at once, switching threads as often as the interpreter allows."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=target) for target in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)


def message_digest(role: str, text: str, refs: tuple[str, ...] = ()) -> str:
    """Independent re-statement of the documented canonical form (docs/privacy.md)."""
    canonical = f"{role}\x1f{text}\x1f" + "\x1e".join(refs)
    return hashlib.blake2b(canonical.encode("utf-8", "surrogatepass"), key=KEY, digest_size=16).hexdigest()


@pytest.fixture
def llm(fake_llm: FakeLLM) -> FakeLLM:
    """The plugin's ``fake_llm`` (ctxguard.testing.plugin), under a short name."""
    return fake_llm


@pytest.fixture
def harness() -> Iterator[GuardHarness]:
    """A guard harness, not yet instrumented: call ``harness.start(mode=..., policy=...)``."""
    h = GuardHarness()
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture
def client(llm: FakeLLM) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as c:
        yield c


@pytest_asyncio.fixture
async def aclient(llm: FakeLLM):  # type: ignore[no-untyped-def]
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as c:
        yield c


def prose(tokens: int) -> str:
    """Whole sentences of about ``tokens`` tokens by the default counter (cl100k's count when tiktoken
    is there), never more."""
    from ctxguard.tokens import default_counter

    sentence = "The parcel left the Pune depot at noon and reached the Mumbai hub by the evening. "
    return sentence * (tokens // default_counter().count(sentence))


def guard_spans(harness: GuardHarness) -> list:
    """ctxguard's own spans (an SDK may record spans of its own beside them)."""
    return [s for s in harness.spans() if s.attributes and s.attributes.get("ctxguard.payload.hash")]


def only_guard_span(harness: GuardHarness):  # type: ignore[no-untyped-def]
    spans = guard_spans(harness)
    assert len(spans) == 1, [s.name for s in harness.spans()]
    return spans[0]


def replace_body(request, body: object) -> None:  # type: ignore[no-untyped-def]
    """In an httpx/httpx2 request hook: send ``body`` (JSON) instead of what the SDK built, as a
    proxy or middleware below the SDK might."""
    import json
    import sys

    http = sys.modules[type(request).__module__.split(".")[0]]  # httpx or httpx2, whichever built it
    raw = json.dumps(body).encode()
    request.stream = http.ByteStream(raw)
    request._content = raw
    request.headers["Content-Length"] = str(len(raw))


import gc  # noqa: E402
import tracemalloc  # noqa: E402
from contextlib import contextmanager  # noqa: E402


@contextmanager
def traced() -> Iterator[Callable[[], int]]:
    """``with traced() as retained:``; ``retained()``: the bytes allocated since the block began
    and still alive (after a collection), as tracemalloc counts them."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]

    def retained() -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - base

    try:
        yield retained
    finally:
        tracemalloc.stop()


# -- real servers ----------------------------------------------------------------

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import NoReturn  # noqa: E402

from tests.servers import REQUIRE_REDIS, RedisServer, redis_server  # noqa: E402


def _redis_unavailable(reason: str) -> NoReturn:
    if REQUIRE_REDIS:
        pytest.fail(f"{reason} (CTXGUARD_REQUIRE_REDIS=1)")
    pytest.skip(reason)


def _redis_binary() -> str:
    """redis-server's path. Skipped when it or redis-py is missing, unless ``CTXGUARD_REQUIRE_REDIS=1``
    (CI sets it after installing both): then a missing one fails."""
    try:
        import redis  # noqa: F401
    except ImportError:
        _redis_unavailable("redis-py not installed: pip install 'ctxguard[redis]'")
    server = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if server is None:
        _redis_unavailable("redis-server not found: apt-get install -y redis-server")
    return server


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a throwaway ``redis-server``, one per test session (the fact
    store's tests, the fleet app's)."""
    with redis_server(_redis_binary(), tmp_path_factory.mktemp("redis")) as server:
        yield server.url


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own, to kill or freeze (``SIGSTOP``) without touching the session's."""
    with redis_server(_redis_binary(), tmp_path) as server:
        yield server
