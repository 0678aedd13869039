"""Ollama's Python SDK (ollama), driven for real over loopback HTTP: what ctxguard records is what arrived."""

from __future__ import annotations

import base64
import gc
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ollama", reason="ollama is not installed (extra 'ollama')")

import ollama
from ollama import AsyncClient, ChatResponse, Client, ResponseError

import ctxguard
from ctxguard.capture import read_capture
from ctxguard.checks import CHECKS
from ctxguard.digest import Digester
from ctxguard.offline import CAPTURED_PROVIDERS, Checker
from ctxguard.testing import FakeLLM, Reply, record
from tests.conftest import KEY, guard_spans, message_digest, only_guard_span
from tests.events import violation_events

MODEL = "llama3.2"
SYSTEM = {"role": "system", "content": "You are the order assistant of Acme Shop."}
HISTORY = [SYSTEM, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
           {"role": "user", "content": "where is my order A-1041?"}]
#: About 280 tokens of English.
PROSE = "The parcel left the depot in Lyon on Monday and reached the sorting centre in Pune on Friday. " * 14
#: A history longer than a 2048-token window: the server would drop its head silently.
LONG = [SYSTEM, *({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "words " * 120}
                  for i in range(40)), {"role": "user", "content": "and now?"}]
# A 1x1 PNG, base64: an image as the SDK sends it.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()


@pytest.fixture
def client(llm):
    with Client(host=llm.ollama_host) as c:
        yield c


@pytest.fixture
def default_client(llm, monkeypatch):
    """The module's own client (``ollama.chat`` is its bound method), pointed at the fake."""
    monkeypatch.setattr(ollama._client._client, "base_url", llm.ollama_host)
    return ollama._client


def wire_digest(body: bytes) -> str:
    return Digester(KEY).bytes(body)


