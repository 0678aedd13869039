"""LiteLLM, driven for real over loopback HTTP (``api_base`` pointed at the fake server).

LiteLLM fetches its model cost map from the network at import unless
``LITELLM_LOCAL_MODEL_COST_MAP=True``: set here before the import (and in scripts/test).
"""

from __future__ import annotations

import base64
import gc
import os
import urllib.parse

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm", reason="litellm is not installed (extra 'litellm'; needs openai>=2)")

import ctxguard  # noqa: E402
from ctxguard.digest import Digester  # noqa: E402
from ctxguard.testing import Reply  # noqa: E402
from tests.conftest import KEY, guard_spans, message_digest, only_guard_span, prose  # noqa: E402

SYSTEM = {"role": "system", "content": "You are the order assistant.\nAnswer in English."}
USER = {"role": "user", "content": "where is my parcel?"}


def calls(harness):
    return sum(harness.metric("ctxguard_calls_total", provider=p, operation="chat")
               for p in ("openai", "anthropic", "gcp.gemini", "gcp.vertex_ai", "litellm"))


def test_openai_route_span_matches_the_body(harness, llm):
    harness.start(mode="observe")
    with ctxguard.conversation("l1"):
        reply = litellm.completion(model="openai/gpt-4o", messages=[SYSTEM, USER], max_tokens=300,
                                   api_base=llm.base_url, api_key="t")
    assert reply.choices[0].message.content == "ok 1"
    sent = llm.bodies("/chat/completions")[0]
    a = only_guard_span(harness).attributes
    assert a["gen_ai.provider.name"] == "openai"  # LiteLLM's routing, not the wrapper's name
    assert a["gen_ai.request.model"] == "openai/gpt-4o" and sent["model"] == "gpt-4o"
    assert list(a["ctxguard.message.roles"]) == [m["role"] for m in sent["messages"]]
    assert list(a["ctxguard.message.hashes"]) == [message_digest(m["role"], m["content"]) for m in sent["messages"]]
    assert a["ctxguard.budget.window"] == 128_000
    assert a["ctxguard.budget.reserved_output"] == sent["max_tokens"] == 300
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[0].body)
    assert a["gen_ai.response.id"] == reply.id == llm.responses[0].id
    assert list(a["ctxguard.violations"]) == []
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 1 == calls(harness)


def test_azure_route_runs_the_openai_sdk_underneath_one_evaluation_one_span(harness, llm):
    """LiteLLM's Azure route calls openai's chat.completions.create: that call site is patched too,
    and must not count the same app call twice; its transport body feeds the outer wire_intact."""
    harness.start(mode="enforce")
    litellm.completion(model="azure/gpt-4o", messages=[SYSTEM, USER], api_base=llm.origin, api_key="t",
                       api_version="2024-10-21")
    assert "/openai/deployments/gpt-4o/chat/completions" in llm.requests[0].path
    a = only_guard_span(harness).attributes
    assert a["gen_ai.provider.name"] == "litellm"
    assert calls(harness) == 1
    assert harness.metric("ctxguard_checks_total", check="system_at_head", outcome="pass") == 1
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[0].body)
    with pytest.raises(ctxguard.ContextViolation):
        litellm.completion(model="azure/gpt-4o", messages=[USER], api_base=llm.origin, api_key="t",
                           api_version="2024-10-21")
    assert len(llm.requests) == 1
    assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 1


@pytest.mark.parametrize(("model", "label"), [
    ("gemini/gemini-2.5-flash", "gcp.gemini"),
    ("vertex_ai/gemini-2.5-flash", "gcp.vertex_ai"),
    ("vertex_ai/claude-sonnet-4@20250514", "gcp.vertex_ai"),
    ("vertex_ai_beta/gemini-2.5-flash", "gcp.vertex_ai"),
])
def test_routes_to_google_are_labelled_by_the_api_they_reach(model, label):
    """The rule the google-genai SDK's clients follow (the Gemini Developer API or Vertex AI), on
    LiteLLM's Google routes: never the conventions' catch-all ``gcp.gen_ai`` when the route says."""
    from ctxguard.providers.litellm import ADAPTER, PROVIDER

    view = ADAPTER.normalise("chat.completions", {"model": model, "messages": [USER]})
    assert view.provider == label
    assert label in PROVIDER.labels and "gcp.gen_ai" not in PROVIDER.labels


