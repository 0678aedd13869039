"""The OpenTelemetry GenAI conventions on ctxguard's own span, at the revision docs/operations.md pins
("GenAI conventions"): per provider, a chat call's span carries every attribute of the inference
client span that the call can have, with the values of the body that arrived and of the answer the
fake served (cache and reasoning usage reported the way each provider reports them); the content
it captures (opt-in) validates against the conventions' JSON schemas; each failed check is a
``gen_ai.evaluation.result`` event; ``gen_ai.conversation.compacted`` marks exactly the request
that lost turns."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import openai
import pytest
from google import genai
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes

import ctxguard
from ctxguard import Policy
from ctxguard.providers.openai import OpenAIAdapter
from ctxguard.telemetry import spans as attr
from ctxguard.testing import FakeLLM, Reply

# The inference client span (``gen_ai.inference.client``) of semantic-conventions-genai's
# model/gen-ai/spans.yaml at commit 7e7e4e763354b505b8e1f76512f17a1977b00f70, by requirement level.
# Opt-in (content) and the agent attributes are left out: content is tested below, against its schema.
REQUIRED = {"gen_ai.operation.name", "gen_ai.provider.name"}
CONDITIONALLY_REQUIRED = {
    "gen_ai.request.model": "if available",
    "server.port": "if server.address is set",
    "error.type": "if the operation ended in an error",
    "gen_ai.request.choice.count": "if available, in the request, and != 1",
    "gen_ai.request.top_k": "if applicable",
    "gen_ai.request.seed": "if the request includes a seed",
    "gen_ai.output.type": "if the request includes an output format",
    "gen_ai.request.stream": "if and only if the request is streaming",
    "gen_ai.conversation.id": "when available",
}
RECOMMENDED = {
    "server.address", "gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.request.max_tokens",
    "gen_ai.request.temperature", "gen_ai.request.top_p", "gen_ai.request.stop_sequences",
    "gen_ai.request.frequency_penalty", "gen_ai.request.presence_penalty", "gen_ai.response.id",
    "gen_ai.response.model", "gen_ai.response.finish_reasons",
    "gen_ai.response.time_to_first_chunk",  # if the request was a streaming request
    "gen_ai.usage.reasoning.output_tokens",  # when applicable
}
CONVENTIONS = REQUIRED | set(CONDITIONALLY_REQUIRED) | RECOMMENDED
#: Not in the request or answer of a successful call to any provider here.
NEVER_HERE = {"error.type", "gen_ai.request.choice.count"}


def conventions(span: Any) -> dict[str, Any]:
    return {k: v for k, v in span.attributes.items() if k in CONVENTIONS}


def only_span(harness: Any) -> Any:
    spans = harness.spans()
    assert len(spans) == 1
    return spans[0]


POLICY = Policy(system_at_head=True)


def assert_server(a: dict[str, Any], llm: FakeLLM) -> None:
    """``server.address`` / ``server.port`` name where the request went: the fake, whose URL gives
    no default port, as the Host header that arrived says."""
    assert (a["server.address"], a["server.port"]) == ("127.0.0.1", llm.port)
    assert [r.headers["host"] for r in llm.requests] == [f"127.0.0.1:{llm.port}"]


def test_the_names_are_the_packages_where_it_has_them() -> None:
    """Every name ctxguard writes out is the installed opentelemetry-semantic-conventions package's
    constant where it has one (ctxguard does not import those large modules); only the names newer
    than the pinned revision are ctxguard's spelling alone."""
    from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
    from opentelemetry.semconv.attributes import error_attributes, server_attributes

    from ctxguard.telemetry import meter

    assert (meter.GENAI_TOKEN_USAGE, meter.GENAI_DURATION) == (
        gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE, gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION)
    assert (attr.SERVER_ADDRESS, attr.SERVER_PORT, attr.ERROR_TYPE) == (
        server_attributes.SERVER_ADDRESS, server_attributes.SERVER_PORT, error_attributes.ERROR_TYPE)
    names = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_") and isinstance(v, str)}
    ours = {v for k, v in vars(attr).items() if isinstance(v, str) and v.startswith("gen_ai.")}
    ours |= set(attr.REQUEST_SETTINGS.values())
    newer = {attr.CONVERSATION_COMPACTED, attr.REQUEST_SETTINGS["previous_response.id"], attr.CONTEXT_WINDOW_SIZE,
             attr.CONTEXT_UTILIZATION, attr.EVALUATION_EVENT}
    assert ours - newer <= names
    assert CONVENTIONS - {"server.address", "server.port", "error.type"} <= names