def test_chat_span_matches_the_body_that_arrived(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("order-41"):
        reply = client.chat(model=MODEL, messages=HISTORY, options={"num_predict": 300, "num_ctx": 8192})
    assert type(reply) is ChatResponse
    assert reply.message.content == "ok 1"
    sent = llm.bodies("/api/chat")[0]
    served = llm.responses[0]
    span = only_guard_span(harness)
    a = span.attributes
    assert span.name == f"chat {MODEL}"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "ollama"
    assert a["gen_ai.request.model"] == sent["model"] == MODEL
    assert a["gen_ai.request.max_tokens"] == sent["options"]["num_predict"] == 300
    assert a["ctxguard.budget.window"] == sent["options"]["num_ctx"] == 8192
    assert a["ctxguard.budget.reserved_output"] == 300
    assert a["gen_ai.conversation.id"] == "order-41"
    assert a["ctxguard.payload.messages"] == len(sent["messages"]) == 4
    assert list(a["ctxguard.message.roles"]) == [m["role"] for m in sent["messages"]]
    assert list(a["ctxguard.message.hashes"]) == [message_digest(m["role"], m["content"]) for m in sent["messages"]]
    assert a["ctxguard.head.role"] == "system"
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert "gen_ai.response.id" not in a and served.id is None  # an Ollama answer has no id
    assert a["gen_ai.response.model"] == reply.model == served.model
    assert list(a["gen_ai.response.finish_reasons"]) == [reply.done_reason] == list(served.finish_reasons) == ["stop"]
    assert a["gen_ai.usage.input_tokens"] == reply.prompt_eval_count == served.input_tokens > 0
    assert a["gen_ai.usage.output_tokens"] == reply.eval_count == served.output_tokens > 0
    assert list(a["ctxguard.violations"]) == []
    assert harness.metric("ctxguard_calls_total", provider="ollama", operation="chat") == 1
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


def test_module_level_chat_is_guarded_exactly_once(harness, llm, default_client):
    """``ollama.chat`` is the default client's method, bound before any patching: one wrapper, one
    span, one count per call, whether the arguments are named or positional."""
    harness.start(mode="observe")
    reply = ollama.chat(model=MODEL, messages=HISTORY)
    assert type(reply) is ChatResponse and reply.message.content == "ok 1"
    ollama.chat(MODEL, HISTORY[1:])  # positional: model, messages
    spans = guard_spans(harness)
    assert len(spans) == len(llm.requests) == 2
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [[], ["system_at_head"]]
    assert [s.attributes["ctxguard.payload.messages"] for s in spans] == [4, 3]
    assert [s.attributes["gen_ai.request.model"] for s in spans] == [MODEL, MODEL]
    assert [s.attributes["ctxguard.wire.hash"] for s in spans] == [wire_digest(r.body) for r in llm.requests]
    # The default client's host, as moved: where its requests went.
    assert [(s.attributes["server.address"], s.attributes["server.port"]) for s in spans] == [
        ("127.0.0.1", llm.port)] * 2
    assert harness.metric("ctxguard_calls_total", provider="ollama", operation="chat") == 2
    assert harness.metric("ctxguard_checks_total", check="system_at_head", outcome="fail") == 1
    # The default client's method through the class is the same call site: once too.
    default_client.chat(model=MODEL, messages=HISTORY)
    assert harness.metric("ctxguard_calls_total", provider="ollama", operation="chat") == 3
    assert len(guard_spans(harness)) == 3


def test_module_level_chat_is_guarded_once_when_ollama_is_imported_after_instrument(llm):
    """The other import order: the post-import hook patches the module and the class after
    ``ollama/__init__`` bound ``chat``; still one span per call."""
    script = textwrap.dedent(f"""
        import os
        os.environ["OLLAMA_HOST"] = {llm.ollama_host!r}
        import ctxguard
        from ctxguard.testing.plugin import GuardHarness
        harness = GuardHarness()
        harness.start(mode="observe")
        import ollama
        ollama.chat(model="llama3.2", messages=[{{"role": "user", "content": "hi"}}])
        ollama.Client().chat(model="llama3.2", messages=[{{"role": "user", "content": "hi"}}])
        print(len(harness.spans()), harness.metric("ctxguard_calls_total", provider="ollama", operation="chat"))
    """)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2.0"]
    assert len(llm.requests) == 2


@pytest.mark.asyncio
async def test_async_chat_is_guarded(harness, llm):
    harness.start(mode="observe")
    async with AsyncClient(host=llm.ollama_host) as client:
        reply = await client.chat(model=MODEL, messages=HISTORY[1:])
    assert type(reply) is ChatResponse
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["system_at_head"]
    assert a["ctxguard.head.role"] == "user"
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert a["gen_ai.usage.input_tokens"] == reply.prompt_eval_count == llm.responses[0].input_tokens
    assert a["gen_ai.usage.output_tokens"] == reply.eval_count
    assert harness.metric("ctxguard_violations_total", check="system_at_head", provider="ollama") == 1


def _chunks(stream) -> list[dict]:
    chunks = list(stream)
    assert all(type(c) is ChatResponse for c in chunks)  # the SDK's own objects
    dumped = [c.model_dump() for c in chunks]
    for chunk in dumped:  # what differs between two answers of the server: the time
        chunk.pop("created_at")
    return dumped


def test_stream_chunks_identical_to_uninstrumented_and_span_complete(harness, llm, client):
    kwargs = dict(model=MODEL, messages=HISTORY, stream=True, options={"num_predict": 64})
    llm.script("the parcel is in Pune")
    plain = _chunks(client.chat(**kwargs))
    harness.start(mode="observe")
    llm.script("the parcel is in Pune")
    guarded = _chunks(client.chat(**kwargs))
    assert guarded == plain
    assert "".join(c["message"]["content"] for c in guarded) == "the parcel is in Pune"
    served = llm.responses[-1]
    a = only_guard_span(harness).attributes
    assert json.loads(llm.requests[-1].body)["stream"] is True
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[-1].body)  # sent on the first chunk, judged
    assert a["gen_ai.response.model"] == served.model
    assert list(a["gen_ai.response.finish_reasons"]) == [guarded[-1]["done_reason"]] == ["stop"]
    assert a["gen_ai.usage.input_tokens"] == served.input_tokens == plain[-1]["prompt_eval_count"]
    assert a["gen_ai.usage.output_tokens"] == served.output_tokens == plain[-1]["eval_count"] > 0
    assert "ctxguard.stream.abandoned" not in a


@pytest.mark.asyncio
async def test_async_stream_chunks_unchanged_and_span_complete(harness, llm):
    harness.start(mode="observe")
    llm.script("streamed answer")
    async with AsyncClient(host=llm.ollama_host) as client:
        stream = await client.chat(model=MODEL, messages=HISTORY, stream=True)
        chunks = [chunk async for chunk in stream]
    assert all(type(c) is ChatResponse for c in chunks)
    assert "".join(c.message.content for c in chunks) == "streamed answer"
    served = llm.responses[0]
    a = only_guard_span(harness).attributes
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        served.input_tokens, served.output_tokens) == (chunks[-1].prompt_eval_count, chunks[-1].eval_count)
    assert "ctxguard.stream.abandoned" not in a


