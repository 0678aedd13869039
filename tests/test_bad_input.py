"""Bad input: the call goes through unchanged, checks skip with a reason, nothing raises."""

from __future__ import annotations

from typing import TypedDict

import openai
import pytest
from openai.types.chat import ChatCompletionMessage

import ctxguard
from ctxguard import Pinned, Policy
from ctxguard.tokens import NON_TEXT_PART

SYSTEM = {"role": "system", "content": "sys"}


def skipped(harness) -> list[str]:
    return list(harness.spans()[-1].attributes.get("ctxguard.checks.skipped", ()))


def test_generator_messages_are_not_consumed(harness, llm, client):
    harness.start(mode="observe")
    messages = (m for m in [SYSTEM, {"role": "user", "content": "hi"}])
    client.chat.completions.create(model="gpt-4o", messages=messages)
    assert [m["role"] for m in llm.bodies()[0]["messages"]] == ["system", "user"]
    assert "system_at_head: messages is a one-shot iterator (generator), left unread for the SDK" in skipped(harness)


def test_none_and_non_string_content(harness, llm, client):
    harness.start(mode="observe")
    client.chat.completions.create(
        model="gpt-4o",
        messages=[SYSTEM, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 7}'}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped"}'}],
    )
    a = harness.spans()[-1].attributes
    assert list(a["ctxguard.message.roles"]) == ["system", "assistant", "tool"]
    assert list(a["ctxguard.violations"]) == []


def test_unknown_roles_and_lone_surrogates(harness, llm, client):
    harness.start(mode="observe")
    weird = {"role": "narrator" * 10, "content": "broken \udc80 text"}
    with pytest.raises(Exception) as info:  # the SDK cannot encode a lone surrogate: its error, unchanged
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, weird])
    assert not isinstance(info.value, ctxguard.ContextViolation)
    a = harness.spans()[-1].attributes
    assert a["ctxguard.message.roles"][1] == ("narrator" * 10)[:32]
    assert a["error.type"] == type(info.value).__qualname__


def test_huge_content_goes_through(harness, llm, client):
    harness.start(mode="observe")
    huge = "x" * (10 * 1024 * 1024)
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": huge}])
    assert llm.bodies()[0]["messages"][1]["content"] == huge
    a = harness.spans()[-1].attributes
    assert list(a["ctxguard.violations"]) == ["payload_under_budget"]  # 10 MB does not fit 128k tokens


def test_unknown_model_skips_budget(harness, llm, client):
    harness.start(mode="enforce")
    client.chat.completions.create(model="local-llama", messages=[SYSTEM])
    assert any(s.startswith("payload_under_budget: unknown context window") for s in skipped(harness))


class Unserialisable:
    def __str__(self) -> str:
        raise ValueError("no")


def test_objects_that_fail_to_serialise(harness, llm, client):
    harness.start(mode="observe", policy=Policy(pinned=Pinned()))
    with pytest.raises(Exception) as info:
        client.chat.completions.create(
            model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": Unserialisable()}]
        )
    assert not isinstance(info.value, ctxguard.ContextViolation)
    assert "system_at_head: message 1 could not be read (ValueError)" in skipped(harness)


class Msg(TypedDict):
    role: str
    content: str


def test_pydantic_typeddict_and_sentinels(harness, llm, client):
    harness.start(mode="observe")
    previous = ChatCompletionMessage(role="assistant", content="earlier answer")
    client.chat.completions.create(
        model="gpt-4o",
        messages=[Msg(role="system", content="sys"), {"role": "user", "content": "q"}, previous],
        max_tokens=openai.NOT_GIVEN,
        tools=openai.NOT_GIVEN,
    )
    a = harness.spans()[-1].attributes
    assert list(a["ctxguard.message.roles"]) == ["system", "user", "assistant"]
    assert "gen_ai.request.max_tokens" not in a
    assert [m["role"] for m in llm.bodies()[0]["messages"]] == ["system", "user", "assistant"]


def test_content_parts_images_become_references(harness, llm, client):
    harness.start(mode="observe")
    client.chat.completions.create(
        model="gpt-4o",
        messages=[SYSTEM, {"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 5000}}]}],
    )
    a = harness.spans()[-1].attributes
    assert a["ctxguard.payload.messages"] == 2
    assert "A" * 100 not in str(dict(a))


def test_a_remote_image_is_charged_its_models_bound_and_a_name_nothing(harness, llm, client):
    """A URL's image is never fetched: it costs the most the model's formula charges an image up to
    2048 px a side (docs/budget.md). Each call on its own model, so no calibration moves the counts."""
    harness.start(mode="observe")
    image = {"type": "image_url", "image_url": {"url": "https://example.com/parcel.png"}}
    question = {"type": "text", "text": "what is this?"}
    for model, user in [("gpt-4o", {"role": "user", "content": [question]}),
                        ("gpt-4o-mini", {"role": "user", "content": [question, image]}),
                        ("gpt-4.1", {"role": "user", "content": [question, image, image]}),
                        ("gpt-4.1-mini", {"role": "user", "content": [question], "name": "alice"})]:
        client.chat.completions.create(model=model, messages=[SYSTEM, user])
    tokens = [s.attributes["ctxguard.payload.tokens"] for s in harness.spans()]
    # gpt-4o-mini: 2833 + 8 tiles x 5667 (a 768 x 2048 image); gpt-4.1: 85 + 8 x 170, twice.
    assert [t - tokens[0] for t in tokens] == [0, 2833 + 8 * 5667, 2 * (85 + 8 * 170), 0]


def test_non_list_responses_input(harness, llm, client):
    harness.start(mode="observe")
    client.responses.create(model="gpt-4o", instructions="sys", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "{\"a\": 1}"},
    ])
    a = harness.spans()[-1].attributes
    assert list(a["ctxguard.message.roles"]) == ["system", "user", "assistant", "tool"]


