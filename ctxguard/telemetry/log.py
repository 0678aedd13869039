"""Structured warnings on the ``ctxguard`` logger (no content, ever): one per failed check of a
call, however many violations it found, and a bounded number per conversation.

A check that fails for 1,000 facts is one line naming the first and counting the rest (the
ids in ``extra`` are capped at ``MAX_IDS``). A conversation that keeps failing logs a burst
of ``BURST`` lines, then at most one line per ``1 / RATE`` seconds; the next line it may log
says how many it held back. Metrics and spans are never rate-limited: they count every call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from .. import forksafe
from ..cache import BoundedLRU
from ..violations import Violation

__all__ = ["BURST", "MAX_IDS", "RATE", "WarningLimiter", "log_violations"]

logger = logging.getLogger("ctxguard")

#: Fact ids listed in one warning's ``extra``, at most.
MAX_IDS = 20
#: Warnings a conversation may log at once, and how many per second it earns back.
BURST = 10
RATE = 1 / 6
#: Conversations whose budget is remembered (least recently warned forgotten first).
MAX_TRACKED = 4_096


class WarningLimiter:
    """A token bucket per conversation (``None``: calls outside any conversation share one)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: BoundedLRU[str | None, list[float]] = BoundedLRU(MAX_TRACKED)  # id -> [tokens, at, held back]
        self._lock = forksafe.lock()

    def take(self, conversation_id: str | None) -> int | None:
        """None: hold this warning back; else how many were held back since the last one."""
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(conversation_id)
            if bucket is None:
                bucket = [float(BURST), now, 0.0]
                self._buckets.put(conversation_id, bucket)
            else:
                bucket[0] = min(float(BURST), bucket[0] + (now - bucket[1]) * RATE)
                bucket[1] = now
            if bucket[0] < 1.0:
                bucket[2] += 1
                return None
            bucket[0] -= 1.0
            held, bucket[2] = int(bucket[2]), 0.0
            return held


def log_violations(
    violations: Iterable[Violation],
    *,
    provider: str,
    conversation_id: str | None,
    payload_hash: str,
    limiter: WarningLimiter,
) -> None:
    by_check: dict[str, list[Violation]] = {}
    for v in violations:
        by_check.setdefault(v.check, []).append(v)
    for check, found in by_check.items():
        held = limiter.take(conversation_id)
        if held is None:
            continue
        first = found[0]
        message = "ctxguard violation %s: %s"
        args: list[object] = [check, first.detail]
        if len(found) > 1:
            message += " (and %d more)"
            args.append(len(found) - 1)
        if held:
            message += " [%d earlier warnings of this conversation held back]"
            args.append(held)
        fact_ids = list(dict.fromkeys(v.fact_id for v in found if v.fact_id is not None))
        logger.warning(
            message,
            *args,
            extra={
                "ctxguard": {
                    "check": check,
                    "detail": first.detail,
                    "fact_id": first.fact_id,
                    "stage": first.stage,
                    "count": len(found),
                    "fact_ids": fact_ids[:MAX_IDS],
                    "held_back": held,
                    "provider": provider,
                    "conversation_id": conversation_id,
                    "payload_hash": payload_hash,
                }
            },
        )
