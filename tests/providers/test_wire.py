"""wire_intact: the body the HTTP client actually sent, compared with what the app passed."""

from __future__ import annotations

import json

import anthropic
import openai
import openai._base_client as _openai_base

import ctxguard
from ctxguard.digest import Digester
from ctxguard.testing import Reply
from tests.conftest import KEY, replace_body
from tests.events import violation_events

# The HTTP library this openai release is built on (httpx2 for 3.x, httpx for 1.x).
http = getattr(_openai_base, "httpx2", None) or _openai_base.httpx

SYSTEM = {"role": "system", "content": "You are terse.\nAnswer in English."}
USER = {"role": "user", "content": "hi"}


def test_wire_hash_is_the_digest_of_the_body_that_arrived(harness, llm, client):
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
    block = ctxguard.render_pinned({"city": "Pune"}, max_tokens=100)
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "system", "content": block}, USER])
    a = harness.spans()[-1].attributes
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[0].body)
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


def test_anthropic_system_blocks_are_intact_on_the_wire(harness, llm):
    harness.start(mode="observe")
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as claude:
        claude.messages.create(model="claude-sonnet-4-20250514", max_tokens=10, messages=[USER], system=[
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Answer in English."}])
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1
    assert "wire_intact" not in harness.spans()[-1].attributes["ctxguard.violations"]


def drop_system(request) -> None:
    """A call path that loses the system prompt after the app handed it to the SDK."""
    body = json.loads(request.content)
    body["messages"] = [m for m in body["messages"] if m["role"] != "system"]
    replace_body(request, body)


def test_a_system_prompt_dropped_below_the_sdk_fails_wire_intact(harness, llm):
    harness.start(mode="enforce")  # judged after sending: recorded, never blocking
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks={"request": [drop_system]})) as client:
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, USER])
    arrived = llm.bodies()[0]
    assert [m["role"] for m in arrived["messages"]] == ["user"]
    a = harness.spans()[-1].attributes
    assert list(a["ctxguard.violations"]) == ["wire_intact"]
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[0].body)
    details = [e.attributes["detail"] for e in violation_events(harness.spans()[-1])]
    assert details == ["the system instruction passed is not in the body sent"]
    assert harness.metric("ctxguard_violations_total", check="wire_intact", provider="openai") == 1


def test_unchanged_path_with_the_same_hook_machinery_passes(harness, llm):
    harness.start(mode="observe")
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks={"request": [lambda request: None]})) as client:
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, USER])
    assert list(harness.spans()[-1].attributes["ctxguard.violations"]) == []


def redact_user_city(request) -> None:
    """A call path (a redaction proxy, say) that rewrites a user message after the SDK built it."""
    body = json.loads(request.content)
    for m in body["messages"]:
        if m["role"] == "user":
            m["content"] = m["content"].replace("Lyon", "[city]")
    replace_body(request, body)


def test_an_active_fact_rewritten_below_the_sdk_fails_wire_intact(harness, llm):
    harness.start(mode="observe")
    messages = [SYSTEM, {"role": "user", "content": "Hello.\nPlease ship to LYON,  69002.\nThanks"}]
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks={"request": [redact_user_city]})) as client, \
            ctxguard.conversation("w-1"):
        ctxguard.record_fact("city", "lyon, 69002")
        ctxguard.record_fact("greeting_word", "Thanks")
        client.chat.completions.create(model="gpt-4o", messages=messages)
    assert "Lyon" not in llm.requests[0].body.decode() and "LYON" in llm.requests[0].body.decode()  # case kept
    span = harness.spans()[-1]
    assert list(span.attributes["ctxguard.violations"]) == []  # the hook matched "Lyon" only: "LYON" survived
    messages[1]["content"] = "Hello.\nPlease ship to Lyon,  69002.\nThanks"
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks={"request": [redact_user_city]})) as client, \
            ctxguard.conversation("w-1"):
        client.chat.completions.create(model="gpt-4o", messages=messages)
    span = harness.spans()[-1]
    assert list(span.attributes["ctxguard.violations"]) == ["wire_intact"]
    events = [(e.attributes["detail"], e.attributes.get("fact_id")) for e in violation_events(span)]
    assert events == [("city@1 passed is not in the body sent", "city")]
    assert "Lyon" not in json.dumps([dict(e.attributes) for e in violation_events(span)])


def test_active_facts_sent_unchanged_pass_wire_intact(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("w-2"):
        ctxguard.record_fact("city", "Zürich")  # non-ASCII: the SDK's JSON escapes it
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "to ZÜRICH"}])
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


def test_an_active_fact_rewritten_below_the_sdk_fails_with_a_pinned_block_in_the_payload(harness, llm):
    """Only the messages carrying the instruction or the pinned block are left to their own
    checks: a fact in any other message is still looked for on the wire."""
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
    block = ctxguard.render_pinned({"order": "A-1041"}, max_tokens=100)
    messages = [SYSTEM, {"role": "system", "content": block}, {"role": "user", "content": "Ship to Lyon, 69002."}]
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks={"request": [redact_user_city]})) as client, \
            ctxguard.conversation("w-3"):
        ctxguard.record_fact("city", "Lyon, 69002")
        client.chat.completions.create(model="gpt-4o", messages=messages)
    events = [(e.attributes["detail"], e.attributes.get("fact_id")) for e in violation_events(harness.spans()[-1])]
    assert events == [("city@1 passed is not in the body sent", "city")]


def cut(edit):  # type: ignore[no-untyped-def]
    """A call path that edits the system instruction's text with ``edit``."""

    def hook(request) -> None:  # type: ignore[no-untyped-def]
        body = json.loads(request.content)
        for m in body["messages"]:
            if m["role"] == "system":
                m["content"] = edit(m["content"])
        replace_body(request, body)

    return hook