def test_anthropic_route_moves_the_system_message_and_wire_is_intact(harness, llm):
    harness.start(mode="observe")
    litellm.completion(model="anthropic/claude-sonnet-4-20250514", messages=[SYSTEM, USER], max_tokens=50,
                       api_base=llm.anthropic_base_url, api_key="t")
    sent = llm.bodies("/messages")[0]
    assert [b["text"] for b in sent["system"]] == [SYSTEM["content"]]  # LiteLLM's translation
    a = only_guard_span(harness).attributes
    assert a["gen_ai.provider.name"] == "anthropic"
    assert list(a["ctxguard.message.roles"]) == ["system", "user"]
    assert a["ctxguard.budget.window"] == 200_000
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


def test_requests_litellm_makes_beside_the_model_call_are_not_the_body_judged(harness, llm):
    """Given tools on its ``ollama_chat/`` route, LiteLLM asks the server for the model's details
    (``POST /api/show``: does it call tools?) while the call is in flight: that body is not the call's,
    so ``wire_intact`` judges the ``/api/chat`` body, and passes (it failed: "the system instruction
    passed is not in the body sent")."""
    tool = {"type": "function", "function": {"name": "track", "description": "Track a parcel",
                                             "parameters": {"type": "object", "properties": {}}}}
    harness.start(mode="observe")
    litellm.completion(model="ollama_chat/qwen3:8b", messages=[SYSTEM, USER], tools=[tool], api_base=llm.ollama_host)
    a = only_guard_span(harness).attributes
    chat = next(r for r in llm.requests if r.path == "/api/chat")
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(chat.body)
    assert "wire_intact" not in list(a.get("ctxguard.violations", ()))
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


def test_a_claude_route_counts_text_at_claudes_newer_tokenizer(harness, llm):
    """A LiteLLM call to Claude Sonnet 5 is counted at its tokenizer's ratio (``anthropic.text_scale``)
    on the first call, as the Anthropic SDK's is: over a window cl100k's count fits, and the fake
    (answering as Anthropic does) reports ~1.3 times Sonnet 4.5's count of the same text."""
    from ctxguard import Budget, Policy
    from ctxguard.tokens import default_counter

    window = 20_000
    text = prose(int(window * 0.85))
    assert 0.8 * window < default_counter().count(text) < 0.9 * window
    harness.start(mode="observe", policy=Policy(budget=Budget(window=window)))
    for model in ("anthropic/claude-sonnet-5", "anthropic/claude-sonnet-4-5"):
        litellm.completion(model=model, messages=[SYSTEM, {"role": "user", "content": text}], max_tokens=50,
                           api_base=llm.anthropic_base_url, api_key="t")
    newer, older = (s.attributes for s in guard_spans(harness))
    assert list(newer["ctxguard.violations"]) == ["payload_under_budget"] and newer["ctxguard.payload.tokens"] > window
    assert list(older["ctxguard.violations"]) == [] and older["ctxguard.payload.tokens"] < window
    assert newer["gen_ai.usage.input_tokens"] > 1.25 * older["gen_ai.usage.input_tokens"]


def test_system_pinned_budget_and_fact_checks(harness, llm):
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=40)))
    block = {"role": "system", "content": ctxguard.render_pinned({"city": "Pune"}, max_tokens=40)}
    cut = {"role": "system", "content": "\n".join(block["content"].splitlines()[:-1])}
    kw = dict(model="openai/gpt-4o", api_base=llm.base_url, api_key="t")
    with ctxguard.conversation("l2"):
        ctxguard.record_fact("city", "Pune")
        litellm.completion(messages=[SYSTEM, block, USER], **kw)
        litellm.completion(messages=[USER, block], **kw)
        litellm.completion(messages=[SYSTEM, cut, USER], **kw)
        litellm.completion(messages=[SYSTEM, USER], **kw)
        litellm.completion(messages=[SYSTEM, block, USER], max_tokens=128_000, **kw)
        ctxguard.forget_fact("city")
        litellm.completion(messages=[SYSTEM, block, USER], **kw)
        litellm.completion(messages=[SYSTEM, {"role": "system", "content": "Pinned facts"}, USER], **kw)
    assert [list(s.attributes["ctxguard.violations"]) for s in guard_spans(harness)] == [
        [],
        ["system_at_head"],
        ["pinned_intact"],
        ["pinned_present", "fact_present"],
        ["payload_under_budget"],
        ["fact_forgotten"],
        [],
    ]
    assert harness.metric("ctxguard_violations_total", check="fact_forgotten", provider="openai") == 1


