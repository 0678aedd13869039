"""RedisLedger against a real redis-server: same reduction as MemoryLedger, shared
across processes, isolated per scope, bounded, and failing fast when Redis is gone."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.servers import REQUIRE_REDIS, free_port

try:
    import redis
except ImportError:
    if REQUIRE_REDIS:
        raise
    pytest.skip("redis-py not installed: pip install 'ctxguard[redis]'", allow_module_level=True)

from ctxguard.facts.ledger import FactEvent, MemoryLedger
from ctxguard.facts.redis import LedgerSlow, RedisLedger

#: These tests are about what is stored and read, not how fast: a busy machine (Redis on the same
#: two cores as the test workers) must not make a read miss the 3 ms a guarded call waits.
PATIENT = 1.0

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc)
SCOPE = ("conv-1", "acme")


@pytest.fixture
def prefix() -> str:
    """A fresh key prefix per test: tests share one server but never each other's keys."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def ledger(redis_url: str, prefix: str) -> Iterator[RedisLedger]:
    store = RedisLedger(redis_url, prefix=prefix, read_timeout=PATIENT)
    try:
        yield store
    finally:
        store.close()


def ev(fact_id: str, value: str | None, scope: tuple[str, str | None] = SCOPE, **kw: object) -> FactEvent:
    return FactEvent(scope=scope, fact_id=fact_id, value=value, **kw)  # type: ignore[arg-type]


def test_revision_makes_old_value_stale(ledger: RedisLedger) -> None:
    ledger.append(ev("shipping_city", "Mumbai"))
    ledger.append(ev("shipping_city", "Pune"))
    state = ledger.state(SCOPE, NOW)
    active = state.active["shipping_city"]
    assert (active.value, active.version, active.label) == ("Pune", 2, "shipping_city@2")
    assert [(v.value, v.version) for v in state.stale["shipping_city"]] == [("Mumbai", 1)]
    assert not state.forgotten


def test_same_result_as_memory_ledger(ledger: RedisLedger) -> None:
    events = [
        ev("shipping_city", "Mumbai"),
        ev("shipping_city", "Pune"),
        ev("budget", "5000", required=False),
        ev("promo", "SPRING", expires_at=NOW + timedelta(hours=1)),
        ev("phone", "123"),
        ev("phone", None),
    ]
    memory = MemoryLedger()
    for e in events:
        ledger.append(e)
        memory.append(e)
    for at in (NOW, NOW + timedelta(hours=2)):
        assert ledger.state(SCOPE, at) == memory.state(SCOPE, at)


def test_deletion_forgets(ledger: RedisLedger) -> None:
    ledger.append(ev("phone", "98200 12345"))
    ledger.append(ev("phone", None))
    state = ledger.state(SCOPE, NOW)
    assert "phone" not in state.active
    assert [v.value for v in state.forgotten["phone"]] == ["98200 12345"]


def test_expiry_forgets_and_reports_next_expiry(ledger: RedisLedger) -> None:
    expires = NOW + timedelta(minutes=5)
    ledger.append(ev("promo", "SPRING", expires_at=expires))
    assert ledger.state(SCOPE, NOW).next_expiry == expires
    assert ledger.state(SCOPE, NOW).active["promo"].value == "SPRING"
    assert [v.value for v in ledger.state(SCOPE, expires).forgotten["promo"]] == ["SPRING"]


def test_explicit_sequence_beats_arrival(ledger: RedisLedger) -> None:
    ledger.append(ev("shipping_city", "Pune", sequence=2))
    ledger.append(ev("shipping_city", "Mumbai", sequence=1))  # arrives late, is older
    state = ledger.state(SCOPE, NOW)
    assert state.active["shipping_city"].value == "Pune"
    assert [v.value for v in state.stale["shipping_city"]] == ["Mumbai"]


def test_store_assigns_arrival(ledger: RedisLedger) -> None:
    """A caller's ``arrival`` is ignored: the shared counter decides."""
    ledger.append(ev("shipping_city", "Mumbai", arrival=100))
    ledger.append(ev("shipping_city", "Pune", arrival=1))
    assert ledger.state(SCOPE, NOW).active["shipping_city"].value == "Pune"


def test_missing_scope_is_empty(ledger: RedisLedger) -> None:
    state = ledger.state(("nobody", None), NOW)
    assert not state.active and not state.stale and not state.forgotten and state.next_expiry is None


