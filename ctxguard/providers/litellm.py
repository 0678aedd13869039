"""LiteLLM: ``litellm.completion`` / ``acompletion``, OpenAI-shaped messages routed to any provider.

Requests and answers are OpenAI Chat Completions shaped. A route to a provider whose module
ctxguard has, in a request format that module reads (Cohere's v2 chat, Mistral, Ollama's
``/api/chat``, Anthropic's Messages: ``_AS_SENT``), is counted by that module, as that provider
accounts for it (its framing, preamble, tool rendering): the call's arguments are mapped to the
body LiteLLM sends, the way LiteLLM's own translation writes it, and read as that SDK's call of it.
Every other route is read by the OpenAI module, with OpenAI Chat's accounting. This module adds
the provider label and the server from LiteLLM's routing.
LiteLLM runs other SDKs underneath (the openai SDK for Azure, say): the adapter
``delegates``, so while its call is in flight those SDKs' call sites are part of it
(one evaluation, one span), and the body they send feeds this call's ``wire_intact``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ..memo import Memo
from ..payload import Answer, RequestView
from . import anthropic as anthropic_provider
from . import cohere as cohere_provider
from . import mistral as mistral_provider
from . import ollama as ollama_provider
from . import openai as openai_provider
from ._read import as_str as _str
from ._read import get as _get
from .base import CallSite, Delegating, Provider, StreamReader, Translation
from .identity import url_server

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


def _int_arg(kwargs: Mapping[str, Any], *names: str) -> int | None:
    """The first of ``names`` the call sets to a whole number."""
    for name in names:
        value = _get(kwargs, name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _picked(kwargs: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """What the call sets of ``names`` (OpenAI's parameter -> the provider's), under the provider's names."""
    return {sent: kwargs[name] for name, sent in names.items() if _get(kwargs, name) is not None}


#: The OpenAI parameters LiteLLM sends on to each provider whose module reads its requests, under
#: the names the provider takes (its ``map_openai_params``): what the count and the span's settings read.
_COHERE_PARAMS = {"tools": "tools", "documents": "documents", "response_format": "response_format",
                  "temperature": "temperature", "top_p": "p", "top_k": "k", "seed": "seed",
                  "stop": "stop_sequences", "frequency_penalty": "frequency_penalty",
                  "presence_penalty": "presence_penalty"}
_MISTRAL_PARAMS = {"tools": "tools", "response_format": "response_format", "reasoning_effort": "reasoning_effort",
                   "temperature": "temperature", "top_p": "top_p", "seed": "random_seed", "stop": "stop",
                   "n": "n", "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty"}
_OLLAMA_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "seed": "seed", "stop": "stop",
                   "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
                   "num_ctx": "num_ctx"}
