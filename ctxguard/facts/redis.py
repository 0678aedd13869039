"""A fact store in Redis, for apps that run several worker processes.

``MemoryLedger`` lives in one process: with a pool of workers, a fact recorded by
the worker that handled turn 3 is invisible to the worker that handles turn 4, and
the guard would neither pin the current value nor catch the stale one. This store
keeps every scope's events in Redis so that all workers reduce the same history.

redis-py is an optional extra (``pip install 'ctxguard[redis]'``); it is imported
only when a ``RedisLedger`` is built, so importing this module costs nothing.

Key layout (``prefix`` defaults to ``ctxguard``):

``{prefix}:arrival``
    One integer counter, ``INCR``-ed per append. It is the events' ``arrival``
    number, so "arrived later" means the same thing in every process (each
    process's own clock or counter would not).
``{prefix}:facts:{tenant}:{conversation}``
    One list per scope, oldest event first; each item is the event's
    ``FactEvent.to_json()`` as JSON, with the store-assigned ``arrival``. The
    tenant is ``-`` for ``None``; ``%`` and ``:`` in the ids are percent-encoded
    (and a tenant that is literally ``-`` becomes ``%2D``) so that distinct scopes
    never share a key.

Bound: a scope keeps its last ``max_revisions * 64`` events (``max_events``),
whatever fact they belong to; older ones are trimmed on append. That is
``max_revisions`` revisions for each of 64 facts, more for facts revised less
often. A conversation that outgrows it loses its oldest events first: old stale
versions, and eventually a fact that was set once long ago and never revised.
Each append also resets the scope's expiry to ``ttl_seconds`` (``None``: never
expires), so abandoned conversations do not accumulate.

``{prefix}:values``
    A stream of ``SharedValue`` entries (``ctxguard.facts.shared``: keyed digests, a fact
    id, two numbers; never a value), one per distinctive value recorded while the ledger
    is shared (``instrument()`` shares it when a digest key is configured), written by the
    same script as the event, capped at about ``max_shared`` entries (``MAXLEN ~``). Each
    process's ``SharedValuesReader`` thread follows it into its own ``DigestIndex``, which the
    call path asks without any I/O (docs/facts.md, "Across processes").

Not for Redis Cluster: the append script touches the shared counter, the scope's list
and the stream, which live in different hash slots.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import threading
from datetime import datetime
from typing import Any

from .. import forksafe
from .._isolation import report_internal_error
from ..conversation import Scope
from ..digest import Digester
from .ledger import FactEvent, FactState, reduce
from .matching import match_key
from .shared import DigestIndex, SharedValue, ValueDigests

__all__ = ["LedgerSlow", "RedisLedger", "SharedValuesReader"]

logger = logging.getLogger("ctxguard")

FACTS_PER_SCOPE = 64  # max_events = max_revisions * FACTS_PER_SCOPE

# KEYS[1] = arrival counter, KEYS[2] = scope list, KEYS[3] = shared values stream.
# ARGV[1] = the event's JSON object *without* "arrival", ARGV[2] = max events,
# ARGV[3] = ttl in seconds (0: no expiry), ARGV[4] = the stream's MAXLEN, ARGV[5...] = the
# shared value's field/value pairs (none: nothing shared).
# One script, so that no other append can take an arrival number between our INCR
# and our RPUSH: list order and arrival order agree; and an event is shared if and only
# if it is stored. The arrival is spliced in as text rather than through cjson, which
# would re-encode (and round) the payload.
_APPEND_LUA = """
local arrival = redis.call('INCR', KEYS[1])
local item = '{"arrival": ' .. string.format('%d', arrival) .. ', ' .. string.sub(ARGV[1], 2)
redis.call('RPUSH', KEYS[2], item)
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[2], ttl)
end
if #ARGV > 4 then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', unpack(ARGV, 5))
end
return arrival
"""

#: The reader's XREAD waits this long for new entries (ms) before asking again; a new entry
#: wakes it at once, so this bounds nothing but how often an idle reader asks.
BLOCK_MS = 1_000
#: Entries per read.
PAGE = 500
#: After a read that brought entries the reader waits this long (s) before it reads again, so that
#: a burst of values recorded across the fleet comes in one read instead of waking every worker's
#: reader once per value (a wake costs a worker a round trip to Redis, and its call thread the
#: GIL). A value recorded in another process is found in this one's payloads up to this much later.
COALESCE_S = 0.2
#: The reader's connection gives up on a silent Redis this long after its wait ends (s).
READ_MARGIN_S = 1.0
#: After a failed read the reader waits this long, doubled per failure up to RETRY_MAX_S (s).
FIRST_RETRY_S = 0.5
RETRY_MAX_S = 5.0
#: ``close()`` / ``uninstrument()`` wait at most this long for the reader thread (s).
STOP_TIMEOUT_S = 2.0
#: The longest a guarded call waits for Redis, by default (s): a loopback or same-zone Redis
#: answers an LRANGE in well under a millisecond.
READ_TIMEOUT_S = 0.003


def redis_timeout() -> type[Exception]:
    """redis-py's timeout error (imported only once a ``RedisLedger`` exists)."""
    import redis

    return redis.exceptions.TimeoutError


