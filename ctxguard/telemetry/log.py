"""One structured warning per violation on the ``ctxguard`` logger (no content, ever)."""

from __future__ import annotations

import logging

from ..violations import Violation

logger = logging.getLogger("ctxguard")


def log_violation(v: Violation, *, provider: str, conversation_id: str | None, payload_hash: str) -> None:
    logger.warning(
        "ctxguard violation %s: %s",
        v.check,
        v.detail,
        extra={
            "ctxguard": {
                "check": v.check,
                "detail": v.detail,
                "fact_id": v.fact_id,
                "stage": v.stage,
                "provider": provider,
                "conversation_id": conversation_id,
                "payload_hash": payload_hash,
            }
        },
    )