def test_a_message_nested_deeper_than_python_can_copy(harness, llm, client):
    """Too deep for the memo to copy: not kept, still read (its text part), no internal error; the
    app gets what the SDK alone gives it, and the server what it alone sends. Which side refuses
    it is Python's doing, not ctxguard's: up to 3.12 the SDK's JSON encoder (a RecursionError,
    nothing sent); on 3.13, which encodes it, the server (the fake's 400, as a provider's parser)."""
    deep: object = "leaf"
    for _ in range(5000):
        deep = {"k": deep}
    messages = [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "hi", "extra": deep}]}]
    with pytest.raises((RecursionError, openai.BadRequestError)) as alone:  # the SDK alone
        client.chat.completions.create(model="gpt-4o", messages=messages)
    sent_alone = [r.body for r in llm.requests]
    harness.start(mode="observe")
    with ctxguard.conversation("deep"), pytest.raises(type(alone.value)):
        client.chat.completions.create(model="gpt-4o", messages=messages)
    assert [r.body for r in llm.requests] == sent_alone * 2
    a = harness.spans()[-1].attributes
    assert a["ctxguard.payload.messages"] == 2 and a["error.type"] == type(alone.value).__qualname__



#: An image whose size is unknown (these values are no image) on a model not in the tables: the
#: larger of gpt-4o's tiles and gpt-5.4's patches for a 2048 x 2048 image, 2,500 patches x 1.2.
UNKNOWN_IMAGE = 3000
PARTS = {  # a part made from a value, by the field that carries it, and what it is charged
    "image_url url": ("chat", lambda v: {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{v}"}},
                      UNKNOWN_IMAGE),
    "input_audio data": ("chat", lambda v: {"type": "input_audio", "input_audio": {"data": v, "format": "wav"}},
                         NON_TEXT_PART),
    "file file_id": ("chat", lambda v: {"type": "file", "file": {"file_id": f"file-{v}"}}, NON_TEXT_PART),
    "file file_data": ("chat", lambda v: {"type": "file", "file": {"file_data": v}}, NON_TEXT_PART),
    "input_image image_url": ("responses", lambda v: {"type": "input_image", "image_url": f"https://img/{v}.png"},
                              UNKNOWN_IMAGE),
    "input_image file_id": ("responses", lambda v: {"type": "input_image", "file_id": f"file-{v}"}, UNKNOWN_IMAGE),
    "input_file file_id": ("responses", lambda v: {"type": "input_file", "file_id": f"file-{v}"}, NON_TEXT_PART),
    "input_file file_url": ("responses", lambda v: {"type": "input_file", "file_url": f"https://f/{v}"},
                            NON_TEXT_PART),
    "input_file file_data": ("responses", lambda v: {"type": "input_file", "file_data": v}, NON_TEXT_PART),
}


def _send(client, api: str, model: str, content: list[dict[str, object]]) -> None:
    if api == "chat":
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}])
    else:
        client.responses.create(model=model, input=[{"role": "user", "content": content}])


@pytest.mark.parametrize("name", list(PARTS))
def test_every_non_text_part_is_a_reference_that_tells_parts_apart(harness, llm, client, name):
    """Its digest changes with the part it stands for, it is charged its estimate, its bytes go nowhere."""
    api, make, charge = PARTS[name]
    harness.start(mode="observe")
    text = {"type": "text" if api == "chat" else "input_text", "text": "what is this?"}
    for i, content in enumerate([[text], [text, make("QUFB")], [text, make("QUFB")], [text, make("QkJC")]]):
        _send(client, api, f"model-{i}", content)  # a model of its own: no calibration from an earlier answer
    spans = [s.attributes for s in harness.spans()]
    digests = [a["ctxguard.message.hashes"][-1] for a in spans]
    assert digests[1] == digests[2] and len({digests[0], digests[1], digests[3]}) == 3
    base = spans[0]["ctxguard.payload.tokens"]
    assert [a["ctxguard.payload.tokens"] - base for a in spans[1:]] == [charge] * 3
    assert not any(secret in str(dict(a)) for a in spans for secret in ("QUFB", "QkJC"))


