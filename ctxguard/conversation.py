"""Conversation scope and per-conversation memory (bounded), for diffs and evictions.

``conversation("order-41")`` scopes calls through ``contextvars``, so it follows
asyncio tasks and is isolated between threads. The memory remembers, per
conversation, only digests of the previous payload (8 bytes a message: 7 of its
digest, 1 for its role: ``Message.key``) and which protected items (system instruction, pinned block)
it carried, never a text; least recently used conversations are forgotten past the
cap on conversations or on bytes.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections import Counter
from collections.abc import Callable, Set
from contextvars import ContextVar, Token
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

from . import forksafe
from .cache import BoundedLRU
from .payload import KEY_BYTES, ROLES, SYSTEM_ROLES, Message, Payload, message_key
from .wiredigest import common_prefix

__all__ = [
    "CONVERSATION_BYTES",
    "ConversationMemory",
    "ConversationState",
    "Diff",
    "conversation",
    "current_conversation",
]

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


_NO_FACTS: frozenset[str] = frozenset()


@dataclass(slots=True)
class ConversationState:
    """What the memory keeps of one conversation: digests and flags, never a text."""

    first_system: str | None = None
    prev_hash: str | None = None
    #: The previous payload's messages, 8 bytes each: their ``Message.key`` (7 bytes of the
    #: digest, 1 for the role), joined.
    prev_keys: bytes = b""
    had_system: bool = False
    had_pinned: bool = False
    system_evicted: bool = False
    pinned_evicted: bool = False
    facts_carried: Set[str] = _NO_FACTS  # fact_id@version sent before, still active
    facts_evicted: Set[str] = _NO_FACTS
    fact_locations: dict[str, str] | None = None  # fact_id@version -> message digest, once asked for
    size: int = 0  # the bytes counted for it (``ConversationMemory._resize``)


#: What a conversation's state keeps beside its keys: itself, its slot in the memory, the scope
#: and its conversation id, the digests of the previous payload and first instruction.
STATE_BYTES = 800
#: Per fact version the state remembers (where it was seen, whether it was sent or evicted).
FACT_BYTES = 250
#: A conversation of 25 messages, as ``_resize`` counts it: what each of the conversations a
#: guard is told to remember (``CTXGUARD_MAX_CONVERSATIONS``) is given at least.
CONVERSATION_BYTES = 1024

_key_of = attrgetter("key")
#: Where a key's last byte, its role, is in the word it unpacks to.
_ROLE_AT = 8 * (KEY_BYTES - 1) if sys.byteorder == "little" else 0


def _keys(messages: list[Message]) -> bytes:
    """The messages' keys, joined (a C loop): what the memory keeps of a payload. A Message made
    by hand, not by the measurer, has none: its key is made here."""
    keys = b"".join(map(_key_of, messages))
    if len(keys) != KEY_BYTES * len(messages):
        keys = b"".join([m.key or message_key(m.role, m.digest) for m in messages])
    return keys


@dataclass(slots=True)
class Diff:
    """This payload against the previous one of the same conversation."""

    prev_hash: str | None
    added: int
    dropped: dict[str, int]  # role -> messages present last time and absent now
    evicted: tuple[str, ...]  # eviction kinds first observed on this payload
    first_system: str | None  # the system digest first seen in the conversation


def _shared(a: bytes, b: bytes) -> int:
    """The bytes of the whole keys ``a`` and ``b`` begin with: one key, then two more, four more...
    while they agree, then halving (each step one memcmp): a short shared head, the instruction,
    costs two or three."""
    lo, step, end = 0, KEY_BYTES, min(len(a), len(b))
    view = memoryview(a)
    while lo + step <= end and b.startswith(view[lo : lo + step], lo):
        lo, step = lo + step, step * 2
    return common_prefix(a[: min(lo + step, end)], b, lo) // KEY_BYTES * KEY_BYTES


def _changes(prev: bytes, now: bytes) -> tuple[int, dict[str, int]]:
    """(added, dropped-by-role) of ``now`` against ``prev`` (keys joined), as multisets. What both
    begin with, and a run they share after it, cancel out: a history trimmed at its front (a
    sliding window, the previous messages from some point on, then new ones) is found with a
    memcmp and a memmem, and only what it lost and what it gained are compared."""
    start = _shared(prev, now)
    prev, now = prev[start:], now[start:]
    head = now[:KEY_BYTES]
    at = prev.find(head) if head else -1
    while at > 0 and at % KEY_BYTES:  # a match across two keys: look further
        at = prev.find(head, at + 1)
    if at >= 0 and now.startswith(prev[at:]):  # prev = lost + shared, now = shared + gained
        return _dropped(prev[:at], now[len(prev) - at :])
    return _dropped(prev, now)


def _dropped(prev_keys: bytes, now_keys: bytes) -> tuple[int, dict[str, int]]:
    """(added, dropped-by-role) by key, as multisets; sets when there are no repeats."""
    prev, now = memoryview(prev_keys).cast("Q").tolist(), memoryview(now_keys).cast("Q").tolist()
    prev_set, now_set = frozenset(prev), frozenset(now)
    dropped: dict[str, int] = {}
    if len(now_set) == len(now) and len(prev_set) == len(prev):
        if prev_set - now_set:
            for key in prev:
                if key not in now_set:
                    role = ROLES[key >> _ROLE_AT & 0xFF]
                    dropped[role] = dropped.get(role, 0) + 1
        return len(now_set - prev_set), dropped
    remaining = Counter(now)
    for key in prev:
        if remaining[key] > 0:
            remaining[key] -= 1
        else:
            role = ROLES[key >> _ROLE_AT & 0xFF]
            dropped[role] = dropped.get(role, 0) + 1
    return sum(remaining.values()), dropped


class ConversationMemory:
    """LRU of conversation states, at most ``max_conversations`` of them and ``max_bytes`` as
    ``_resize`` counts them (the most recent one is kept even if it alone weighs more)."""

    def __init__(self, max_conversations: int = 10_000, max_bytes: int = 12 * 1024 * 1024) -> None:
        self._states: BoundedLRU[Scope, ConversationState] = BoundedLRU(
            max_conversations, max_bytes, attrgetter("size"), keep_newest=True)
        self._lock = forksafe.lock()

    def __len__(self) -> int:
        return len(self._states)

    @property
    def max_conversations(self) -> int:
        return self._states.max_entries

    @max_conversations.setter
    def max_conversations(self, value: int) -> None:
        self._states.max_entries = value

    @property
    def max_bytes(self) -> int:
        return self._states.max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self._states.max_bytes = value

    @property
    def bytes(self) -> int:
        """What the states keep, as ``_resize`` counts it."""
        return self._states.bytes

    def _state(self, scope: Scope) -> ConversationState:
        """``scope``'s state, made if new (under the lock)."""
        state = self._states.peek(scope)
        if state is None:
            state = ConversationState()
            self._states.put(scope, state)
            self._resize(scope, state)
        return state

    def _resize(self, scope: Scope, state: ConversationState) -> None:
        """Count what ``state`` keeps now; forget the least recently used while over a bound."""
        facts = len(state.facts_carried) + len(state.facts_evicted)
        if state.fact_locations is not None:
            facts += len(state.fact_locations)
        size = STATE_BYTES + len(state.prev_keys) + FACT_BYTES * facts
        grown, state.size = size - state.size, size
        self._states.resized(scope, grown)

    def observe(self, scope: Scope, payload: Payload, *, pinned: bool) -> Diff:
        """Record this payload for ``scope`` and return what changed since the last one."""
        digests, messages = payload.digests, payload.messages
        system = payload.system
        self._lock.acquire()  # not ``with``: the call path's locks (forksafe.lock)
        try:
            state = self._states.get(scope)
            if state is None:
                state = self._state(scope)
            prev_hash = state.prev_hash
            dropped: dict[str, int] = {}
            kept = len(state.prev_keys) // KEY_BYTES
            if prev_hash is not None and payload.extends == prev_hash:
                # The common case, history resent and grown: this payload begins with all of the
                # previous one's messages (the memo says so), only the new ones are looked at.
                added = len(digests) - kept
                if added:
                    state.prev_keys += _keys(messages[kept:])
                    state.size += KEY_BYTES * added  # what _resize counts
                    self._states.resized(scope, KEY_BYTES * added)
            else:
                keys = _keys(messages)
                if prev_hash is None:
                    added = len(digests)
                elif keys.startswith(state.prev_keys):  # grown, but not measured with the same memo
                    added = len(digests) - kept
                else:
                    added, dropped = _changes(state.prev_keys, keys)
                state.prev_keys = keys
                self._resize(scope, state)
            evicted: list[str] = []
            if system is not None or any(m.role in SYSTEM_ROLES for m in messages):
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
            return Diff(prev_hash, added, dropped, tuple(evicted), state.first_system)
        finally:
            self._lock.release()

    def fact_locations(self, scope: Scope) -> dict[str, str]:
        """Where each fact version was last seen in this conversation (bounded by its facts)."""
        with self._lock:
            state = self._state(scope)
            if state.fact_locations is None or len(state.fact_locations) > 4 * 1024:
                state.fact_locations = {}
            return state.fact_locations

    def fact_evictions(self, scope: Scope, present: set[str], active: set[str]) -> int:
        """How many active fact versions that earlier payloads carried vanished now (each counted once)."""
        with self._lock:
            state = self._state(scope)
            gone = (state.facts_carried & active) - present - state.facts_evicted
            # An empty set is the shared empty frozenset: most conversations carry no fact.
            state.facts_evicted = (state.facts_evicted | gone) - present or _NO_FACTS
            state.facts_carried = (state.facts_carried | present) & active or _NO_FACTS
            self._resize(scope, state)
            return len(gone)
