"""Facts: ``record_fact``, ``forget_fact``, ``checkpoint`` / ``@stage`` and the stores.

These are the application's own calls (not the LLM call): bad arguments raise a
clear ``ValueError`` here; a store that is down is swallowed and counted
(``ctxguard_guard_errors_total{where="ledger"}``), never raised into the app.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from .. import forksafe
from .._isolation import guarded, report_internal_error
from ..cache import BoundedLRU
from ..conversation import Scope, current_conversation
from ..digest import Digester
from .index import WORD, ValueIndex
from .ledger import FactEvent, FactState, Ledger, MemoryLedger, Version, reduce
from .matching import MIN_MATCH_CHARS, distinctive, normalise, number_key, strings_in, value_text
from .redis import RedisLedger, SharedValuesReader
from .stages import STAGES, StageBook

logger = logging.getLogger("ctxguard")


class FactCapture(Protocol):
    """Where fact events are captured (``ctxguard.capture.CaptureWriter``)."""

    def fact(self, event: FactEvent) -> None: ...

__all__ = [
    "STAGES",
    "FactEvent",
    "FactState",
    "Ledger",
    "MemoryLedger",
    "Sinks",
    "Version",
    "checkpoint",
    "forget_fact",
    "record_fact",
    "reduce",
    "stage",
]

F = TypeVar("F", bound=Callable[..., Any])


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


#: After a ledger failure, the ledger is left alone this long (a down Redis must not
#: cost every LLM call its connect timeout).
RETRY_AFTER_S = 5.0


class Sinks:
    """Where fact events and checkpoints go, the clock that judges expiry, and the
    circuit breaker that keeps a failing ledger off the call path."""

    def __init__(self, ledger: Ledger | None = None, clock: Callable[[], datetime] | None = None) -> None:
        self.ledger: Ledger = ledger if ledger is not None else MemoryLedger()
        self.stages = StageBook()
        self.index = ValueIndex()
        self.clock: Callable[[], datetime] = clock or _utc_now
        self.down_until = 0.0
        # Conversations whose fact writes were lost: judging them would raise false alarms. The
        # first to have lost one go first out past 10,000 (losing another does not move it up).
        self.lost: BoundedLRU[Scope, None] = BoundedLRU(10_000)
        self.capture: FactCapture | None = None  # set while a capture file records fact events
        #: With a shared RedisLedger: the other processes' values, as digests (``share``).
        self.shared: SharedValuesReader | None = None
        self._unshared = False  # a RedisLedger that cannot share: no digest key common to the processes
        self._lock = forksafe.lock()

    def share(self, digester: Digester | None) -> None:
        """With a ``RedisLedger``, judge ``fact_scoped`` across processes: recorded values are
        published as keyed digests and the other processes' followed (docs/facts.md, "Across
        processes"). ``None``: no digest key is configured, so no other process could match
        this one's digests; detection stays per process, and spans say so."""
        if not isinstance(self.ledger, RedisLedger):
            return
        if digester is None:
            self._unshared = True
            logger.warning("ctxguard: RedisLedger without a digest key (digest_key= or CTXGUARD_DIGEST_KEY): "
                           "other conversations' values are detected only when recorded in this process")
            return
        self.shared = self.ledger.share(digester)

    def stop(self) -> None:
        """Stop sharing (the ledger itself stays usable: it is the app's)."""
        ledger = self.ledger
        if self.shared is not None and isinstance(ledger, RedisLedger):
            self.shared = None
            ledger.stop_sharing()

    def reach(self) -> str | None:
        """Where ``fact_scoped`` sees other conversations' values from: ``"fleet"`` (every process
        sharing the Redis ledger), ``"process"`` (this one only, while sharing is impossible,
        starting or failing), None (a ledger that is not shared: per process by design)."""
        shared = self.shared
        if shared is not None:
            return "fleet" if shared.live else "process"
        return "process" if self._unshared else None

    def usable(self) -> bool:
        return time.monotonic() >= self.down_until

    def idle(self) -> bool:
        """Nothing recorded in this process: the in-memory ledger is empty and so are the
        cross-conversation index, the stage checkpoints and the lost writes. Every fact
        check then skips without asking the ledger (an app that records no facts pays ~1 µs)."""
        ledger = self.ledger
        return (
            type(ledger) is MemoryLedger
            and ledger.empty
            and not len(self.index)
            and self.stages.empty
            and not self.lost
        )

    def failed(self, scope: Scope | None = None) -> None:
        with self._lock:
            self.down_until = time.monotonic() + RETRY_AFTER_S
            if scope is not None and scope not in self.lost:
                self.lost.put(scope, None)

    def write(self, event: FactEvent) -> None:
        """Append, unless the ledger is known to be down; a lost write taints its conversation."""
        if not self.usable():
            self.failed(event.scope)
            report_internal_error("ledger", ConnectionError("fact ledger unavailable; write dropped"))
            return
        try:
            self.ledger.append(event)
        except Exception:
            self.failed(event.scope)
            raise

    def record(self, event: FactEvent) -> None:
        """A fact event from the app: written to the ledger, and a value also to the
        cross-conversation index. Failures are swallowed and counted (``where="ledger"``)."""
        with guarded("ledger"):
            self.write(event)
        if self.capture is not None:
            with guarded("capture"):
                self.capture.fact(event)
        if event.value is not None:
            with guarded("ledger"):
                self.index.add(event.scope, Version(event.fact_id, event.value, normalise(event.value), 0))