_ANTHROPIC_PARAMS = {"tools": "tools", "tool_choice": "tool_choice", "thinking": "thinking",
                     "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "stop": "stop_sequences"}


def _cohere_body(kwargs: Mapping[str, Any], model: str) -> dict[str, Any] | None:
    """Cohere's v2 chat takes OpenAI's messages and function tools as they are (LiteLLM's
    ``CohereV2ChatConfig`` sends them so); its v1 route (``cohere_chat/v1/...``) is not read here."""
    if "v1/" in (_str(_get(kwargs, "model")) or ""):
        return None
    return {"model": model, "messages": _get(kwargs, "messages"),
            "max_tokens": _int_arg(kwargs, "max_tokens", "max_completion_tokens"), **_picked(kwargs, _COHERE_PARAMS)}


def _mistral_body(kwargs: Mapping[str, Any], model: str) -> dict[str, Any]:
    """Mistral's chat completions take OpenAI's messages and tools as they are."""
    return {"model": model, "messages": _get(kwargs, "messages"),
            "max_tokens": _int_arg(kwargs, "max_tokens", "max_completion_tokens"), **_picked(kwargs, _MISTRAL_PARAMS)}


def _ollama_message(message: Any) -> dict[str, Any]:
    """A message (a dict, or LiteLLM's ``Message`` an app keeps in its history) as LiteLLM's
    ``OllamaChatConfig`` sends it: content parts joined into one text and its images apart."""
    sent: dict[str, Any] = {"role": _get(message, "role")}
    content = _get(message, "content")
    if isinstance(content, list):
        texts, images = [], []
        for part in content:
            kind = _get(part, "type")
            if kind == "text":
                texts.append(_str(_get(part, "text")) or "")
            elif kind == "image_url":
                image = _get(part, "image_url")
                url = image if isinstance(image, str) else _str(_get(image, "url"))
                if url:
                    images.append(url)
        sent["content"] = "".join(texts)
        sent["images"] = images
    elif content is not None:
        sent["content"] = content
    for key in ("tool_calls", "tool_call_id"):
        if _get(message, key):
            sent[key] = _get(message, key)
    return sent


def _ollama_body(kwargs: Mapping[str, Any], model: str) -> dict[str, Any]:
    """Ollama's ``/api/chat`` (the ``ollama_chat`` route): the sampling parameters and the reserved
    output (``num_predict``) in ``options``, and the window the call sets (``num_ctx``)."""
    options = _picked(kwargs, _OLLAMA_OPTIONS)
    predict = _int_arg(kwargs, "max_tokens", "max_completion_tokens")
    if predict is not None:
        options["num_predict"] = predict
    messages = _get(kwargs, "messages")
    if isinstance(messages, (list, tuple)):
        messages = [_ollama_message(m) for m in messages]
    return {"model": model, "messages": messages, "options": options, "tools": _get(kwargs, "tools"),
            "stream": _get(kwargs, "stream") is True}


def _anthropic_blocks(content: Any) -> list[Any]:
    """OpenAI content as Anthropic's blocks: text as text, an image's URL as an image's source (a
    ``data:`` URL's bytes as base64); other parts as they are."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return []
    blocks: list[Any] = []
    for part in content:
        if _get(part, "type") != "image_url":
            blocks.append(part)
            continue
        image = _get(part, "image_url")
        url = (image if isinstance(image, str) else _str(_get(image, "url"))) or ""
        if url.startswith("data:") and ";base64," in url:
            media, data = url[5:].split(";base64,", 1)
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
        else:
            blocks.append({"type": "image", "source": {"type": "url", "url": url}})
    return blocks


def _anthropic_turn(message: Any) -> tuple[str, list[Any]]:
    """A non-system message as the role and blocks of Anthropic's turn it goes into: a tool's
    result is a user turn's ``tool_result``, an assistant's calls its ``tool_use`` blocks."""
    role = _get(message, "role")
    if role == "tool" or role == "function":
        result = {"type": "tool_result", "tool_use_id": _get(message, "tool_call_id"),
                  "content": _get(message, "content")}
        return "user", [result]
    blocks = _anthropic_blocks(_get(message, "content"))
    if role != "assistant":
        return "user", blocks
    for call in _get(message, "tool_calls") or ():
        function = _get(call, "function")
        arguments = _get(function, "arguments") if function is not None else None
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
        except ValueError:
            parsed = arguments
        blocks.append({"type": "tool_use", "id": _get(call, "id"), "name": _get(function, "name"), "input": parsed})
    return "assistant", blocks


def _anthropic_body(kwargs: Mapping[str, Any], model: str) -> dict[str, Any] | None:
    """Anthropic's Messages as LiteLLM writes them (``AnthropicConfig.transform_request``): the system
    messages' texts in ``system``, each other message a turn, consecutive turns of one role merged into
    one (a user's text and the tools' results beside it), the function tools as Anthropic's; None
    for messages that are not a list (the SDK's error to raise), read as OpenAI's instead."""
    messages = _get(kwargs, "messages")
    if not isinstance(messages, (list, tuple)):
        return None
    system: list[Any] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if _get(message, "role") == "system":
            system += _anthropic_blocks(_get(message, "content"))
            continue
        role, blocks = _anthropic_turn(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    body = {"model": model, "messages": turns, "max_tokens": _int_arg(kwargs, "max_tokens", "max_completion_tokens"),
            **_picked(kwargs, _ANTHROPIC_PARAMS)}
    if system:
        body["system"] = system
    tools = body.get("tools")
    if isinstance(tools, list):
        body["tools"] = [_anthropic_tool(tool) for tool in tools]
    if "tool_choice" in body:
        body["tool_choice"] = _anthropic_tool_choice(body["tool_choice"])
    return body


def _anthropic_tool(tool: Any) -> Any:
    function = _get(tool, "function") if _get(tool, "type") == "function" else None
    if function is None:
        return tool
    # LiteLLM names the type, which Anthropic's own SDK leaves out: it is in the body as sent.
    sent = {"name": _get(function, "name"), "input_schema": _get(function, "parameters") or {"type": "object"},
            "type": "custom"}
    if _get(function, "description"):
        sent["description"] = _get(function, "description")
    return sent


def _anthropic_tool_choice(choice: Any) -> Any:
    """OpenAI's ``tool_choice`` as Anthropic's: ``required`` is ``any``, a named function ``tool``."""
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, str):
        return {"type": choice}
    name = _get(_get(choice, "function"), "name") if _get(choice, "type") == "function" else None
    return {"type": "tool", "name": name} if name else choice


#: LiteLLM's provider names whose requests a provider module reads -> how the call's arguments
#: become the body LiteLLM sends there (None: a body of this route that module does not read),
#: and that module's ``as_call`` and adapter.
_AS_SENT: dict[str, tuple[Callable[[Mapping[str, Any], str], dict[str, Any] | None], Any, Any]] = {
    "cohere": (_cohere_body, cohere_provider.as_call, cohere_provider.ADAPTER),
    "cohere_chat": (_cohere_body, cohere_provider.as_call, cohere_provider.ADAPTER),
    "mistral": (_mistral_body, mistral_provider.as_call, mistral_provider.ADAPTER),
    "ollama_chat": (_ollama_body, ollama_provider.as_call, ollama_provider.ADAPTER),
    "anthropic": (_anthropic_body, anthropic_provider.as_call, anthropic_provider.ADAPTER),
}


def _as_sent(kwargs: Mapping[str, Any], route: tuple[str, str | None, str] | None,
             memo: Memo | None) -> RequestView | None:
    """The call read as the provider its route reaches reads the body LiteLLM sends it, counted as
    that provider accounts for it; None for a route no module reads (``_AS_SENT``). The model is the
    call's, as the app names it (the span's ``gen_ai.request.model``, the budget's window)."""
    found = _AS_SENT.get(route[0]) if route is not None else None
    if found is None or route is None:
        return None
    body_of, as_call, adapter = found
    body = body_of(kwargs, route[2])
    if body is None:
        return None
    if _get(kwargs, "stream") is True:
        body["stream"] = True
    api, call = as_call({key: value for key, value in body.items() if value is not None})
    view: RequestView = adapter.normalise(api, call, memo)
    view.model = _str(_get(kwargs, "model"))
    return view


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