def test_positional_model_and_messages_are_read(harness, llm):
    harness.start(mode="observe")
    litellm.completion("openai/gpt-4o", [SYSTEM, USER], api_base=llm.base_url, api_key="t")
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.message.roles"]) == ["system", "user"]
    assert a["gen_ai.request.model"] == "openai/gpt-4o"


def test_stream_chunks_identical_to_uninstrumented(harness, llm):
    def chunks():
        llm.script("parcel in Pune")
        stream = litellm.completion(model="openai/gpt-4o", messages=[SYSTEM, USER], stream=True,
                                    stream_options={"include_usage": True}, api_base=llm.base_url, api_key="t")
        # What differs between two answers of the service: id, time, random padding.
        return stream, [c.model_dump(exclude={"id", "created", "obfuscation"}) for c in stream]

    _, plain = chunks()
    harness.start(mode="observe")
    stream, guarded = chunks()
    assert isinstance(stream, litellm.CustomStreamWrapper)
    assert guarded == plain
    a = only_guard_span(harness).attributes
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[-1].body)
    assert a["gen_ai.usage.output_tokens"] > 0
    assert list(a["gen_ai.response.finish_reasons"]) == ["stop"]


@pytest.mark.asyncio
async def test_acompletion_and_async_stream(harness, llm):
    harness.start(mode="observe")
    llm.script("one", "two")
    reply = await litellm.acompletion(model="openai/gpt-4o", messages=[USER], api_base=llm.base_url, api_key="t")
    stream = await litellm.acompletion(model="openai/gpt-4o", messages=[SYSTEM, USER], stream=True,
                                       api_base=llm.base_url, api_key="t")
    text = "".join([c.choices[0].delta.content or "" async for c in stream])
    assert (reply.choices[0].message.content, text) == ("one", "two")
    spans = guard_spans(harness)
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [["system_at_head"], []]
    assert [s.attributes["ctxguard.wire.hash"] for s in spans] == [Digester(KEY).bytes(r.body) for r in llm.requests]


def test_sdk_errors_pass_through(harness, llm):
    harness.start(mode="observe")
    llm.script(Reply(status=429, text="slow down"))
    with pytest.raises(litellm.RateLimitError):
        litellm.completion(model="openai/gpt-4o", messages=[SYSTEM, USER], api_base=llm.base_url, api_key="t",
                           max_retries=0)
    assert only_guard_span(harness).attributes["error.type"] == "RateLimitError"


def test_unroutable_model_is_labelled_litellm_and_the_error_is_litellms(harness, llm):
    harness.start(mode="observe")
    with pytest.raises(litellm.BadRequestError):
        litellm.completion(model="no-such-model-xyz", messages=[SYSTEM, USER], api_base=llm.base_url)
    a = only_guard_span(harness).attributes
    assert a["gen_ai.provider.name"] == "litellm"
    assert "payload_under_budget: " in "\n".join(a["ctxguard.checks.skipped"])


def test_uninstrument_restores_identity(harness):
    originals = (litellm.completion, litellm.acompletion)
    harness.start(mode="observe")
    assert litellm.completion is not originals[0] and litellm.acompletion is not originals[1]
    ctxguard.uninstrument()
    assert (litellm.completion, litellm.acompletion) == originals
    assert litellm.completion is originals[0] and litellm.acompletion is originals[1]


def test_a_stream_broken_off_and_dropped_still_ends_its_span(harness, llm):
    harness.start(mode="observe")
    llm.script("word " * 1000)
    stream = litellm.completion(model="openai/gpt-4o", messages=[SYSTEM, USER], stream=True,
                                api_base=llm.base_url, api_key="t")
    for _ in stream:
        break
    del stream
    gc.collect()
    a = only_guard_span(harness).attributes
    assert a["ctxguard.stream.abandoned"] is True
    assert harness.metric("ctxguard_guard_duration_seconds_count") == 1


