"""What a failed check reports, and the exception enforce mode raises."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ContextViolation", "Violation"]


@dataclass(frozen=True)
class Violation:
    """One failed check. ``detail`` never contains message content or fact values."""

    check: str
    detail: str
    fact_id: str | None = None
    stage: str | None = None
    #: The same finding with fact values in clear, for enforce mode's exception only
    #: (it stays in the test process); never exported, logged or put on a span.
    clear: str | None = field(default=None, repr=False, compare=False)


class ContextViolation(Exception):
    """Raised in enforce mode, before the request is sent.

    >>> try:
    ...     raise ContextViolation([Violation("system_at_head", "head role is user")])
    ... except ContextViolation as exc:
    ...     exc.violations[0].check
    'system_at_head'
    """

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = list(violations)
        lines = "; ".join(f"{v.check}: {v.clear or v.detail}" for v in self.violations)
        super().__init__(f"request blocked by ctxguard: {lines}")