# -- per provider: a chat span's attribute set ------------------------------------------------


def test_openai_chat_stream(harness: Any, llm: FakeLLM) -> None:
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text="Pune.", input_tokens=900, cached_tokens=512, output_tokens=40, reasoning_tokens=16))
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client, ctxguard.conversation("c-1"):
        stream = client.chat.completions.create(
            model="gpt-4o", stream=True,
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where?"}],
            stream_options={"include_usage": True}, temperature=0.2, top_p=0.9, stop=["END"], seed=7,
            frequency_penalty=0.1, presence_penalty=0.3, max_completion_tokens=200,
            response_format={"type": "json_object"})
        chunks = list(stream)
    sent, served = llm.bodies("/chat/completions")[0], llm.responses[0]
    a = conventions(only_span(harness))
    assert set(a) == CONVENTIONS - NEVER_HERE - {"gen_ai.usage.cache_creation.input_tokens", "gen_ai.request.top_k"}
    assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"]) == ("chat", "openai")
    assert (a["gen_ai.request.model"], a["gen_ai.request.max_tokens"]) == (sent["model"], sent["max_completion_tokens"])
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (sent["temperature"], sent["top_p"])
    assert list(a["gen_ai.request.stop_sequences"]) == sent["stop"]
    assert a["gen_ai.request.seed"] == sent["seed"]
    assert (a["gen_ai.request.frequency_penalty"], a["gen_ai.request.presence_penalty"]) == (0.1, 0.3)
    assert a["gen_ai.output.type"] == "json"
    assert a["gen_ai.request.stream"] is True and sent["stream"] is True
    assert a["gen_ai.conversation.id"] == "c-1"
    assert a["gen_ai.response.id"] == served.id == chunks[0].id
    assert list(a["gen_ai.response.finish_reasons"]) == list(served.finish_reasons)
    usage = chunks[-1].usage
    assert a["gen_ai.usage.input_tokens"] == usage.prompt_tokens == 900  # the cached ones included
    assert a["gen_ai.usage.cache_read.input_tokens"] == usage.prompt_tokens_details.cached_tokens == 512
    assert a["gen_ai.usage.output_tokens"] == usage.completion_tokens == 40
    assert a["gen_ai.usage.reasoning.output_tokens"] == usage.completion_tokens_details.reasoning_tokens == 16
    assert a["gen_ai.response.time_to_first_chunk"] > 0
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == llm.port


def test_openai_responses(harness: Any, llm: FakeLLM) -> None:
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text="Pune.", input_tokens=700, cached_tokens=256, output_tokens=30, reasoning_tokens=12))
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        result = client.responses.create(model="gpt-5", instructions="Be brief.", input="Where?", temperature=0.5,
                                         top_p=0.8, max_output_tokens=300, previous_response_id="resp_earlier",
                                         text={"format": {"type": "text"}})
    sent = llm.bodies("/responses")[0]
    a = only_span(harness).attributes
    assert set(conventions(only_span(harness))) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.usage.cache_creation.input_tokens", "gen_ai.request.top_k", "gen_ai.request.seed",
        "gen_ai.request.stop_sequences", "gen_ai.request.frequency_penalty", "gen_ai.request.presence_penalty",
        "gen_ai.request.stream", "gen_ai.response.time_to_first_chunk", "gen_ai.conversation.id"}
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (sent["temperature"], sent["top_p"])
    assert a["gen_ai.request.max_tokens"] == sent["max_output_tokens"]
    assert a["gen_ai.output.type"] == "text"
    assert a["gen_ai.request.previous_response.id"] == sent["previous_response_id"] == "resp_earlier"
    assert a["gen_ai.response.id"] == result.id
    assert a["gen_ai.usage.input_tokens"] == result.usage.input_tokens == 700
    assert a["gen_ai.usage.cache_read.input_tokens"] == result.usage.input_tokens_details.cached_tokens == 256
    assert a["gen_ai.usage.reasoning.output_tokens"] == result.usage.output_tokens_details.reasoning_tokens == 12