def test_an_exception_inside_with_stream_is_an_error_not_an_answer(harness, llm):
    harness.start(mode="observe")
    stream = litellm.completion(model="openai/gpt-4o", messages=[SYSTEM, USER], stream=True,
                                api_base=llm.base_url, api_key="t")
    with pytest.raises(KeyboardInterrupt), stream:
        next(iter(stream))
        raise KeyboardInterrupt  # the app's block was interrupted mid-stream
    a = only_guard_span(harness).attributes
    assert a["error.type"] == "KeyboardInterrupt"
    assert "ctxguard.stream.abandoned" not in a


@pytest.mark.parametrize("stream", [False, True])
def test_the_anthropic_routes_span_says_what_anthropic_answered(harness, llm, stream):
    """LiteLLM translates the answer (an id of its own, OpenAI finish reasons); the span carries
    the provider's own, read off the HTTP response LiteLLM got."""
    harness.start(mode="observe")
    result = litellm.completion(model="anthropic/claude-sonnet-4-5", messages=[SYSTEM, USER], max_tokens=50,
                                api_base=llm.anthropic_base_url, api_key="t", stream=stream)
    if stream:
        list(result)
    served = llm.responses[0]
    a = only_guard_span(harness).attributes
    assert a["gen_ai.response.id"] == served.id and served.id.startswith("msg_")
    assert list(a["gen_ai.response.finish_reasons"]) == list(served.finish_reasons) == ["end_turn"]
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (served.input_tokens,
                                                                                  served.output_tokens)


