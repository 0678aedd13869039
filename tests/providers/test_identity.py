"""Provider identity (ctxguard/providers/identity.py): a call is labelled with the provider its
SDK client reaches — by the client's class (AzureOpenAI, AnthropicVertex, ...) or by a known
host — and carries ``server.address`` / ``server.port``; an unknown host stays the SDK's own label
and never becomes a label value. Driven with the real SDKs over loopback HTTP."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import openai
import pytest

from ctxguard.providers import LABELS
from ctxguard.providers.identity import ROUTES, by_host, client_identity, resource_identity
from tests.conftest import only_guard_span, redirected

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
def test_a_plain_openai_client_is_openai_with_the_server_it_talks_to(harness, llm):
    harness.start(mode="observe")
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    span = only_guard_span(harness)
    fake = urlsplit(llm.base_url)
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert (span.attributes["server.address"], span.attributes["server.port"]) == (fake.hostname, fake.port)
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 1


def test_an_azure_client_is_azure_ai_openai(harness, llm):
    harness.start(mode="observe")
    root = llm.base_url.removesuffix("/v1")
    with openai.AzureOpenAI(azure_endpoint=root, api_key="t", api_version="2024-10-21", max_retries=0) as client:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert "/openai/deployments/gpt-4o/chat/completions" in llm.requests[-1].path
    span = only_guard_span(harness)
    assert span.attributes["gen_ai.provider.name"] == "azure.ai.openai"
    assert harness.metric("ctxguard_calls_total", provider="azure.ai.openai", operation="chat") == 1
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 0


@pytest.mark.parametrize(("base_url", "label"), [
    ("https://api.groq.com/openai/v1", "groq"),
    ("https://api.deepseek.com/v1", "deepseek"),
    ("https://api.x.ai/v1", "x_ai"),
    ("https://api.perplexity.ai", "perplexity"),
    ("https://api.mistral.ai/v1", "mistral_ai"),
    ("https://openrouter.ai/api/v1", "openrouter"),
    ("https://api.together.xyz/v1", "together_ai"),
    ("https://api.fireworks.ai/inference/v1", "fireworks_ai"),
    ("https://generativelanguage.googleapis.com/v1beta/openai", "gcp.gemini"),
    # Vertex AI's OpenAI-compatible endpoint, regional and global: the same rule as the google-genai
    # SDK's (tests/providers/test_google_genai.py) and LiteLLM's routes.
    ("https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/endpoints/openapi",
     "gcp.vertex_ai"),
    ("https://aiplatform.googleapis.com/v1/projects/p/locations/global/endpoints/openapi", "gcp.vertex_ai"),
    ("https://my-resource.openai.azure.com/openai/v1", "azure.ai.openai"),
])
def test_the_openai_sdk_pointed_at_a_known_host_is_that_provider(harness, llm, base_url, label):
    harness.start(mode="observe")
    with openai.OpenAI(base_url=base_url, api_key="t", max_retries=0, http_client=redirected(llm)) as client:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert llm.requests, "the request reached the fake"
    span = only_guard_span(harness)
    assert span.attributes["gen_ai.provider.name"] == label
    assert span.attributes["server.address"] == urlsplit(base_url).hostname
    assert span.attributes["server.port"] == 443
    assert harness.metric("ctxguard_calls_total", provider=label, operation="chat") == 1


def test_an_unknown_host_stays_openai_and_never_becomes_a_label(harness, llm):
    harness.start(mode="observe")
    base = "https://llm-gateway.internal.example:8443/v1"
    with openai.OpenAI(base_url=base, api_key="t", max_retries=0, http_client=redirected(llm)) as client:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    span = only_guard_span(harness)
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert (span.attributes["server.address"], span.attributes["server.port"]) == ("llm-gateway.internal.example", 8443)
    assert harness.metric("ctxguard_calls_total", provider="openai", operation="chat") == 1
    providers = {s.labels["provider"] for f in harness.registry.collect() for s in f.samples if "provider" in s.labels}
    assert providers and providers <= set(LABELS)


def test_every_label_given_here_is_in_the_fixed_label_set():
    assert set(ROUTES) <= set(LABELS)
    assert by_host("API.GROQ.COM.") == "groq" and by_host("example.com") is None


def test_the_anthropic_sdk_on_vertex_bedrock_and_foundry_is_labelled_by_its_client_class():
    anthropic = pytest.importorskip("anthropic")
    vertex = anthropic.AnthropicVertex(region="us-east5", project_id="p", access_token="t")
    assert resource_identity(vertex.messages)[0] == "gcp.vertex_ai"
    assert resource_identity(anthropic.Anthropic(api_key="t").messages) == ("anthropic", "api.anthropic.com", 443)
    bedrock = anthropic.AnthropicBedrock(aws_access_key="a", aws_secret_key="s", aws_region="us-east-1")
    assert resource_identity(bedrock.messages)[0] == "aws.bedrock"
    if hasattr(anthropic, "AnthropicFoundry"):
        foundry = anthropic.AnthropicFoundry(api_key="t", resource="my-resource")
        assert resource_identity(foundry.messages)[0] == "azure.ai.inference"


def test_a_subclass_of_a_named_client_keeps_its_identity_and_a_moved_base_url_is_read_again():
    class MyAzure(openai.AzureOpenAI):
        pass

    client = MyAzure(azure_endpoint="https://x.openai.azure.com", api_key="t", api_version="2024-10-21")
    assert client_identity(client)[0] == "azure.ai.openai"
    plain = openai.OpenAI(api_key="t", base_url="https://api.groq.com/openai/v1")
    assert client_identity(plain)[:2] == ("groq", "api.groq.com")
    plain.base_url = "https://api.deepseek.com/v1"
    assert client_identity(plain)[:2] == ("deepseek", "api.deepseek.com")


# -- the server of the other SDKs' clients (issue 41): what their requests are sent to ------------


def test_a_mistral_call_naming_its_own_server_url_is_sent_there_and_says_so(harness, llm):
    """``server_url`` on the call overrides the client's: the span names the call's server, not the
    client's (an unreachable port here, which the request never went to)."""
    pytest.importorskip("mistralai.client", reason="mistralai is not installed (extra 'mistral')")
    from mistralai.client import Mistral

    harness.start(mode="observe")
    with Mistral(api_key="t", server_url="http://127.0.0.1:9") as client:
        client.chat.complete(model="mistral-small-latest", messages=MESSAGES, server_url=llm.mistral_base_url)
    span = only_guard_span(harness)
    assert [r.headers["host"] for r in llm.requests] == [f"127.0.0.1:{llm.port}"]
    assert (span.attributes["server.address"], span.attributes["server.port"]) == ("127.0.0.1", llm.port)


