"""The fake answers the real google-genai SDK as Gemini does (ctxguard/testing/fake/gemini.py):
usage from what the model reads, cached and thought tokens, ``usageMetadata`` on every chunk, the
error bodies, a stream failing midway. Values are compared with what the server recorded having
sent (``llm.responses``).
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxguard.testing.fake import FakeLLM, Reply
from tests.testing.fake.helpers import Order, gemini_client


def test_gemini_prompt_usage_counts_instruction_contents_and_tools(llm: FakeLLM) -> None:
    gemini = gemini_client(llm)

    def prompt(contents: Any, **config: Any) -> int:
        r = gemini.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config or None)
        assert r.usage_metadata.prompt_token_count == llm.responses[-1].input_tokens
        return int(r.usage_metadata.prompt_token_count)

    base = prompt("where is my parcel")
    assert prompt("where is my parcel", system_instruction="You are the order assistant of Acme.") > base + 5
    assert prompt("where is my parcel", tools=[{"function_declarations": [{
        "name": "lookup", "description": "Look up an order",
        "parameters": {"type": "OBJECT", "properties": {"order": {"type": "STRING"}}}}]}]) > base + 8
    assert prompt("where is my parcel", response_mime_type="application/json", response_schema=Order) > base + 5
    reply = {"role": "user", "parts": [{"function_response": {"name": "lookup",
                                                              "response": {"status": "shipped from Pune"}}}]}
    assert prompt(["where is my parcel", reply]) > base + 8


def test_gemini_cached_and_thought_tokens(llm: FakeLLM) -> None:
    llm.script(Reply(text="ok", reasoning="Check the order ledger first.", input_tokens=900, cached_tokens=512,
                     output_tokens=120, reasoning_tokens=100))
    gemini = gemini_client(llm)  # a client closes its connections when collected: keep it
    r = gemini.models.generate_content(model="gemini-2.5-flash", contents="where is my parcel")
    u = r.usage_metadata
    assert (u.prompt_token_count, u.cached_content_token_count) == (900, 512)
    assert (u.candidates_token_count, u.thoughts_token_count, u.total_token_count) == (20, 100, 1020)
    parts = r.candidates[0].content.parts
    assert [(p.thought, p.text) for p in parts] == [(True, "Check the order ledger first."), (None, "ok")]
    assert llm.responses[0].output_tokens == 120


def test_gemini_stream_chunks_and_usage_metadata(llm: FakeLLM) -> None:
    gemini = gemini_client(llm)
    llm.script(Reply(text="It left the Pune warehouse."))
    chunks = list(gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="where is it"))
    served = llm.responses[0]
    assert "".join(c.text for c in chunks) == "It left the Pune warehouse."
    assert {c.response_id for c in chunks} == {served.id}
    assert all(c.usage_metadata.prompt_token_count == served.input_tokens for c in chunks)
    assert [c.usage_metadata.candidates_token_count for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert [c.candidates[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    last = chunks[-1]
    assert last.candidates[0].finish_reason == "STOP" and served.finish_reasons == ("STOP",)
    assert last.usage_metadata.candidates_token_count == served.output_tokens
    assert last.usage_metadata.model_dump(exclude_none=True, by_alias=True, mode="json") == served.usage


@pytest.mark.parametrize(("status", "code_name"), [(400, "INVALID_ARGUMENT"), (429, "RESOURCE_EXHAUSTED"),
                                                   (500, "INTERNAL"), (503, "UNAVAILABLE")])
def test_gemini_error_bodies(llm: FakeLLM, status: int, code_name: str) -> None:
    gemini = gemini_client(llm)
    from google.genai import errors

    llm.script(Reply(status=status))
    with pytest.raises(errors.APIError) as info:
        gemini.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert isinstance(info.value, errors.ServerError if status >= 500 else errors.ClientError)
    assert (info.value.code, info.value.status) == (status, code_name) == (status, llm.responses[0].error_type)
    assert info.value.message


def test_gemini_stream_failure_raises_server_error(llm: FakeLLM) -> None:
    gemini = gemini_client(llm)
    from google.genai import errors

    llm.script(Reply(text="It left the warehouse", stream_failure="error"))
    seen = []
    with pytest.raises(errors.ServerError) as info:
        for chunk in gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="x"):
            seen.append(chunk.text)
    assert (info.value.code, info.value.status) == (503, "UNAVAILABLE")
    assert len(seen) == 1
