"""An earlier answer's thinking sent back: counted the way the model reads it (not at all once a new
user query follows, on the models whose template or API leaves it out), while the message itself, its
text and digest, stays the one the app sent (``RequestView.not_read``; docs/budget.md, "Thinking sent
back"). The conversation memory then sees the same message on every call, never one dropped."""

from __future__ import annotations

import anthropic
import pytest

import ctxguard
from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.providers.anthropic import ADAPTER as ANTHROPIC
from ctxguard.providers.bedrock import ADAPTER as BEDROCK
from ctxguard.testing import Reply
from ctxguard.tokens import BOUND, Calibration
from tests.conftest import guard_spans, message_digest
from tests.providers.test_bedrock import bedrock, bedrock_client  # noqa: F401  (the fixture)

QWEN = "qwen.qwen3-32b-v1:0"
THOUGHT = "<think>\nThe user wants the weather in Paris. I should call get_weather with the city.\n</think>\n\n"
WEATHER = {"toolSpec": {"name": "get_weather", "description": "Get the weather for a city.",
                        "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}},
                                                 "required": ["city"]}}}}


def user(text: str) -> dict:
    return {"role": "user", "content": [{"text": text}]}


def shown(model: str, messages: list[dict]) -> tuple[int, int]:
    """What a guard shows for a first call of ``messages`` before any verdict needs the exact count:
    its tokens, estimated from its bytes, and its ceiling (its bytes: ``Measurer``'s bounds)."""
    view = BEDROCK.normalise("converse", {"modelId": model, "messages": messages, "toolConfig": {"tools": [WEATHER]}})
    payload = Measurer(Digester(b"k"), BOUND, Calibration()).measure(view)
    return payload.tokens, payload.bound