def test_the_default_servers_of_mistral_ollama_and_bedrock_clients_with_the_scheme_s_port():
    """A client's default server, read as its SDK sends to it: the port its URL implies (443 for
    https) when the URL names none."""
    pytest.importorskip("mistralai.client", reason="mistralai is not installed (extra 'mistral')")
    ollama = pytest.importorskip("ollama", reason="ollama is not installed (extra 'ollama')")
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed (extra 'bedrock')")
    from mistralai.client import Mistral

    from ctxguard.providers import bedrock, mistral
    from ctxguard.providers import ollama as ollama_provider

    assert mistral.ADAPTER.identity(Mistral(api_key="t").chat) == (None, "api.mistral.ai", 443)
    assert mistral.ADAPTER.identity(Mistral(api_key="t", server="eu").chat) == (None, "api.eu.mistral.ai", 443)
    assert ollama_provider.ADAPTER.identity(ollama.Client(host="https://ollama.example")) == (
        None, "ollama.example", 443)
    assert ollama_provider.ADAPTER.identity(ollama.Client(host="http://gpu-box:8080")) == (None, "gpu-box", 8080)
    runtime = boto3.client("bedrock-runtime", region_name="eu-west-3", aws_access_key_id="k",
                           aws_secret_access_key="s")
    assert bedrock.ADAPTER.identity(runtime) == (None, "bedrock-runtime.eu-west-3.amazonaws.com", 443)


def test_a_cohere_client_whose_requests_a_hook_redirects_names_no_server(harness, llm):
    """Cohere's Bedrock, SageMaker and OCI clients keep ``https://api.cohere.com`` as their base URL
    and send each request elsewhere, rewritten in an httpx request hook, as an app's hook may: the
    base URL is not where the request goes, so no server is named rather than the wrong one."""
    cohere = pytest.importorskip("cohere", reason="cohere is not installed (extra 'cohere')")
    import httpx as cohere_httpx  # cohere's HTTP package

    fake = urlsplit(llm.cohere_base_url)

    def to_the_fake(request):  # type: ignore[no-untyped-def]
        request.url = request.url.copy_with(scheme="http", host=fake.hostname, port=fake.port)

    hooked = cohere_httpx.Client(event_hooks={"request": [to_the_fake]})
    harness.start(mode="observe")
    client = cohere.ClientV2(api_key="t", base_url="https://api.cohere.com", httpx_client=hooked)
    client.chat(model="command-a-03-2025", messages=MESSAGES, request_options={"max_retries": 0})
    span = only_guard_span(harness)
    assert len(llm.requests) == 1  # it went to the fake (its Host header still says api.cohere.com)
    assert "server.address" not in span.attributes and "server.port" not in span.attributes
    bedrock = cohere.BedrockClientV2(aws_region="us-east-1", aws_access_key="k", aws_secret_key="s")
    from ctxguard.providers.cohere import ADAPTER

    assert ADAPTER.identity(bedrock) is None and ADAPTER.identity(bedrock.v2) is None


def test_the_api_base_of_the_route_litellm_takes_and_none_it_cannot_know():
    """The route's ``api_base``: the call's own (``base_url`` over ``api_base``, as ``completion``
    takes them), else LiteLLM's for a route it knows one of; none where the SDK or environment
    beneath picks it (``anthropic``, ``openai``), nor when fallbacks may answer from another route."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
    pytest.importorskip("litellm", reason="litellm is not installed (extra 'litellm')")
    from ctxguard.providers.litellm import ADAPTER

    def server(**kwargs):  # type: ignore[no-untyped-def]
        return ADAPTER.normalise("chat.completions", {"messages": MESSAGES, **kwargs}).server

    assert server(model="groq/llama-3.1-8b-instant") == ("api.groq.com", 443)
    assert server(model="anthropic/claude-sonnet-4-5", api_base="http://10.0.0.7:4000") == ("10.0.0.7", 4000)
    assert server(model="gpt-4o", api_base="http://a:1", base_url="https://b.example/v1") == ("b.example", 443)
    assert server(model="anthropic/claude-sonnet-4-5") is None
    assert server(model="gpt-4o") is None
    assert server(model="groq/llama-3.1-8b-instant", fallbacks=["gpt-4o"]) is None
