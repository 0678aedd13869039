"""``wire_intact``: what the app passed is what the SDK put on the wire.

SDKs rename fields, drop unset values and restructure messages; this check is
the evidence that the payload ctxguard judged is the payload that was sent. It is
judged when the transport sends the request (so it never blocks), on the raw
body: each line of the system instruction and of the pinned block must appear
in it, JSON-escaped as an encoder would write it. Line by line, because an SDK
may split an instruction into blocks; on the raw bytes, because decoding and
normalising every body would cost more than the rest of the guard.
"""

from __future__ import annotations

import json
from functools import lru_cache

from ..payload import Payload
from ..violations import Violation
from .base import Context


@lru_cache(maxsize=256)  # the same instruction and block are sent call after call
def _needles(text: str) -> tuple[frozenset[bytes], ...]:
    """Each non-empty line of ``text`` as a JSON encoder may write it (ASCII-escaped or not)."""
    return tuple(
        frozenset({json.dumps(line)[1:-1].encode(), json.dumps(line, ensure_ascii=False)[1:-1].encode()})
        for line in (raw.strip() for raw in text.splitlines())
        if line
    )


def _carried(text: str, body: bytes) -> bool:
    return all(any(n in body for n in variants) for variants in _needles(text))


def wire_intact(payload: Payload, ctx: Context, body: bytes) -> list[Violation]:
    """The system instruction and pinned block passed to the SDK, missing from ``body`` as sent."""
    violations = []
    system = payload.system
    if system is not None and not _carried(system.text, body):
        violations.append(Violation("wire_intact", "the system instruction passed is not in the body sent"))
    if ctx.pinned is not None and not _carried(ctx.pinned.text, body):
        violations.append(Violation("wire_intact", "the pinned block passed is not in the body sent"))
    return violations
