"""Testing toolkit: a loopback fake LLM server and pytest fixtures (``ctxguard.testing.plugin``)."""

from __future__ import annotations

from .fake_llm import FakeLLM, RecordedRequest, Reply

__all__ = ["FakeLLM", "RecordedRequest", "Reply"]