def test_scopes_are_isolated(ledger: RedisLedger) -> None:
    ledger.append(ev("city", "Pune", scope=("c1", "acme")))
    ledger.append(ev("city", "Delhi", scope=("c2", "acme")))  # other conversation
    ledger.append(ev("city", "Goa", scope=("c1", "globex")))  # other tenant
    ledger.append(ev("city", "Agra", scope=("c1", None)))  # no tenant
    assert ledger.state(("c1", "acme"), NOW).active["city"].value == "Pune"
    assert ledger.state(("c2", "acme"), NOW).active["city"].value == "Delhi"
    assert ledger.state(("c1", "globex"), NOW).active["city"].value == "Goa"
    assert ledger.state(("c1", None), NOW).active["city"].value == "Agra"
    assert not ledger.state(("c1", "acme"), NOW).stale


def test_prefixes_are_isolated(redis_url: str, ledger: RedisLedger) -> None:
    other = RedisLedger(redis_url, prefix=ledger.prefix + "x", read_timeout=PATIENT)
    try:
        other.append(ev("city", "Goa"))
        assert not ledger.state(SCOPE, NOW).active
    finally:
        other.close()


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("a:b", "c"), ("b", "c:a")),  # ':' moved between the ids
        (("x", "t:y"), ("y", "t:x")),
        (("c", "t:a"), ("a:c", "t")),  # tenant:conversation == tenant':conversation'
        (("c", "-"), ("c", None)),  # literal "-" tenant vs no tenant
        (("c", "%3A"), ("c", ":")),  # the escape itself
        (("c", ""), ("c", None)),
    ],
)
def test_ids_with_separators_do_not_collide(
    ledger: RedisLedger, a: tuple[str, str | None], b: tuple[str, str | None]
) -> None:
    assert ledger.key(a) != ledger.key(b)
    ledger.append(ev("city", "Pune", scope=a))
    ledger.append(ev("city", "Delhi", scope=b))
    assert ledger.state(a, NOW).active["city"].value == "Pune"
    assert ledger.state(b, NOW).active["city"].value == "Delhi"
    assert not ledger.state(a, NOW).stale and not ledger.state(b, NOW).stale


