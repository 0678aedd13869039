"""One run, in a process of its own: ctxguard and another instrumentation installed in an order,
the app's calls (``Other.calls``) made, one of the two uninstrumented, the calls made again; what
each call recorded, as JSON.

A process of its own per run because most of these packages cannot be taken out again (OpenLIT's
and Langfuse's wrappers stay, OpenLLMetry's openai unwrap misses, Sentry keeps its functions) and
each sets the global tracer provider. To rerun one by hand (``first_out``: ``other`` or ``ctxguard``):

    python -m tests.coexistence.driver logfire other-first other out.json

Phases: ``both``; then, uninstrumenting the other first, ``without-other`` (ctxguard alone);
or, uninstrumenting ctxguard first, ``without-ctxguard`` (the other alone) and ``again`` (after
``ctxguard.instrument()`` once more, both). With ``span="own"`` only ``both``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard import _isolation
from ctxguard.digest import Digester
from ctxguard.facts import MemoryLedger
from ctxguard.testing import FakeLLM, Reply
from tests.coexistence.others import OTHERS, Other
from tests.frameworks.helpers import stable

KEY = b"ctxguard-tests"
SYSTEM = "Be brief."
ASK = "Where is parcel A-99172?"
SAID = "It is in Pune and arrives in 2 days."
CHAT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}]
CLAUDE = {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": SYSTEM,
          "messages": [{"role": "user", "content": ASK}]}


#: The app's calls, and the provider each is counted under (``ctxguard_calls_total{provider=}``).
CALLS = {"chat": "openai", "chat-stream": "openai", "chat-raw": "openai", "responses": "openai",
         "responses-stream": "openai", "responses-raw": "openai",
         "messages": "anthropic", "messages-stream": "anthropic", "messages-raw": "anthropic",
         "converse": "aws.bedrock", "converse-stream": "aws.bedrock", "invoke-model": "aws.bedrock",
         "invoke-model-stream": "aws.bedrock",
         "langchain-invoke": "openai", "langchain-stream": "openai"}
BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
CONVERSE = {"modelId": BEDROCK_MODEL, "system": [{"text": SYSTEM}],
            "messages": [{"role": "user", "content": [{"text": ASK}]}]}
INVOKE = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "system": SYSTEM,
          "messages": [{"role": "user", "content": ASK}]}


def _bedrock(response: dict[str, Any]) -> dict[str, Any]:
    """A Bedrock answer as the app reads it, less the transport's metadata (its dates and ids)."""
    return {k: v for k, v in response.items() if k != "ResponseMetadata"}


def calls(llm: FakeLLM, names: tuple[str, ...]) -> dict[str, Callable[[], Any]]:
    """The app's calls ``names``, each returning what the app got (a stream read to its end), on
    clients made here (only those the calls need: a boto3 client takes a while)."""
    made: dict[str, Callable[[], Any]] = {}
    if any(CALLS[name] != "aws.bedrock" and not name.startswith("langchain") for name in names):
        import anthropic
        import openai

        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        claude = anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0)
        chat, responses, messages = client.chat.completions, client.responses, claude.messages
        made |= {
            "chat": lambda: chat.create(model="gpt-4o", messages=CHAT),
            "chat-stream": lambda: list(chat.create(model="gpt-4o", messages=CHAT, stream=True,
                                                    stream_options={"include_usage": True})),
            "chat-raw": lambda: chat.with_raw_response.create(model="gpt-4o", messages=CHAT).parse(),
            "responses": lambda: responses.create(model="gpt-4o", instructions=SYSTEM, input=ASK),
            "responses-stream": lambda: list(responses.create(model="gpt-4o", instructions=SYSTEM, input=ASK,
                                                              stream=True)),
            "responses-raw": lambda: responses.with_raw_response.create(model="gpt-4o", instructions=SYSTEM,
                                                                        input=ASK).parse(),
            "messages": lambda: messages.create(**CLAUDE),
            "messages-stream": lambda: list(messages.create(**CLAUDE, stream=True)),
            "messages-raw": lambda: messages.with_raw_response.create(**CLAUDE).parse(),
        }
    if any(CALLS[name] == "aws.bedrock" for name in names):
        import boto3
        from botocore.config import Config

        bedrock = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=llm.bedrock_endpoint_url,
                               aws_access_key_id="test", aws_secret_access_key="test",
                               config=Config(retries={"total_max_attempts": 1}))
        made |= {
            "converse": lambda: _bedrock(bedrock.converse(**CONVERSE)),
            "converse-stream": lambda: list(bedrock.converse_stream(**CONVERSE)["stream"]),
            "invoke-model": lambda: json.loads(bedrock.invoke_model(modelId=BEDROCK_MODEL,
                                                                    body=json.dumps(INVOKE))["body"].read()),
            "invoke-model-stream": lambda: [json.loads(event["chunk"]["bytes"]) for event in
                                            bedrock.invoke_model_with_response_stream(
                                                modelId=BEDROCK_MODEL, body=json.dumps(INVOKE))["body"]],
        }
    if any(name.startswith("langchain") for name in names):
        from langchain_openai import ChatOpenAI

        model = ChatOpenAI(model="gpt-4o", base_url=llm.base_url, api_key="test", max_retries=0, stream_usage=True)
        ask = [("system", SYSTEM), ("human", ASK)]
        made |= {
            "langchain-invoke": lambda: model.invoke(ask),
            "langchain-stream": lambda: list(model.stream(ask)),
        }
    return {name: made[name] for name in names}


