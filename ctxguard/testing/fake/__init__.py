"""A loopback fake LLM server that speaks each provider's wire format, behind the real SDKs.

Mocked SDK objects never exercise what ctxguard depends on: the bytes the real SDKs send and the
way they parse answers, streams included. This server answers them over real HTTP, deterministic,
offline and free, the way the providers answer: usage grows with what the model reads and says
(``tokens``, ``media``), ids look real and are recorded (``FakeLLM.responses``), streams carry each
provider's framing and fail the way real ones do, errors carry each provider's body.

One module per wire format (``openai_chat``, ``openai_responses``, ``anthropic_messages``, ``gemini``,
``mistral``, ``ollama``, ``cohere``, ``bedrock``), each declaring a ``wire.WireFormat`` listed in
``registry.FORMATS``; the server, the records and the writers are shared and name no API.
Standard library only: importing it drags no dependency into the library or its tests.

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