def test_anthropic_stream(harness: Any, llm: FakeLLM) -> None:
    """Anthropic reports the cache reads and writes apart from ``input_tokens``: the span's input
    tokens are their sum, as the conventions want."""
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text="Pune.", input_tokens=1500, cached_tokens=1024, cache_write_tokens=300, output_tokens=50))
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as claude:
        events = list(claude.messages.create(
            model="claude-sonnet-4-5", system="Be brief.", messages=[{"role": "user", "content": "Where?"}],
            max_tokens=400, stop_sequences=["END"], stream=True,
            # anthropic 2.x takes the sampling parameters only as extra_body (older SDKs as arguments).
            extra_body={"temperature": 0.4, "top_p": 0.9, "top_k": 40}))
    sent, served = llm.bodies("/messages")[0], llm.responses[0]
    a = conventions(only_span(harness))
    assert set(a) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.request.seed", "gen_ai.request.frequency_penalty", "gen_ai.request.presence_penalty",
        "gen_ai.output.type", "gen_ai.conversation.id", "gen_ai.usage.reasoning.output_tokens"}
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (sent["temperature"], sent["top_p"])
    assert a["gen_ai.request.top_k"] == sent["top_k"]
    assert list(a["gen_ai.request.stop_sequences"]) == sent["stop_sequences"]
    usage = events[0].message.usage
    assert usage.input_tokens == 1500 - 1024 - 300  # what the wire says: apart
    assert a["gen_ai.usage.input_tokens"] == served.input_tokens == 1500
    assert a["gen_ai.usage.cache_read.input_tokens"] == usage.cache_read_input_tokens == 1024
    assert a["gen_ai.usage.cache_creation.input_tokens"] == usage.cache_creation_input_tokens == 300
    assert a["gen_ai.request.stream"] is True and a["gen_ai.response.time_to_first_chunk"] > 0
    assert a["gen_ai.response.model"] == served.model


def test_bedrock_converse(harness: Any, llm: FakeLLM) -> None:
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed (extra 'bedrock')")
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text="Pune.", input_tokens=1200, cached_tokens=800, cache_write_tokens=100, output_tokens=20))
    bedrock = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                           aws_access_key_id="k", aws_secret_access_key="s")
    result = bedrock.converse(
        modelId="anthropic.claude-3-5-sonnet-20240620-v1:0", system=[{"text": "Be brief."}],
        messages=[{"role": "user", "content": [{"text": "Where?"}]}],
        inferenceConfig={"maxTokens": 300, "temperature": 0.3, "topP": 0.7, "stopSequences": ["END"]})
    sent = llm.bodies()[0]
    a = conventions(only_span(harness))
    # Converse answers with no id, no model name and no reasoning count.
    assert set(a) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.request.seed", "gen_ai.request.frequency_penalty", "gen_ai.request.presence_penalty",
        "gen_ai.request.top_k", "gen_ai.output.type", "gen_ai.conversation.id", "gen_ai.request.stream",
        "gen_ai.response.time_to_first_chunk", "gen_ai.usage.reasoning.output_tokens", "gen_ai.response.id",
        "gen_ai.response.model"}
    config = sent["inferenceConfig"]
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (config["temperature"], config["topP"])
    assert list(a["gen_ai.request.stop_sequences"]) == config["stopSequences"]
    usage = result["usage"]
    assert a["gen_ai.usage.input_tokens"] == 1200 == usage["inputTokens"] + 800 + 100
    assert a["gen_ai.usage.cache_read.input_tokens"] == usage["cacheReadInputTokens"] == 800
    assert a["gen_ai.usage.cache_creation.input_tokens"] == usage["cacheWriteInputTokens"] == 100
    assert_server(a, llm)


def test_gemini(harness: Any, llm: FakeLLM) -> None:
    """Gemini counts thinking apart from ``candidatesTokenCount``: the output tokens include it."""
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text='{"city": "Pune"}', input_tokens=900, cached_tokens=512, output_tokens=60,
                     reasoning_tokens=25))
    client = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})
    result = client.models.generate_content(
        model="gemini-2.5-flash", contents="Where?",
        config={"system_instruction": "Be brief.", "temperature": 0.6, "top_p": 0.9, "top_k": 20, "seed": 3,
                "stop_sequences": ["END"], "max_output_tokens": 256, "response_mime_type": "application/json",
                "presence_penalty": 0.2, "frequency_penalty": 0.1})
    a = conventions(only_span(harness))
    assert set(a) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.usage.cache_creation.input_tokens", "gen_ai.conversation.id", "gen_ai.request.stream",
        "gen_ai.response.time_to_first_chunk"}
    generation = llm.bodies()[0]["generationConfig"]
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_k"]) == (generation["temperature"],
                                                                            generation["topK"])
    assert a["gen_ai.request.seed"] == generation["seed"] and a["gen_ai.output.type"] == "json"
    usage = result.usage_metadata
    assert a["gen_ai.usage.input_tokens"] == usage.prompt_token_count == 900
    assert a["gen_ai.usage.cache_read.input_tokens"] == usage.cached_content_token_count == 512
    assert a["gen_ai.usage.reasoning.output_tokens"] == usage.thoughts_token_count == 25
    assert a["gen_ai.usage.output_tokens"] == usage.candidates_token_count + 25 == 60



