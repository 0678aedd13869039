"""DSPy as apps call it (``dspy.Predict``, sync and async), on both of its engines, held to the
matrix's checks. Its default engine, lm15 (vendored as ``dspy._vendor.lm15``), writes HTTP over
sockets itself: no SDK, no call site, so its requests are guarded from the wire
(``ctxguard.guarded_at="wire"``); ``engine="litellm"`` goes through LiteLLM's guarded call site."""

from __future__ import annotations

import asyncio
import os

import pytest

import ctxguard
from tests.frameworks.helpers import framework, play

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost map fetched at import
dspy = framework("dspy")

#: What the fake answers, in DSPy's chat adapter's format.
ANSWER = "[[ ## answer ## ]]\nYour parcel is on its way.\n\n[[ ## completed ## ]]"
QUESTIONS = ["Where is my parcel?", "When will it arrive?"]


def scenario(engine: str, asynchronous: bool):  # type: ignore[no-untyped-def]
    """Two questions in one conversation whose shipping city was recorded, and which DSPy's prompt
    never carries: the planted defect, ``fact_present`` fails on every request."""

    def run(llm):  # type: ignore[no-untyped-def]
        llm.script(*[ANSWER] * len(QUESTIONS))
        lm = dspy.LM("openai/gpt-4o", api_base=llm.base_url, api_key="t", cache=False, num_retries=0, engine=engine)
        predict = dspy.Predict("question -> answer")
        answers = []
        with dspy.context(lm=lm), ctxguard.conversation(f"dspy-{engine}"):
            ctxguard.record_fact("shipping_city", "Lyon, 69002")
            for question in QUESTIONS:
                if asynchronous:
                    answers.append(asyncio.run(predict.acall(question=question)).toDict())
                else:
                    answers.append(predict(question=question).toDict())
        return answers

    return run


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_default_engine_is_guarded_from_the_wire(harness, asynchronous):
    def flagged(played) -> None:  # type: ignore[no-untyped-def]
        assert [s.attributes.get("ctxguard.guarded_at") for s in played.spans] == ["wire"] * len(QUESTIONS)
        assert [list(s.attributes["ctxguard.violations"]) for s in played.spans] == [["fact_present"]] * 2
        assert all(s.attributes["gen_ai.conversation.id"] == "dspy-auto" for s in played.spans)

    play(harness, scenario("auto", asynchronous), then=flagged)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_litellm_engine_is_guarded_at_litellms_call_site(harness, asynchronous):
    def flagged(played) -> None:  # type: ignore[no-untyped-def]
        assert [s.attributes.get("ctxguard.guarded_at") for s in played.spans] == [None] * len(QUESTIONS)
        assert [list(s.attributes["ctxguard.violations"]) for s in played.spans] == [["fact_present"]] * 2

    play(harness, scenario("litellm", asynchronous), then=flagged)



@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_default_engine_sent_a_request_without_its_system_prompt_is_flagged(harness, asynchronous):
    """An app that hands DSPy's LM a request of its own (``dspy.lm15.Request``, DSPy 3.4's way to
    send messages) and left its system prompt out (the planted defect): guarded from the wire,
    ``system_at_head`` flagged."""
    lm15 = dspy.lm15
    request = lm15.Request(model="openai/gpt-4o", messages=(lm15.Message.user("Where is my parcel?"),))

    def run(llm):  # type: ignore[no-untyped-def]
        llm.script("It is on its way.")
        lm = dspy.LM("openai/gpt-4o", api_base=llm.base_url, api_key="t", cache=False, num_retries=0)
        response = asyncio.run(lm.acall(request)) if asynchronous else lm(request)
        return response.text

    def flagged(played) -> None:  # type: ignore[no-untyped-def]
        (span,) = played.spans
        assert span.attributes.get("ctxguard.guarded_at") == "wire"
        assert list(span.attributes["ctxguard.violations"]) == ["system_at_head"]

    play(harness, run, then=flagged)
