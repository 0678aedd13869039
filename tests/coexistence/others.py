"""The other LLM instrumentations, each set up the way its documentation says, offline: spans go
to one in-memory exporter, nothing leaves the machine (Langfuse's and Sentry's exports go nowhere,
OpenLIT reads a local pricing file and has no OTLP endpoint, Logfire does not send).

Each is an ``Other``: ``tracing()`` makes the tracer provider every instrumentation (ctxguard
included) records to, ``instrument()`` / ``uninstrument()`` are the package's own, ``around()``
is what the app wraps a call in (a Sentry transaction), ``records()`` what it recorded outside
OpenTelemetry (Sentry's spans).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Other:
    """An instrumentation next to ctxguard; the base is none at all (ctxguard alone)."""

    #: import names it needs (what ``CTXGUARD_REQUIRE_INSTRUMENTATIONS`` names)
    modules: tuple[str, ...] = ()
    #: distributions whose versions a run prints
    distributions: tuple[str, ...] = ()
    #: the app's calls (``driver.CALLS``) a run makes beside it
    calls: tuple[str, ...] = ("chat", "chat-stream", "chat-raw", "responses", "messages", "messages-stream")

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()

    def tracing(self) -> Any:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        trace.set_tracer_provider(provider)
        return provider

    def instrument(self, provider: Any) -> None:
        pass

    def uninstrument(self) -> None:
        pass

    def around(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def records(self) -> list[dict[str, Any]]:
        return []


class Instrumentors(Other):
    """OpenTelemetry-style instrumentors (``Instrumentor().instrument(tracer_provider=...)``), named
    by ``module:class`` in ``instrumentors``."""

    instrumentors: tuple[str, ...] = ()

    def instrument(self, provider: Any) -> None:
        self.active = []
        for name in self.instrumentors:
            module, _, cls = name.partition(":")
            instrumentor = getattr(importlib.import_module(module), cls)()
            instrumentor.instrument(tracer_provider=provider)
            self.active.append(instrumentor)

    def uninstrument(self) -> None:
        for instrumentor in self.active:
            instrumentor.uninstrument()


class OpenTelemetry(Instrumentors):
    """opentelemetry-instrumentation-openai-v2 (util-genai): a wrapt wrapper on ``Completions.create``."""

    modules = ("opentelemetry.instrumentation.openai_v2", "opentelemetry.util.genai")
    distributions = ("opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai")
    instrumentors = ("opentelemetry.instrumentation.openai_v2:OpenAIInstrumentor",)


class GenAI(Instrumentors):
    """The new generation of OpenTelemetry's own (util-genai 1.3): opentelemetry-instrumentation-genai-openai
    and -anthropic, wrapt wrappers on the call sites (``Completions.create``, ``Responses.create``,
    ``Messages.create`` and more), each raw response behind a proxy of theirs."""

    modules = ("opentelemetry.instrumentation.genai.openai", "opentelemetry.instrumentation.genai.anthropic")
    distributions = ("opentelemetry-instrumentation-genai-openai", "opentelemetry-instrumentation-genai-anthropic",
                     "opentelemetry-util-genai")
    instrumentors = ("opentelemetry.instrumentation.genai.openai:OpenAIInstrumentor",
                     "opentelemetry.instrumentation.genai.anthropic:AnthropicInstrumentor")
    calls = ("chat", "chat-stream", "chat-raw", "responses", "responses-stream", "responses-raw",
             "messages", "messages-stream", "messages-raw")


BEDROCK = ("converse", "converse-stream", "invoke-model", "invoke-model-stream")


class GenAIBedrock(Instrumentors):
    """opentelemetry-instrumentation-genai-bedrock: a wrapt wrapper on botocore's
    ``BaseClient._make_api_call``, where ctxguard guards Bedrock too."""

    modules = ("opentelemetry.instrumentation.genai.bedrock", "boto3")
    distributions = ("opentelemetry-instrumentation-genai-bedrock", "opentelemetry-util-genai", "boto3")
    instrumentors = ("opentelemetry.instrumentation.genai.bedrock:BedrockInstrumentor",)
    calls = BEDROCK


class Botocore(Instrumentors):
    """opentelemetry-instrumentation-botocore: a wrapt wrapper on ``BaseClient._make_api_call``, its
    bedrock-runtime extension recording GenAI attributes on its ``Bedrock Runtime.{operation}`` span."""

    modules = ("opentelemetry.instrumentation.botocore", "boto3")
    distributions = ("opentelemetry-instrumentation-botocore", "boto3")
    instrumentors = ("opentelemetry.instrumentation.botocore:BotocoreInstrumentor",)
    calls = BEDROCK


class GenAIBedrockBotocore(Instrumentors):
    """Both of the above, as an app that runs ``opentelemetry-bootstrap`` beside genai-bedrock has them."""

    modules = (*GenAIBedrock.modules, *Botocore.modules)
    distributions = (*GenAIBedrock.distributions, *Botocore.distributions)
    instrumentors = (*GenAIBedrock.instrumentors, *Botocore.instrumentors)
    calls = BEDROCK


class GenAILangChain(Instrumentors):
    """opentelemetry-instrumentation-genai-langchain: a callback handler added to LangChain's
    callback managers, its span of a chat model run made current around the model's work; the app
    calls LangChain's ``ChatOpenAI``."""

    modules = ("opentelemetry.instrumentation.genai.langchain", "langchain_openai")
    distributions = ("opentelemetry-instrumentation-genai-langchain", "opentelemetry-util-genai", "langchain",
                     "langchain-core", "langchain-openai")
    instrumentors = ("opentelemetry.instrumentation.genai.langchain:LangChainInstrumentor",)
    calls = ("langchain-invoke", "langchain-stream")


