"""Many facts, values shared by many conversations, many violations: the work and the output
of a call stay bounded (issue 21, points 4-6). Costs are counted, not timed: bench/hostile.py
has the times."""

from __future__ import annotations

import json
import logging

import openai
import openai._base_client as _openai_base

import ctxguard
import ctxguard.checks.wire as wire
from ctxguard.facts.index import MAX_OWNERS
from ctxguard.telemetry.log import BURST, MAX_IDS, WarningLimiter
from ctxguard.telemetry.spans import MAX_EVENTS_PER_CHECK
from tests.conftest import replace_body
from tests.events import violation_events

http = getattr(_openai_base, "httpx2", None) or _openai_base.httpx

SYSTEM = {"role": "system", "content": "You are terse."}


def parts_message(lines: list[str]) -> dict[str, object]:
    """A user message of two text parts: its text is on the wire in two pieces, never whole,
    so wire_intact looks for the lines carrying facts."""
    half = len(lines) // 2
    return {"role": "user", "content": [{"type": "text", "text": "\n".join(lines[:half])},
                                        {"type": "text", "text": "\n".join(lines[half:])}]}


def test_wire_intact_normalises_each_line_once_whatever_the_number_of_facts(harness, llm, client, monkeypatch):
    harness.start(mode="observe")
    values = [f"ACC-{k:04d}-row" for k in range(200)]
    lines = [f"row {n}: nothing to see here" for n in range(400)]
    for k, value in enumerate(values):
        lines[2 * k] += f" {value}"
    calls = []

    def counting(text: str) -> str:
        calls.append(text)
        return normalise(text)

    normalise = wire.normalise
    monkeypatch.setattr(wire, "normalise", counting)
    with ctxguard.conversation("scale-wire"):
        for k, value in enumerate(values):
            ctxguard.record_fact(f"account_{k}", value)
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, parts_message(lines)])
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1
    assert 0 < len(calls) <= len(lines)  # once per line: 80,000 when it was once per line per fact


def redact(value: str):  # type: ignore[no-untyped-def]
    def hook(request) -> None:  # type: ignore[no-untyped-def]
        body = json.loads(request.content)
        for m in body["messages"]:
            if isinstance(m["content"], list):
                for part in m["content"]:
                    part["text"] = part["text"].replace(value, "[redacted]")
        replace_body(request, body)
    return hook


def test_the_one_fact_of_many_rewritten_below_the_sdk_is_the_one_named(harness, llm):
    harness.start(mode="observe")
    values = [f"ACC-{k:04d}-row" for k in range(50)]
    lines = [f"row {n}: {values[n]}" for n in range(50)]
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks={"request": [redact("ACC-0031-row")]})) as client, \
            ctxguard.conversation("scale-wire-1"):
        for k, value in enumerate(values):
            ctxguard.record_fact(f"account_{k}", value)
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, parts_message(lines)])
    events = [(e.attributes["detail"], e.attributes.get("fact_id")) for e in violation_events(harness.spans()[-1])]
    assert events == [("account_31@1 passed is not in the body sent", "account_31")]


def test_a_value_shared_by_many_conversations_is_one_index_entry_and_one_violation(harness, client):
    guard = harness.start(mode="observe")
    shared = "ACC-77310-shared"
    for n in range(2_000):
        ctxguard.record_fact("account", shared, conversation=f"other-{n}")
    assert len(guard._inspector.facts.index) == 1
    entry = guard._inspector.facts.index._values[shared.casefold()]
    assert len(entry.owners) == MAX_OWNERS  # the last few, to name one; not 2,000
    with ctxguard.conversation("me"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": shared}])
    assert harness.metric("ctxguard_violations_total", check="fact_scoped", provider="openai") == 1
    assert [e.attributes["check"] for e in violation_events(harness.spans()[-1])] == ["fact_scoped"]  # one, not 2,000
    assert list(harness.spans()[-1].attributes["ctxguard.facts.leaked"]) == ["account@foreign"]


def test_a_value_one_conversation_recorded_is_not_foreign_to_it_however_many_others_did(harness, client):
    harness.start(mode="observe")
    shared = "ACC-77310-shared"
    for n in range(20):
        ctxguard.record_fact("account", shared, conversation=f"other-{n}")
    ctxguard.record_fact("account", shared, conversation="me")  # the most recent owner is the caller itself
    with ctxguard.conversation("me"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": shared}])
    assert harness.metric("ctxguard_violations_total", check="fact_scoped", provider="openai") == 0


def test_a_check_failing_for_many_facts_is_one_warning_and_a_bounded_list_of_events(harness, client, caplog):
    harness.start(mode="observe")
    with ctxguard.conversation("scale-log"):
        for k in range(300):
            ctxguard.record_fact(f"account_{k}", f"ACC-{k:04d}-gone")
        with caplog.at_level(logging.WARNING, logger="ctxguard"):
            client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "hi"}])
    records = [r for r in caplog.records if r.getMessage().startswith("ctxguard violation fact_present")]
    assert len(records) == 1
    info = records[0].ctxguard  # type: ignore[attr-defined]
    assert info["count"] == 300 and len(info["fact_ids"]) == MAX_IDS and info["fact_id"] == "account_0"
    assert "(and 299 more)" in records[0].getMessage()
    events = [e for e in violation_events(harness.spans()[-1]) if e.attributes["check"] == "fact_present"]
    assert len(events) == MAX_EVENTS_PER_CHECK + 1
    assert events[-1].attributes["omitted"] == 300 - MAX_EVENTS_PER_CHECK
    assert harness.metric("ctxguard_violations_total", check="fact_present", provider="openai") == 1


def test_warnings_are_rate_limited_per_conversation(harness, client, caplog):
    guard = harness.start(mode="observe")
    now = [1_000.0]
    guard._recorder.warnings = WarningLimiter(clock=lambda: now[0])
    ctxguard.record_fact("order", "A-1041-x", conversation="noisy")
    ctxguard.record_fact("order", "B-2041-y", conversation="quiet")

    def call(conversation_id: str) -> None:
        with ctxguard.conversation(conversation_id):
            client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "hi"}])

    def lines(conversation_id: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.ctxguard["conversation_id"] == conversation_id]  # type: ignore[attr-defined]

    with caplog.at_level(logging.WARNING, logger="ctxguard"):
        for _ in range(BURST + 5):
            call("noisy")
        assert len(lines("noisy")) == BURST
        call("quiet")
        assert len(lines("quiet")) == 1  # another conversation has a budget of its own
        now[0] += 60.0
        call("noisy")
    last = lines("noisy")[-1]
    assert last.ctxguard["held_back"] == 5  # type: ignore[attr-defined]
    assert "5 earlier warnings of this conversation held back" in last.getMessage()
    assert harness.metric("ctxguard_violations_total", check="fact_present", provider="openai") == BURST + 7
