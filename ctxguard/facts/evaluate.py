"""Per call: which fact versions each stage held, computed once for every fact check."""

from __future__ import annotations

from sys import getsizeof
from typing import NamedTuple

from ..cache import ENTRY_BYTES, str_bytes
from ..conversation import Scope
from .index import ValueIndex
from .ledger import FactState, Version
from .matching import MIN_MATCH_CHARS, Chunked, distinctive
from .shared import DigestIndex
from .stages import Checkpoint

__all__ = ["NO_TERMS", "FactText", "FactView", "build_view", "fact_text_bytes"]

#: Stages whose checkpoints are compared, in pipeline order (``capture`` is the
#: ledger itself, ``answer`` is judged after the response).
_BEFORE_SEND = ("commit", "load", "selection", "payload")


class FactText(NamedTuple):
    """What the fact checks read of one message, computed once per message and process (the
    inspector keeps it by the message's digest): its text normalised (``matching.searchable``: a
    ``Chunked`` for a text too large, searched in chunks) and its words and grouped numbers
    (``index.terms``, none for a large text)."""

    norm: str | Chunked
    terms: frozenset[str]


NO_TERMS: frozenset[str] = frozenset()
_PAIR_BYTES = getsizeof(FactText("", NO_TERMS))


def fact_text_bytes(key: object, text: FactText) -> int:
    """The weight of a kept ``FactText`` (a ``Chunked`` one is not kept)."""
    norm, terms = text
    kept = str_bytes(norm) if isinstance(norm, str) else 0
    return ENTRY_BYTES + _PAIR_BYTES + kept + getsizeof(terms) + sum(map(str_bytes, terms))


class FactView:
    """The facts of one call: which versions the payload and each checkpointed stage held.

    Presence in the payload is computed once per version per call, and remembered
    across calls as the digest of the message that carried it: while that message is
    in the payload, the value is (a digest pins the exact content), so a fact that
    stays put costs a set look-up, not a scan of the history. A grouped number not
    found as written is looked for among the messages' numbers, in any grouping.
    """

    __slots__ = ("_positions", "_sent", "checkpoints", "digests", "foreign", "locations", "norms", "reach", "state",
                 "terms", "too_short", "unavailable", "unsearched")

    def __init__(
        self,
        state: FactState,
        norms: list[str | Chunked],
        digests: list[str],
        checkpoints: dict[str, Checkpoint],
        locations: dict[str, str],
        terms: list[frozenset[str]],
    ) -> None:
        self.state = state
        self.norms = norms
        self.digests = digests
        self.checkpoints = checkpoints  # stage -> what it held
        self.locations = locations  # fact_id@version -> digest of a message that carried it
        #: Each message's words and grouped numbers (``index.terms``; none for a large message): the
        #: candidate values of other conversations, a number in any grouping.
        self.terms = terms
        # Other conversations' values sent here, each with its conversation: a scope, or (found by
        # the fleet index) the digest of a conversation of another process, the value as found here.
        self.foreign: list[tuple[Scope | str, Version]] = []
        self.reach: str | None = None  # Sinks.reach(): where the foreign values were looked for
        # Why the conversation's own facts are unknown (its ledger unreachable): only fact_scoped is
        # judged then, from this process's indexes.
        self.unavailable: str | None = None
        self.too_short: list[str] = []  # fact ids that cannot be matched reliably
        self.unsearched = 0  # messages too large to search for other conversations' values
        self._sent: dict[str, int] = {}  # fact_id@version -> index of the message carrying it, or -1
        self._positions: dict[str, int] | None = None  # message digest -> its first index

    def too_short_labels(self) -> tuple[str, ...]:
        """``fact_id@version`` of the values too short to match reliably (active, superseded or
        forgotten): never judged present, sent or absent, whatever the checks say of the others."""
        state = self.state
        labels = [state.active[fact_id].label for fact_id in self.too_short]
        for versions in (*state.stale.values(), *state.forgotten.values()):
            labels.extend(v.label for v in versions if len(v.norm) < MIN_MATCH_CHARS)
        return tuple(labels)

    def sent(self, version: Version) -> bool:
        """Whether the payload carries ``version``; never for values too short to match reliably."""
        return self.carrier(version) >= 0

    def carrier(self, version: Version) -> int:
        """Index of a message carrying ``version`` (-1: none does, or the value is too short)."""
        label = version.label
        known = self._sent.get(label)
        if known is not None:
            return known
        found = -1
        if len(version.norm) < MIN_MATCH_CHARS:
            self._sent[label] = found
            return found
        where = self.locations.get(label)
        if where is not None:
            positions = self._positions
            if positions is None:
                positions = self._positions = {}
                for i, digest in enumerate(self.digests):
                    positions.setdefault(digest, i)
            found = positions.get(where, -1)
        if found < 0:
            norm = version.norm
            for i, text in enumerate(self.norms):
                if norm in text:
                    self.locations[label] = self.digests[i]
                    found = i
                    break
        if found < 0 and version.number is not None:
            found = self._carrier_of_number(version.number)
            if found >= 0:
                self.locations[label] = self.digests[found]
        self._sent[label] = found
        return found

    def _carrier_of_number(self, key: str) -> int:
        for i, text in enumerate(self.norms):
            if isinstance(text, Chunked):
                if text.has_number(key):
                    return i
                continue
            if key in self.terms[i]:
                return i
        return -1

    def divergence(self, fact_id: str, wanted: Version | None) -> tuple[str, Version | None]:
        """Earliest stage that did not hold ``wanted`` (None: that held a value it must not)."""
        versions = self.state.versions(fact_id)
        for stage in _BEFORE_SEND:
            if stage == "payload":
                observed = next((v for v in versions if v is not wanted and self.sent(v)), None)
                held = wanted is not None and self.sent(wanted)
            else:
                held_there = self.checkpoints.get(stage)
                if held_there is None:
                    continue
                observed = next((v for v in versions if v is not wanted and held_there.holds(v)), None)
                held = wanted is not None and held_there.holds(wanted)
            if (wanted is None and observed is not None) or (wanted is not None and not held):
                return stage, observed
        return "payload", None