#: The process default: facts recorded before (or between) instrument() calls are kept.
_DEFAULT = Sinks()
SINKS = _DEFAULT


def configure(ledger: Ledger | None, clock: Callable[[], datetime] | None) -> Sinks:
    """Called by ``instrument()``: the given ledger (with its own index), else the process default."""
    global SINKS
    if SINKS is not _DEFAULT:
        SINKS.stop()
    if ledger is None:
        _DEFAULT.clock = clock or _utc_now
        SINKS = _DEFAULT
    else:
        SINKS = Sinks(ledger, clock)
    return SINKS


def _scope(conversation: str | None, tenant: str | None, caller: str) -> Scope:
    """The scope a fact event or checkpoint belongs to (docs/facts.md, "Whose fact it is").

    What is given wins; what is not comes from the active ``conversation()`` scope, and
    its tenant only when the scope is of the same conversation. Outside any scope,
    ``conversation=`` without ``tenant=`` is that conversation with no tenant.
    """
    current = current_conversation()
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise ValueError("tenant must be a non-empty string, or None")
    if conversation is None:
        if current is None:
            raise ValueError(
                f"{caller}() needs a conversation: call it inside ctxguard.conversation(...) or pass conversation="
            )
        conversation = current[0]
    elif not isinstance(conversation, str) or not conversation:
        raise ValueError("conversation must be a non-empty string")
    if tenant is None and current is not None and current[0] == conversation:
        tenant = current[1]
    return (conversation, tenant)


def _fact_id(fact_id: object) -> str:
    if not isinstance(fact_id, str) or not fact_id.strip():
        raise ValueError("fact_id must be a non-empty string")
    return fact_id


