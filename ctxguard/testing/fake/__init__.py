"""A loopback fake LLM server that speaks each provider's wire format, behind the real SDKs: over
real HTTP, deterministic, offline, the way the providers answer (docs/testing.md; usage: ``FakeLLM``).
Standard library only."""

from __future__ import annotations

from .script import RecordedRequest, Reply, ServedResponse
from .server import FakeLLM

__all__ = ["FakeLLM", "RecordedRequest", "Reply", "ServedResponse"]
