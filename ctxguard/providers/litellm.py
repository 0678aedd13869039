"""LiteLLM: ``litellm.completion`` / ``acompletion``, OpenAI-shaped messages routed to any provider.

Requests and answers are OpenAI Chat Completions shaped. A route to a provider whose module
ctxguard has, in a request format that module reads (Cohere's v2 chat, Mistral, Ollama's
``/api/chat``, Anthropic's Messages, Bedrock's Converse: ``_READ_AS``), is counted by that module, as that provider
accounts for it (its framing, preamble, tool rendering): the call's arguments are mapped to the
body LiteLLM sends, the way LiteLLM's own translation writes it, and read as that SDK's call of it.
Every other route is read by the OpenAI module, with OpenAI Chat's accounting. This module adds
the provider label and the server from LiteLLM's routing.
LiteLLM runs other SDKs underneath (the openai SDK for Azure, say): the adapter
``delegates``, so while its call is in flight those SDKs' call sites are part of it
(one evaluation, one span), and the body they send feeds this call's ``wire_intact``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from ..memo import Memo
from ..payload import Answer, RequestView
from . import anthropic as anthropic_provider
from . import openai as openai_provider
from ._read import as_str as _str
from ._read import get as _get
from .base import CallSite, Delegating, Provider, StreamReader, Translation
from .identity import url_server
from .openai_shaped import read_as

__all__ = ["ADAPTER", "PROVIDER"]

#: Module-level functions, patched on the ``litellm`` package, which is where
#: ``litellm.completion(...)`` looks them up.
SITES = (
    CallSite("litellm", "completion", "chat.completions"),
    CallSite("litellm", "acompletion", "chat.completions", "async"),
)

#: LiteLLM's provider names -> ctxguard's provider label (a bounded set); others are "litellm".
_LABELS = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
}


#: LiteLLM's provider names whose requests go out in an SDK's own request format -> that SDK:
#: LiteLLM runs the openai SDK for OpenAI and Azure OpenAI, and writes Anthropic's Messages
#: requests itself. Its other routes' bodies are in formats of LiteLLM's choosing.
_SENT_AS = {
    "openai": "openai",
    "azure": "openai",
    "anthropic": "anthropic",
}


def _route(kwargs: Mapping[str, Any]) -> tuple[str, str | None, str] | None:
    """LiteLLM's provider name for a call (``openai``, ``azure``, ``anthropic``, ...), the
    ``api_base`` of that route, if it routes it: the one the call names (``base_url`` over
    ``api_base``, as ``completion`` takes them), else the route's own where LiteLLM knows it
    (``groq`` is ``https://api.groq.com/openai/v1``); None where it is left to the SDK or the
    environment beneath (``openai``, ``anthropic``); and the model it sends (``command-a-03-2025``
    for ``cohere_chat/command-a-03-2025``)."""
    litellm = sys.modules.get("litellm")
    model = _str(_get(kwargs, "model"))
    if litellm is None or model is None:
        return None
    aliases = getattr(litellm, "model_alias_map", None)
    if isinstance(aliases, Mapping):  # ``completion`` routes the model an alias names
        model = _str(aliases.get(model, model)) or model
    try:
        sent, provider, _, api_base = litellm.get_llm_provider(
            model=model,
            custom_llm_provider=_str(_get(kwargs, "custom_llm_provider")),
            api_base=_str(_get(kwargs, "base_url")) or _str(_get(kwargs, "api_base")),
        )
    except Exception:  # a model LiteLLM cannot route: its own call raises the error the app sees
        return None
    return str(provider), api_base if isinstance(api_base, str) else None, _str(sent) or model


def _may_reroute(kwargs: Mapping[str, Any]) -> bool:
    """Whether another route than the model's may answer the call: fallbacks (the call's, or
    ``litellm.model_fallbacks``) or a model list to pick from."""
    return bool(_get(kwargs, "fallbacks") or _get(kwargs, "model_list")
                or getattr(sys.modules.get("litellm"), "model_fallbacks", None))


def _sends_as(kwargs: Mapping[str, Any]) -> str | None:
    """The SDK whose request format LiteLLM sends this call in (``_SENT_AS``), if any."""
    route = _route(kwargs)
    return _SENT_AS.get(route[0]) if route is not None else None


#: LiteLLM's provider names whose requests a provider module reads (``openai_shaped``) -> that
#: provider's label.
_READ_AS = {"cohere": "cohere", "cohere_chat": "cohere", "mistral": "mistral_ai", "ollama_chat": "ollama",
            "anthropic": "anthropic", "bedrock": "aws.bedrock"}


def _sent_to_converse(kwargs: Mapping[str, Any], model: str) -> bool:
    """Whether LiteLLM sends a ``bedrock`` route's call to Bedrock's Converse, as its ``completion``
    decides (``BedrockModelInfo.get_bedrock_route`` of the routed model and the call's parameters):
    ``bedrock/converse/...`` and the models it serves on Converse unprefixed; not ``bedrock/invoke/...``
    nor another model it sends to ``invoke_model`` in the model's own body, nor Bedrock's OpenAI Chat
    Completions (``chat_completions/...``, GPT 5.6 and newer)."""
    try:
        return bool(sys.modules["litellm"].BedrockModelInfo.get_bedrock_route(model, kwargs) == "converse")
    except Exception:  # a LiteLLM without it: read as OpenAI's, as before
        return False


def _as_sent(kwargs: Mapping[str, Any], route: tuple[str, str | None, str] | None,
             memo: Memo | None) -> RequestView | None:
    """The call read as the provider its route reaches reads the body LiteLLM sends it, counted as
    that provider accounts for it; None for a route no module reads (``_READ_AS``), for Cohere's
    v1 chat route (``cohere_chat/v1/...``), whose body is not v2's, and for a Bedrock route LiteLLM
    does not send to Converse."""
    label = _READ_AS.get(route[0]) if route is not None else None
    if label is None or route is None:
        return None
    if label == "cohere" and "v1/" in (_str(_get(kwargs, "model")) or ""):
        return None
    if label == "aws.bedrock" and not _sent_to_converse(kwargs, route[2]):
        return None
    return read_as(label, kwargs, route[2], memo)


class LiteLLMAdapter(Translation):
    provider = "litellm"

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        route = _route(kwargs)
        view = _as_sent(kwargs, route, memo) or openai_provider.ADAPTER.normalise(api, kwargs, memo)
        view.provider = _LABELS.get(route[0], "litellm") if route is not None else "litellm"
        if route is not None and route[1] and not _may_reroute(kwargs):
            view.server = url_server(route[1])
        return view

    def read_response(self, api: str, result: Any) -> Answer | None:
        return openai_provider.ADAPTER.read_response(api, result)

    def stream_reader(self, api: str) -> StreamReader:
        return openai_provider.ADAPTER.stream_reader(api)

    def wire_readers(self, provider: str) -> tuple[Callable[[Any], Answer | None], StreamReader] | None:
        """How the routed provider's own answer is read off the HTTP response LiteLLM got: LiteLLM
        translates what it returns (its own id, OpenAI finish reasons), and the span carries what
        the provider said. None for a provider whose wire format is not read here."""
        found = _WIRE.get(provider)
        if found is None:
            return None
        adapter, api = found
        return (lambda body: adapter.read_response(api, body)), adapter.stream_reader(api)


#: provider label -> (adapter, api) reading that provider's HTTP answers.
_WIRE: dict[str, tuple[Any, str]] = {
    "openai": (openai_provider.ADAPTER, "chat.completions"),
    "anthropic": (anthropic_provider.ADAPTER, "messages"),
}


ADAPTER = LiteLLMAdapter()


PROVIDER = Provider(
    distribution="litellm",
    module="litellm",
    supported=(1, 1),
    label="litellm",
    routes=tuple(dict.fromkeys(_LABELS.values())),
    adapter=ADAPTER,
    # ``completion(model, messages, ...)``
    family=Delegating(SITES, wire_readers=ADAPTER.wire_readers, sends_as=_sends_as, positional=("model", "messages")),
)
