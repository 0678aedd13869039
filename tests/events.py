"""A span's ``ctxguard.violation`` events, apart from the other events on it (the conventions'
``gen_ai.evaluation.result``, for one)."""

from __future__ import annotations

from typing import Any

from ctxguard.telemetry.spans import VIOLATION_EVENT


def violation_events(span: Any) -> list[Any]:
    return [e for e in span.events if e.name == VIOLATION_EVENT]
