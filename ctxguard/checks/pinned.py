"""The pinned facts block: present, within its caps, and not cut."""

from __future__ import annotations

from ..payload import Payload
from ..violations import Violation
from .base import Context, Skip


def pinned_present(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    policy = ctx.policy.pinned
    if policy is None:
        return Skip("no Pinned policy")
    if ctx.pinned is not None:
        return []
    if payload.history_elsewhere is not None:
        return Skip(payload.history_elsewhere)
    if not policy.required:
        return Skip("pinned block not required")
    return [Violation("pinned_present", f"no message carries the pinned marker {policy.marker!r}")]


def pinned_capped(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    policy = ctx.policy.pinned
    if policy is None:
        return Skip("no Pinned policy")
    if ctx.pinned is None:
        return Skip("no pinned block")
    violations = []
    if ctx.pinned_tokens > policy.max_tokens:
        violations.append(
            Violation("pinned_capped", f"pinned block is {ctx.pinned_tokens} tokens, cap {policy.max_tokens}")
        )
    if policy.max_entries is not None and ctx.pinned.entries > policy.max_entries:
        violations.append(
            Violation(
                "pinned_capped", f"pinned block has {ctx.pinned.entries} entries, cap {policy.max_entries}"
            )
        )
    return violations


def pinned_intact(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    if ctx.policy.pinned is None:
        return Skip("no Pinned policy")
    if ctx.pinned is None:
        return Skip("no pinned block")
    if not ctx.pinned.rendered:
        return Skip("block not made by render_pinned")
    if not ctx.pinned.intact:
        return [Violation("pinned_intact", "pinned block is cut: its closing line or an entry is missing")]
    return []