def test_mistral(harness: Any, llm: FakeLLM) -> None:
    """Mistral reports the cached prompt tokens inside ``prompt_tokens`` (``prompt_tokens_details``),
    and no reasoning count (a Magistral's thinking is in ``completion_tokens``)."""
    pytest.importorskip("mistralai.client", reason="mistralai is not installed (extra 'mistral')")
    from mistralai.client import Mistral

    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text='{"city": "Pune"}', input_tokens=800, cached_tokens=640, output_tokens=30))
    with Mistral(api_key="t", server_url=llm.mistral_base_url) as client:
        result = client.chat.complete(
            model="mistral-large-latest", messages=[{"role": "system", "content": "Be brief."},
                                                    {"role": "user", "content": "Where?"}],
            temperature=0.2, top_p=0.9, max_tokens=200, stop=["END"], random_seed=5, presence_penalty=0.3,
            frequency_penalty=0.1, response_format={"type": "json_object"})
    sent = llm.bodies("/chat/completions")[0]
    a = conventions(only_span(harness))
    assert set(a) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.request.top_k", "gen_ai.usage.cache_creation.input_tokens", "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.conversation.id", "gen_ai.request.stream", "gen_ai.response.time_to_first_chunk"}
    assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"]) == ("chat", "mistral_ai")
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (sent["temperature"], sent["top_p"])
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.seed"]) == (sent["max_tokens"], sent["random_seed"])
    assert list(a["gen_ai.request.stop_sequences"]) == sent["stop"]
    assert (a["gen_ai.request.frequency_penalty"], a["gen_ai.request.presence_penalty"]) == (0.1, 0.3)
    assert a["gen_ai.output.type"] == "json"
    assert a["gen_ai.response.id"] == result.id and a["gen_ai.response.model"] == result.model
    assert list(a["gen_ai.response.finish_reasons"]) == [result.choices[0].finish_reason]
    assert a["gen_ai.usage.input_tokens"] == result.usage.prompt_tokens == 800  # the cached ones included
    assert a["gen_ai.usage.cache_read.input_tokens"] == 640
    assert llm.responses[0].usage["prompt_tokens_details"] == {"cached_tokens": 640}
    assert a["gen_ai.usage.output_tokens"] == result.usage.completion_tokens == 30
    assert_server(a, llm)


def test_cohere(harness: Any, llm: FakeLLM) -> None:
    """Cohere v2 names its sampling parameters ``p`` and ``k``, and reports the prompt tokens that hit
    its cache as ``usage.cached_tokens``, a part of ``tokens.input_tokens``; no reasoning count."""
    cohere = pytest.importorskip("cohere", reason="cohere is not installed (extra 'cohere')")
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text='{"city": "Pune"}', input_tokens=900, cached_tokens=700, output_tokens=25))
    client = cohere.ClientV2(api_key="t", base_url=llm.cohere_base_url)  # made after instrument(): guarded
    with ctxguard.conversation("c-5"):
        result = client.chat(
            model="command-a-03-2025", messages=[{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Where?"}],
            temperature=0.3, p=0.75, k=40, seed=11, stop_sequences=["END"], max_tokens=250, frequency_penalty=0.2,
            presence_penalty=0.4, response_format={"type": "json_object"}, request_options={"max_retries": 0})
    sent = llm.bodies("/chat")[0]
    a = conventions(only_span(harness))
    # Cohere's answer names no model.
    assert set(a) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.usage.cache_creation.input_tokens", "gen_ai.usage.reasoning.output_tokens", "gen_ai.request.stream",
        "gen_ai.response.time_to_first_chunk", "gen_ai.response.model"}
    assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"]) == ("chat", "cohere")
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"], a["gen_ai.request.top_k"]) == (
        sent["temperature"], sent["p"], sent["k"])
    assert (a["gen_ai.request.seed"], a["gen_ai.request.max_tokens"]) == (sent["seed"], sent["max_tokens"])
    assert list(a["gen_ai.request.stop_sequences"]) == sent["stop_sequences"]
    assert (a["gen_ai.request.frequency_penalty"], a["gen_ai.request.presence_penalty"]) == (
        sent["frequency_penalty"], sent["presence_penalty"])
    assert a["gen_ai.output.type"] == "json"
    assert a["gen_ai.conversation.id"] == "c-5"
    assert a["gen_ai.response.id"] == result.id
    assert list(a["gen_ai.response.finish_reasons"]) == [result.finish_reason]
    assert a["gen_ai.usage.input_tokens"] == result.usage.tokens.input_tokens == 900
    assert a["gen_ai.usage.cache_read.input_tokens"] == result.usage.cached_tokens == 700
    assert a["gen_ai.usage.output_tokens"] == result.usage.tokens.output_tokens == 25
    assert_server(a, llm)


