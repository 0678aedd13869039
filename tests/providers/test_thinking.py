"""An earlier answer's thinking sent back: counted the way the model reads it (not at all once a new
user query follows, on the models whose template or API leaves it out), while the message itself, its
text and digest, stays the one the app sent (``RequestView.not_read``; docs/budget.md, "Thinking sent
back"). The conversation memory then sees the same message on every call, never one dropped."""

from __future__ import annotations

import ctxguard
from ctxguard.digest import Digester
from ctxguard.measure import Measurer
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
