"""LiteLLM as apps call it (``litellm.completion`` / ``acompletion``, plain and streamed), on its
OpenAI and Anthropic routes, held to the matrix's checks (tests/providers/test_litellm.py covers
the provider itself)."""

from __future__ import annotations

import asyncio
import os

import pytest

import ctxguard
from tests.frameworks.helpers import framework, play

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost map fetched at import
litellm = framework("litellm")

SYSTEM = {"role": "system", "content": "You are the order assistant."}
TURNS = ["Where is my parcel?", "When will it arrive?"]


def route(llm, provider: str) -> dict:
    if provider == "anthropic":
        return {"model": "anthropic/claude-sonnet-4-20250514", "api_base": llm.anthropic_base_url,
                "api_key": "t", "max_tokens": 200}
    return {"model": "openai/gpt-4o", "api_base": llm.base_url, "api_key": "t"}


def chunks(stream) -> list:
    return [c.model_dump(exclude={"id", "created"}) for c in stream]


async def achunks(stream) -> list:
    return [c.model_dump(exclude={"id", "created"}) async for c in stream]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])  # the span says what the provider said
@pytest.mark.parametrize("how", ["completion", "stream", "acompletion", "astream"])
def test_a_two_turn_conversation(harness, provider, how):
    def scenario(llm):
        kwargs = route(llm, provider)
        if how.endswith("stream"):
            kwargs.update(stream=True, stream_options={"include_usage": True})
        messages, seen = [SYSTEM], []
        with ctxguard.conversation("litellm"):
            for question in TURNS:
                messages.append({"role": "user", "content": question})
                if how == "completion":
                    reply = litellm.completion(messages=messages, **kwargs)
                    seen.append(reply.model_dump(exclude={"id", "created"}))
                    text = reply.choices[0].message.content
                elif how == "acompletion":
                    reply = asyncio.run(litellm.acompletion(messages=messages, **kwargs))
                    seen.append(reply.model_dump(exclude={"id", "created"}))
                    text = reply.choices[0].message.content
                else:
                    call = litellm.completion(messages=messages, **kwargs) if how == "stream" else None
                    got = chunks(call) if call is not None else asyncio.run(_astream(messages, kwargs))
                    seen.append(got)
                    text = "".join(c["choices"][0]["delta"]["content"] or "" for c in got if c["choices"])
                messages.append({"role": "assistant", "content": text})
        return seen

    def turns(played):
        assert [s.attributes["ctxguard.payload.messages"] for s in played.spans] == [2, 4]
        assert all(list(s.attributes["ctxguard.violations"]) == [] for s in played.spans)

    play(harness, scenario, then=turns)


async def _astream(messages, kwargs) -> list:
    return await achunks(await litellm.acompletion(messages=messages, **kwargs))