def test_ollama_stream(harness: Any, llm: FakeLLM) -> None:
    """Ollama carries the sampling parameters in ``options`` and reports no cache or reasoning count
    (``prompt_eval_count`` and ``eval_count`` only), nor an id."""
    ollama = pytest.importorskip("ollama", reason="ollama is not installed (extra 'ollama')")
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text='{"city": "Pune"}', input_tokens=300, output_tokens=20))
    options = {"temperature": 0.7, "top_p": 0.85, "top_k": 30, "seed": 42, "stop": ["END"], "num_predict": 128,
               "frequency_penalty": 0.1, "presence_penalty": 0.2}
    with ollama.Client(host=llm.ollama_host) as client:
        chunks = list(client.chat(model="llama3.2", messages=[{"role": "system", "content": "Be brief."},
                                                               {"role": "user", "content": "Where?"}],
                                  options=options, format="json", stream=True))
    sent = llm.bodies("/api/chat")[0]
    a = conventions(only_span(harness))
    assert set(a) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.reasoning.output_tokens", "gen_ai.conversation.id", "gen_ai.response.id"}
    assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"]) == ("chat", "ollama")
    sent_options = sent["options"]
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"], a["gen_ai.request.top_k"]) == (
        sent_options["temperature"], sent_options["top_p"], sent_options["top_k"])
    assert (a["gen_ai.request.seed"], a["gen_ai.request.max_tokens"]) == (sent_options["seed"],
                                                                         sent_options["num_predict"])
    assert list(a["gen_ai.request.stop_sequences"]) == sent_options["stop"]
    assert (a["gen_ai.request.frequency_penalty"], a["gen_ai.request.presence_penalty"]) == (
        sent_options["frequency_penalty"], sent_options["presence_penalty"])
    assert a["gen_ai.output.type"] == "json" and sent["format"] == "json"
    assert a["gen_ai.request.stream"] is True and a["gen_ai.response.time_to_first_chunk"] > 0
    last = chunks[-1]
    assert a["gen_ai.response.model"] == last.model
    assert list(a["gen_ai.response.finish_reasons"]) == [last.done_reason]
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (last.prompt_eval_count,
                                                                                 last.eval_count) == (300, 20)
    assert_server(a, llm)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_huggingface(harness: Any, llm: FakeLLM, stream: bool) -> None:
    """huggingface_hub's client speaks OpenAI's chat format to an endpoint (here, one that reports
    OpenAI's usage details, which the client's output types do not declare)."""
    hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (extra 'huggingface')")
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text="Pune.", input_tokens=600, cached_tokens=128, output_tokens=40, reasoning_tokens=10))
    streaming = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    with hub.InferenceClient(base_url=llm.base_url, api_key="t") as client:
        result = client.chat_completion(
            model="meta-llama/Llama-3.1-8B-Instruct", messages=[{"role": "system", "content": "Be brief."},
                                                                {"role": "user", "content": "Where?"}],
            temperature=0.5, top_p=0.8, seed=9, stop=["END"], max_tokens=150, frequency_penalty=0.1,
            presence_penalty=0.2, response_format={"type": "json", "value": {"type": "object"}}, **streaming)
        usage = list(result)[-1].usage if stream else result.usage
    sent, served = llm.bodies("/chat/completions")[0], llm.responses[0]
    a = conventions(only_span(harness))
    assert set(a) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.request.top_k", "gen_ai.usage.cache_creation.input_tokens", "gen_ai.conversation.id",
        *(() if stream else ("gen_ai.request.stream", "gen_ai.response.time_to_first_chunk"))}
    assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"]) == ("chat", "huggingface")
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (sent["temperature"], sent["top_p"])
    assert (a["gen_ai.request.seed"], a["gen_ai.request.max_tokens"]) == (sent["seed"], sent["max_tokens"])
    assert list(a["gen_ai.request.stop_sequences"]) == sent["stop"]
    assert a["gen_ai.output.type"] == "json" and sent["response_format"]["type"] == "json"
    assert a["gen_ai.response.id"] == served.id and a["gen_ai.response.model"] == served.model
    assert a["gen_ai.usage.input_tokens"] == usage.prompt_tokens == 600
    assert a["gen_ai.usage.cache_read.input_tokens"] == usage.prompt_tokens_details["cached_tokens"] == 128
    assert a["gen_ai.usage.reasoning.output_tokens"] == usage.completion_tokens_details["reasoning_tokens"] == 10
    assert a["gen_ai.usage.output_tokens"] == usage.completion_tokens == 40


