"""Stage checkpoints: what each application stage held, consumed by the next call.

``checkpoint("selection", messages)`` keeps the normalised text (and the grouped
numbers) of what the selection stage produced for the current conversation, in memory only; the next
guarded call of that conversation takes it, so a stage with no checkpoint for a
call is simply not considered.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import forksafe
from ..cache import BoundedLRU
from ..conversation import Scope
from .ledger import Version
from .matching import normalise, numbers

__all__ = ["STAGES", "Checkpoint", "StageBook"]

#: The pipeline of a fact, in order.
STAGES = ("capture", "commit", "load", "selection", "payload", "answer")
#: Checkpoints larger than this are not kept (the stage is then not considered).
MAX_CHECKPOINT_CHARS = 4_000_000


class Checkpoint(NamedTuple):
    """What a stage held, as the fact checks search it."""

    norm: str  # its text, normalised
    numbers: frozenset[str]  # its grouped numbers (``matching.numbers``)

    @classmethod
    def of(cls, text: str) -> Checkpoint:
        return cls(normalise(text), numbers(text))

    def holds(self, version: Version) -> bool:
        return version.norm in self.norm or (version.number is not None and version.number in self.numbers)


class StageBook:
    """Pending checkpoints per conversation (LRU-bounded)."""

    def __init__(self, max_conversations: int = 10_000) -> None:
        self._pending: BoundedLRU[Scope, dict[str, Checkpoint]] = BoundedLRU(max_conversations)
        self._lock = forksafe.lock()

    @property
    def max_conversations(self) -> int:
        return self._pending.max_entries

    @max_conversations.setter
    def max_conversations(self, value: int) -> None:
        self._pending.max_entries = value

    def put(self, scope: Scope, stage: str, text: str) -> None:
        """Keep what ``stage`` held (``text``: every string in it, joined by ``matching.SEPARATOR``)."""
        if len(text) > MAX_CHECKPOINT_CHARS:
            return
        held = Checkpoint.of(text)
        with self._lock:
            stages = self._pending.get(scope)
            if stages is None:
                stages = {}
                self._pending.put(scope, stages)
            stages[stage] = held

    @property
    def empty(self) -> bool:
        """No conversation has a pending checkpoint."""
        return not self._pending

    def take(self, scope: Scope) -> dict[str, Checkpoint]:
        with self._lock:
            return self._pending.pop(scope, {})