def test_a_stream_abandoned_early_ends_its_span_abandoned(harness, llm, client):
    harness.start(mode="observe")
    llm.script("word " * 300)
    stream = client.chat(model=MODEL, messages=HISTORY, stream=True)
    first = next(stream)
    assert first.message.content and first.done is False
    assert guard_spans(harness) == []
    del stream
    gc.collect()
    a = only_guard_span(harness).attributes
    assert a["ctxguard.stream.abandoned"] is True
    assert a["ctxguard.wire.hash"] == wire_digest(llm.requests[0].body)
    assert "gen_ai.usage.input_tokens" not in a  # the counts come with the last chunk, never read


@pytest.mark.asyncio
async def test_an_async_stream_abandoned_early_ends_its_span_abandoned(harness, llm):
    harness.start(mode="observe")
    llm.script("word " * 300)
    async with AsyncClient(host=llm.ollama_host) as client:
        stream = await client.chat(model=MODEL, messages=HISTORY, stream=True)
        async for _ in stream:
            break
        await stream.aclose()
        del stream
        gc.collect()
    assert only_guard_span(harness).attributes["ctxguard.stream.abandoned"] is True


def test_the_window_is_num_ctx_else_the_configured_default(harness, llm, client, monkeypatch):
    harness.start(mode="observe")
    client.chat(model=MODEL, messages=HISTORY, options={"num_ctx": 16384})
    client.chat(model=MODEL, messages=HISTORY)  # the server's default: 4096 unless configured
    harness.start(mode="observe", ollama_num_ctx=32768)
    client.chat(model=MODEL, messages=HISTORY)
    client.chat(model=MODEL, messages=HISTORY, options=ollama.Options(num_ctx=2048))  # the request's own wins
    monkeypatch.setenv("CTXGUARD_OLLAMA_NUM_CTX", "65536")
    harness.start(mode="observe", ollama_num_ctx=32768)  # the environment wins over the code
    client.chat(model=MODEL, messages=HISTORY)
    harness.start(mode="observe", policy=ctxguard.Policy(budget=ctxguard.Budget(window=1000)))
    client.chat(model=MODEL, messages=HISTORY, options={"num_ctx": 16384})  # the app's Budget wins over all
    windows = [s.attributes["ctxguard.budget.window"] for s in guard_spans(harness)]
    assert windows == [16384, 4096, 32768, 2048, 65536, 1000]
    assert [b.get("options", {}).get("num_ctx") for b in llm.bodies()] == [16384, None, None, 2048, None, 16384]


def test_a_prompt_over_num_ctx_fails_the_budget_before_the_server_truncates_it(harness, llm, client):
    """Observe mode: the request goes, and the server keeps only what fits (its ``prompt_eval_count``
    is capped at the window); ctxguard said so before it left, and the answer's count shows it."""
    harness.start(mode="observe")
    reply = client.chat(model=MODEL, messages=LONG, options={"num_ctx": 2048})
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["payload_under_budget", "provider_kept_all"]
    assert a["ctxguard.budget.window"] == 2048 and a["ctxguard.payload.tokens"] > 2048
    assert a["ctxguard.budget.headroom"] < 0
    served = llm.responses[0]
    assert served.truncated_tokens > 0  # what the server dropped, silently: the reply says nothing of it
    assert reply.prompt_eval_count == served.input_tokens <= 2048
    assert harness.metric("ctxguard_violations_total", check="payload_under_budget", provider="ollama") == 1
    # Without num_ctx: the same prompt against the default window (4096 here, and on the fake).
    llm.clear()
    harness.exporter.clear()
    client.chat(model=MODEL, messages=LONG)
    # Cut to 4,096, it kept more than half: within how far providers' counts may differ from ctxguard's,
    # so not ``provider_kept_all``'s to say (docs/budget.md, "Kept whole"); the budget said it.
    assert list(only_guard_span(harness).attributes["ctxguard.violations"]) == ["payload_under_budget"]
    assert llm.responses[0].truncated_tokens > 0


def kept_all(harness) -> list[str]:  # type: ignore[no-untyped-def]
    """Each call's ``provider_kept_all`` outcome, as its span and the metrics tell it."""
    outcomes = []
    for span in guard_spans(harness):
        events = [e for e in violation_events(span) if e.attributes.get("check") == "provider_kept_all"]
        skipped = [s for s in span.attributes.get("ctxguard.checks.skipped", ()) if s.startswith("provider_kept_all")]
        outcomes.append("fail" if events else "skip" if skipped else "pass")
    return outcomes