def test_litellm_anthropic_route(harness: Any, llm: FakeLLM) -> None:
    """Through LiteLLM to Anthropic: the span names the routed provider and carries what Anthropic
    answered on the wire (cache reads and writes apart from ``input_tokens``, summed on the span)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
    litellm = pytest.importorskip("litellm", reason="litellm is not installed (extra 'litellm')")
    harness.start(mode="observe", policy=POLICY)
    llm.script(Reply(text="Pune.", input_tokens=1400, cached_tokens=1000, cache_write_tokens=200, output_tokens=35))
    litellm.completion(model="anthropic/claude-sonnet-4-5", messages=[{"role": "system", "content": "Be brief."},
                                                                   {"role": "user", "content": "Where?"}],
                       temperature=0.4, top_p=0.9, stop=["END"], max_tokens=300, api_base=llm.anthropic_base_url,
                       api_key="t")
    sent, served = llm.bodies("/messages")[0], llm.responses[0]
    a = conventions(only_span(harness))
    assert set(a) == CONVENTIONS - NEVER_HERE - {
        "gen_ai.request.top_k", "gen_ai.request.seed", "gen_ai.request.frequency_penalty",
        "gen_ai.request.presence_penalty", "gen_ai.output.type", "gen_ai.conversation.id",
        "gen_ai.usage.reasoning.output_tokens", "gen_ai.request.stream", "gen_ai.response.time_to_first_chunk"}
    assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"]) == ("chat", "anthropic")
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (sent["temperature"], sent["top_p"])
    assert a["gen_ai.request.max_tokens"] == sent["max_tokens"]
    assert list(a["gen_ai.request.stop_sequences"]) == sent["stop_sequences"]
    assert a["gen_ai.response.id"] == served.id and a["gen_ai.response.model"] == served.model
    usage = served.usage
    assert usage["input_tokens"] == 1400 - 1000 - 200  # what the wire says: apart
    assert a["gen_ai.usage.input_tokens"] == 1400
    assert a["gen_ai.usage.cache_read.input_tokens"] == usage["cache_read_input_tokens"] == 1000
    assert a["gen_ai.usage.cache_creation.input_tokens"] == usage["cache_creation_input_tokens"] == 200
    # The api_base the call gave LiteLLM's route, where its request went.
    assert_server(a, llm)

# -- content capture, in the conventions' JSON shapes -------------------------------------------

SCHEMAS = json.loads((Path(__file__).parent.parent / "data" / "genai_content_schemas.json").read_text())


LOOKUP = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}


def valid_tool_definitions(captured: str) -> list[dict[str, Any]]:
    """``gen_ai.tool.definitions`` read back, valid against its schema, each function's parameters a
    draft-07 JSON schema (as the conventions say they MUST be; the schema's GenericToolDefinition
    would accept any)."""
    definitions = json.loads(captured)
    jsonschema.validate(definitions, SCHEMAS["gen_ai.tool.definitions"])
    for definition in definitions:
        if "parameters" in definition:
            jsonschema.Draft7Validator.check_schema(definition["parameters"])
    return definitions


def test_captured_content_follows_the_schemas(harness: Any, llm: FakeLLM) -> None:
    harness.start(mode="observe", policy=POLICY, capture_content=True)
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as claude:
        answer = claude.messages.create(model="claude-sonnet-4-5", system="Be brief.", max_tokens=100, messages=[
            {"role": "user", "content": "Where?"}, {"role": "assistant", "content": "Where what?"},
            {"role": "user", "content": "The parcel."}],
            tools=[{"name": "lookup", "description": "Find an order", "input_schema": LOOKUP},
                   {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}])
    a = only_span(harness).attributes
    captured = {key: json.loads(a[key]) for key in ("gen_ai.input.messages", "gen_ai.output.messages",
                                                    "gen_ai.system_instructions")}
    for key, value in captured.items():
        jsonschema.validate(value, SCHEMAS[key])
    sent = llm.bodies("/messages")[0]["tools"]
    assert valid_tool_definitions(a["gen_ai.tool.definitions"]) == [
        {"type": "function", "name": sent[0]["name"], "description": sent[0]["description"],
         "parameters": sent[0]["input_schema"]},
        {"type": sent[1]["type"], "name": sent[1]["name"]}]
    assert captured["gen_ai.system_instructions"] == [{"type": "text", "content": "Be brief."}]
    assert [m["role"] for m in captured["gen_ai.input.messages"]] == ["user", "assistant", "user"]
    assert captured["gen_ai.input.messages"][2]["parts"] == [{"type": "text", "content": "The parcel."}]
    assert captured["gen_ai.output.messages"] == [{"role": "assistant", "finish_reason": answer.stop_reason,
                                                   "parts": [{"type": "text", "content": answer.content[0].text}]}]
    # A shape the schemas refuse is refused: the validation is not vacuous.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"role": "user", "content": "Where?"}], SCHEMAS["gen_ai.input.messages"])



def test_tool_definitions_of_chat_completions_and_responses(harness: Any, llm: FakeLLM) -> None:
    """Chat Completions nests a function tool's definition in ``function``, the Responses API does
    not; a built-in tool known by its type alone has no name the conventions could carry."""
    harness.start(mode="observe", policy=POLICY, capture_content=True)
    messages = [{"role": "user", "content": "Where is A-1?"}]
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        client.chat.completions.create(model="gpt-4o", messages=messages, tools=[
            {"type": "function", "function": {"name": "lookup", "description": "Find an order", "parameters": LOOKUP}},
            {"type": "function", "function": {"name": "ping"}}])
        client.responses.create(model="gpt-5", input="Where is A-1?", tools=[
            {"type": "function", "name": "lookup", "parameters": LOOKUP, "strict": True}, {"type": "web_search"}])
    chat, responses = (valid_tool_definitions(s.attributes["gen_ai.tool.definitions"]) for s in harness.spans())
    function = llm.bodies("/chat/completions")[0]["tools"][0]["function"]
    assert chat == [{"type": "function", "name": "lookup", "description": function["description"],
                     "parameters": function["parameters"]}, {"type": "function", "name": "ping"}]
    assert responses == [{"type": "function", "name": "lookup", "parameters": llm.bodies("/responses")[0]["tools"][0][
        "parameters"]}]


def test_tool_definitions_of_bedrock_converse_and_gemini(harness: Any, llm: FakeLLM) -> None:
    """Converse's ``toolConfig`` specs; Gemini's function declarations, their parameters where they
    are JSON Schema (``parameters_json_schema``: Gemini's own ``parameters`` type is not), and no
    built-in tool (it names no function)."""
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed (extra 'bedrock')")
    harness.start(mode="observe", policy=POLICY, capture_content=True)
    bedrock = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                           aws_access_key_id="k", aws_secret_access_key="s")
    bedrock.converse(modelId="anthropic.claude-3-5-sonnet-20240620-v1:0",
                     messages=[{"role": "user", "content": [{"text": "Where is A-1?"}]}],
                     toolConfig={"tools": [{"toolSpec": {"name": "lookup", "description": "Find an order",
                                                         "inputSchema": {"json": LOOKUP}}}]})
    client = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})
    client.models.generate_content(model="gemini-2.5-flash", contents="Where is A-1?", config={"tools": [
        {"function_declarations": [{"name": "lookup", "description": "Find an order", "parameters_json_schema": LOOKUP},
                                   {"name": "ping", "parameters": {"type": "OBJECT", "properties": {}}}]},
        {"google_search": {}}]})
    converse, gemini = (valid_tool_definitions(s.attributes["gen_ai.tool.definitions"]) for s in harness.spans())
    spec = llm.bodies()[0]["toolConfig"]["tools"][0]["toolSpec"]
    assert converse == [{"type": "function", "name": spec["name"], "description": spec["description"],
                         "parameters": spec["inputSchema"]["json"]}]
    declared = next(t for t in llm.bodies()[1]["tools"] if "functionDeclarations" in t)["functionDeclarations"][0]
    assert gemini == [{"type": "function", "name": "lookup", "description": declared["description"],
                       "parameters": declared["parameters_json_schema"]}, {"type": "function", "name": "ping"}]

def test_no_tool_definitions_unless_content_is_captured(harness: Any, llm: FakeLLM,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Nor are they read: a call's default path does no work for content it does not capture."""
    read: list[str] = []
    monkeypatch.setattr(OpenAIAdapter, "tool_definitions", lambda self, api, kwargs: read.append(api) or [])
    harness.start(mode="observe", policy=POLICY)
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Where is A-1?"}], tools=[
            {"type": "function", "function": {"name": "lookup", "description": "Find an order", "parameters": LOOKUP}}])
    a = only_span(harness).attributes
    assert "gen_ai.tool.definitions" not in a and "gen_ai.input.messages" not in a
    assert read == []