def test_an_instruction_one_character_short_on_the_wire_fails(harness, llm):
    """Cut by one character at either end (a byte limit, a trim) is not carried."""
    harness.start(mode="observe")
    instruction = {"role": "system", "content": "You are terse, and you answer in English"}  # one line
    for edit in (lambda t: t[:-1], lambda t: t[1:], lambda t: t):
        with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                           http_client=http.Client(event_hooks={"request": [cut(edit)]})) as client:
            client.chat.completions.create(model="gpt-4o", messages=[instruction, USER])
    verdicts = [list(s.attributes["ctxguard.violations"]) for s in harness.spans()]
    assert verdicts == [["wire_intact"], ["wire_intact"], []]


def rewrite_pinned_city(request) -> None:
    """A call path that edits the pinned block (its own message) and leaves the instruction alone."""
    body = json.loads(request.content)
    for m in body["messages"]:
        m["content"] = m["content"].replace("Pune", "Lyon") if "Pinned facts" in m["content"] else m["content"]
    replace_body(request, body)


def test_a_pinned_block_edited_below_the_sdk_fails_even_when_the_instruction_arrived_whole(harness, llm):
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
    block = ctxguard.render_pinned({"city": "Pune"}, max_tokens=100)
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks={"request": [rewrite_pinned_city]})) as client:
        client.chat.completions.create(
            model="gpt-4o", messages=[SYSTEM, {"role": "system", "content": block}, USER])
    assert "Lyon" in llm.bodies()[0]["messages"][1]["content"]
    details = [e.attributes["detail"] for e in violation_events(harness.spans()[-1])]
    assert details == ["the pinned block passed is not in the body sent"]


def pad_front(request) -> None:
    """A call path that adds a field ahead of the messages: every offset in the body moves."""
    body = json.loads(request.content)
    replace_body(request, {"user": "a field added below the SDK, ahead of the messages", **body})


def test_the_instruction_is_found_wherever_it_moves_in_the_body_and_missed_when_gone(harness, llm):
    """wire_intact remembers where it last found the instruction, to look there first: a hint,
    always checked, so neither a body without it nor one where it moved is misjudged."""
    harness.start(mode="observe")
    rewrites = iter([None, drop_system, pad_front, None, drop_system])

    def hook(request) -> None:  # type: ignore[no-untyped-def]
        rewrite = next(rewrites)
        if rewrite is not None:
            rewrite(request)

    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0,
                       http_client=http.Client(event_hooks={"request": [hook]})) as client:
        for _ in range(5):
            client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, USER])
    assert [len(b["messages"]) for b in llm.bodies()] == [2, 1, 2, 2, 1]
    assert [list(s.attributes["ctxguard.violations"]) for s in harness.spans()] == [
        [], ["wire_intact"], [], [], ["wire_intact"]]


def test_a_stream_the_app_abandons_still_counts_its_wire_verdict(harness, llm, client):
    """A plain call's wire verdict is counted with its end; a stream's end may never come."""
    harness.start(mode="observe")
    stream = client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, USER], stream=True)
    assert llm.requests, "the request was sent before create() returned"
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1
    assert harness.metric("ctxguard_checks_total", check="answer_consistent", outcome="skip") == 0  # not ended
    stream.close()  # never iterated


def test_a_retried_request_is_judged_on_the_wire_once(harness, llm):
    harness.start(mode="observe")
    llm.script(Reply(status=429, text="slow down"), "ok")  # the SDK waits ~0.5 s, then retries
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=1) as client:
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, USER])
    assert len(llm.requests) == 2  # sent twice, one call
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1
    assert harness.spans()[-1].attributes["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[0].body)


TOOL_SYSTEM = {"role": "system", "content": "You are the order assistant."}


def _only_span(harness):  # type: ignore[no-untyped-def]
    return [s for s in harness.spans() if s.instrumentation_scope.name == "ctxguard"][-1]


def test_a_fact_in_tool_call_arguments_is_on_the_wire(harness, llm, client):
    """OpenAI sends a tool call's arguments as a JSON string: the fact's line (the tool's name
    and its arguments) is not in the body raw, its value is; no false alarm."""
    harness.start(mode="observe")
    with ctxguard.conversation("args"):
        ctxguard.record_fact("order_id", "A-1041")
        client.chat.completions.create(model="gpt-4o", messages=[
            TOOL_SYSTEM, {"role": "user", "content": "where is it?"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "lookup", "arguments": '{"order": "A-1041"}'}}]},
            {"role": "tool", "content": "shipped", "tool_call_id": "call_1"}])
    a = _only_span(harness).attributes
    assert list(a["ctxguard.facts.present"]) == ["order_id@1"]
    assert list(a["ctxguard.violations"]) == []


def test_a_fact_in_a_tool_use_input_is_on_the_wire(harness, llm):
    """Anthropic sends a ``tool_use`` input as nested JSON, with the SDK's spacing and key order."""
    import anthropic

    client = anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="x", max_retries=0)
    harness.start(mode="observe")
    with ctxguard.conversation("input"):
        ctxguard.record_fact("order_id", "A-1041")
        client.messages.create(model="claude-sonnet-4-5", max_tokens=100, system=TOOL_SYSTEM["content"], messages=[
            {"role": "user", "content": "where is it?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"order": "A-1041", "n": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"}]}])
    a = _only_span(harness).attributes
    assert list(a["ctxguard.facts.present"]) == ["order_id@1"]
    assert list(a["ctxguard.violations"]) == []
