"""What the tests of the fake share: a conversation, a tool and its call, a schema, raw HTTP and SSE
readers, and the anthropic and google-genai clients (skipped when the SDK is not installed).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

import pydantic
import pytest
from openai.types.chat import ChatCompletionMessageParam

from ctxguard.testing.fake import FakeLLM

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup", "arguments": '{"q": "weather"}'},
}
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up the weather forecast for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]},
    },
}
CALL_ID = re.compile(r"call_[A-Za-z0-9]{24}")


class Order(pydantic.BaseModel):
    city: str
    days: int


def post_raw(url: str, body: bytes) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def sse(url: str, payload: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """The frames of an SSE answer as they came off the wire (``data`` decoded unless ``[DONE]``)."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert resp.headers["Transfer-Encoding"] == "chunked"
        raw = resp.read().decode()
    frames: list[tuple[str | None, Any]] = []
    for block in raw.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        data = fields["data"]
        frames.append((fields.get("event"), data if data == "[DONE]" else json.loads(data)))
    return frames


def anthropic_client(llm: FakeLLM) -> Any:
    anthropic = pytest.importorskip("anthropic")
    return anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0)


def gemini_client(llm: FakeLLM) -> Any:
    genai = pytest.importorskip("google.genai", reason="google-genai is not installed")
    return genai.Client(api_key="test", http_options={"base_url": llm.gemini_base_url})