def test_captures_are_judged_offline_as_the_sdk_that_wrote_the_body_or_said_not_judged(harness, llm, tmp_path):
    """LiteLLM sends a route's request in that provider's own format: through the openai SDK (OpenAI,
    Azure OpenAI), as Anthropic's Messages, or in a format of its own (Gemini here). The capture
    line names the SDK whose format its body is in, so ``ctxguard check`` judges the first two as
    it would the SDKs' own captures and says the third was not judged."""
    import json
    import subprocess
    import sys

    from ctxguard.testing import record

    harness.start(mode="observe")
    path = tmp_path / "cap.jsonl"
    with record(str(path)):
        with ctxguard.conversation("azure"):
            litellm.completion(model="azure/gpt-4o", messages=[USER], api_base=llm.origin, api_key="t",
                               api_version="2024-10-21")
        with ctxguard.conversation("anthropic"):
            litellm.completion(model="anthropic/claude-sonnet-4-20250514", messages=[SYSTEM, USER], max_tokens=50,
                               api_base=llm.anthropic_base_url, api_key="t")
            litellm.completion(model="anthropic/claude-sonnet-4-20250514", messages=[USER], max_tokens=50,
                               api_base=llm.anthropic_base_url, api_key="t")
        with ctxguard.conversation("gemini"):
            litellm.completion(model="gemini/gemini-2.5-flash", messages=[SYSTEM, USER], max_tokens=50,
                               api_base=llm.gemini_base_url, api_key="t")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["provider"], line["sdk"]) for line in lines] == [
        ("litellm", "openai"), ("anthropic", "anthropic"), ("anthropic", "anthropic"), ("gcp.gemini", "litellm")]
    assert [line["body"] for line in lines] == [r.json for r in llm.requests]  # each body as sent
    live = [tuple(s.attributes.get("ctxguard.violations", ())) for s in guard_spans(harness)]
    assert live == [("system_at_head",), (), ("system_at_head",), ()]
    out = subprocess.run([sys.executable, "-m", "ctxguard.cli", "check", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines() == [
        "azure: first violation at turn 1: system_at_head",
        "anthropic: first violation at turn 2: system_at_head",
        "gemini: not judged (1 of 1 request not read offline)",
        "checked 3 of 4 requests in 3 conversations: 2 with violations, 1 not judged",
        "not judged offline: 1 gcp.gemini requests (written by litellm in a request format not read offline)",
    ]


#: Two function tools and a tool exchange, OpenAI-shaped, as an app hands them to LiteLLM whatever the route.
TOOLS = [{"type": "function", "function": {
    "name": name, "description": "Look up the status of an order by its id, and say where it is now.",
    "parameters": {"type": "object", "properties": {"order": {"type": "string", "description": "the order id"}},
                   "required": ["order"]}}} for name in ("lookup", "track")]
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"order": "A-1041"}'}}]}
EXCHANGE = [SYSTEM, USER, CALL,
            {"role": "tool", "tool_call_id": "call_1", "content": "in the Pune depot since Monday"},
            {"role": "user", "content": [{"type": "text", "text": "and when will it reach Mumbai?"}]}]


def exchange(kept_as: str) -> list:
    """EXCHANGE, its answer kept as a dict or as the ``litellm.Message`` LiteLLM returned it as."""
    if kept_as == "dict":
        return EXCHANGE
    return [*EXCHANGE[:2], litellm.Message(**CALL), *EXCHANGE[3:]]


def counted_alike(harness) -> list:
    """The LiteLLM calls' span attributes, each span followed by its provider SDK's of the body LiteLLM
    sent: each counted, its messages' roles and digests and the output it reserves (50) as the SDK's."""
    spans = [s.attributes for s in guard_spans(harness)]
    for litellm_span, sdk_span in zip(spans[::2], spans[1::2], strict=True):
        assert litellm_span["ctxguard.payload.tokens"] == sdk_span["ctxguard.payload.tokens"]
        for key in ("ctxguard.message.roles", "ctxguard.message.hashes"):
            assert list(litellm_span[key]) == list(sdk_span[key])
        assert litellm_span["ctxguard.budget.reserved_output"] == sdk_span["ctxguard.budget.reserved_output"] == 50
    return spans[::2]


def test_a_cohere_request_over_its_window_by_coheres_accounting_is_refused_on_its_first_call(harness, llm):
    """Cohere renders a preamble, its tool-use instructions and the tools into the prompt (1,086 tokens
    here; OpenAI Chat's accounting, which the route had, 108): the route is counted as the cohere module
    counts the v2 body LiteLLM sends, so a request that leaves room by OpenAI's count and none by
    Cohere's fails ``payload_under_budget`` on its first call, and enforce mode refuses it unsent."""
    harness.start(mode="enforce")
    with pytest.raises(ctxguard.ContextViolation):
        litellm.completion(model="cohere_chat/command-r-plus-08-2024", messages=[SYSTEM, USER], tools=TOOLS,
                           max_tokens=128_000 - 500, api_base=llm.cohere_base_url + "/v2/chat", api_key="t")
    assert llm.requests == []
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["payload_under_budget"]
    assert a["ctxguard.budget.window"] == 128_000 and a["ctxguard.payload.tokens"] > 500
    assert a["gen_ai.provider.name"] == "litellm"  # the label is LiteLLM's routing's, as before


def _cohere(llm, body):
    cohere = pytest.importorskip("cohere")
    cohere.ClientV2(api_key="t", base_url=llm.cohere_base_url).chat(**body)


def _mistral(llm, body):
    client = pytest.importorskip("mistralai.client")
    with client.Mistral(api_key="t", server_url=llm.mistral_base_url) as mistral:
        mistral.chat.complete(**body)


def _ollama(llm, body):
    ollama = pytest.importorskip("ollama")
    with ollama.Client(host=llm.ollama_host) as client:
        client.chat(**body)


@pytest.mark.parametrize("kept_as", ["dict", "litellm.Message"])
@pytest.mark.parametrize(("model", "base", "path", "native"), [
    ("cohere_chat/command-a-03-2025", lambda llm: llm.cohere_base_url + "/v2/chat", "/v2/chat", _cohere),
    ("cohere_chat/command-r-plus-08-2024", lambda llm: llm.cohere_base_url + "/v2/chat", "/v2/chat", _cohere),
    ("mistral/mistral-large-latest", lambda llm: llm.mistral_base_url, "/chat/completions", _mistral),
    ("ollama_chat/llama3.2", lambda llm: llm.ollama_host, "/api/chat", _ollama),
    ("ollama_chat/qwen3:8b", lambda llm: llm.ollama_host, "/api/chat", _ollama),
])
def test_a_route_is_counted_as_its_providers_sdk_counts_the_body_litellm_sends(harness, llm, model, base, path,
                                                                                native, kept_as):
    """LiteLLM's Cohere v2, Mistral and Ollama ``/api/chat`` routes send the OpenAI-shaped messages and
    tools nearly as they are: ctxguard counts the call as it counts the provider's own SDK sending the
    body that arrived (its framing, preamble and tool rendering), not with OpenAI Chat's accounting.
    (A window for both: LiteLLM's Ollama route is judged against the model table's, not the server's.)"""
    harness.start(mode="observe", policy=ctxguard.Policy(budget=ctxguard.Budget(window=32_768)))
    for messages in ([SYSTEM, USER], exchange(kept_as)):
        litellm.completion(model=model, messages=messages, tools=TOOLS, max_tokens=50, api_base=base(llm),
                           api_key="t")
        native(llm, llm.bodies(path)[-1])
    routed, routed_exchange = counted_alike(harness)
    assert routed_exchange["ctxguard.payload.tokens"] > routed["ctxguard.payload.tokens"]


@pytest.mark.parametrize("kept_as", ["dict", "litellm.Message"])
def test_the_anthropic_route_is_counted_as_the_anthropic_sdk_counts_the_messages_litellm_writes(harness, llm, kept_as):
    """LiteLLM writes Anthropic's Messages itself: the system messages moved to ``system``, a tool's
    result into a user turn, the tools as Anthropic's. The call is counted as the anthropic SDK's call
    of that body is: Claude's framing and its tool-use system prompt, which OpenAI's accounting lacks."""
    anthropic = pytest.importorskip("anthropic")
    harness.start(mode="observe")
    litellm.completion(model="anthropic/claude-sonnet-4-5", messages=exchange(kept_as), tools=TOOLS,
                       tool_choice="required", max_tokens=50, api_base=llm.anthropic_base_url, api_key="t")
    sent = llm.bodies("/messages")[-1]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"] and sent["tool_choice"] == {
        "type": "any"}
    anthropic.Anthropic(api_key="t", base_url=llm.anthropic_base_url).messages.create(**sent)
    routed, sdk = (s.attributes for s in guard_spans(harness))
    assert routed["ctxguard.payload.tokens"] == sdk["ctxguard.payload.tokens"]
    assert list(routed["ctxguard.message.roles"]) == list(sdk["ctxguard.message.roles"]) == [
        "system", "user", "assistant", "user"]
    assert list(routed["ctxguard.message.hashes"]) == list(sdk["ctxguard.message.hashes"])
    assert (routed["gen_ai.provider.name"], routed["gen_ai.request.model"]) == ("anthropic",
                                                                                "anthropic/claude-sonnet-4-5")
    assert list(routed["ctxguard.violations"]) == []