def test_a_part_of_a_type_not_known_yet_is_told_apart_and_not_charged(harness, llm, client):
    harness.start(mode="observe")
    text = {"type": "text", "text": "what is this?"}
    for i, content in enumerate([[text], [text, {"type": "hologram", "hologram": {"id": "h-1"}}]]):
        _send(client, "chat", f"model-{i}", content)
    plain, other = (s.attributes for s in harness.spans())
    assert plain["ctxguard.message.hashes"][-1] != other["ctxguard.message.hashes"][-1]
    assert plain["ctxguard.payload.tokens"] == other["ctxguard.payload.tokens"]


def _call(name: str = "track", arguments: str = '{"order": "A-1041"}', call_id: str = "call_1") -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CHAT_VARIANTS = [  # each differs from the first in one thing a reader could overlook
    {"role": "assistant", "content": None, "tool_calls": [_call()]},
    {"role": "assistant", "content": None, "tool_calls": [_call(name="cancel")]},
    {"role": "assistant", "content": None, "tool_calls": [_call(arguments='{"order": "A-1042"}')]},
    {"role": "assistant", "content": None, "tool_calls": [_call(call_id="call_2")]},
    {"role": "assistant", "content": None, "function_call": {"name": "track", "arguments": '{"order": "A-1041"}'}},
    {"role": "assistant", "content": None, "function_call": {"name": "track", "arguments": '{"order": "B-7"}'}},
    {"role": "tool", "tool_call_id": "call_1", "content": "in transit"},
    {"role": "tool", "tool_call_id": "call_2", "content": "in transit"},
    {"role": "user", "name": "alice", "content": "in transit"},
    {"role": "user", "name": "bob", "content": "in transit"},
]

RESPONSES_VARIANTS = [
    {"type": "function_call", "call_id": "c1", "name": "track", "arguments": '{"order": "A-1041"}'},
    {"type": "function_call", "call_id": "c1", "name": "track", "arguments": '{"order": "A-1042"}'},
    {"type": "function_call", "call_id": "c2", "name": "track", "arguments": '{"order": "A-1041"}'},
    {"type": "function_call", "call_id": "c1", "name": "cancel", "arguments": '{"order": "A-1041"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "in transit"},
    {"type": "function_call_output", "call_id": "c1", "output": "delivered"},
    {"type": "custom_tool_call_output", "call_id": "c1", "output": "in transit"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "check the order"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "check the refund"}]},
    {"role": "user", "content": "in transit"},
    {"role": "user", "content": [{"type": "input_text", "text": "delivered"}]},
]


def test_tool_calls_and_results_are_told_apart_by_every_field(harness, llm, client):
    """Digests are what evictions, diffs and the wire are judged on: a changed argument, call id,
    tool name or result is another message; the same message is the same digest."""
    harness.start(mode="observe")
    user = {"role": "user", "content": "where is A-1041?"}
    # A tool result answers a call made before it, or OpenAI refuses the request (400).
    calls = {"role": "assistant", "content": None, "tool_calls": [_call(), _call(call_id="call_2")]}
    for variant in [*CHAT_VARIANTS, CHAT_VARIANTS[0]]:
        asked = [calls] if variant["role"] == "tool" else []
        client.chat.completions.create(model="gpt-4o", messages=[user, *asked, variant])
    for variant in [*RESPONSES_VARIANTS, RESPONSES_VARIANTS[0]]:
        client.responses.create(model="gpt-4o", input=[user, variant])
    digests = [s.attributes["ctxguard.message.hashes"][-1] for s in harness.spans()]
    chat, responses = digests[: len(CHAT_VARIANTS) + 1], digests[len(CHAT_VARIANTS) + 1 :]
    assert len(set(chat)) == len(CHAT_VARIANTS) and chat[-1] == chat[0]
    assert len(set(responses)) == len(RESPONSES_VARIANTS) and responses[-1] == responses[0]
    roles = [s.attributes["ctxguard.message.roles"][-1] for s in harness.spans()][len(CHAT_VARIANTS) + 1 :]
    assert roles[:9] == ["assistant"] * 4 + ["tool"] * 3 + ["assistant"] * 2


def test_a_fact_in_tool_call_arguments_is_sent(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("tools"):
        ctxguard.record_fact("order_id", "A-1041")
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "where is it?"},
                                                                 CHAT_VARIANTS[0]])
        assert list(harness.spans()[-1].attributes["ctxguard.facts.present"]) == ["order_id@1"]
        client.responses.create(model="gpt-4o", input=[{"role": "user", "content": "where is it?"},
                                                      RESPONSES_VARIANTS[0]])
        assert list(harness.spans()[-1].attributes["ctxguard.facts.present"]) == ["order_id@1"]


def test_an_empty_role_reads_as_other_and_a_boolean_is_no_token_limit(harness, llm, client):
    harness.start(mode="observe")
    client.chat.completions.create(model="gpt-4o", max_tokens=True,  # type: ignore[arg-type]
                                   messages=[{"role": "", "content": "x"}, {"role": "user", "content": "hi"}])
    a = harness.spans()[-1].attributes
    assert list(a["ctxguard.message.roles"]) == ["other", "user"]
    assert "gen_ai.request.max_tokens" not in a and a["ctxguard.budget.reserved_output"] == 0
