"""Per call: which fact versions each stage held, computed once for every fact check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .index import ValueIndex
from .ledger import FactState, Scope, Version
from .matching import MIN_MATCH_CHARS, SEPARATOR

__all__ = ["FactView", "build_view"]

#: Stages whose checkpoints are compared, in pipeline order (``capture`` is the
#: ledger itself, ``answer`` is judged after the response).
_BEFORE_SEND = ("commit", "load", "selection", "payload")


@dataclass(slots=True)
class FactView:
    state: FactState
    stages: dict[str, str]  # stage -> normalised text, "payload" always present
    foreign: list[tuple[Scope, Version]] = field(default_factory=list)  # other conversations' values sent
    too_short: list[str] = field(default_factory=list)  # fact ids that cannot be matched reliably

    @property
    def payload(self) -> str:
        return self.stages["payload"]

    def sent(self, version: Version) -> bool:
        return version.norm in self.stages["payload"]

    def divergence(self, fact_id: str, wanted: Version | None) -> tuple[str, Version | None]:
        """Earliest stage that did not hold ``wanted`` (None: that held a value it must not)."""
        versions = self.state.versions(fact_id)
        for stage in _BEFORE_SEND:
            text = self.stages.get(stage)
            if text is None:
                continue
            observed = next((v for v in versions if v is not wanted and v.norm in text), None)
            if wanted is None:
                if observed is not None:
                    return stage, observed
            elif wanted.norm not in text:
                return stage, observed
        return "payload", None


def build_view(
    state: FactState,
    scope: Scope,
    message_norms: list[str],
    checkpoints: dict[str, str],
    index: ValueIndex,
    message_words: Callable[[], list[frozenset[str]]],
) -> FactView:
    payload = SEPARATOR.join(message_norms)
    stages = {**checkpoints, "payload": payload}
    view = FactView(state, stages)
    for fact_id, version in state.active.items():
        if len(version.norm) < MIN_MATCH_CHARS:
            view.too_short.append(fact_id)
    if len(index):
        own = {v.norm for fid in state.active for v in state.versions(fid)}
        own.update(v.norm for vs in state.forgotten.values() for v in vs)
        for other, version in index.foreign(scope, message_words()):
            if version.norm not in own and _distinctive(version.norm) and version.norm in payload:
                view.foreign.append((other, version))
    return view


def _distinctive(norm: str) -> bool:
    """Only values unlikely to be typed independently count as leaks (no false alarms on "pune")."""
    return len(norm) >= 8 or any(ch.isdigit() for ch in norm)