def build_view(
    state: FactState,
    scope: Scope,
    norms: list[str | Chunked],
    digests: list[str],
    checkpoints: dict[str, Checkpoint],
    locations: dict[str, str],
    index: ValueIndex,
    terms: list[frozenset[str]],
    fleet: DigestIndex | None = None,
    reach: str | None = None,
    unavailable: str | None = None,
) -> FactView:
    """``terms``: each message's words and grouped numbers (``index.terms``); ``fleet``: the
    other processes' values (a shared ``RedisLedger``), None when it holds none; ``unavailable``:
    why ``state`` is empty (the ledger could not be read)."""
    view = FactView(state, norms, digests, checkpoints, locations, terms)
    view.reach = reach
    view.unavailable = unavailable
    for fact_id, version in state.active.items():
        if len(version.norm) < MIN_MATCH_CHARS:
            view.too_short.append(fact_id)
    large = [text for text in norms if isinstance(text, Chunked)]
    if large:
        # Every value of the conversation looked for in one pass over each large text.
        versions = [v for v in state.active.values() if len(v.norm) >= MIN_MATCH_CHARS]
        versions.extend(v for group in (*state.stale.values(), *state.forgotten.values()) for v in group
                        if len(v.norm) >= MIN_MATCH_CHARS)
        values = [v.norm for v in versions]
        keys = [v.number for v in versions if v.number is not None]
        for text in large:
            text.search(values, keys)
        view.unsearched = len(large) if len(index) or fleet is not None else 0
    if len(index) or fleet is not None:
        own = state.keys
        for candidate in index.foreign(scope, terms) if len(index) else ():
            version = candidate.version
            norm, number = version.norm, version.number
            if norm in own or number in own or not distinctive(norm):
                continue
            if number is not None:  # in a message's numbers (or words: written without groups)
                found = any(number in ts for ts in terms)
            else:
                # A message can hold the value only if it has all the value's words: a set test
                # first, the substring search only in the few messages that pass it.
                value_words = candidate.words
                found = any(value_words <= ts and norm in text for text, ts in zip(norms, terms, strict=True))
            if found:
                view.foreign.append((candidate.scope, version))
        if fleet is not None:
            # Found in this process, named by its scope: as written, and as a number however written.
            here = {key for _, version in view.foreign for key in (version.norm, version.number) if key}
            view.foreign.extend(found for found in fleet.foreign(scope, own, norms, digests, terms)
                                if found[1].norm not in here and found[1].number not in here)
    return view
