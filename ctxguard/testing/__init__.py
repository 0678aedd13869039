"""Testing toolkit (``ctxguard.testing``): a loopback fake LLM server, retention-test helpers,
capture, and the pytest plugin (``ctxguard.testing.plugin``: ``fake_llm``, ``ctxguard_guard``)."""

from __future__ import annotations

from .fake import FakeLLM, RecordedRequest, Reply, ServedResponse
from .helpers import (
    ClaimProblem,
    ClaimsMismatch,
    FactLost,
    FlipPoint,
    assert_claims,
    assert_fact_survives,
    find_flip_point,
    payload_contains,
    record,
)

__all__ = [
    "ClaimProblem",
    "ClaimsMismatch",
    "FactLost",
    "FakeLLM",
    "FlipPoint",
    "RecordedRequest",
    "Reply",
    "ServedResponse",
    "assert_claims",
    "assert_fact_survives",
    "find_flip_point",
    "payload_contains",
    "record",
]
