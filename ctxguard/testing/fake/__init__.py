"""A loopback fake LLM server that speaks each provider's wire format, behind the real SDKs: over
real HTTP, deterministic, offline, the way the providers answer (docs/testing.md). Standard library only.

Usage::

    with FakeLLM() as llm:
        llm.script("hello", Reply(status=429))
        client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
        r = client.chat.completions.create(model="m", messages=[...])
        assert llm.bodies("/chat/completions")[0]["model"] == "m"
        assert r.id == llm.responses[0].id
"""

from __future__ import annotations

from .script import RecordedRequest, Reply, ServedResponse
from .server import FakeLLM

__all__ = ["FakeLLM", "RecordedRequest", "Reply", "ServedResponse"]