@pytest.mark.parametrize("model", ["gemini/gemini-2.5-flash", "cohere_chat/v1/command-r-plus", "ollama/llama3.2",
                                   "bedrock/invoke/us.meta.llama3-3-70b-instruct-v1:0", "groq/llama-3.1-8b-instant",
                                   "no-such-model-xyz"])
def test_a_route_no_module_reads_keeps_openai_chats_accounting(model):
    """A route whose body ctxguard does not read as its provider's (Gemini's, Cohere's v1 chat, Ollama's
    ``/api/generate``, Bedrock's ``invoke_model`` in the model's own body), an OpenAI-compatible server,
    and a model LiteLLM cannot route: read as OpenAI's Chat Completions, as before."""
    from ctxguard.providers import openai
    from ctxguard.providers.litellm import ADAPTER

    kwargs = {"model": model, "messages": EXCHANGE, "tools": TOOLS, "max_tokens": 50}
    view, chat = ADAPTER.normalise("chat.completions", kwargs), openai.ADAPTER.normalise("chat.completions", kwargs)
    assert (view.items, view.tools, view.prompt_overhead, view.message_framing, view.reply_priming) == (
        chat.items, chat.tools, chat.prompt_overhead, chat.message_framing, chat.reply_priming)


@pytest.mark.parametrize(("model", "base", "extra"), [
    ("cohere_chat/command-a-03-2025", lambda llm: llm.cohere_base_url + "/v2/chat", {"seed": 3}),
    ("mistral/mistral-large-latest", lambda llm: llm.mistral_base_url, {"seed": 3}),
    ("ollama_chat/llama3.2", lambda llm: llm.ollama_host, {"seed": 3, "num_ctx": 8_192}),
    ("anthropic/claude-sonnet-4-5", lambda llm: llm.anthropic_base_url, {}),
    ("bedrock/converse/us.amazon.nova-pro-v1:0", lambda llm: llm.bedrock_endpoint_url,
     {"aws_access_key_id": "test", "aws_secret_access_key": "test", "aws_region_name": "us-east-1"}),
])
def test_a_routes_settings_and_window_are_read_under_the_names_its_provider_takes(harness, llm, model, base, extra):
    """The sampling parameters reach the span whatever the provider calls them (Cohere's ``p``,
    Mistral's ``random_seed``, Ollama's ``options``), and an Ollama call's ``num_ctx`` is its window."""
    harness.start(mode="observe")
    litellm.completion(model=model, messages=[SYSTEM, USER], max_tokens=50, temperature=0.2, top_p=0.5, stop=["##"],
                       api_base=base(llm), api_key="t", **extra)
    a = only_guard_span(harness).attributes
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"], a["gen_ai.request.stop_sequences"]) == (
        0.2, 0.5, ("##",))
    assert a.get("gen_ai.request.seed") == extra.get("seed")
    assert a["ctxguard.budget.reserved_output"] == 50
    if "num_ctx" in extra:
        assert a["ctxguard.budget.window"] == 8_192


