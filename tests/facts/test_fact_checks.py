"""Facts through the real openai SDK over loopback HTTP, each scenario with a negative control."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone

import openai
import pytest

import ctxguard
import ctxguard.facts as facts_mod

SYSTEM = {"role": "system", "content": "You are the order assistant."}


def ask(client, *texts: str, role: str = "user"):
    messages = [SYSTEM, *({"role": role, "content": t} for t in texts)]
    return client.chat.completions.create(model="gpt-4o", messages=messages)


def last(harness):
    return harness.spans()[-1].attributes


def failed(harness) -> list[str]:
    return list(last(harness)["ctxguard.violations"])


def moved_to_pune() -> None:
    """The customer corrected the delivery city: Mumbai (v1) is stale, Pune (v2) active."""
    ctxguard.record_fact("shipping_city", "Mumbai")
    ctxguard.record_fact("shipping_city", "Pune")


# -- correction lost by a selector -------------------------------------------------

def select_buggy(history: list[str]) -> list[str]:
    """Keeps the first mention of each topic: the correction loses."""
    return history[:1]


def select_fixed(history: list[str]) -> list[str]:
    return history[-1:]


@pytest.mark.parametrize("corrected", ["Pune", "Nagpur"])
@pytest.mark.parametrize("selector", [select_buggy, select_fixed])
def test_correction_lost_by_the_selector(harness, llm, client, corrected, selector):
    harness.start(mode="observe")
    history = ["Please deliver to Mumbai.", f"Sorry, deliver to {corrected} instead."]
    with ctxguard.conversation("order-41"):
        ctxguard.record_fact("shipping_city", "Mumbai")
        ctxguard.record_fact("shipping_city", corrected)
        ctxguard.checkpoint("load", history)
        selected = selector(history)
        ctxguard.checkpoint("selection", selected)
        ask(client, *selected)
    a = last(harness)
    if selector is select_buggy:
        assert failed(harness) == ["fact_present", "fact_current"]
        assert a["ctxguard.divergence.stage"] == "selection"
        assert a["ctxguard.divergence.fact"] == "shipping_city"
        assert list(a["ctxguard.facts.stale"]) == ["shipping_city@1"]
        assert list(a["ctxguard.facts.missing"]) == ["shipping_city@2"]
    else:
        assert failed(harness) == []
        assert list(a["ctxguard.facts.present"]) == ["shipping_city@2"]


def test_enforce_message_names_fact_stage_and_values(harness, llm, client):
    harness.start(mode="enforce")
    with ctxguard.conversation("order-41"), pytest.raises(ctxguard.ContextViolation) as info:
        moved_to_pune()
        ctxguard.checkpoint("selection", ["deliver to Mumbai"])
        ask(client, "deliver to Mumbai")
    assert "shipping_city diverged at selection: expected 'Pune' (v2), selected 'Mumbai' (v1)" in str(info.value)
    assert llm.requests == []
    assert {v.stage for v in info.value.violations} == {"selection"}


def test_enforce_messages_name_the_value_sent_when_no_stage_was_recorded(harness, llm, client):
    """Without checkpoints the divergence is seen at the payload: the message names what was sent."""
    harness.start(mode="enforce")
    with ctxguard.conversation("order-43"), pytest.raises(ctxguard.ContextViolation) as info:
        moved_to_pune()
        ctxguard.record_fact("phone", "+91 98200 12345")
        ctxguard.forget_fact("phone")
        ask(client, "deliver to Mumbai, call +91 98200 12345")
    text = str(info.value)
    assert "shipping_city diverged at payload: expected 'Pune' (v2), sent 'Mumbai' (v1)" in text
    assert "phone diverged at payload: expected no value, sent '+91 98200 12345' (v1)" in text
    with ctxguard.conversation("order-44"):
        ctxguard.record_fact("account", "4417-2231-9902")
    with ctxguard.conversation("order-45"), pytest.raises(ctxguard.ContextViolation) as info:
        ask(client, "my account is 4417-2231-9902")
    assert "account of conversation 'order-44' sent here: '4417-2231-9902'" in str(info.value)
    assert llm.requests == []


def test_a_correction_sent_next_to_the_old_value_is_current(harness, llm, client):
    """The active value is in the payload: the stale one beside it ("from Mumbai to Pune") is history."""
    harness.start(mode="observe")
    llm.script("Changed: it now ships to Pune, not Mumbai.")
    with ctxguard.conversation("order-46"):
        moved_to_pune()
        ask(client, "Please change the delivery from Mumbai to Pune.")
    assert failed(harness) == []
    assert harness.metric("ctxguard_checks_total", check="fact_current", outcome="pass") == 1
    assert harness.metric("ctxguard_checks_total", check="answer_consistent", outcome="pass") == 1


def test_a_stale_value_of_the_shortest_matchable_length_in_the_answer_is_caught(harness, llm, client):
    harness.start(mode="observe")
    llm.script("It ships to Goa.")
    with ctxguard.conversation("order-47"):
        ctxguard.record_fact("shipping_city", "Goa")  # three characters: the shortest matched
        ctxguard.record_fact("shipping_city", "Pune")
        ask(client, "deliver to Pune please")
    assert failed(harness) == ["answer_consistent"]


def test_a_blocked_request_is_counted_once_per_check_however_many_violations(harness, llm, client):
    harness.start(mode="enforce")
    with ctxguard.conversation("order-42"), pytest.raises(ctxguard.ContextViolation) as info:
        ctxguard.record_fact("shipping_city", "Pune")
        ctxguard.record_fact("order_id", "A-1041")
        ask(client, "where is my parcel?")
    assert [v.check for v in info.value.violations] == ["fact_present", "fact_present"]
    assert llm.requests == []
    assert harness.metric("ctxguard_blocked_total", check="fact_present") == 1


@pytest.mark.parametrize("answer", ["It ships to Mumbai.", "It ships to Pune."])
def test_stale_value_only_in_the_answer(harness, llm, client, answer):
    harness.start(mode="observe")
    llm.script(answer)
    with ctxguard.conversation("order-41"):
        moved_to_pune()
        ask(client, "deliver to Pune please")
    a = last(harness)
    if "Mumbai" in answer:
        assert failed(harness) == ["answer_consistent"]
        assert (a["ctxguard.divergence.stage"], a["ctxguard.divergence.fact"]) == ("answer", "shipping_city")
        assert harness.metric("ctxguard_violations_total", check="answer_consistent", provider="openai") == 1
    else:
        assert failed(harness) == []
        assert harness.metric("ctxguard_checks_total", check="answer_consistent", outcome="pass") == 1


def test_an_answer_judged_late_is_logged_and_keeps_the_first_divergence(harness, llm, client, caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="ctxguard")
    harness.start(mode="observe")
    llm.script("It ships to Mumbai.")
    with ctxguard.conversation("order-48"):
        moved_to_pune()
        ctxguard.record_fact("phone", "+91 98200 12345")
        ctxguard.forget_fact("phone")
        ask(client, "deliver to Pune, call +91 98200 12345")
    assert failed(harness) == ["fact_forgotten", "answer_consistent"]
    a = last(harness)
    assert (a["ctxguard.divergence.stage"], a["ctxguard.divergence.fact"]) == ("payload", "phone")
    logged = [r.ctxguard for r in caplog.records if r.name == "ctxguard" and r.levelno == logging.WARNING]
    assert [(r["check"], r["conversation_id"], r["stage"]) for r in logged] == [
        ("fact_forgotten", "order-48", "payload"), ("answer_consistent", "order-48", "answer")]


def test_stale_value_in_a_responses_api_answer(harness, llm, client):
    harness.start(mode="observe")
    llm.script("It ships to Mumbai.", "It ships to Pune.")
    with ctxguard.conversation("order-49"):
        moved_to_pune()
        for _ in range(2):
            client.responses.create(model="gpt-4o", instructions="You are the order assistant.", input="to Pune")
    assert [list(s.attributes["ctxguard.violations"]) for s in harness.spans()] == [["answer_consistent"], []]


def test_stale_value_in_a_streamed_answer(harness, llm, client):
    harness.start(mode="observe")
    llm.script("It ships to Mumbai.")
    with ctxguard.conversation("order-41"):
        moved_to_pune()
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "to Pune"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "It ships to Mumbai."
    assert failed(harness) == ["answer_consistent"]


# -- deletion and expiry -----------------------------------------------------------

@pytest.mark.parametrize("forgotten", [True, False])
def test_forgotten_phone_number_still_sent(harness, llm, client, forgotten):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("phone", "+91 98200 12345")
        if forgotten:
            ctxguard.forget_fact("phone")
        ask(client, "call me on +91 98200 12345")
    if forgotten:
        assert failed(harness) == ["fact_forgotten"]
        assert list(last(harness)["ctxguard.facts.leaked"]) == ["phone@1"]
    else:
        assert failed(harness) == []


@pytest.mark.parametrize(("offset", "expired"), [(-1, False), (0, True), (1, True)])
def test_expiry_boundary_with_a_frozen_clock(harness, llm, client, offset, expired):
    boundary = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    now = boundary + timedelta(microseconds=offset)
    harness.start(mode="observe", clock=lambda: now)
    with ctxguard.conversation("c"):
        ctxguard.record_fact("otp", "482913", expires_at=boundary)
        ask(client, "my code is 482913")
    assert failed(harness) == (["fact_forgotten"] if expired else [])


# -- cross-conversation leaks ------------------------------------------------------

class OperatorCache:
    """The bug: history cached per operator, not per conversation."""

    def __init__(self, keyed_by_operator: bool) -> None:
        self.keyed_by_operator = keyed_by_operator
        self.store: dict[str, list[str]] = {}
        self.lock = threading.Lock()

    def add(self, operator: str, conversation: str, text: str) -> list[str]:
        key = operator if self.keyed_by_operator else conversation
        with self.lock:
            self.store.setdefault(key, []).append(text)
            return list(self.store[key])


ACCOUNTS = {"alice": "ACC-7731-0042", "bob": "ACC-5519-0777"}


def converse(client, cache: OperatorCache, customer: str, turns: int = 3) -> None:
    with ctxguard.conversation(f"conv-{customer}"):
        ctxguard.record_fact("account", ACCOUNTS[customer])
        for turn in range(turns):
            text = f"turn {turn}: my account is {ACCOUNTS[customer]}" if turn == 0 else f"turn {turn}"
            ask(client, *cache.add("operator-1", f"conv-{customer}", text))


def leaks_by_conversation(harness) -> dict[str, int]:
    out: dict[str, int] = {}
    for span in harness.spans():
        conv = span.attributes["gen_ai.conversation.id"]
        out[conv] = out.get(conv, 0) + ("fact_scoped" in span.attributes["ctxguard.violations"])
    return out


@pytest.mark.parametrize("keyed_by_operator", [True, False])
def test_threads_sharing_an_operator_cache(harness, llm, client, keyed_by_operator):
    harness.start(mode="observe")
    cache = OperatorCache(keyed_by_operator)
    alice_done = threading.Event()

    def alice() -> None:
        converse(client, cache, "alice")
        alice_done.set()

    def bob() -> None:
        alice_done.wait(10)
        converse(client, cache, "bob")

    threads = [threading.Thread(target=alice), threading.Thread(target=bob)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    leaks = leaks_by_conversation(harness)
    if keyed_by_operator:
        assert leaks["conv-bob"] >= 1, leaks  # the victim
        assert leaks["conv-alice"] == 0, leaks
    else:
        assert leaks == {"conv-alice": 0, "conv-bob": 0}


@pytest.mark.asyncio
@pytest.mark.parametrize("keyed_by_operator", [True, False])
async def test_asyncio_tasks_sharing_an_operator_cache(harness, llm, keyed_by_operator):
    harness.start(mode="observe")
    cache = OperatorCache(keyed_by_operator)
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:

        async def customer(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            async with ctxguard.conversation(f"conv-{name}"):
                ctxguard.record_fact("account", ACCOUNTS[name])
                for turn in range(3):
                    text = f"turn {turn}: my account is {ACCOUNTS[name]}" if turn == 0 else f"turn {turn}"
                    messages = [SYSTEM, *({"role": "user", "content": t} for t in cache.add("op", name, text))]
                    await client.chat.completions.create(model="gpt-4o", messages=messages, user=f"conv-{name}")
                    await asyncio.sleep(0.01)

        await asyncio.gather(customer("alice", 0), customer("bob", 0.005))
    # The oracle, from the bodies that actually arrived: a conversation's request that
    # carries the other customer's account number is a leak, and only those are.
    expected: dict[str, int] = {"conv-alice": 0, "conv-bob": 0}
    for body in llm.bodies():
        me = body["user"]
        text = " ".join(m["content"] for m in body["messages"])
        expected[me] += any(acc in text for who, acc in ACCOUNTS.items() if f"conv-{who}" != me)
    assert leaks_by_conversation(harness) == expected
    assert (sum(expected.values()) > 0) == keyed_by_operator


@pytest.mark.parametrize(("fact", "value", "text", "leaked"), [
    ("account", "4417-2231-9902", "my account is 4417-2231-9902", ["account@foreign"]),
    ("shipping_city", "Pune", "I also live in Pune", []),  # a common value two customers share: no leak
])
def test_another_conversations_fact_in_this_payload(harness, llm, client, fact, value, text, leaked):
    harness.start(mode="observe")
    with ctxguard.conversation("a"):
        ctxguard.record_fact(fact, value)
    with ctxguard.conversation("b"):
        ask(client, text)
    assert failed(harness) == (["fact_scoped"] if leaked else [])
    assert list(last(harness).get("ctxguard.facts.leaked", ())) == leaked


# -- grouped numbers: one number however it is written -----------------------------------

GROUPED = {  # each family: the same number, written as people and payloads write it
    "phone": ["+33612345678", "+33 6 12 34 56 78", "+33.6.12.34.56.78", "+33-6-12-34-56-78"],
    "national": ["0612345678", "06 12 34 56 78", "06.12.34.56.78", "06-12-34-56-78"],
    "us": ["(415) 555-0132", "415-555-0132", "415.555.0132", "4155550132"],
    "iban": ["FR76 3000 6000 0112 3456 7890 189", "FR7630006000011234567890189"],
    "iban_letters": ["GB29 NWBK 6016 1331 9268 19", "GB29NWBK60161331926819"],
    "card": ["4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111"],
}
# Recorded in one form, sent in another: the first form against each other one, both directions.
PAIRS = [(forms[0], other) for forms in GROUPED.values() for other in forms[1:]]
PAIRS += [(sent, recorded) for recorded, sent in PAIRS]


@pytest.mark.parametrize(("recorded", "sent"), PAIRS)
def test_a_grouped_number_of_another_conversation_is_found_in_any_grouping(harness, llm, client, recorded, sent):
    """docs/facts.md, "Matching": "+33612345678" recorded and "+33 6 12 34 56 78" sent (or the reverse)
    is one number; before, a value with no word of three characters was not indexed at all."""
    harness.start(mode="observe")
    with ctxguard.conversation("carol"):
        ctxguard.record_fact("phone", recorded)
    with ctxguard.conversation("dave"):
        ask(client, f"my number: {sent}, thanks")
    assert failed(harness) == ["fact_scoped"]
    assert list(last(harness)["ctxguard.facts.leaked"]) == ["phone@foreign"]


@pytest.mark.parametrize(("recorded", "text"), [
    ("06 12 34 56 78", "ref 106 12 34 56 78"),  # a longer number that holds its digits
    ("06 12 34 56 78", "ref 06 12 34 56 789"),
    ("0612345678", "ref 0612345678901"),
    ("06 12 34 56 78", "order x0612345678"),  # inside a word
    ("20261203", "delivery on 2026-12-03"),  # a date is never a number
    ("20261203", "delivery on 03.12.2026 at 14:00"),
    ("1234567", "total 1.234.567,89 EUR"),  # a price with decimals
    ("12 34 56", "code 12 34 56"),  # six digits: too short to be one number; no word of 3 either
    ("ACC-7731-0042", "account 7731 0042"),  # an identifier is matched as written, not as a number
])
def test_numbers_that_only_share_digits_are_no_leak(harness, llm, client, recorded, text):
    harness.start(mode="observe")
    with ctxguard.conversation("carol"):
        ctxguard.record_fact("ref", recorded)
    with ctxguard.conversation("dave"):
        ask(client, text)
    assert failed(harness) == []


@pytest.mark.parametrize(("recorded", "sent"), [
    ("06 12 34 56 78", "call me on 0612345678"), ("0612345678", "call me on 06.12.34.56.78"),
    ("FR76 3000 6000 0112 3456 7890 189", "IBAN FR7630006000011234567890189"),
])
def test_a_grouped_number_sent_in_another_grouping_is_present(harness, llm, client, recorded, sent):
    harness.start(mode="enforce")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("phone", recorded)
        ask(client, sent)
    assert list(last(harness)["ctxguard.facts.present"]) == ["phone@1"]


def test_a_stale_grouped_number_in_another_grouping_is_not_current(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("phone", "06 12 34 56 78")
        ctxguard.record_fact("phone", "07 98 76 54 32")
        ctxguard.checkpoint("selection", ["call 06.12.34.56.78"])
        ask(client, "call 0612345678")
    a = last(harness)
    assert failed(harness) == ["fact_present", "fact_current"]
    assert list(a["ctxguard.facts.stale"]) == ["phone@1"] and a["ctxguard.divergence.stage"] == "selection"


def test_a_forgotten_grouped_number_in_another_grouping_is_still_sent(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("phone", "+33 6 12 34 56 78")
        ctxguard.forget_fact("phone")
        ask(client, "call +33612345678")
    assert failed(harness) == ["fact_forgotten"]


def test_a_stale_grouped_number_in_the_answer_is_inconsistent(harness, llm, client):
    harness.start(mode="observe")
    llm.script("I will call 06.12.34.56.78")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("phone", "06 12 34 56 78")
        ctxguard.record_fact("phone", "07 98 76 54 32")
        ask(client, "my new number is 0798765432")
    assert failed(harness) == ["answer_consistent"]


def test_a_value_no_check_can_find_is_warned_of_once(harness, llm, client, caplog, monkeypatch):
    """docs/facts.md, "Matching": such a value is kept and judged where it can be, never dropped silently."""
    monkeypatch.setattr(facts_mod, "_WARNED", set())
    harness.start(mode="observe")
    with ctxguard.conversation("c"), caplog.at_level("WARNING", logger="ctxguard"):
        ctxguard.record_fact("code", "98 76 54")
        ctxguard.record_fact("locker", "B-7 C-9")
        ctxguard.record_fact("size", "M")
        ctxguard.record_fact("phone", "06 12 34 56 78")  # a grouped number: found, no warning
        ctxguard.record_fact("city", "Pune")  # not distinctive: no leak by design, no warning
    warned = [r.getMessage() for r in caplog.records if r.name == "ctxguard"]
    assert len(warned) == 2, warned
    assert "fact_scoped never finds it in another conversation's payload" in warned[0]
    assert "shorter than 3 characters" in warned[1]
    assert not any(v in m for m in warned for v in ("98 76 54", "B-7", "code", "locker"))  # neither value nor id
    with ctxguard.conversation("c"):
        ask(client, "code 98 76 54, locker B-7 C-9, phone 0612345678, Pune")
    assert failed(harness) == []  # its own conversation's checks judge it as usual
    assert sorted(last(harness)["ctxguard.facts.present"]) == ["city@1", "code@1", "locker@1", "phone@1"]


# -- the three trimming bugs ----------------------------------------------------------

ACCOUNT = "4417-2231-9902"


def fixed_window(history: list[str], n: int = 4) -> list[str]:
    return history[-n:]


def test_fixed_window_drops_the_account_at_exactly_the_first_call_past_it(harness, llm, client):
    harness.start(mode="observe")
    history: list[str] = []
    first_missing = flagged = None
    with ctxguard.conversation("window"):
        ctxguard.record_fact("account_number", ACCOUNT)
        for call in range(1, 9):
            history.append(f"my account is {ACCOUNT}" if call == 1 else f"question {call}")
            sent = fixed_window(history)
            ask(client, *sent)
            if first_missing is None and not any(ACCOUNT in t for t in sent):
                first_missing = call
            if flagged is None and "fact_present" in failed(harness):
                flagged = call
            # The eviction is named on the span of exactly the first call that lacks the fact.
            assert ("fact" in last(harness)["ctxguard.evicted"]) == (call == first_missing), call
    assert first_missing == 5
    assert flagged == first_missing
    assert harness.metric("ctxguard_evictions_total", kind="fact") == 1
    assert list(last(harness)["ctxguard.facts.missing"]) == ["account_number@1"]


def token_trimmer(history: list[str], budget_chars: int) -> list[str]:
    kept: list[str] = []
    for text in reversed(history):
        if sum(map(len, kept)) + len(text) > budget_chars:
            break
        kept.insert(0, text)
    return kept


@pytest.mark.parametrize("verbosity", [1, 3])
def test_token_budget_trimmer_drops_it_at_a_length_that_depends_on_verbosity(harness, llm, client, verbosity):
    harness.start(mode="observe")
    history: list[str] = []
    flagged = None
    with ctxguard.conversation(f"budget-{verbosity}"):
        ctxguard.record_fact("account_number", ACCOUNT)
        for call in range(1, 15):
            history.append(f"my account is {ACCOUNT}" if call == 1 else "tell me more " * (5 * verbosity))
            ask(client, *token_trimmer(history, 400))
            if "fact_present" in failed(harness):
                flagged = call
                break
    assert flagged == {1: 7, 3: 3}[verbosity]


def summarise(history: list[str], keep_digits: bool) -> str:
    text = " ".join(history)
    return text if keep_digits else "".join(ch for ch in text if not ch.isdigit())


@pytest.mark.parametrize("keep_digits", [True, False])
def test_summariser_that_drops_digits_loses_the_account(harness, llm, client, keep_digits):
    harness.start(mode="observe")
    with ctxguard.conversation("summary"):
        ctxguard.record_fact("account_number", ACCOUNT)
        summary = summarise([f"my account is {ACCOUNT}", "and I want a refund"], keep_digits)
        ctxguard.checkpoint("selection", summary)
        ask(client, f"Summary so far: {summary}", "what now?")
    if keep_digits:
        assert failed(harness) == []
    else:
        assert failed(harness) == ["fact_present"]
        assert last(harness)["ctxguard.divergence.stage"] == "selection"


# -- bad input ------------------------------------------------------------------------

def test_record_fact_rejects_bad_input_clearly():
    with pytest.raises(ValueError, match="needs a conversation"):
        ctxguard.record_fact("city", "Pune")
    with ctxguard.conversation("c"):
        with pytest.raises(ValueError, match="empty values"):
            ctxguard.record_fact("city", "  ")
        with pytest.raises(ValueError, match="fact_id"):
            ctxguard.record_fact("", "Pune")
        with pytest.raises(ValueError, match="timezone-aware"):
            ctxguard.record_fact("city", "Pune", expires_at=datetime(2030, 1, 1))
        with pytest.raises(TypeError):
            ctxguard.record_fact("city", object())


def test_non_string_values_are_normalised_deterministically(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("order_total", 1249)
        ctxguard.record_fact("delivery_date", datetime(2026, 12, 3).date())
        ask(client, "total 1249 due 2026-12-03")
    assert sorted(last(harness)["ctxguard.facts.present"]) == ["delivery_date@1", "order_total@1"]


def test_values_too_short_are_skipped_never_flagged(harness, llm, client):
    harness.start(mode="enforce")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("size", "M")
        ask(client, "hello")
    skipped = list(last(harness)["ctxguard.checks.skipped"])
    assert "fact_present: values too short to match reliably: size" in skipped
    assert list(last(harness)["ctxguard.facts.missing"]) == []  # not judged, so not missing
    with ctxguard.conversation("c"):
        ctxguard.record_fact("fit", "XL")
        ctxguard.forget_fact("fit")
        ask(client, "an XL in M, please")  # "xl" and "m" occur everywhere: never a deletion alarm
    assert failed(harness) == []
    assert list(last(harness)["ctxguard.facts.too_short"]) == ["size@1", "fit@1"]


def test_a_value_too_short_is_named_when_the_other_facts_are_judged(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("size", "M")
        ctxguard.record_fact("city", "Pune")
        ask(client, "ship to Pune")
    a = last(harness)
    assert not any(s.startswith("fact_present") for s in a.get("ctxguard.checks.skipped", ()))  # judged: city
    assert list(a["ctxguard.facts.present"]) == ["city@1"] and list(a["ctxguard.facts.missing"]) == []
    assert list(a["ctxguard.facts.too_short"]) == ["size@1"]  # not judged, and said so
    with ctxguard.conversation("c"):
        ctxguard.record_fact("size", "XXL")
        ask(client, "ship to Pune, size XXL")
    a = last(harness)
    assert sorted(a["ctxguard.facts.present"]) == ["city@1", "size@2"]
    assert list(a["ctxguard.facts.too_short"]) == ["size@1"]  # whether the superseded "m" is sent: not judged


class DownLedger:
    def __init__(self) -> None:
        self.calls = 0

    def append(self, event):
        self.calls += 1
        raise ConnectionError("ledger down")

    def state(self, scope, now):
        self.calls += 1
        raise ConnectionError("ledger down")


def test_a_ledger_that_is_down_never_fails_nor_slows_the_call(harness, llm, client, internal_errors):
    ledger = DownLedger()
    harness.start(mode="enforce", ledger=ledger)
    with ctxguard.conversation("reader"):
        reply = ask(client, "hello")  # the ledger fails: the call goes through, the circuit opens
    assert reply.choices[0].message.content == "ok 1"
    assert "fact_present: fact ledger unavailable" in last(harness)["ctxguard.checks.skipped"]
    with ctxguard.conversation("reader"):
        ask(client, "hello again")  # circuit open: the ledger is not even asked
    assert "fact_present: fact ledger unavailable (circuit open)" in last(harness)["ctxguard.checks.skipped"]
    assert ledger.calls == 1
    with ctxguard.conversation("writer"):
        ctxguard.record_fact("city", "Pune")  # dropped while the circuit is open, counted
        ask(client, "deliver to Mumbai")  # would be a false alarm if judged without the lost write
    assert ledger.calls == 1
    assert "fact_present: fact writes of this conversation were lost while the ledger was unavailable" in (
        last(harness)["ctxguard.checks.skipped"]
    )
    assert harness.metric("ctxguard_guard_errors_total", where="ledger") == 2
    assert {w for w, _ in internal_errors} == {"ledger"}
    internal_errors.clear()


def test_the_ledger_is_retried_after_the_circuit_closes(harness, llm, client, internal_errors, monkeypatch):
    from ctxguard import facts

    ledger = DownLedger()
    harness.start(mode="observe", ledger=ledger)
    with ctxguard.conversation("c"):
        ask(client, "one")
        monkeypatch.setattr(facts.SINKS, "down_until", 0.0)
        ask(client, "two")
    assert ledger.calls == 2
    internal_errors.clear()


def test_checkpoints_are_consumed_by_the_next_call(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("city", "Pune")
        ctxguard.checkpoint("selection", "nothing useful")
        ask(client, "nothing")
        assert last(harness)["ctxguard.divergence.stage"] == "selection"
        ask(client, "nothing")
        assert last(harness)["ctxguard.divergence.stage"] == "payload"


def test_a_checkpoint_made_before_any_fact_is_consumed_by_the_next_call(harness, llm, client):
    """With nothing recorded, fact checks skip without asking the ledger, but a pending
    checkpoint still belongs to the next call: it must not linger into a later one."""
    harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.checkpoint("selection", "nothing useful")
        ask(client, "nothing")
        assert "fact_present: no facts recorded for this conversation" in last(harness)["ctxguard.checks.skipped"]
        ctxguard.record_fact("city", "Pune")
        ask(client, "nothing")
        assert last(harness)["ctxguard.divergence.stage"] == "payload"


@pytest.mark.asyncio
async def test_stage_decorator_records_return_values(harness, llm):
    harness.start(mode="observe")

    @ctxguard.stage("load")
    async def load() -> list[dict[str, str]]:
        return [{"role": "user", "content": "deliver to Mumbai"}]

    @ctxguard.stage("selection")
    def select(history):
        return history

    async with (
        openai.AsyncOpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client,
        ctxguard.conversation("c"),
    ):
        ctxguard.record_fact("city", "Mumbai")
        ctxguard.record_fact("city", "Pune")
        await client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, *select(await load())])
    assert last(harness)["ctxguard.divergence.stage"] == "load"