def test_a_server_window_below_the_configured_one_is_seen_in_its_answer(harness, llm, client, monkeypatch):
    """The server holds prompts to less than ctxguard was told (its OLLAMA_CONTEXT_LENGTH is 1024,
    ``ollama_num_ctx`` says 32768): the budget passes, the server cuts the prompt, and its
    ``prompt_eval_count`` is what fails ``provider_kept_all``. The next call, which fits, passes.
    Counted lazily: the bytes pass the budget, and the answer is what has the prompt counted exactly."""
    llm.ollama_num_ctx = 1024
    monkeypatch.delenv("CTXGUARD_TOKENIZER", raising=False)  # the choice is the test's (CI runs one suite eager)
    harness.start(mode="observe", ollama_num_ctx=32768, tokenizer="lazy")
    history = [SYSTEM, *({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + PROSE}
                         for i in range(12)), {"role": "user", "content": "where is my order A-1041?"}]
    with ctxguard.conversation("order-41"):
        reply = client.chat(model=MODEL, messages=history)
        assert reply.prompt_eval_count == llm.responses[0].input_tokens <= 1024 and llm.responses[0].truncated_tokens
        client.chat(model=MODEL, messages=[SYSTEM, history[-1]])  # the app trims its history: it fits
    cut, fits = guard_spans(harness)
    assert "payload_under_budget" not in cut.attributes["ctxguard.violations"]
    assert list(cut.attributes["ctxguard.violations"]) == ["provider_kept_all"]
    assert cut.attributes["ctxguard.payload.tokens_source"] == "estimate"  # judged before sending on bytes
    event = next(e for e in violation_events(cut) if e.attributes["check"] == "provider_kept_all")
    assert event.attributes["detail"].startswith(f"{reply.prompt_eval_count:,} input tokens reported for ")
    assert list(fits.attributes.get("ctxguard.violations", ())) == [], fits.attributes
    assert kept_all(harness) == ["fail", "pass"]
    assert harness.metric("ctxguard_violations_total", check="provider_kept_all", provider="ollama") == 1
    assert harness.metric("ctxguard_checks_total", check="provider_kept_all", outcome="fail") == 1
    assert harness.metric("ctxguard_checks_total", check="provider_kept_all", outcome="pass") == 1


@pytest.mark.asyncio
async def test_enforce_mode_refuses_an_over_window_prompt_before_it_is_sent(harness, llm, client, default_client):
    harness.start(mode="enforce")
    options = {"num_ctx": 2048}
    with pytest.raises(ctxguard.ContextViolation) as info:
        client.chat(model=MODEL, messages=LONG, options=options)
    assert [v.check for v in info.value.violations] == ["payload_under_budget"]
    with pytest.raises(ctxguard.ContextViolation):
        client.chat(model=MODEL, messages=LONG, options=options, stream=True)
    with pytest.raises(ctxguard.ContextViolation):
        ollama.chat(model=MODEL, messages=LONG, options=options)
    async with AsyncClient(host=llm.ollama_host) as aclient:
        with pytest.raises(ctxguard.ContextViolation):
            await aclient.chat(model=MODEL, messages=LONG, options=options)
        with pytest.raises(ctxguard.ContextViolation):
            await aclient.chat(model=MODEL, messages=LONG, options=options, stream=True)
    assert llm.requests == []  # nothing reached the server, so nothing was truncated
    assert harness.metric("ctxguard_blocked_total", check="payload_under_budget") == 5
    client.chat(model=MODEL, messages=LONG, options={"num_ctx": 65536})  # a window it fits in
    assert len(llm.requests) == 1 and llm.responses[0].truncated_tokens == 0


def _lookup(order: str) -> str:
    """Find an order by its id.

    Args:
      order: The order's id, e.g. A-1041

    Returns:
      str: where the order is
    """
    return "shipped"


def _exchange(tool_name: str | None = "lookup") -> list:
    result = {"role": "tool", "content": "shipped to Pune"}
    if tool_name:
        result["tool_name"] = tool_name
    return [SYSTEM, {"role": "user", "content": "where is A-1041?"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {
                "name": "lookup", "arguments": {"order": "A-1041"}}}]},
            result, {"role": "assistant", "content": "It shipped to Pune."}]