class OpenLLMetry(Instrumentors):
    """traceloop's opentelemetry-instrumentation-openai and -anthropic: wrapt wrappers on the call sites."""

    modules = ("opentelemetry.instrumentation.openai", "opentelemetry.instrumentation.anthropic")
    distributions = ("opentelemetry-instrumentation-openai", "opentelemetry-instrumentation-anthropic")
    instrumentors = ("opentelemetry.instrumentation.openai:OpenAIInstrumentor",
                     "opentelemetry.instrumentation.anthropic:AnthropicInstrumentor")


class OpenInference(Instrumentors):
    """openinference-instrumentation-openai (on the client's ``request``) and -anthropic (on the call
    sites, restored by assignment)."""

    modules = ("openinference.instrumentation.openai", "openinference.instrumentation.anthropic")
    distributions = ("openinference-instrumentation-openai", "openinference-instrumentation-anthropic")
    instrumentors = ("openinference.instrumentation.openai:OpenAIInstrumentor",
                     "openinference.instrumentation.anthropic:AnthropicInstrumentor")


class OpenLIT(Other):
    """``openlit.init()`` with only its openai and anthropic instrumentations (wrapt, on the call
    sites; its ``uninstrument`` does nothing)."""

    modules = ("openlit",)
    distributions = ("openlit",)

    def instrument(self, provider: Any) -> None:
        import openlit
        from openlit._instrumentors import MODULE_NAME_MAP

        pricing = os.path.join(tempfile.mkdtemp(prefix="ctxguard-openlit-"), "pricing.json")
        with open(pricing, "w") as f:  # else it fetches its price list over the network
            json.dump({"chat": {}, "embeddings": {}, "images": {}, "audio": {}}, f)
        openlit.init(
            disabled_instrumentors=sorted(set(MODULE_NAME_MAP) - {"openai", "anthropic"}),
            disable_metrics=True,
            disable_events=True,
            pricing_json=pricing,
            capture_message_content=False,
        )

    def uninstrument(self) -> None:
        from openlit.instrumentation.anthropic import AnthropicInstrumentor
        from openlit.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().uninstrument()
        AnthropicInstrumentor().uninstrument()