def test_an_answers_thinking_left_out_once_a_query_follows_is_not_a_dropped_message(harness, llm, bedrock):  # noqa: F811
    """Qwen3's template reads an answer's ``<think>`` while it is in the agent loop of the last query,
    and not once a new user query follows: the third call counts it as not read, and its message is
    still the one the second call sent (no ``messages.dropped``)."""
    harness.start(mode="observe")
    llm.script(Reply(text=THOUGHT, tool_calls=[{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]),
               Reply(text="It is 30C in Paris."), Reply(text="It is 28C in Lyon."))
    tools = {"tools": [WEATHER]}
    messages = [user("What is the weather in Paris?")]
    with ctxguard.conversation("qwen-loop"):
        asked = bedrock.converse(modelId=QWEN, messages=messages, toolConfig=tools)
        thinking = asked["output"]["message"]
        assert thinking["content"][0]["text"] == THOUGHT and "toolUse" in thinking["content"][1]
        use = thinking["content"][1]["toolUse"]
        messages += [thinking, {"role": "user", "content": [
            {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": "30C"}]}}]}]
        answered = bedrock.converse(modelId=QWEN, messages=messages, toolConfig=tools)  # thinking read
        messages += [answered["output"]["message"], user("And in Lyon?")]
        bedrock.converse(modelId=QWEN, messages=messages, toolConfig=tools)  # thinking not read
    _, loop, after = (span.attributes for span in guard_spans(harness))
    sent = message_digest("assistant", f"{THOUGHT}\nget_weather {{\"city\": \"Paris\"}}",
                          (f"id:tool_call={use['toolUseId']}",))
    assert loop["ctxguard.message.hashes"][1] == after["ctxguard.message.hashes"][1] == sent
    assert after.get("ctxguard.messages.dropped", 0) == 0
    assert harness.metric("ctxguard_messages_dropped_total", role="assistant") == 0
    # Counted as the template reads it: the third call as if the answer had been sent without its thinking.
    bare = [messages[0], {"role": "assistant", "content": thinking["content"][1:]}, *messages[2:]]
    counts = ("ctxguard.payload.tokens", "ctxguard.payload.tokens_ceiling")
    assert tuple(after[key] for key in counts) == shown(QWEN, bare)
    assert tuple(loop[key] for key in counts) == shown(QWEN, messages[:3])  # in the loop: read


@pytest.fixture
def claude(llm):
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as client:
        yield client


def claude_shown(model: str, messages: list) -> tuple[int, int]:
    view = ANTHROPIC.normalise("messages.create", {"model": model, "max_tokens": 2048, "messages": messages,
                                                   "thinking": {"type": "enabled", "budget_tokens": 1024}})
    payload = Measurer(Digester(b"k"), BOUND, Calibration()).measure(view)
    return payload.tokens, payload.bound


@pytest.mark.parametrize(("model", "strips"), [
    ("claude-3-7-sonnet-20250219", True), ("claude-sonnet-4-5", True), ("claude-opus-4-1", True),
    ("claude-haiku-4-5", True), ("claude-sonnet-4-6", False),
    ("claude-sonnet-5", False),
])
def test_claude_reads_an_earlier_answers_thinking_as_its_model_does(harness, llm, claude, model, strips):
    """Claude 3.7 and the Claude 4 models before Opus 4.5 and Sonnet 4.6 leave the thinking of an answer
    before the last user query out of the prompt (Anthropic's "Extended thinking"); the later ones keep
    it. Either way the answer is the message the app sent, digested as sent."""
    harness.start(mode="observe")
    llm.script(Reply(text="Look both ways, then cross.", reasoning=THOUGHT), Reply(text="Take the bridge."))
    thinking = {"type": "enabled", "budget_tokens": 1024}
    messages: list = [{"role": "user", "content": "How do I cross the street?"}]
    with ctxguard.conversation(f"street-{model}"):
        answer = claude.messages.create(model=model, max_tokens=2048, thinking=thinking, messages=messages)
        assert [block.type for block in answer.content] == ["thinking", "text"]
        messages += [{"role": "assistant", "content": answer.content}, {"role": "user", "content": "And a river?"}]
        claude.messages.create(model=model, max_tokens=2048, thinking=thinking, messages=messages)
    after = guard_spans(harness)[1].attributes
    assert after["ctxguard.message.hashes"][1] == message_digest(
        "assistant", f"{THOUGHT}\nLook both ways, then cross.", ("id:thinking",))
    assert after.get("ctxguard.messages.dropped", 0) == 0
    bare = [messages[0], {"role": "assistant", "content": answer.content[1:]}, messages[2]]
    tokens, ceiling = claude_shown(model, bare)  # as if sent without the thinking: no rule of the module's
    if strips:
        assert (after["ctxguard.payload.tokens"], after["ctxguard.payload.tokens_ceiling"]) == (tokens, ceiling)
    else:  # its bytes, and the newline that joins it to the answer's text
        assert after["ctxguard.payload.tokens_ceiling"] == ceiling + len(THOUGHT) + 1


REASONED = {"role": "assistant", "content": [
    {"reasoningContent": {"reasoningText": {"text": "Cross at the lights.", "signature": "EqYGCmQIDxAB"}}},
    {"text": "Look both ways."}]}


@pytest.mark.parametrize(("model", "strips"), [
    ("us.anthropic.claude-sonnet-4-20250514-v1:0", True), ("us.anthropic.claude-3-7-sonnet-20250219-v1:0", True),
    ("us.anthropic.claude-sonnet-4-6", False), ("us.anthropic.claude-sonnet-5", False),
])
def test_claude_on_bedrock_reads_an_earlier_answers_reasoning_as_on_anthropics_api(model, strips):
    """Converse's ``reasoningContent``: Claude's rule on Bedrock as on Anthropic's API (Bedrock's
    "Extended thinking": thinking blocks from previous turns are ignored and not counted)."""
    asked = [user("How do I cross the street?"), REASONED, user("And a river?")]
    bare = [asked[0], {"role": "assistant", "content": REASONED["content"][1:]}, asked[2]]
    view = BEDROCK.normalise("converse", {"modelId": model, "messages": asked})
    assert view.items[1][1] == "Cross at the lights.\nLook both ways."  # the message as sent
    sent, without = (Measurer(Digester(b"k"), BOUND, Calibration()).measure(BEDROCK.normalise(
        "converse", {"modelId": model, "messages": messages})).bound for messages in (asked, bare))
    assert sent == (without if strips else without + len("Cross at the lights.\n"))
    loop = BEDROCK.normalise("converse", {"modelId": model, "messages": asked[:2]})  # the last turn: read
    assert loop.not_read == {}
