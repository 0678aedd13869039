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

Not for Redis Cluster: the append script touches the shared counter and the
scope's list, which live in different hash slots.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..conversation import Scope
from .ledger import FactEvent, FactState, reduce

__all__ = ["RedisLedger"]

FACTS_PER_SCOPE = 64  # max_events = max_revisions * FACTS_PER_SCOPE

# KEYS[1] = arrival counter, KEYS[2] = scope list.
# ARGV[1] = the event's JSON object *without* "arrival", ARGV[2] = max events,
# ARGV[3] = ttl in seconds (0: no expiry).
# One script, so that no other append can take an arrival number between our INCR
# and our RPUSH: list order and arrival order agree. The arrival is spliced in as
# text rather than through cjson, which would re-encode (and round) the payload.
_APPEND_LUA = """
local arrival = redis.call('INCR', KEYS[1])
local item = '{"arrival": ' .. string.format('%d', arrival) .. ', ' .. string.sub(ARGV[1], 2)
redis.call('RPUSH', KEYS[2], item)
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[2], ttl)
end
return arrival
"""


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


class RedisLedger:
    """Fact store shared by several worker processes. ``RedisLedger("redis://127.0.0.1:6379/0")``

    Connect and read timeouts are both ``socket_timeout`` and there are no
    retries: the store sits on the path of an LLM call, so an unreachable Redis
    must fail in a fraction of a second rather than stall the request. Errors
    from redis-py propagate; the guard swallows and counts them.

    ``client``: an already configured redis-py client (its own timeouts apply, and
    ``url`` and ``socket_timeout`` are ignored); ``close()`` then leaves it open.
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
    ) -> None:
        if max_revisions <= 0:
            raise ValueError("RedisLedger max_revisions must be positive")
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError("RedisLedger ttl_seconds must be positive or None")
        if socket_timeout <= 0:
            raise ValueError("RedisLedger socket_timeout must be positive")
        self.prefix = prefix
        self.max_revisions = max_revisions
        self.max_events = max_revisions * FACTS_PER_SCOPE
        self.ttl_seconds = ttl_seconds
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
        self._client: Any = client
        self._arrival_key = f"{prefix}:arrival"
        self._append = client.register_script(_APPEND_LUA)

    def __repr__(self) -> str:  # no url: it may carry a password
        return f"RedisLedger(prefix={self.prefix!r}, max_revisions={self.max_revisions})"

    def key(self, scope: Scope) -> str:
        """The Redis key holding ``scope``'s events (for operators and tests)."""
        return scope_key(self.prefix, scope)

    def append(self, event: FactEvent) -> None:
        """Record ``event``; its ``arrival`` is replaced by the shared counter's next value."""
        payload = event.to_json()
        payload.pop("arrival", None)
        self._append(
            keys=[self._arrival_key, self.key(event.scope)],
            args=[json.dumps(payload), self.max_events, self.ttl_seconds or 0],
        )

    def state(self, scope: Scope, now: datetime) -> FactState:
        """Reduce the scope's stored events; read afresh each time (other workers append)."""
        items = self._client.lrange(self.key(scope), 0, -1)
        if not items:
            return FactState()
        return reduce([FactEvent.from_json(json.loads(item)) for item in items], now)

    def close(self) -> None:
        """Release the connection pool (a ``client`` passed in is left to its owner)."""
        if self._owns_client:
            self._client.close()
