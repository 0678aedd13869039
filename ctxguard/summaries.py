"""Summaries of older turns: the prompt to write one, and the check that it kept the facts.

ctxguard never calls a model. An app that summarises its older turns with its own
model can start from ``SUMMARY_PROMPT``; ``ContextBuilder`` then checks the summary
it is handed against the conversation's active facts (a paraphrase tends to lose
exactly the digits, identifiers and names), counts a lossy one in
``ctxguard_lossy_summaries_total`` and leaves a note with the active guard's inspector, which
puts it on the verdict of the conversation's next guarded call, and the recorder on its span
(``ctxguard.summary.lossy``: fact ids, never values).
"""

from __future__ import annotations

from collections.abc import Iterable

from . import forksafe
from .cache import BoundedLRU
from .conversation import Scope
from .facts.ledger import Version
from .facts.matching import MIN_MATCH_CHARS
from .facts.stages import Checkpoint

__all__ = ["SUMMARY_PROMPT", "LossyNotes", "lost_facts"]

#: A prompt template for a structured summary of older turns, for the app's own model:
#: ``SUMMARY_PROMPT.format(facts=..., turns=...)``. ``facts`` is one ``id: value`` line
#: per active fact (the values to copy verbatim), ``turns`` the transcript to summarise.
SUMMARY_PROMPT = """\
Summarise the conversation below for an assistant that will continue it without seeing it.

Write four sections, each a short bullet list, and leave a section empty rather than invent:
Decisions: what was decided or agreed, with the final value when a value was corrected.
Constraints: requirements, limits and preferences the user stated that still hold.
Commitments: what the assistant promised to do, with dates, amounts and identifiers.
Open questions: what is still unanswered or waiting for the user.

Copy every number, date, amount, identifier, address and name exactly as written; never
round, translate or paraphrase them. Each of these values must appear verbatim:
{facts}

Leave out greetings, thanks, apologies, small talk and anything later taken back.

Conversation:
{turns}
"""


def lost_facts(summary: str, active: Iterable[Version]) -> list[str]:
    """Ids of the active facts whose value the summary no longer carries.

    Matched like the fact checks match a payload (normalised substring; a grouped number in any
    grouping); values too short to match reliably are not judged.
    """
    text = Checkpoint.of(summary)
    return [v.fact_id for v in active if len(v.norm) >= MIN_MATCH_CHARS and not text.holds(v)]


class LossyNotes:
    """Per conversation, the fact ids the last supplied summary lost, until a call takes them."""

    def __init__(self, max_conversations: int = 10_000) -> None:
        self._notes: BoundedLRU[Scope, tuple[str, ...]] = BoundedLRU(max_conversations)
        self._lock = forksafe.lock()

    @property
    def max_conversations(self) -> int:
        return self._notes.max_entries

    @max_conversations.setter
    def max_conversations(self, value: int) -> None:
        self._notes.max_entries = value

    def note(self, scope: Scope, fact_ids: Iterable[str]) -> None:
        with self._lock:
            self._notes.put(scope, tuple(fact_ids))

    def take(self, scope: Scope) -> tuple[str, ...]:
        if not self._notes:  # the common case: no builder, or no lossy summary
            return ()
        with self._lock:
            return self._notes.pop(scope, ())