def test_a_tool_exchange_is_paired_by_name_and_a_cut_one_fails(harness, llm, client):
    harness.start(mode="observe")
    llm.script(Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}}]))
    asked = client.chat(model=MODEL, messages=_exchange()[:2], tools=[_lookup])
    call = asked.message.tool_calls[0]
    assert call.function.name == "lookup" and call.function.arguments == {"order": "A-1041"}
    # The app answers the call with the SDK's own objects, as its docs show.
    history = [*_exchange()[:2], asked.message, {"role": "tool", "content": "shipped", "tool_name": call.function.name}]
    client.chat(model=MODEL, messages=history, tools=[_lookup])
    client.chat(model=MODEL, messages=_exchange())
    client.chat(model=MODEL, messages=[*_exchange()[:3], *_exchange()[4:]])  # a trimmer cut the result
    client.chat(model=MODEL, messages=[*_exchange()[:2], *_exchange()[3:]])  # ... or the call
    client.chat(model=MODEL, messages=_exchange(tool_name="other"))  # a result naming another tool
    spans = guard_spans(harness)
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [
        [], [], [], ["tool_pairs_intact"], ["tool_pairs_intact"], ["tool_pairs_intact"]]
    assert spans[2].attributes["ctxguard.message.hashes"][2] == message_digest(
        "assistant", 'lookup\n{"order": "A-1041"}', ("id:tool_call:lookup",))
    assert spans[2].attributes["ctxguard.message.hashes"][3] == message_digest(
        "tool", "shipped to Pune", ("id:tool_result:lookup",))
    details = [[e.attributes["detail"] for e in violation_events(s)] for s in spans[3:]]
    assert details == [["tool call 'lookup' (message 2) has no result right after it"],
                       ["tool result 'lookup' (message 2) answers no call right before it"],
                       ["tool result 'other' (message 3) answers no call right before it",
                        "tool call 'lookup' (message 2) has no result right after it"]]


