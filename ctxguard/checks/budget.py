"""The payload fits the model's window with the output reservation."""

from __future__ import annotations

from ..payload import Payload
from ..violations import Violation
from .base import Context, Skip


def payload_under_budget(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    if isinstance(ctx.budget, str):
        return Skip(ctx.budget)
    ev = ctx.budget
    violations = []
    if ev.headroom < 0:
        violations.append(
            Violation(
                "payload_under_budget",
                f"input {ev.input_tokens} + reserved {ev.reserved} tokens exceed the window "
                f"{ev.breakdown.window} by {-ev.headroom}",
            )
        )
    if ev.over_history_max:
        violations.append(
            Violation("payload_under_budget", f"history {ev.history} tokens exceeds history_max {ev.history_max}")
        )
    return violations