# -- verdicts as evaluation results ------------------------------------------------------------


def evaluations(span: Any) -> list[dict[str, Any]]:
    return [dict(e.attributes) for e in span.events if e.name == "gen_ai.evaluation.result"]


def test_one_evaluation_result_per_failed_check_without_raw_content(harness: Any, llm: FakeLLM) -> None:
    secret = "Flat 12, Rue Saint-Honore"
    harness.start(mode="observe", policy=Policy(system_at_head=True))
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client, ctxguard.conversation("c-2"):
        ctxguard.record_fact("address", secret)
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hello there"}])
    span = only_span(harness)
    failed = [o for o in span.attributes["ctxguard.violations"]]
    assert sorted(failed) == ["fact_present", "system_at_head"]
    results = evaluations(span)
    assert sorted(r["gen_ai.evaluation.name"] for r in results) == ["ctxguard.fact_present", "ctxguard.system_at_head"]
    assert {r["gen_ai.evaluation.score.label"] for r in results} == {"fail"}
    assert all(r["gen_ai.evaluation.explanation"] for r in results)
    assert secret not in json.dumps(results) and "Hello there" not in json.dumps(results)
    # The SPEC's violation events stay.
    assert sorted(e.attributes["check"] for e in span.events if e.name == "ctxguard.violation") == sorted(failed)