def test_tools_count_as_the_sdk_sends_them_and_a_format_costs_nothing(harness, llm, client):
    """Tools are rendered into the prompt (a Python function as the schema the SDK makes of it); a
    ``format`` schema constrains the sampling and is not in the prompt: the server's count agrees."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    tool = {"type": "function", "function": {"name": "lookup", "description": "Find an order by its id", "parameters": {
        "type": "object", "properties": {"order": {"type": "string", "description": "The order's id"}}}}}
    harness.start(mode="observe")
    client.chat(model=MODEL, messages=HISTORY)
    client.chat(model=MODEL, messages=HISTORY, tools=[_lookup])
    client.chat(model=MODEL, messages=HISTORY, tools=[tool])
    client.chat(model=MODEL, messages=HISTORY, format=schema)
    plain, function, schema_tool, formatted = (s.attributes for s in guard_spans(harness))
    assert function["ctxguard.payload.tokens"] > plain["ctxguard.payload.tokens"]
    assert function["ctxguard.budget.tools"] > 0 and schema_tool["ctxguard.budget.tools"] > 0
    assert formatted["ctxguard.payload.tokens"] == plain["ctxguard.payload.tokens"]
    sent = llm.bodies()
    assert sent[1]["tools"][0]["function"]["name"] == "_lookup"  # what the SDK made of the function
    assert sent[1]["tools"][0]["function"]["parameters"]["properties"]["order"]["description"].startswith("The order")
    assert sent[3]["format"] == schema
    served = [r.input_tokens for r in llm.responses]
    assert served[1] > served[0] and served[3] == served[0]
    # Tools given as a generator are the SDK's to consume: left unread, sent whole.
    client.chat(model=MODEL, messages=HISTORY[1:], tools=(t for t in [tool]))
    last = guard_spans(harness)[-1].attributes
    assert list(last["ctxguard.violations"]) == ["system_at_head"]  # the messages were still judged
    assert llm.bodies()[-1]["tools"][0]["function"]["name"] == "lookup"


def test_images_and_thinking_are_read_as_sent(harness, llm, client):
    harness.start(mode="observe")
    with ctxguard.conversation("images"):
        ctxguard.record_fact("order_id", "A-1041")
        client.chat(model="gemma3:4b", messages=[
            SYSTEM, {"role": "user", "content": "what is in this parcel?", "images": [PNG]},
            {"role": "assistant", "content": "A box.", "thinking": "order A-1041 holds a box"},
            {"role": "user", "content": "thanks"}], think=True)
        client.chat(model="gemma3:4b", messages=[
            SYSTEM, ollama.Message(role="user", content="what is in this parcel?", images=[ollama.Image(value=PNG)]),
            ollama.Message(role="assistant", content="A box.", thinking="order A-1041 holds a box"),
            ollama.Message(role="user", content="thanks")], think=True)
    dicts, objects = (s.attributes for s in guard_spans(harness))
    assert list(dicts["ctxguard.message.hashes"]) == list(objects["ctxguard.message.hashes"])
    assert dicts["ctxguard.payload.tokens"] == objects["ctxguard.payload.tokens"]
    import hashlib
    image_ref = "image:" + hashlib.blake2b(PNG.encode(), digest_size=16).hexdigest()
    assert dicts["ctxguard.message.hashes"][1] == message_digest("user", "what is in this parcel?", (image_ref,))
    assert dicts["ctxguard.message.hashes"][2] == message_digest(
        "assistant", "A box.\norder A-1041 holds a box", ("id:thinking",))
    assert list(dicts["ctxguard.facts.present"]) == ["order_id@1"]  # found in the thinking sent back
    assert PNG[:24] not in str(dict(dicts))
    body = llm.bodies()[0]
    assert body["messages"][1]["images"] == [PNG] and body["think"] is True

    from ctxguard.providers.ollama import ADAPTER

    def cost(model: str) -> int:
        return ADAPTER.normalise("chat", {"model": model, "messages": [
            {"role": "user", "content": "", "images": [PNG, PNG]}]}).items[0][4]

    assert cost("gemma3:4b") == 2 * 256 and cost("llava:7b") == 2 * 576


def _error(call) -> tuple:
    with pytest.raises(ResponseError) as info:
        call()
    e = info.value
    return type(e), e.status_code, e.error, str(e), e.args


@pytest.mark.parametrize("status", [400, 404, 500])
def test_response_errors_pass_through_unchanged(harness, status):
    def run() -> list[tuple]:
        with FakeLLM(seed="errors") as llm, Client(host=llm.ollama_host) as client:
            llm.script(Reply(status=status), Reply(status=status))
            return [_error(lambda: client.chat(model=MODEL, messages=HISTORY)),
                    _error(lambda: list(client.chat(model=MODEL, messages=HISTORY, stream=True)))]

    plain = run()
    harness.start(mode="observe")
    guarded = run()
    assert guarded == plain
    assert [e[1] for e in guarded] == [status, status]
    if status == 404:
        assert guarded[0][2] == f'model "{MODEL}" not found, try pulling it first'
    spans = guard_spans(harness)
    assert [s.attributes["error.type"] for s in spans] == ["ResponseError"] * 2
    assert all(s.status.status_code.name == "ERROR" for s in spans)


def test_an_error_midway_through_a_stream_ends_the_call_in_error(harness, llm, client):
    harness.start(mode="observe")
    llm.script(Reply(text="the parcel is in Pune", stream_failure="error"))
    stream = client.chat(model=MODEL, messages=HISTORY, stream=True)
    with pytest.raises(ResponseError) as info:
        list(stream)
    assert info.value.status_code == -1  # the SDK's own: the status (200) was sent before the error line
    span = only_guard_span(harness)
    assert span.attributes["error.type"] == "ResponseError"
    assert "ctxguard.stream.abandoned" not in span.attributes


def test_uninstrument_restores_the_sdk(harness, llm, client, default_client):
    original_class, original_module = vars(Client)["chat"], ollama.chat
    async_original = vars(AsyncClient)["chat"]
    harness.start(mode="observe")
    assert vars(Client)["chat"] is not original_class and ollama.chat is not original_module
    assert vars(AsyncClient)["chat"] is not async_original
    ctxguard.uninstrument()
    assert vars(Client)["chat"] is original_class
    assert vars(AsyncClient)["chat"] is async_original
    assert ollama.chat is original_module
    client.chat(model=MODEL, messages=HISTORY)
    ollama.chat(model=MODEL, messages=HISTORY)
    assert guard_spans(harness) == [] and len(llm.requests) == 2


def test_captured_bodies_are_judged_offline_like_live(tmp_path: Path, harness, llm, client):
    harness.start(mode="observe")
    path = tmp_path / "ollama.jsonl"
    with record(str(path)), ctxguard.conversation("o-2"):
        ctxguard.record_fact("city", "Lyon")
        client.chat(model=MODEL, messages=[SYSTEM, {"role": "user", "content": "ship to Lyon"}])
        list(client.chat(model=MODEL, messages=[{"role": "user", "content": "and again"}], stream=True))
        client.chat(model=MODEL, messages=LONG, options={"num_ctx": 2048})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    requests = [line for line in lines if "body" in line]
    assert [r["provider"] for r in requests] == ["ollama"] * 3
    assert [r["body"] for r in requests] == llm.bodies()
    live = [list(s.attributes["ctxguard.violations"]) for s in guard_spans(harness)]
    assert live == [[], ["system_at_head", "fact_present"],
                    ["payload_under_budget", "fact_present", "provider_kept_all"]]
    with path.open("rb") as f:
        results = [r for _, r in Checker().judge(read_capture(f, CAPTURED_PROVIDERS))]
    # A capture holds the requests, not their answers: offline, the checks judged before sending.
    assert [sorted(c for c, outcome in r.outcomes.items() if outcome == "fail") for r in results] == [
        sorted(c for c in v if c in CHECKS) for v in live]


#: What Ollama's Qwen 3.5 renderer (ollama/ollama model/renderers/qwen35.go, which renders
#: ``qwen3.6``) writes after the tools: the format it asks the model to call them in.
QWEN35_TOOL_POSTAMBLE = (
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but "
    "NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do "
    "not tell the user about function calls\n</IMPORTANT>")
#: Qwen's special tokens: one token each.
QWEN_SPECIAL = re.compile(r"(<\|im_start\|>|<\|im_end\|>|<think>|</?tool_call>)")
#: A tool as an app sends it, its fields in the order Ollama's Go types write them.
LOOKUP_TOOL = {"type": "function", "function": {
    "name": "lookup_order", "description": "Find an order by its id.",
    "parameters": {"type": "object", "required": ["order"],
                   "properties": {"order": {"type": "string", "description": "The order's id, e.g. A-1041"}}}}}


def _qwen35_prompt(question: str, tool: dict) -> str:
    """The prompt the renderer makes of one user message and one tool (no ``think`` given)."""
    return ("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
            + json.dumps(tool, separators=(", ", ": ")) + QWEN35_TOOL_POSTAMBLE + "<|im_end|>\n"
            + "<|im_start|>user\n" + question.strip() + "<|im_end|>\n<|im_start|>assistant\n<think>\n")


def test_tools_over_num_ctx_by_the_templates_count_fail_the_budget_on_the_first_call(
        harness, llm, client, monkeypatch):
    """A request whose tools' JSON fits ``num_ctx`` but whose prompt, as the model's chat template
    renders the tools (Qwen 3.5's instructions and all), is just over it: the server would cut it
    silently; ctxguard says so before it leaves, on its first call (no report learnt from yet). The
    count it gives is the rendered prompt's to a token."""
    from ctxguard.tokens import default_counter

    monkeypatch.setenv("CTXGUARD_TOKENIZER", "eager")
    count = default_counter().count
    question = "where is my order A-1041? " * 20
    rendered = sum(1 if QWEN_SPECIAL.fullmatch(piece) else count(piece)
                   for piece in QWEN_SPECIAL.split(_qwen35_prompt(question, LOOKUP_TOOL)) if piece)
    messages = [{"role": "user", "content": question}]
    as_json = count(question) + count(json.dumps(LOOKUP_TOOL, sort_keys=True)) + 3 + 3  # the count before
    num_ctx = rendered - 5
    assert as_json < num_ctx - 150
    only_budget = ctxguard.Policy(system_at_head=False)  # the rendered prompt above has no system message
    harness.start(mode="observe", policy=only_budget)
    client.chat(model="qwen3.6:latest", messages=messages, tools=[LOOKUP_TOOL], options={"num_ctx": num_ctx})
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.violations"]) == ["payload_under_budget"]
    assert a["ctxguard.budget.window"] == num_ctx == llm.bodies()[0]["options"]["num_ctx"]
    assert abs(a["ctxguard.payload.tokens"] - rendered) <= 1
    assert a["ctxguard.payload.tokens"] > num_ctx
    # Enforced, it never reaches the server; in a window the rendered prompt fits, it goes.
    harness.start(mode="enforce", policy=only_budget)
    with pytest.raises(ctxguard.ContextViolation):
        client.chat(model="qwen3.6:latest", messages=messages, tools=[LOOKUP_TOOL], options={"num_ctx": num_ctx})
    client.chat(model="qwen3.6:latest", messages=messages, tools=[LOOKUP_TOOL], options={"num_ctx": rendered})
    assert len(llm.requests) == 2


def test_the_models_default_system_prompt_is_counted_when_the_request_has_none(harness, llm, client, monkeypatch):
    """The server puts the Modelfile's ``SYSTEM`` first when the request's first message is not a
    system one (Mistral Small 3.2's: 482 tokens, and its two control tokens): counted then, not when
    the request brings its own; a model whose template ctxguard does not know gets OpenAI's framing."""
    from ctxguard.providers.ollama import template

    monkeypatch.setenv("CTXGUARD_TOKENIZER", "eager")
    harness.start(mode="observe")
    for model in ("mistral-small3.2:24b", "my-finetune:latest"):
        client.chat(model=model, messages=HISTORY[1:])
        client.chat(model=model, messages=[{"role": "system", "content": ""}, *HISTORY[1:]])
    mistral_none, mistral_own, other_none, other_own = (
        s.attributes["ctxguard.payload.tokens"] for s in guard_spans(harness))
    small = template("mistral-small3.2:24b")
    assert small is not None and small.system == 2 + 482
    assert mistral_none - mistral_own == small.system - small.framing  # the empty system message's markers
    assert other_own - other_none == 3  # OpenAI's framing of the empty system message, nothing more


def test_all_caps_text_to_a_mistral_model_is_counted_as_mistrals_tokenizers_read_it(harness, llm, client, monkeypatch):
    """Ollama's Mistral templates run Mistral's own tokenizers: an all-caps run costs
    ``CAPITALS_PER_LETTER`` more a capital, as through Mistral's API (test_mistral.py), whether the
    message is read inline (a plain one) or whole (with an image); a model of another family, nothing."""
    from ctxguard.providers.mistral import CAPITALS_PER_LETTER
    from ctxguard.tokens import capitals_surplus, default_counter

    monkeypatch.setenv("CTXGUARD_TOKENIZER", "eager")
    shout = "ONLY SINGLE NUMBER IN RESPONSE"  # 26 capitals: 3 tokens more
    surplus = capitals_surplus(shout, CAPITALS_PER_LETTER)
    assert surplus == 3
    harness.start(mode="observe")
    pixel = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    for model in ("mistral-nemo:12b", "qwen3.6:latest"):
        client.chat(model=model, messages=[{"role": "user", "content": shout}])
        client.chat(model=model, messages=[{"role": "user", "content": shout.lower()}])
        client.chat(model=model, messages=[{"role": "user", "content": shout, "images": [pixel]}])
        client.chat(model=model, messages=[{"role": "user", "content": shout.lower(), "images": [pixel]}])
    tokens = [s.attributes["ctxguard.payload.tokens"] for s in guard_spans(harness)]
    nemo, qwen = tokens[:4], tokens[4:]
    caps = [m["content"] for m in llm.bodies("/api/chat")[0]["messages"]]
    assert caps == [shout]  # sent as written
    count = default_counter().count
    assert nemo[0] - nemo[1] == count(shout) - count(shout.lower()) + surplus
    assert nemo[2] - nemo[3] == count(shout) - count(shout.lower()) + surplus
    assert qwen[0] - qwen[1] == qwen[2] - qwen[3] == count(shout) - count(shout.lower())


def test_digits_to_a_mistral_model_are_counted_one_a_token(harness, llm, client, monkeypatch):
    """Ollama's Mistral templates run Mistral's tokenizers, which take each digit as a token
    (``mistral.tokenizer_surplus``), as through Mistral's API, whether the message is read inline (a
    plain one) or whole (with an image); a Qwen model's count is cl100k's."""
    from ctxguard.tokens import default_counter, digit_surplus

    monkeypatch.setenv("CTXGUARD_TOKENIZER", "eager")
    dated, plain = "order 5551234567 ships on 2024-08-27", "order ships on monday"
    assert digit_surplus(dated) == 10
    harness.start(mode="observe")
    for model in ("mistral-nemo:12b", "qwen3.6:latest"):
        for text in (dated, plain):
            client.chat(model=model, messages=[{"role": "user", "content": text}])
            client.chat(model=model, messages=[{"role": "user", "content": text, "images": [PNG]}])
    tokens = [s.attributes["ctxguard.payload.tokens"] for s in guard_spans(harness)]
    count = default_counter().count
    nemo, qwen = tokens[:4], tokens[4:]
    assert nemo[0] - nemo[2] == nemo[1] - nemo[3] == count(dated) - count(plain) + 10
    assert qwen[0] - qwen[2] == qwen[1] - qwen[3] == count(dated) - count(plain)