def _escape(part: str) -> str:
    """Percent-encode the separator (and the escape character itself)."""
    return part.replace("%", "%25").replace(":", "%3A")


def scope_key(prefix: str, scope: Scope) -> str:
    """The Redis key of a scope's event list (injective in ``scope``)."""
    conversation, tenant = scope
    if tenant is None:
        tenant_part = "-"
    else:
        tenant_part = _escape(tenant)
        if tenant_part == "-":  # keep the literal tenant "-" apart from no tenant
            tenant_part = "%2D"
    return f"{prefix}:facts:{tenant_part}:{_escape(conversation)}"


class LedgerSlow(TimeoutError):
    """The conversation's facts did not arrive within ``read_timeout``: the call goes on without
    them (its fact checks skip, saying so)."""


class RedisLedger:
    """Fact store shared by several worker processes. ``RedisLedger("redis://127.0.0.1:6379/0")``

    Connect and read timeouts are both ``socket_timeout`` and there are no
    retries, so an unreachable Redis fails in a fraction of a second. Errors from
    redis-py propagate; the guard swallows and counts them.

    A guarded call waits on Redis no longer than ``read_timeout`` (3 ms): its conversation's
    facts are read over connections of their own whose connect and read timeouts are that, so a
    paused, stopped or black-holed Redis costs a call at most one such wait (``LedgerSlow``: its
    fact checks skip, "the fact ledger did not answer within 3 ms"). A socket timeout counts
    only the wait for Redis's bytes, not the time the process waits to be scheduled, so a busy
    machine does not miss it. Raise it for a Redis farther away than a millisecond or two.
    ``record_fact`` writes are the app's own calls, not an LLM call's: they wait up to
    ``socket_timeout``.

    ``client``: an already configured redis-py client (its own timeouts apply to writes, and
    ``url`` and ``socket_timeout`` are ignored; calls read over connections made with its
    settings and ``read_timeout``); ``close()`` then leaves it open.

    ``max_shared``: the shared values stream holds about this many entries, and each
    process's index of the other processes' values at most this many values, and never more
    than ``index.INDEX_BYTES`` (4 MiB), whatever the count.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ctxguard",
        max_revisions: int = 32,
        ttl_seconds: int | None = 7 * 86400,
        socket_timeout: float = 0.25,
        client: Any = None,
        max_shared: int = 100_000,
        read_timeout: float = READ_TIMEOUT_S,
    ) -> None:
        if max_revisions <= 0:
            raise ValueError("RedisLedger max_revisions must be positive")
        if max_shared <= 0:
            raise ValueError("RedisLedger max_shared must be positive")
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError("RedisLedger ttl_seconds must be positive or None")
        if socket_timeout <= 0:
            raise ValueError("RedisLedger socket_timeout must be positive")
        if read_timeout <= 0:
            raise ValueError("RedisLedger read_timeout must be positive")
        self.read_timeout = read_timeout
        self.prefix = prefix
        self.max_revisions = max_revisions
        self.max_events = max_revisions * FACTS_PER_SCOPE
        self.ttl_seconds = ttl_seconds
        self.max_shared = max_shared
        self._owns_client = client is None
        if client is None:
            try:
                import redis
                from redis.backoff import NoBackoff
                from redis.retry import Retry
            except ImportError as exc:
                raise ImportError(
                    "RedisLedger needs redis-py: pip install 'ctxguard[redis]' (or pip install redis)"
                ) from exc
            client = redis.Redis.from_url(
                url,
                socket_timeout=socket_timeout,
                socket_connect_timeout=socket_timeout,
                # redis-py >= 6 retries 3 times with up to seconds of backoff by default.
                retry=Retry(NoBackoff(), 0),
            )
        if self._owns_client:
            _unlocked_at_fork(client)
        self._client: Any = client
        self._arrival_key = f"{prefix}:arrival"
        #: The stream of shared values (keyed digests only).
        self.stream_key = f"{prefix}:values"
        self._append = client.register_script(_APPEND_LUA)
        self._reader: SharedValuesReader | None = None
        self._reads = self._client_timing_out_at(read_timeout)

    def __repr__(self) -> str:  # no url: it may carry a password
        return f"RedisLedger(prefix={self.prefix!r}, max_revisions={self.max_revisions})"

    def key(self, scope: Scope) -> str:
        """The Redis key holding ``scope``'s events (for operators and tests)."""
        return scope_key(self.prefix, scope)

    def append(self, event: FactEvent) -> None:
        """Record ``event``; its ``arrival`` is replaced by the shared counter's next value."""
        payload = event.to_json()
        payload.pop("arrival", None)
        args: list[Any] = [json.dumps(payload), self.max_events, self.ttl_seconds or 0, self.max_shared]
        reader = self._reader
        if reader is not None and event.value is not None:
            # A grouped number is shared as its number, so that any grouping of it is found.
            shared = reader.digests.shared(event.scope, event.fact_id, match_key(event.value), reader.origin)
            if shared is not None:
                for field in shared.fields().items():
                    args.extend(field)
        self._append(keys=[self._arrival_key, self.key(event.scope), self.stream_key], args=args)

    def state(self, scope: Scope, now: datetime) -> FactState:
        """Reduce the scope's stored events; read afresh each time (other workers append), waiting
        at most ``read_timeout`` for Redis (``LedgerSlow`` past it)."""
        try:
            items = self._reads.lrange(self.key(scope), 0, -1)
        except redis_timeout() as exc:
            raise LedgerSlow(f"the fact ledger did not answer within {self.read_timeout * 1000:g} ms") from exc
        if not items:
            return FactState()
        return reduce([FactEvent.from_json(json.loads(item)) for item in items], now)

    def share(self, digester: Digester) -> SharedValuesReader:
        """Share recorded values with the other processes, as keyed digests, and follow theirs
        (``instrument()`` calls it when a digest key is configured). Returns the started reader."""
        self.stop_sharing()
        reader = self._reader = SharedValuesReader(self, ValueDigests(digester))
        reader.start()
        return reader

    def stop_sharing(self) -> None:
        """Stop publishing and stop the reader thread (``uninstrument()``, ``close()``)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.stop()

    def _stream_client(self) -> Any:
        """A client of its own for the reader: its blocking reads never hold a connection the call
        path needs, and it times out only past the read's wait."""
        return self._client_timing_out_at(BLOCK_MS / 1000 + READ_MARGIN_S, connect=None)

    def _client_timing_out_at(self, seconds: float, *, connect: float | None = -1.0) -> Any:
        """A client on connections of its own to the same server, with the ledger client's settings
        but these timeouts (``connect`` -1: the same as the read's; None: the client's own). A read
        that waits ``seconds`` for a silent server ends the command, whatever it was, and drops its
        connection (a late reply may still come on it): the next call connects again. So these
        connections say nothing on connect that they need not: RESP2 (no ``HELLO``; the replies
        read here are lists either way) and no ``CLIENT SETINFO``. A connection then costs a
        worker 47 µs of CPU instead of 189 (redis-py 8.2, loopback), and on a loaded machine a
        quarter of the ledger reads may time out (docs/performance.md, "The fleet example under
        load")."""
        import redis

        pool = self._client.connection_pool
        # What needs RESP3 is left out: client-side caching, and redis-py 8's maintenance
        # notifications (on by default where the server speaks RESP3), neither of use to a read here.
        kwargs = {key: value for key, value in pool.connection_kwargs.items() if key not in _RESP3_ONLY}
        kwargs.update(socket_timeout=seconds, protocol=2, **_no_setinfo())
        if connect is not None:
            kwargs["socket_connect_timeout"] = seconds if connect < 0 else connect
        # The ledger client's own class (an app's subclass, say, that counts or traces commands).
        connections = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        return _unlocked_at_fork(type(self._client)(connection_pool=connections))

    def close(self) -> None:
        """Stop sharing and release the connection pool (a ``client`` passed in is left to its owner)."""
        self.stop_sharing()
        self._reads.close()
        if self._owns_client:
            self._client.close()


