"""Conversation scope and per-conversation memory (bounded), for diffs and evictions.

``conversation("order-41")`` scopes calls through ``contextvars``, so it follows
asyncio tasks and is isolated between threads. The memory remembers, per
conversation, only digests of the previous payload and which protected items
(system instruction, pinned block) it carried; least recently used
conversations are forgotten past the cap.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .payload import SYSTEM_ROLES, Message, Payload

__all__ = ["ConversationMemory", "ConversationState", "Diff", "conversation", "current_conversation"]

Scope = tuple[str, "str | None"]
_current: ContextVar[Scope | None] = ContextVar("ctxguard_conversation", default=None)

F = TypeVar("F", bound=Callable[..., Any])


def current_conversation() -> Scope | None:
    """``(conversation_id, tenant)`` of the innermost active scope, or None."""
    return _current.get()


class conversation:
    """Scope calls (and facts) to one conversation; context manager or decorator.

    >>> with conversation("order-41"):
    ...     current_conversation()
    ('order-41', None)
    """

    def __init__(self, conversation_id: str, *, tenant: str | None = None) -> None:
        if not isinstance(conversation_id, str) or not conversation_id:
            raise ValueError("conversation_id must be a non-empty string")
        self.conversation_id = conversation_id
        self.tenant = tenant
        self._tokens: list[Token[Scope | None]] = []

    def __enter__(self) -> conversation:
        self._tokens.append(_current.set((self.conversation_id, self.tenant)))
        return self

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._tokens.pop())

    async def __aenter__(self) -> conversation:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()

    def __call__(self, func: F) -> F:
        conversation_id, tenant = self.conversation_id, self.tenant
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_scoped(*args: Any, **kwargs: Any) -> Any:
                with conversation(conversation_id, tenant=tenant):
                    return await func(*args, **kwargs)

            return async_scoped  # type: ignore[return-value]

        @functools.wraps(func)
        def scoped(*args: Any, **kwargs: Any) -> Any:
            with conversation(conversation_id, tenant=tenant):
                return func(*args, **kwargs)

        return scoped  # type: ignore[return-value]


@dataclass
class ConversationState:
    first_system: str | None = None
    prev_hash: str | None = None
    prev_messages: list[Message] = field(default_factory=list)
    prev_digests: list[str] = field(default_factory=list)
    had_system: bool = False
    had_pinned: bool = False
    system_evicted: bool = False
    pinned_evicted: bool = False
    facts_carried: set[str] = field(default_factory=set)  # fact_id@version sent before, still active
    facts_evicted: set[str] = field(default_factory=set)
    fact_locations: dict[str, str] = field(default_factory=dict)  # fact_id@version -> message digest


@dataclass(slots=True)
class Diff:
    """This payload against the previous one of the same conversation."""

    prev_hash: str | None
    added: int
    dropped: dict[str, int]  # role -> messages present last time and absent now
    evicted: tuple[str, ...]  # eviction kinds first observed on this payload
    first_system: str | None  # the system digest first seen in the conversation


def _dropped(
    prev: list[Message], prev_set: frozenset[str], now: list[str], now_set: frozenset[str]
) -> tuple[int, dict[str, int]]:
    """(added, dropped-by-role) by digest, as multisets; sets when there are no repeats."""
    dropped: dict[str, int] = {}
    if len(now_set) == len(now) and len(prev_set) == len(prev):
        if prev_set - now_set:
            for m in prev:
                if m.digest not in now_set:
                    dropped[m.role] = dropped.get(m.role, 0) + 1
        return len(now_set - prev_set), dropped
    remaining = Counter(now)
    for m in prev:
        if remaining[m.digest] > 0:
            remaining[m.digest] -= 1
        else:
            dropped[m.role] = dropped.get(m.role, 0) + 1
    return sum(remaining.values()), dropped


class ConversationMemory:
    """LRU of conversation states, at most ``max_conversations``."""

    def __init__(self, max_conversations: int = 10_000) -> None:
        self.max_conversations = max_conversations
        self._states: OrderedDict[Scope, ConversationState] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._states)

    def observe(self, scope: Scope, payload: Payload, *, pinned: bool) -> Diff:
        """Record this payload for ``scope`` and return what changed since the last one."""
        digests = payload.digests
        system = payload.system
        with self._lock:
            state = self._states.get(scope)
            if state is None:
                state = self._states[scope] = ConversationState()
                if len(self._states) > self.max_conversations:
                    self._states.popitem(last=False)
            else:
                self._states.move_to_end(scope)
            prev_hash = state.prev_hash
            dropped: dict[str, int] = {}
            kept = state.prev_digests
            if prev_hash is None:
                added = len(digests)
            elif len(kept) <= len(digests) and digests[: len(kept)] == kept:
                added = len(digests) - len(kept)  # the common case, history resent and grown: a C loop
            else:
                added, dropped = _dropped(state.prev_messages, frozenset(kept), digests, frozenset(digests))
            evicted: list[str] = []
            if system is not None or any(m.role in SYSTEM_ROLES for m in payload.messages):
                state.had_system, state.system_evicted = True, False
                if state.first_system is None and system is not None:
                    state.first_system = system.digest
            elif state.had_system and not state.system_evicted:
                state.system_evicted = True
                evicted.append("system")
            if pinned:
                state.had_pinned, state.pinned_evicted = True, False
            elif state.had_pinned and not state.pinned_evicted:
                state.pinned_evicted = True
                evicted.append("pinned")
            state.prev_hash = payload.digest
            state.prev_messages, state.prev_digests = payload.messages, digests
            return Diff(prev_hash, added, dropped, tuple(evicted), state.first_system)

    def fact_locations(self, scope: Scope) -> dict[str, str]:
        """Where each fact version was last seen in this conversation (bounded by its facts)."""
        with self._lock:
            state = self._states.get(scope)
            if state is None:
                state = self._states[scope] = ConversationState()
            if len(state.fact_locations) > 4 * 1024:
                state.fact_locations.clear()
            return state.fact_locations

    def fact_evictions(self, scope: Scope, present: set[str], active: set[str]) -> int:
        """How many active fact versions that earlier payloads carried vanished now (each counted once)."""
        with self._lock:
            state = self._states.get(scope)
            if state is None:
                state = self._states[scope] = ConversationState()
            gone = (state.facts_carried & active) - present - state.facts_evicted
            state.facts_evicted = (state.facts_evicted | gone) - present
            state.facts_carried = (state.facts_carried | present) & active
            return len(gone)