def test_passed_and_skipped_checks_are_reported_only_when_asked(harness: Any, llm: FakeLLM) -> None:
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
        harness.start(mode="observe", policy=POLICY)
        client.chat.completions.create(model="gpt-4o", messages=messages)
        assert evaluations(harness.spans()[-1]) == []
        harness.start(mode="observe", policy=POLICY, evaluations="all")
        client.chat.completions.create(model="gpt-4o", messages=messages)
    span = harness.spans()[-1]
    results = {r["gen_ai.evaluation.name"]: r["gen_ai.evaluation.score.label"] for r in evaluations(span)}
    checks = harness.registry.get_sample_value  # every check counted has its event, with its outcome
    assert results["ctxguard.system_at_head"] == "pass" and results["ctxguard.wire_intact"] == "pass"
    assert set(results.values()) <= {"pass", "skip"}
    for name, label in results.items():
        assert checks("ctxguard_checks_total", {"check": name.removeprefix("ctxguard."), "outcome": label}) >= 1


# -- compaction --------------------------------------------------------------------------------


def test_compacted_exactly_on_the_request_that_lost_turns(harness: Any, llm: FakeLLM) -> None:
    harness.start(mode="observe", policy=POLICY)
    system = {"role": "system", "content": "Be brief."}
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn number {i}"} for i in range(6)]
    sent = [[system, *turns[:2]], [system, *turns[:4]], [system, *turns[2:6]], [system, *turns[2:6],
                                                                                {"role": "user", "content": "more"}]]
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client, ctxguard.conversation("c-3"):
        for messages in sent:
            client.chat.completions.create(model="gpt-4o", messages=messages)
    marked = [s.attributes.get("gen_ai.conversation.compacted") for s in harness.spans()]
    assert marked == [None, None, True, None]  # never false: the conventions set it true only


def test_window_size_and_utilization(harness: Any, llm: FakeLLM) -> None:
    harness.start(mode="observe", policy=POLICY)
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "system", "content": "Be brief."},
                                                                 {"role": "user", "content": "Where?"}])
    a, served = only_span(harness).attributes, llm.responses[0]
    assert a["gen_ai.context.window_size"] == a["ctxguard.budget.window"] == 128_000
    assert a["gen_ai.context.utilization"] == round((served.input_tokens + served.output_tokens) / 128_000, 4) > 0