#: Connection settings that need RESP3 (redis-py >= 5; the last two >= 8).
_RESP3_ONLY = frozenset({"cache", "cache_config", "maint_notifications_config", "maint_notifications_pool_handler"})


def _no_setinfo() -> dict[str, Any]:
    """The connection settings that send no ``CLIENT SETINFO``: ``driver_info=None`` where redis-py
    has it (it deprecates ``lib_name`` and ``lib_version`` there), else those two None."""
    try:
        import redis.driver_info  # noqa: F401
    except ImportError:
        return {"lib_name": None, "lib_version": None}
    return {"driver_info": None}


def _unlocked_at_fork(client: Any) -> Any:
    """``client``, its pool's lock released in a forked child. redis-py before 8.2 resets an
    inherited pool (at its first command, or when the client is dropped) under that lock, which
    a parent thread may have held at the fork: the child would wait for it for ever."""
    forksafe.adopt(getattr(client.connection_pool, "_lock", None))
    return client


class SharedValuesReader:
    """A daemon thread that follows a ``RedisLedger``'s shared values stream into a local
    ``DigestIndex`` (the call path reads the index, never Redis).

    ``live``: the index holds every entry the stream had when the reader last heard from Redis
    (its backlog loaded, its last read successful); False before that, and after a failed read
    until it has caught up again. Each failed read is counted once
    (``ctxguard_guard_errors_total{where="ledger"}``), retried after 0.5 s, doubled up to 5 s.
    Entries this process wrote are skipped (its own ``ValueIndex`` has the values). A forked
    child starts afresh: an empty index, a new origin, its own thread at first use (``start``).
    """

    def __init__(self, ledger: RedisLedger, digests: ValueDigests) -> None:
        self.digests = digests
        self._ledger = ledger
        self._reset()
        forksafe.on_fork(self)

    def _reset(self) -> None:
        self.index = DigestIndex(self.digests, self._ledger.max_shared)
        self.origin = os.urandom(8).hex()
        self.live = False
        self.last_id: str = "0-0"
        self._other_key_warned = False
        self._lock = forksafe.lock()
        self._stopping = forksafe.event()
        self._thread: threading.Thread | None = None
        self._client: Any = None

    def start(self) -> None:
        """Start the thread, unless it runs (cheap: the call path asks it after a fork)."""
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None and not self._stopping.is_set():
                self._thread = threading.Thread(target=self._run, name="ctxguard-shared-values", daemon=True)
                self._thread.start()
                atexit.register(self.stop)  # a thread blocked in Redis would hold up the interpreter's exit

    def stop(self) -> None:
        atexit.unregister(self.stop)
        self._stopping.set()
        self.live = False
        client = self._client
        if client is not None:  # wakes a read blocked in the socket
            with contextlib.suppress(Exception):
                client.connection_pool.disconnect()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_TIMEOUT_S)

    def forked(self) -> None:
        """In a forked child: the parent's thread is not here, and its index may be mid-update."""
        if not self._stopping.is_set():
            self._reset()

    def _run(self) -> None:
        stopping, retry = self._stopping, FIRST_RETRY_S
        while not stopping.is_set():
            try:
                if self._client is None:
                    self._client = self._ledger._stream_client()
                if not self.live:
                    while self._take(self._client.xread({self._ledger.stream_key: self.last_id}, count=PAGE)) == PAGE:
                        pass  # the backlog, without waiting: caught up when a page is not full
                    self.live = True
                if self._take(self._client.xread({self._ledger.stream_key: self.last_id}, count=PAGE,
                                                 block=BLOCK_MS)):
                    stopping.wait(COALESCE_S)
                retry = FIRST_RETRY_S
            except Exception as exc:
                if stopping.is_set():
                    break
                self.live = False
                report_internal_error("ledger", exc)
                stopping.wait(retry)
                retry = min(retry * 2, RETRY_MAX_S)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def _take(self, reply: Any) -> int:
        """Index an XREAD reply's entries (RESP2 list or RESP3 map); how many it had."""
        if isinstance(reply, dict):  # RESP3: {stream: [entries]}
            batches = [value[0] if value else () for value in reply.values()]
        else:  # RESP2: [[stream, entries]]
            batches = [entries for _, entries in reply or ()]
        n = 0
        for entries in batches:
            for entry_id, fields in entries:
                n += 1
                self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                try:
                    shared = SharedValue.from_fields(fields)
                except (KeyError, ValueError) as exc:
                    report_internal_error("ledger", exc)
                    continue
                if shared.origin == self.origin:
                    continue
                if shared.key != self.digests.key:
                    self._other_key()
                    continue
                self.index.add(shared)
        return n

    def _other_key(self) -> None:
        if not self._other_key_warned:
            self._other_key_warned = True
            logger.warning("ctxguard: %s holds values shared by a process with another digest key; they cannot "
                           "be matched here: give every worker the same CTXGUARD_DIGEST_KEY", self._ledger.stream_key)
