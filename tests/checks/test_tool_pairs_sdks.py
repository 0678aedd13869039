"""``tool_pairs_intact`` through the real SDKs over loopback HTTP: a history trimmed through a tool
exchange is on the span and counted (observe), or never sent (enforce); an intact one passes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest

import ctxguard
from tests.checks.test_tools import (
    ANSWER,
    CLAUDE_ANSWER,
    GEMINI_ANSWER,
    SAID,
    SYSTEM,
    USER,
    calls,
    fc,
    fco,
    model_calls,
    responses_of,
    result,
    tool_result,
    tool_use,
)
from tests.conftest import only_guard_span

genai = pytest.importorskip("google.genai", reason="google-genai is not installed (extra 'google')")

CHECK = "tool_pairs_intact"


@pytest.fixture
def claude(llm: Any) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


@pytest.fixture
def gemini(llm: Any) -> Any:
    return genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})


def chat_call(client: Any, claude: Any, gemini: Any, trimmed: bool) -> None:
    exchange = [calls("call_a", "call_b"), result("call_b"), *([] if trimmed else [result("call_a")]), ANSWER]
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, USER, *exchange, USER])


def responses_call(client: Any, claude: Any, gemini: Any, trimmed: bool) -> None:
    items = [fco("call_a")] if trimmed else [fc("call_a"), fco("call_a")]
    client.responses.create(model="gpt-4o", instructions="You are the order assistant.",
                            input=[{"role": "user", "content": "where is order A-1041?"}, *items, SAID])


def anthropic_call(client: Any, claude: Any, gemini: Any, trimmed: bool) -> None:
    messages = [{"role": "user", "content": "where is order A-1041?"}, tool_use("toolu_a"), tool_result("toolu_a"),
                CLAUDE_ANSWER, {"role": "user", "content": "and the other one?"}]
    claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=300, system="You are the order assistant.",
                           messages=messages[2:] if trimmed else messages)


def gemini_call(client: Any, claude: Any, gemini: Any, trimmed: bool) -> None:
    exchange = [model_calls(("lookup", None)), *([] if trimmed else [responses_of(("lookup", None))]), GEMINI_ANSWER]
    gemini.models.generate_content(model="gemini-2.5-flash", contents=["where is order A-1041?", *exchange, "thanks"],
                                   config={"system_instruction": "You are the order assistant."})


CALLS: dict[str, tuple[Callable[[Any, Any, Any, bool], None], str, str]] = {
    "chat": (chat_call, "openai", "tool call call_a (message 2) has no result right after it"),
    "responses": (responses_call, "openai", "tool result call_a (message 2) answers no call before it"),
    "anthropic": (anthropic_call, "anthropic", "tool result toolu_a (message 1) answers no call right before it"),
    "gemini": (gemini_call, "gcp.gemini", "tool call 'lookup' (message 2) has no result right after it"),
}


@pytest.mark.parametrize("api", CALLS)
def test_a_trimmed_exchange_is_on_the_span_and_counted(api: str, harness: Any, llm: Any, client: Any, claude: Any,
                                                       gemini: Any) -> None:
    send, provider, detail = CALLS[api]
    harness.start(mode="observe")
    send(client, claude, gemini, True)
    span = only_guard_span(harness)
    assert CHECK in list(span.attributes["ctxguard.violations"])
    assert [v.detail for v in harness.violations if v.check == CHECK] == [detail]
    assert harness.metric("ctxguard_violations_total", check=CHECK, provider=provider) == 1
    assert harness.metric("ctxguard_checks_total", check=CHECK, outcome="fail") == 1
    assert len(llm.requests) == 1  # observed, sent


@pytest.mark.parametrize("api", CALLS)
def test_an_intact_exchange_passes(api: str, harness: Any, llm: Any, client: Any, claude: Any, gemini: Any) -> None:
    send, provider, _ = CALLS[api]
    harness.start(mode="enforce")
    send(client, claude, gemini, False)
    assert CHECK not in list(only_guard_span(harness).attributes["ctxguard.violations"])
    assert harness.metric("ctxguard_checks_total", check=CHECK, outcome="pass") == 1
    assert harness.metric("ctxguard_violations_total", check=CHECK, provider=provider) == 0
    assert len(llm.requests) == 1


@pytest.mark.parametrize("api", CALLS)
def test_enforce_blocks_a_trimmed_exchange_before_sending(api: str, harness: Any, llm: Any, client: Any, claude: Any,
                                                          gemini: Any) -> None:
    send, _, detail = CALLS[api]
    harness.start(mode="enforce")
    with pytest.raises(ctxguard.ContextViolation) as raised:
        send(client, claude, gemini, True)
    assert [v.detail for v in raised.value.violations if v.check == CHECK] == [detail]
    assert llm.requests == []
    assert harness.metric("ctxguard_blocked_total", check=CHECK) == 1


def test_previous_response_id_skips_with_the_reason(harness: Any, llm: Any, client: Any) -> None:
    harness.start(mode="enforce")
    client.responses.create(model="gpt-4o", instructions="You are the order assistant.", input=[fco("call_a")],
                            previous_response_id="resp_1")
    skipped = list(only_guard_span(harness).attributes["ctxguard.checks.skipped"])
    assert f"{CHECK}: history is provider-managed (previous_response_id)" in skipped
    assert harness.metric("ctxguard_checks_total", check=CHECK, outcome="skip") == 1
    assert len(llm.requests) == 1