# -- Bedrock's Converse, the request LiteLLM writes for it ------------------------------------------------

LLAMA = "bedrock/converse/us.meta.llama3-3-70b-instruct-v1:0"
NOVA = "bedrock/converse/us.amazon.nova-pro-v1:0"
CLAUDE = "bedrock/converse/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
#: Tools as an app may write them: no description, no ``required``, a schema key Converse is not sent;
#: no parameters.
BARE_TOOLS = [{"type": "function", "function": {"name": "cancel", "parameters": {
    "type": "object", "properties": {"order": {"type": "string"}}, "additionalProperties": False}}},
              {"type": "function", "function": {"name": "ping", "description": "Say whether orders are served."}}]
#: A system message after the first turn, which LiteLLM sends as a user turn.
REMINDER = {"role": "system", "content": "Quote the order id in every answer."}


def _aws(llm) -> dict:
    """LiteLLM's Bedrock route at the fake, with credentials to sign its requests with."""
    return {"api_base": llm.bedrock_endpoint_url, "aws_access_key_id": "test", "aws_secret_access_key": "test",
            "aws_region_name": "us-east-1"}


def _converse(llm) -> None:
    """The Converse request LiteLLM sent last, sent again by boto3's ``converse`` (its model id the path's)."""
    boto3 = pytest.importorskip("boto3")
    request = llm.requests[-1]
    model = urllib.parse.unquote(request.path.split("/model/", 1)[1].rsplit("/", 1)[0])
    client = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                          aws_access_key_id="test", aws_secret_access_key="test")
    body = request.json
    for message in body["messages"]:  # an image's bytes go as base64 in JSON; boto3 takes the bytes
        for block in message["content"]:
            if "image" in block:
                block["image"]["source"]["bytes"] = base64.b64decode(block["image"]["source"]["bytes"])
    client.converse(modelId=model, **body)
    client.close()


