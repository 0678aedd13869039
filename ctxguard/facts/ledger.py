"""The fact ledger: events, the reducer, and the in-memory store.

A fact is a business value with a stable id (``shipping_city``), recorded per
conversation. Events revise it, delete it, or let it expire; the reducer turns a
conversation's events into what must and must not be in the next payload.

Ordering: an explicit ``sequence`` orders revisions (a late event with a lower
sequence does not win); events without one come after every revision seen so far
for that fact. Ties are broken deterministically: a deletion after a value, then
by the value's normalised text.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Protocol

from .. import forksafe
from ..cache import BoundedLRU
from ..conversation import Scope
from .matching import normalise, number_key

__all__ = ["FactEvent", "FactState", "Ledger", "MemoryLedger", "Version", "reduce"]



@dataclass(frozen=True)
class FactEvent:
    """One revision (``value`` set) or deletion (``value is None``) of a fact."""

    scope: Scope
    fact_id: str
    value: str | None
    sequence: int | None = None
    expires_at: datetime | None = None
    required: bool = True
    arrival: int = 0  # store-assigned arrival order

    def to_json(self) -> dict[str, Any]:
        return {
            "conversation": self.scope[0],
            "tenant": self.scope[1],
            "fact_id": self.fact_id,
            "value": self.value,
            "sequence": self.sequence,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "required": self.required,
            "arrival": self.arrival,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FactEvent:
        expires = data.get("expires_at")
        return cls(
            scope=(data["conversation"], data.get("tenant")),
            fact_id=data["fact_id"],
            value=data.get("value"),
            sequence=data.get("sequence"),
            expires_at=datetime.fromisoformat(expires) if expires else None,
            required=bool(data.get("required", True)),
            arrival=int(data.get("arrival", 0)),
        )


@dataclass(frozen=True)
class Version:
    """One value of a fact: ``shipping_city@2``."""

    fact_id: str
    value: str
    norm: str
    version: int
    required: bool = True

    @cached_property  # read several times per fact per call
    def label(self) -> str:
        return f"{self.fact_id}@{self.version}"

    @cached_property
    def number(self) -> str | None:
        """The grouped number the value is (``matching.number_key``), found in any grouping; or None."""
        return number_key(self.value)


@dataclass
class FactState:
    """What a conversation's payload must carry (active) and must not (stale, forgotten)."""

    active: dict[str, Version] = field(default_factory=dict)
    stale: dict[str, list[Version]] = field(default_factory=dict)
    forgotten: dict[str, list[Version]] = field(default_factory=dict)
    next_expiry: datetime | None = None  # the state must be recomputed from this instant on

    @cached_property
    def norms(self) -> frozenset[str]:
        """Every value this conversation ever recorded (active, stale or forgotten), normalised."""
        return frozenset(v.norm for v in self._all())

    @cached_property
    def keys(self) -> frozenset[str]:
        """``norms``, and the numbers among them as ``matching.numbers`` reads them: what another
        conversation's value found in a payload is compared with to tell it is this one's own."""
        return self.norms | {v.number for v in self._all() if v.number is not None}

    def _all(self) -> list[Version]:
        return [v for group in (*self.stale.values(), *self.forgotten.values(), self.active.values()) for v in group]

    def versions(self, fact_id: str) -> list[Version]:
        out = list(self.stale.get(fact_id, ()))
        if fact_id in self.active:
            out.append(self.active[fact_id])
        return out + list(self.forgotten.get(fact_id, ()))


def reduce(events: list[FactEvent], now: datetime) -> FactState:
    """Latest revision wins, deletion removes, expiry removes; events in arrival order."""
    ordered: dict[str, list[tuple[tuple[int, int, str], FactEvent]]] = {}
    for event in sorted(events, key=lambda e: e.arrival):
        revisions = ordered.setdefault(event.fact_id, [])
        seq = event.sequence
        if seq is None:
            seq = max((key[0] for key, _ in revisions), default=-1) + 1
        norm = normalise(event.value) if event.value is not None else ""
        revisions.append(((seq, 1 if event.value is None else 0, norm), event))
    state = FactState()
    for fact_id, revisions in ordered.items():
        revisions.sort(key=lambda pair: pair[0])
        versions: list[Version] = []
        for (_, _, norm), event in revisions:
            if event.value is not None:
                versions.append(Version(fact_id, event.value, norm, len(versions) + 1, event.required))
        last = revisions[-1][1]
        expired = last.expires_at is not None and now >= last.expires_at
        if last.expires_at is not None and not expired and (
            state.next_expiry is None or last.expires_at < state.next_expiry
        ):
            state.next_expiry = last.expires_at
        if last.value is None or expired:
            if versions:
                state.forgotten[fact_id] = versions
            continue
        active = versions[-1]
        state.active[fact_id] = active
        stale = [v for v in versions[:-1] if v.norm != active.norm]
        if stale:
            state.stale[fact_id] = stale
    return state


class Ledger(Protocol):
    """A fact store: ``append`` events, read a conversation's reduced ``state``."""

    def append(self, event: FactEvent) -> None: ...

    def state(self, scope: Scope, now: datetime) -> FactState: ...


class MemoryLedger:
    """The in-process store (the default), bounded.

    >>> ledger = MemoryLedger(max_conversations=50_000, max_facts=500)

    Least recently used conversations are dropped past ``max_conversations``; past
    ``max_facts`` in one conversation the least recently revised fact is dropped, and
    past ``max_revisions`` the oldest revisions of a fact. ``overflow`` counts drops.
    """

    def __init__(self, max_conversations: int = 10_000, max_facts: int = 1_000, max_revisions: int = 32) -> None:
        if min(max_conversations, max_facts, max_revisions) <= 0:
            raise ValueError("MemoryLedger limits must be positive")
        self.max_facts = max_facts  # read when a conversation's first fact is kept
        self.max_revisions = max_revisions
        self.overflow = 0
        self._arrival = itertools.count(1)
        self._lock = forksafe.lock()
        # scope -> fact_id -> events (least recently revised first)
        self._facts: BoundedLRU[Scope, BoundedLRU[str, list[FactEvent]]] = BoundedLRU(max_conversations)
        self._cache: dict[Scope, FactState] = {}

    @property
    def max_conversations(self) -> int:
        return self._facts.max_entries

    @max_conversations.setter
    def max_conversations(self, value: int) -> None:
        self._facts.max_entries = value

    def append(self, event: FactEvent) -> None:
        with self._lock:
            event = FactEvent(**{**event.__dict__, "arrival": next(self._arrival)})
            facts = self._facts.get(event.scope)
            if facts is None:
                facts = BoundedLRU(self.max_facts)
                for dropped, _ in self._facts.put(event.scope, facts):
                    self._cache.pop(dropped, None)
                    self.overflow += 1
            revisions = facts.pop(event.fact_id, [])
            revisions.append(event)
            if len(revisions) > self.max_revisions:
                del revisions[: len(revisions) - self.max_revisions]
                self.overflow += 1
            self.overflow += len(facts.put(event.fact_id, revisions))
            self._cache.pop(event.scope, None)

    @property
    def empty(self) -> bool:
        """No conversation has a fact event."""
        return not self._facts

    def state(self, scope: Scope, now: datetime) -> FactState:
        with self._lock:
            cached = self._cache.get(scope)
            if cached is not None and (cached.next_expiry is None or now < cached.next_expiry):
                return cached
            facts = self._facts.peek(scope)
            if not facts:
                return FactState()
            state = reduce([e for revisions in facts.values() for e in revisions], now)
            self._cache[scope] = state
            return state
