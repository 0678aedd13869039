"""A retention suite for a chat app (``examples/shop_app.py``), with the ctxguard pytest plugin.

    pytest examples/test_retention_suite.py                  # passes
    SHOP_BUG=revert pytest examples/test_retention_suite.py  # the correction test fails

``ctxguard_guard`` instruments in enforce mode with the policy of the marker: a
call whose payload breaks a check raises ``ContextViolation`` instead of being
sent, so most tests need no assertion of their own beyond driving the app.
The last request each test sends is also asserted on directly, from the bytes the
fake model received.
"""

from __future__ import annotations

import openai
import pytest
from shop_app import PINNED, SYSTEM, ShopAssistant

import ctxguard
from ctxguard.testing import assert_fact_survives, payload_contains

POLICY = ctxguard.Policy(pinned=PINNED)
FILLER = ["what are your opening hours?", "do you ship on sundays?", "thanks", "ok, and returns?"]
PHONE = "+33 6 12 34 56 78"

pytestmark = pytest.mark.ctxguard(policy=POLICY)


@pytest.fixture(autouse=True)
def guard(ctxguard_guard):
    """Every test of this module runs instrumented (enforce mode unless its marker says otherwise)."""
    return ctxguard_guard


@pytest.fixture
def client(fake_llm):
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="test", max_retries=0) as c:
        yield c


def test_a_correction_wins(fake_llm, client):
    shop = ShopAssistant(client, "alice")
    shop.say("my delivery city is Pune")
    for text in FILLER:
        shop.say(text)
    shop.say("sorry, my delivery city is Lyon")
    for text in FILLER:
        shop.say(text)
    last = fake_llm.requests[-1]
    assert payload_contains(last, "Lyon") and not payload_contains(last, "Pune")


def test_a_deleted_phone_number_stays_deleted(fake_llm, client):
    shop = ShopAssistant(client, "bob")
    shop.say(f"my phone is {PHONE}")
    for text in FILLER:
        shop.say(text)
    shop.say("please forget my phone")
    shop.say("where is my parcel?")
    assert not payload_contains(fake_llm.requests[-1], PHONE)


def test_customers_never_see_each_others_facts(fake_llm, client):
    """Carol's phone in Dave's request is ``fact_scoped``: enforce mode blocks the request before it
    is sent (the assertion below checks the fake received nothing of it either)."""
    ShopAssistant(client, "carol").say(f"my phone is {PHONE}")
    ShopAssistant(client, "dave").say("hello, where is my parcel?")
    assert not payload_contains(fake_llm.requests[-1], PHONE)


@pytest.mark.ctxguard(mode="collect", policy=POLICY)  # let calls through: the sweep itself must catch it
def test_the_system_prompt_survives_4_8_16_32_turns(fake_llm, client):
    def run(turns: int) -> list:
        start = len(fake_llm.requests)
        shop = ShopAssistant(client, f"sweep-{turns}")
        for n in range(turns):
            shop.say(f"question {n} about my order")
        return fake_llm.requests[start:]

    assert_fact_survives(run, SYSTEM, turns=(4, 8, 16, 32), label="the system prompt")


def test_the_pinned_block_stays_under_its_cap(fake_llm, client, guard):
    shop = ShopAssistant(client, "erin")
    for n in range(30):
        shop.say(f"my preferred slot {n} is a weekday evening after 18:{n:02d}")
    assert guard.metric("ctxguard_checks_total", check="pinned_capped", outcome="pass") == 30