@pytest.mark.parametrize("kept_as", ["dict", "litellm.Message"])
@pytest.mark.parametrize("model", [LLAMA, NOVA, "bedrock/us.amazon.nova-pro-v1:0"])
def test_a_bedrock_converse_route_is_counted_as_boto3s_converse_of_the_request_litellm_sends(harness, llm, model,
                                                                                             kept_as):
    """LiteLLM's ``bedrock/converse/`` route (and ``bedrock/`` for a model it serves on Converse)
    writes Converse's request: the leading system message in
    ``system``, a later one a user turn after LiteLLM's note, a tool's result a user turn's
    ``toolResult`` merged with the user's text beside it, the calls ``toolUse`` blocks, each tool a
    ``toolSpec`` (its name for a missing description, the schema's type, properties and required
    alone). The call is counted as boto3's ``converse`` of that request is: by the prompt format of
    the model family behind the id (Llama 3.3's template, Nova's), not OpenAI Chat's."""
    harness.start(mode="observe")
    reminded = [*exchange(kept_as)[:4], REMINDER, EXCHANGE[4]]
    for messages in ([SYSTEM, USER], reminded):
        litellm.completion(model=model, messages=messages, tools=[*TOOLS, *BARE_TOOLS], max_tokens=50, **_aws(llm))
        _converse(llm)
    routed, routed_exchange = counted_alike(harness)
    assert list(routed["ctxguard.violations"]) == list(routed_exchange["ctxguard.violations"]) == []
    assert list(routed_exchange["ctxguard.message.roles"]) == ["system", "user", "assistant", "user"]


@pytest.mark.parametrize("model", [LLAMA, NOVA])
def test_a_bedrock_request_over_its_window_by_its_familys_format_is_refused_on_its_first_call(harness, llm, model):
    """Llama 3.3's template writes a date block, a tool prompt and each tool as indented JSON; Nova
    adds its tool prompt: with two tools the request is several times what OpenAI Chat's accounting,
    which the route had, made of it. A request that leaves room by OpenAI's count and none by the
    family's fails ``payload_under_budget`` on its first call, and enforce mode refuses it unsent."""
    from ctxguard.budget import window_for

    window = window_for(model)
    harness.start(mode="enforce")
    with pytest.raises(ctxguard.ContextViolation):
        litellm.completion(model=model, messages=[SYSTEM, USER], tools=TOOLS, max_tokens=window - 200, **_aws(llm))
    assert llm.requests == []
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["payload_under_budget"]
    assert a["ctxguard.budget.window"] == window and a["ctxguard.payload.tokens"] > 200


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "track"}}])
def test_a_forced_tool_choice_on_claudes_converse_route_is_counted_as_forced(harness, llm, tool_choice):
    """Claude on Converse: a tool choice that forces a tool (``required``, a named function) is
    Converse's ``any`` or ``tool``, with which Anthropic's tool-use system prompt is another's."""
    harness.start(mode="observe")
    litellm.completion(model=CLAUDE, messages=[SYSTEM, USER], tools=TOOLS, tool_choice=tool_choice, max_tokens=50,
                       **_aws(llm))
    _converse(llm)
    counted_alike(harness)


def test_a_streamed_bedrock_converse_call_is_read_as_converse_stream(harness, llm):
    """``stream=True`` goes to ``converse-stream``: the span says the request streams, its count is the
    plain call's."""
    harness.start(mode="observe")
    litellm.completion(model=NOVA, messages=[SYSTEM, USER], max_tokens=50, **_aws(llm))
    chunks = list(litellm.completion(model=NOVA, messages=[SYSTEM, USER], max_tokens=50, stream=True, **_aws(llm)))
    assert chunks and llm.requests[-1].path.endswith("/converse-stream")
    plain, streamed = (s.attributes for s in guard_spans(harness))
    assert streamed.get("gen_ai.request.stream") is True and "gen_ai.request.stream" not in plain
    assert streamed["ctxguard.payload.tokens"] == plain["ctxguard.payload.tokens"]


def test_an_image_on_a_bedrock_converse_route_is_counted_by_its_size(harness, llm):
    """A ``data:`` URL's image is the image block LiteLLM sends, priced by its size as Nova prices it
    (1,800 tokens for a 3:2 photo), as boto3's ``converse`` of it is."""
    from tests.providers.test_image import png

    image = "data:image/png;base64," + base64.b64encode(png(1400, 900)).decode()
    harness.start(mode="observe")
    litellm.completion(model=NOVA, messages=[SYSTEM, {"role": "user", "content": [
        {"type": "text", "text": "what is on this label?"}, {"type": "image_url", "image_url": {"url": image}}]}],
        max_tokens=50, **_aws(llm))
    _converse(llm)
    (routed,) = counted_alike(harness)
    assert routed["ctxguard.payload.tokens"] > 1_800