def record_fact(
    fact_id: str,
    value: object,
    *,
    conversation: str | None = None,
    tenant: str | None = None,
    sequence: int | None = None,
    expires_at: datetime | None = None,
    required: bool = True,
) -> None:
    """Record (or revise) a fact of the current conversation; stage ``capture``.

    >>> with ctxguard.conversation("order-41", tenant="acme"):          # doctest: +SKIP
    ...     ctxguard.record_fact("shipping_city", "Pune")
    >>> ctxguard.record_fact("shipping_city", "Pune", conversation="order-41", tenant="acme")  # doctest: +SKIP

    ``conversation=`` and ``tenant=`` name the scope from outside a ``conversation()`` block
    (a webhook, a back-office job). What is given wins; what is not comes from the active
    scope, its tenant only if it is the same conversation (docs/facts.md, "Whose fact it is").
    """
    fact_id = _fact_id(fact_id)
    text = value_text(value)
    if not text.strip():
        raise ValueError(f"fact {fact_id!r}: empty values cannot be recorded (use forget_fact to delete)")
    if sequence is not None and (not isinstance(sequence, int) or isinstance(sequence, bool)):
        raise ValueError("sequence must be an int")
    if expires_at is not None and (not isinstance(expires_at, datetime) or expires_at.tzinfo is None):
        raise ValueError("expires_at must be a timezone-aware datetime")
    scope = _scope(conversation, tenant, "record_fact")
    _warn_if_never_matched(text)
    SINKS.record(FactEvent(scope, fact_id, text, sequence, expires_at, bool(required)))


#: What ``record_fact`` has warned of, in this process: each kind of value is warned of once.
_WARNED: set[str] = set()


def _warn_if_never_matched(value: str) -> None:
    """One warning per kind of value a check will never find (docs/facts.md, "Matching"); never the
    value, nor the fact id (an id may be personal data, exported only as a digest with hash_ids)."""
    norm = normalise(value)
    if len(norm) < MIN_MATCH_CHARS:
        kind, why = "too_short", (
            "shorter than 3 characters once normalised: never judged present, sent or absent in any payload "
            "(spans list it in ctxguard.facts.too_short)")
    elif distinctive(norm) and number_key(value) is None and WORD.search(norm) is None:
        kind, why = "no_word", (
            "neither a grouped number nor a value with a run of 3 letters or digits (like '12 34 56' or 'A-1'): "
            "fact_scoped never finds it in another conversation's payload (its own checks judge it as usual)")
    else:
        return
    if kind not in _WARNED:
        _WARNED.add(kind)
        logger.warning("ctxguard: record_fact got a value %s; logged once per process (docs/facts.md, \"Matching\")",
                       why)


def forget_fact(fact_id: str, *, conversation: str | None = None, tenant: str | None = None) -> None:
    """Delete a fact: from now on its values must be absent from payloads."""
    fact_id = _fact_id(fact_id)
    SINKS.record(FactEvent(_scope(conversation, tenant, "forget_fact"), fact_id, None))


def checkpoint(stage: str, content: Any, *, conversation: str | None = None, tenant: str | None = None) -> None:
    """Record what an application stage holds (``commit``, ``load``, ``selection`` or a custom name)."""
    if not isinstance(stage, str) or not stage or stage in ("capture", "payload", "answer"):
        raise ValueError("stage must be a non-empty name other than capture, payload and answer (automatic)")
    scope = _scope(conversation, tenant, "checkpoint")
    with guarded("ledger"):
        SINKS.stages.put(scope, stage, strings_in(content))


def stage(name: str) -> Callable[[F], F]:
    """Decorator: record the wrapped function's return value as checkpoint ``name``.

    >>> @ctxguard.stage("selection")                     # doctest: +SKIP
    ... def select(history): ...
    """
    if not isinstance(name, str) or not name or name in ("capture", "payload", "answer"):
        raise ValueError("stage name must be a non-empty name other than capture, payload and answer")

    def decorate(func: F) -> F:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_recorded(*args: Any, **kwargs: Any) -> Any:
                result = await func(*args, **kwargs)
                _record_stage(name, result)
                return result

            return async_recorded  # type: ignore[return-value]

        @functools.wraps(func)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            result = func(*args, **kwargs)
            _record_stage(name, result)
            return result

        return recorded  # type: ignore[return-value]

    return decorate


def _record_stage(name: str, result: Any) -> None:
    scope = current_conversation()
    if scope is not None:
        with guarded("ledger"):
            SINKS.stages.put(scope, name, strings_in(result))
