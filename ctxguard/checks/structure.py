"""Structure of the request head: the system instruction is first and unchanged."""

from __future__ import annotations

from ..payload import Payload
from ..violations import Violation
from .base import Context, Skip


def system_at_head(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    if not ctx.policy.system_at_head:
        return Skip("disabled by policy")
    head = payload.head
    if head is None:
        return [Violation("system_at_head", "the request carries no messages and no instruction")]
    if payload.system is None:
        return [Violation("system_at_head", f"head is a {head.role!r} message, not the system instruction")]
    return []


def system_stable(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    if not ctx.in_conversation:
        return Skip("no conversation id (use ctxguard.conversation())")
    system = payload.system
    if system is None:
        return Skip("no system instruction at the head")
    if ctx.first_system is not None and system.digest != ctx.first_system:
        return [Violation("system_stable", "system instruction differs from the first one of this conversation")]
    return []