class Logfire(Other):
    """``logfire.instrument_openai()`` / ``instrument_anthropic()``: the clients' ``request``
    replaced by assignment; its tracer provider is the global one, our exporter an extra processor."""

    modules = ("logfire",)
    distributions = ("logfire",)

    def tracing(self) -> Any:
        import logfire

        logfire.configure(
            send_to_logfire=False,
            console=False,
            metrics=False,
            inspect_arguments=False,
            additional_span_processors=[SimpleSpanProcessor(self.exporter)],
        )
        return trace.get_tracer_provider()

    def instrument(self, provider: Any) -> None:
        import logfire

        self.handles = [logfire.instrument_openai(), logfire.instrument_anthropic()]

    def uninstrument(self) -> None:
        for handle in self.handles:  # leaving the context manager it returned uninstruments
            with handle:
                pass


class Langfuse(Other):
    """Langfuse's OpenAI drop-in (``langfuse.openai``: wrapt wrappers on ``create``, made on import)
    and its OpenTelemetry integration (its span processor on our provider), exporting to memory.
    It has no uninstrument."""

    modules = ("langfuse",)
    distributions = ("langfuse",)

    def instrument(self, provider: Any) -> None:
        from langfuse import Langfuse as Client

        self.client = Client(public_key="pk-lf-ctxguard", secret_key="sk-lf-ctxguard", base_url="http://127.0.0.1:9",
                             tracer_provider=provider, span_exporter=InMemorySpanExporter())
        import langfuse.openai  # noqa: F401  (the drop-in wraps on import)


class Sentry(Other):
    """sentry_sdk with its openai and anthropic integrations (plain functions over the call sites,
    Sentry spans, not OpenTelemetry's). No DSN: a transport that keeps the envelopes here."""

    modules = ("sentry_sdk",)
    distributions = ("sentry-sdk",)

    def instrument(self, provider: Any) -> None:
        import sentry_sdk
        from sentry_sdk.integrations.anthropic import AnthropicIntegration
        from sentry_sdk.integrations.openai import OpenAIIntegration
        from sentry_sdk.transport import Transport

        envelopes = self.envelopes = []

        class Kept(Transport):
            def capture_envelope(self, envelope: Any) -> None:
                envelopes.append(envelope)

        sentry_sdk.init(dsn=None, transport=Kept(), traces_sample_rate=1.0, default_integrations=False,
                        integrations=[OpenAIIntegration(include_prompts=False),
                                      AnthropicIntegration(include_prompts=False)])

    def uninstrument(self) -> None:
        """Sentry has no uninstrument: a client without the integrations makes its wrappers pass through."""
        import sentry_sdk

        sentry_sdk.init(dsn=None, default_integrations=False)

    @contextlib.contextmanager
    def around(self) -> Iterator[None]:
        import sentry_sdk

        with sentry_sdk.start_transaction(name="app", op="app"):
            yield
        sentry_sdk.flush()

    def records(self) -> list[dict[str, Any]]:
        """Sentry's spans, whichever envelope carries them (a transaction's, or the streamed items)."""
        found = []
        for envelope in self.envelopes:
            for item in envelope.items:
                event = item.get_event()
                if event is not None:
                    spans = [{"op": s.get("op"), "name": s.get("description"), "data": s.get("data") or {}}
                             for s in event.get("spans") or ()]
                else:
                    spans = [{"op": (s.get("attributes") or {}).get("sentry.op", {}).get("value"),
                              "name": s.get("name"), "data": s.get("attributes") or {}}
                             for s in (item.payload.json or {}).get("items") or ()]
                found.extend({"op": s["op"], "name": s["name"], "usage": "gen_ai.usage.input_tokens" in s["data"]}
                             for s in spans)
        self.envelopes.clear()
        return found


OTHERS: dict[str, type[Other]] = {
    "none": Other,
    "opentelemetry": OpenTelemetry,
    "genai": GenAI,
    "genai-bedrock": GenAIBedrock,
    "botocore": Botocore,
    "genai-bedrock-botocore": GenAIBedrockBotocore,
    "genai-langchain": GenAILangChain,
    "openllmetry": OpenLLMetry,
    "openinference": OpenInference,
    "openlit": OpenLIT,
    "logfire": Logfire,
    "langfuse": Langfuse,
    "sentry": Sentry,
}