def test_append_from_another_process_is_visible(redis_url: str, ledger: RedisLedger) -> None:
    ledger.append(ev("shipping_city", "Mumbai"))
    code = textwrap.dedent(
        f"""
        from ctxguard.facts.ledger import FactEvent
        from ctxguard.facts.redis import RedisLedger
        store = RedisLedger({redis_url!r}, prefix={ledger.prefix!r}, read_timeout=1.0)
        store.append(FactEvent(scope={SCOPE!r}, fact_id="shipping_city", value="Pune"))
        store.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    state = ledger.state(SCOPE, NOW)
    assert (state.active["shipping_city"].value, state.active["shipping_city"].version) == ("Pune", 2)
    assert [v.value for v in state.stale["shipping_city"]] == ["Mumbai"]


def test_concurrent_appends_keep_arrival_and_list_order_consistent(redis_url: str, prefix: str) -> None:
    """Many writers at once: arrivals are unique and the list is in arrival order."""
    stores = [RedisLedger(redis_url, prefix=prefix, read_timeout=PATIENT) for _ in range(4)]

    def write(i: int) -> None:
        for n in range(50):
            stores[i].append(ev(f"f{i}", str(n)))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    items = stores[0]._client.lrange(stores[0].key(SCOPE), 0, -1)
    arrivals = [json.loads(item)["arrival"] for item in items]
    assert len(arrivals) == 200 and arrivals == sorted(set(arrivals))
    state = stores[0].state(SCOPE, NOW)
    assert {fid: v.value for fid, v in state.active.items()} == {f"f{i}": "49" for i in range(4)}
    for store in stores:
        store.close()


def test_list_is_bounded_and_expires(redis_url: str, prefix: str) -> None:
    store = RedisLedger(redis_url, prefix=prefix, max_revisions=1, ttl_seconds=60, read_timeout=PATIENT)
    try:
        assert store.max_events == 64
        for n in range(70):
            store.append(ev("counter", str(n)))
        key = store.key(SCOPE)
        assert store._client.llen(key) == 64
        assert 0 < store._client.ttl(key) <= 60
        active = store.state(SCOPE, NOW).active["counter"]
        assert active.value == "69"
    finally:
        store.close()


def test_no_ttl_means_no_expiry(redis_url: str, prefix: str) -> None:
    store = RedisLedger(redis_url, prefix=prefix, ttl_seconds=None, read_timeout=PATIENT)
    try:
        store.append(ev("city", "Pune"))
        assert store._client.ttl(store.key(SCOPE)) == -1
    finally:
        store.close()


def test_unreachable_redis_fails_fast() -> None:
    store = RedisLedger(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        for call in (lambda: store.state(SCOPE, NOW), lambda: store.append(ev("city", "Pune"))):
            start = time.monotonic()
            with pytest.raises(redis.exceptions.ConnectionError):
                call()
            assert time.monotonic() - start < 2
    finally:
        store.close()


def test_silent_redis_times_out_fast() -> None:
    """A peer that accepts the connection but never answers must not hang the call: a call's read
    gives up at ``read_timeout`` (3 ms), never at the client's ``socket_timeout``, set here to a
    minute so that the two cannot be mistaken for each other however loaded the machine is."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # never accept()ed, never answered
        port = server.getsockname()[1]
        store = RedisLedger(f"redis://127.0.0.1:{port}/0", socket_timeout=60)
        try:
            for _ in range(3):  # every time
                start = time.monotonic()
                with pytest.raises(LedgerSlow, match="did not answer within 3 ms"):
                    store.state(SCOPE, NOW)
                assert time.monotonic() - start < 30
        finally:
            store.close()
        store = RedisLedger(f"redis://127.0.0.1:{port}/0", socket_timeout=0.25)
        try:  # a write (the app's record_fact) gives up at socket_timeout
            with pytest.raises((redis.exceptions.TimeoutError, redis.exceptions.ConnectionError)):
                store.append(ev("city", "Pune"))
        finally:
            store.close()


def test_a_read_that_timed_out_costs_the_next_call_a_bare_connection(private_redis, prefix: str) -> None:
    """A read past ``read_timeout`` drops its connection (a late reply may still come on it), so the
    next call connects again: under load a quarter of the calls (docs/performance.md, "The fleet
    example under load"). That connection says nothing it need not: no ``HELLO``, no ``CLIENT
    SETINFO``, only the read (redis-py 8.2: 47 µs of a worker's CPU a connection, against 189)."""
    store = RedisLedger(private_redis.url, prefix=prefix, read_timeout=0.05)
    admin = redis.Redis.from_url(private_redis.url)
    try:
        store.append(ev("city", "Pune"))
        assert store.state(SCOPE, NOW).active["city"].value == "Pune"
        before = admin.info("commandstats")
        for _ in range(3):
            private_redis.proc.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(LedgerSlow):
                    store.state(SCOPE, NOW)
            finally:
                private_redis.proc.send_signal(signal.SIGCONT)
            assert store.state(SCOPE, NOW).active["city"].value == "Pune"  # on a new connection
        after = admin.info("commandstats")
    finally:
        store.close()
        admin.close()

    def sent(command: str) -> int:
        return int(after.get(f"cmdstat_{command}", {}).get("calls", 0)) - int(
            before.get(f"cmdstat_{command}", {}).get("calls", 0))

    assert sent("lrange") == 6  # the three that timed out reached Redis when it woke, and the three after
    assert sent("hello") == 0 and sent("client|setinfo") == 0


def test_injected_client_is_used_and_not_closed(redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        store = RedisLedger("ignored://", prefix=prefix, client=client)
        store.append(ev("city", "Pune"))
        store.close()
        assert client.ping()
        reader = RedisLedger(redis_url, prefix=prefix, read_timeout=PATIENT)
        assert reader.state(SCOPE, NOW).active["city"].value == "Pune"
        reader.close()
    finally:
        client.close()


def test_bad_limits_are_rejected(redis_url: str) -> None:
    for kwargs in ({"max_revisions": 0}, {"ttl_seconds": 0}, {"socket_timeout": 0}, {"max_shared": 0}):
        with pytest.raises(ValueError):
            RedisLedger(redis_url, **kwargs)  # type: ignore[arg-type]


def test_importing_module_does_not_import_redis_and_missing_redis_names_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        import ctxguard.facts.redis as mod
        assert "redis" not in sys.modules, "importing ctxguard.facts.redis imported redis"
        sys.modules["redis"] = None  # as if redis-py were not installed
        try:
            mod.RedisLedger("redis://127.0.0.1:1/0")
        except ImportError as exc:
            assert "ctxguard[redis]" in str(exc), exc
        else:
            raise AssertionError("no ImportError")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
