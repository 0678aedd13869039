"""How ids are written into exported telemetry: as the app gave them, or as keyed digests.

Conversation ids and fact ids are exported as they are by default (spans, span events,
log records). Apps whose ids are personal data (an e-mail address or a phone number as
the conversation id) turn on ``instrument(hash_ids=True)`` / ``CTXGUARD_HASH_IDS=1``:
every id ctxguard exports is then ``Digester.text(id)``, keyed like the payload digests,
so one id digests the same in every process that shares ``CTXGUARD_DIGEST_KEY`` and
nobody without the key can confirm a guess. A ``fact_id@version`` label keeps its
version readable: ``<digest>@2``.

Checks keep clear ids (enforce mode's exception stays in the process); the recording
side passes what it exports through an ``ExportedIds``, which knows the id-bearing
span attributes (``ID_ATTRIBUTES``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..cache import TwoGenerationCache, str_bytes, text_bytes
from ..digest import Digester
from ..violations import Violation
from . import spans as attr

if TYPE_CHECKING:
    from ..facts.evaluate import FactView

__all__ = ["ID_ATTRIBUTES", "ExportedIds"]

#: Span attributes that carry ids, and what kind: one id, ids, ``fact_id@version`` labels,
#: or texts that may name fact ids (skip reasons).
ID_ATTRIBUTES: dict[str, str] = {
    attr.CONVERSATION_ID: "id",
    attr.DIVERGENCE_FACT: "id",
    attr.SUMMARY_LOSSY: "ids",
    attr.FACTS_PRESENT: "labels",
    attr.FACTS_MISSING: "labels",
    attr.FACTS_STALE: "labels",
    attr.FACTS_LEAKED: "labels",
    attr.FACTS_TOO_SHORT: "labels",
    attr.SKIPPED: "texts",
}


def _id_bytes(raw: str, digest: str) -> int:
    return text_bytes(raw, raw) + str_bytes(digest)


class ExportedIds:
    """``ExportedIds(digester).id("alice@example.com")`` -> its keyed digest; ``ExportedIds(None)``
    leaves every id as it is."""

    __slots__ = ("_cache", "_digester")

    def __init__(self, digester: Digester | None) -> None:
        self._digester = digester
        # The same few ids come back call after call; an id is the app's string, of any length.
        self._cache: TwoGenerationCache[str, str] = TwoGenerationCache(8_192, 1024 * 1024, _id_bytes)

    def id(self, raw: str) -> str:
        digester = self._digester
        if digester is None or not raw:
            return raw
        found = self._cache.get(raw)
        if found is None:
            found = digester.text(raw)
            self._cache.put(raw, found)
        return found

    def label(self, label: str) -> str:
        """``fact_id@version`` (or ``@foreign``): the id digested, the version kept. Split at the
        last ``@``: a fact id may contain one."""
        fact_id, at, version = label.rpartition("@")
        return f"{self.id(fact_id)}@{version}" if at else self.id(label)

    def text(self, text: str, ids: Iterable[str]) -> str:
        """``text`` with every occurrence of each of ``ids`` replaced by its digest (one pass,
        longest first, so a digest is never rewritten and no id survives inside a longer one)."""
        if self._digester is None:
            return text
        found = sorted({i for i in ids if i and i in text}, key=len, reverse=True)
        if not found:
            return text
        return re.sub("|".join(map(re.escape, found)), lambda m: self.id(m.group()), text)

    def violations(self, violations: list[Violation]) -> list[Violation]:
        """Violations as exported: fact id and detail with the id digested, no clear text."""
        if self._digester is None:
            return violations
        return [
            v if v.fact_id is None
            else Violation(v.check, self.text(v.detail, (v.fact_id,)), self.id(v.fact_id), v.stage)
            for v in violations
        ]

    def attributes(self, attributes: dict[str, Any], facts: FactView | None) -> dict[str, Any]:
        """Span attributes as exported (``attributes`` is rewritten in place and returned);
        ``facts`` names the fact ids a skip reason may mention."""
        if self._digester is None:
            return attributes
        known: set[str] | None = None
        for key, kind in ID_ATTRIBUTES.items():
            value = attributes.get(key)
            if value is None:
                continue
            if kind == "id":
                attributes[key] = self.id(value)
            elif kind == "ids":
                attributes[key] = tuple(self.id(v) for v in value)
            elif kind == "labels":
                attributes[key] = tuple(self.label(v) for v in value)
            else:
                if known is None:
                    known = _fact_ids(facts)
                attributes[key] = tuple(self.text(v, known) for v in value)
        return attributes


def _fact_ids(facts: FactView | None) -> set[str]:
    if facts is None:
        return set()
    state = facts.state
    return {*state.active, *state.stale, *state.forgotten, *facts.too_short}
