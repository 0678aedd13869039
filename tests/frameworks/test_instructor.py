"""instructor over the OpenAI SDK: a response model in tools mode and in JSON schema mode,
``create_partial`` (partial objects while the stream arrives), and a validation retry (the first
reply fails validation, instructor asks again with the error: two requests, two spans)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, field_validator

import ctxguard
from ctxguard.testing import FakeLLM, Reply
from tests.frameworks.helpers import Played, framework, matched_spans, play

instructor = framework("instructor")

import openai  # noqa: E402

SYSTEM = {"role": "system", "content": "You extract parcel details."}
ASK = [SYSTEM, {"role": "user", "content": "My parcel A-99172 is in Pune and comes in 2 days."}]
PARCEL = {"order": "A-99172", "city": "Pune", "days": 2}


class Parcel(BaseModel):
    order: str
    city: str
    days: int

    @field_validator("city")
    @classmethod
    def known_city(cls, city: str) -> str:
        if city not in ("Pune", "Lyon"):
            raise ValueError(f"we do not deliver to {city}")
        return city


def answer(mode, parcel: dict) -> Reply:
    if mode is instructor.Mode.TOOLS:
        return Reply(tool_calls=[{"function": {"name": "Parcel", "arguments": parcel}}], finish_reason="tool_calls")
    return Reply(text=json.dumps(parcel))


def client(llm, mode):
    return instructor.from_openai(openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0), mode=mode)


MODES = [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_response_model(harness, mode):
    def scenario(llm):
        llm.script(answer(mode, PARCEL))
        with ctxguard.conversation("extract"):
            return client(llm, mode).chat.completions.create(model="gpt-4o", messages=ASK, response_model=Parcel)

    played = play(harness, scenario)
    assert played.result == PARCEL
    body = played.bodies()[0]
    assert ("tools" in body) is (mode is instructor.Mode.TOOLS)
    assert ("response_format" in body) is (mode is instructor.Mode.JSON_SCHEMA)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_create_partial(harness, mode):
    def scenario(llm):
        llm.script(answer(mode, PARCEL))
        partials = client(llm, mode).chat.completions.create_partial(model="gpt-4o", messages=ASK,
                                                                     response_model=Parcel)
        return list(partials)

    played = play(harness, scenario)
    assert played.result[-1] == PARCEL and len(played.result) > 1
    assert played.bodies()[0]["stream"] is True


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_validation_retry(harness, mode):
    def scenario(llm):
        llm.script(answer(mode, {**PARCEL, "city": "Atlantis"}), answer(mode, PARCEL))
        with ctxguard.conversation("extract"):
            return client(llm, mode).chat.completions.create(model="gpt-4o", messages=ASK, response_model=Parcel,
                                                             max_retries=2)

    def reask(played):
        first, second = played.bodies()
        assert "Atlantis" in str(second["messages"][len(first["messages"]):])  # the error goes back
        assert [s.attributes["ctxguard.head.role"] for s in played.spans] == ["system", "system"]

    played = play(harness, scenario, then=reask)
    assert played.result == PARCEL


def test_a_client_patched_before_instrument_is_guarded(harness):
    """``client = instructor.from_openai(OpenAI())`` at import, ``ctxguard.instrument()`` at start-up:
    instructor keeps the bound ``create`` it patched, which bypasses the call site; its requests
    are guarded from the wire."""
    with FakeLLM() as llm:
        patched = client(llm, instructor.Mode.TOOLS)
        harness.start(mode="observe")
        llm.script(answer(instructor.Mode.TOOLS, PARCEL))
        patched.chat.completions.create(model="gpt-4o", messages=ASK, response_model=Parcel)
        matched_spans(harness, Played(None, list(llm.requests)))
