"""Who answers a call: the provider behind an SDK client, by the client's class and its host.

The openai SDK reaches Azure, Groq, DeepSeek, xAI and many more; the anthropic SDK reaches
Vertex AI, Bedrock and Foundry. A call's ``provider`` label (``gen_ai.provider.name``) is the
provider it reaches, read off the client its call site belongs to:

1. the client's class (``AzureOpenAI``, ``AnthropicVertex``, ... or a subclass of one);
2. else its base URL's host, when the host is a known provider's (``HOSTS``, ``SUFFIXES``);
3. else the SDK's own label, with ``server.address`` / ``server.port`` on the span.

Labels come from a fixed table: a host never becomes a label (docs/supported.md, "Provider
identity").

>>> by_host("api.groq.com"), by_host("my-rg.openai.azure.com"), by_host("llm.internal")
('groq', 'azure.ai.openai', None)
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlsplit

from .base import Identity

__all__ = ["CLASSES", "HOSTS", "ROUTES", "SUFFIXES", "by_host", "client_identity", "resource_identity", "url_server"]

#: Client classes (without their ``Async`` prefix) that name the provider they reach.
CLASSES: dict[str, str] = {
    "AzureOpenAI": "azure.ai.openai",
    "BedrockOpenAI": "aws.bedrock",
    "AnthropicVertex": "gcp.vertex_ai",
    "AnthropicGoogleCloud": "gcp.vertex_ai",
    "AnthropicBedrock": "aws.bedrock",
    "AnthropicBedrockMantle": "aws.bedrock",
    "AnthropicAWS": "aws.bedrock",
    "AnthropicFoundry": "azure.ai.inference",
}

#: OpenAI-compatible hosts -> the provider's ``gen_ai.provider.name`` (the conventions' value
#: where they have one; LiteLLM's provider name where they do not).
HOSTS: dict[str, str] = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
    "api.mistral.ai": "mistral_ai",
    # Cohere's Compatibility API (``/compatibility/v1``): its Command models' chat completions, with
    # tools and structured outputs, through the openai SDK (https://docs.cohere.com/docs/compatibility-api).
    "api.cohere.ai": "cohere",
    "api.cohere.com": "cohere",
    "openrouter.ai": "openrouter",
    "api.together.xyz": "together_ai",
    "api.together.ai": "together_ai",
    "api.fireworks.ai": "fireworks_ai",
    "generativelanguage.googleapis.com": "gcp.gemini",
    "aiplatform.googleapis.com": "gcp.vertex_ai",
}

#: Host suffixes of providers whose hosts are per customer.
SUFFIXES: tuple[tuple[str, str], ...] = (
    (".openai.azure.com", "azure.ai.openai"),
    (".services.ai.azure.com", "azure.ai.inference"),
    (".models.ai.azure.com", "azure.ai.inference"),
    (".cognitiveservices.azure.com", "azure.ai.openai"),
    ("-aiplatform.googleapis.com", "gcp.vertex_ai"),
)


#: Every label a client may be given here (each SDK's own among them): a fixed set.
ROUTES: tuple[str, ...] = tuple(dict.fromkeys([*CLASSES.values(), *HOSTS.values(), *(label for _, label in SUFFIXES)]))


def by_host(host: str) -> str | None:
    """The provider a host belongs to, if it is a known one."""
    host = host.lower().rstrip(".")
    label = HOSTS.get(host)
    if label is None:
        label = next((label for suffix, label in SUFFIXES if host.endswith(suffix)), None)
    return label


#: The port a URL without one reaches, by its scheme.
_DEFAULT_PORTS = {"https": 443, "http": 80}


@functools.lru_cache(maxsize=256)
def url_server(url: str) -> tuple[str, int] | None:
    """``(server.address, server.port)`` of a URL a client sends to: its host, and its port or the
    scheme's (443, or 80 for ``http``), as the OpenAI path reads a client's. None when the URL names
    no host or no port can be known (another scheme; a port that is not a number, on which the
    SDK's own request fails). Memoised: a client's URL is one string, read on every call.

    >>> url_server("https://api.mistral.ai"), url_server("http://127.0.0.1:11434/")
    (('api.mistral.ai', 443), ('127.0.0.1', 11434))
    """
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    host = parts.hostname
    return (host, port) if host and port else None


def _by_class(cls: type) -> str | None:
    for base in cls.__mro__:
        label = CLASSES.get(base.__name__.removeprefix("Async"))
        if label is not None:
            return label
    return None


#: Per base URL object (kept, so its id is not reused while cached): ``(url, client class,
#: identity)``. A client's URL object is replaced when its base URL is (``client.base_url = ...``).
#: A memo of a pure function, so the process's: keyed by identity (hashing an ``httpx.URL`` formats
#: it), which ``functools.lru_cache`` cannot do; at most ``_MAX`` entries, cleared whole past it.
_urls: dict[int, tuple[Any, type, Identity | None]] = {}
_MAX = 256


def resource_identity(instance: Any) -> Identity | None:
    """The identity of the client a Stainless resource (``client.chat.completions``) belongs to:
    one attribute read and one dict look-up a call, once its URL has been seen."""
    client = getattr(instance, "_client", None)
    if client is None:
        return None
    # The Stainless clients keep it in ``_base_url``; their ``base_url`` property costs ~15x more.
    url = getattr(client, "_base_url", None)
    kept = _urls.get(id(url))
    if kept is not None and kept[0] is url and kept[1] is type(client):
        return kept[2]
    return client_identity(client)


def client_identity(client: Any) -> Identity | None:
    """``(label or None, server address, server port)`` of a Stainless SDK client (openai,
    anthropic): its class first, then its base URL's host. None if it has neither."""
    named = _by_class(type(client))
    url = getattr(client, "_base_url", None) or getattr(client, "base_url", None)
    found: Identity | None = (named, None, None) if named is not None else None
    host = str(getattr(url, "host", "") or "") if url is not None else ""
    if host:
        port = getattr(url, "port", None)
        if port is None:
            port = 443 if getattr(url, "scheme", "https") == "https" else 80
        found = (named if named is not None else by_host(host), host, port)
    if url is not None:
        if len(_urls) >= _MAX:
            _urls.clear()
        _urls[id(url)] = (url, type(client), found)
    return found