def _counters(registry: CollectorRegistry) -> dict[str, float]:
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name in ("ctxguard_calls_total", "ctxguard_checks_total", "ctxguard_guard_errors_total"):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def _span(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "kind": span.kind.name,
        "id": span.context.span_id,
        "parent": span.parent.span_id if span.parent else None,
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()},
    }


def _phase(other: Other, registry: CollectorRegistry) -> dict[str, Any]:
    """Each call on fresh clients (the openai SDK caches ``with_raw_response`` per client) and a
    fresh fake seeded alike in every phase, so that a call gets the same ids in every phase."""
    swallowed: list[str] = []

    def hook(where: str, exc: BaseException) -> None:
        swallowed.append(f"{where}: {exc!r}")

    _isolation.add_error_hook(hook)
    recorded = {}
    with FakeLLM(seed="coexistence", reply=lambda request: Reply(text=SAID)) as llm:
        for name, call in calls(llm, other.calls).items():
            other.exporter.clear()
            other.records()
            before, arrived, answered = _counters(registry), len(llm.requests), len(llm.responses)
            del swallowed[:]
            try:
                with other.around():
                    result, failure = call(), None
            except Exception as exc:
                result, failure = None, repr(exc)
            after = _counters(registry)
            requests = llm.requests[arrived:]
            recorded[name] = {
                "failure": failure,
                "result": stable(result, llm.origin),
                "bodies": [stable(r.json, llm.origin) for r in requests],
                "wire": [Digester(KEY).bytes(r.body) for r in requests],
                "served": [r.input_tokens for r in llm.responses[answered:]],
                "counters": {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)},
                "swallowed": list(swallowed),
                "spans": [_span(s) for s in other.exporter.get_finished_spans()],
                "records": other.records(),
            }
    _isolation.remove_error_hook(hook)
    return recorded


def run(name: str, order: str, first_out: str, span: str = "auto") -> dict[str, Any]:
    other = OTHERS[name]()
    provider = other.tracing()
    registry = CollectorRegistry()

    def guard() -> None:
        ctxguard.instrument(registry=registry, tracer_provider=provider, digest_key=KEY, ledger=MemoryLedger(),
                            span=span)

    if order == "other-first":
        other.instrument(provider)
        guard()
    else:
        guard()
        other.instrument(provider)
    phases = {"both": _phase(other, registry)}
    if span == "auto" and first_out == "other":
        other.uninstrument()
        phases["without-other"] = _phase(other, registry)
    elif span == "auto":
        ctxguard.uninstrument()
        phases["without-ctxguard"] = _phase(other, registry)
        guard()
        phases["again"] = _phase(other, registry)
    versions = {d: metadata.version(d) for d in ("openai", "anthropic", *other.distributions)}
    return {"versions": versions, "phases": phases}


def write(out: str, *args: str) -> None:
    with open(out, "w") as f:
        json.dump(run(*args), f)


if __name__ == "__main__":
    write(sys.argv[4], *sys.argv[1:4], *sys.argv[5:])
