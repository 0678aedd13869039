"""The fake LLM server's former home, kept so ``from ctxguard.testing.fake_llm import FakeLLM`` goes
on working: it lives in ``ctxguard.testing.fake`` (``ctxguard.testing`` exports it too)."""

from __future__ import annotations

from .fake import FakeLLM, RecordedRequest, Reply, ServedResponse

__all__ = ["FakeLLM", "RecordedRequest", "Reply", "ServedResponse"]
