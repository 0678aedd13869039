"""OpenAI-shaped requests as another provider's API reads them.

An OpenAI Chat Completions call (its messages, tools and parameters) that reaches Cohere, Mistral,
Ollama, Anthropic or Bedrock's Converse is read there as that provider's own request, and counted as
that provider accounts for it: its framing, the preamble or system prompt it adds, how it renders
tools, the prompt format of the model family behind a Bedrock model id. Two callers: LiteLLM, which
writes the provider's request from the OpenAI-shaped arguments itself (Bedrock's only caller here),
and the openai SDK pointed at a provider's OpenAI-compatible endpoint (``api.anthropic.com``,
``api.mistral.ai``, Cohere's Compatibility API), where the provider does. Each mapping writes the
body the provider's own SDK would send, which that provider's module reads (``as_call`` and its
adapter's ``normalise``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from ..memo import Memo
from ..payload import RequestView
from . import anthropic as anthropic_provider
from . import bedrock as bedrock_provider
from . import cohere as cohere_provider
from . import mistral as mistral_provider
from . import ollama as ollama_provider
from ._read import as_str as _str
from ._read import get as _get

__all__ = ["COMPATIBLE", "read_as"]


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


#: The OpenAI parameters each provider takes, under its own names (LiteLLM's ``map_openai_params``
#: for the provider; its OpenAI-compatible endpoint reads them so): what the count and the span's
#: settings read.
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


def _cohere_body(kwargs: Mapping[str, Any], model: str) -> dict[str, Any]:
    """Cohere's v2 chat takes OpenAI's messages and function tools as they are (LiteLLM's
    ``CohereV2ChatConfig`` sends them so, and the Compatibility API reads them so)."""
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


def _tool_calls(message: Any) -> list[tuple[Any, Any, Any]]:
    """An assistant message's tool calls: each one's id, name and arguments (their JSON parsed; empty
    ones ``{}``; a string that is not JSON as it is)."""
    calls = []
    for call in _get(message, "tool_calls") or ():
        function = _get(call, "function")
        arguments = _get(function, "arguments") if function is not None else None
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
        except ValueError:
            parsed = arguments
        calls.append((_get(call, "id"), _get(function, "name"), parsed))
    return calls


def _merged(turns: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    """Turns as sent: consecutive turns of one role merged into one (a user's text and the tools'
    results beside it)."""
    merged: list[dict[str, Any]] = []
    for role, blocks in turns:
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"] += blocks
        else:
            merged.append({"role": role, "content": blocks})
    return merged


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
    blocks += [{"type": "tool_use", "id": id_, "name": name, "input": parsed}
               for id_, name, parsed in _tool_calls(message)]
    return "assistant", blocks


#: The roles whose messages go into Anthropic's ``system``: LiteLLM maps ``developer`` to ``system`` for
#: every provider but OpenAI (``BaseConfig.translate_developer_role_to_system_role``).
_SYSTEM_ROLES = ("system", "developer")


def _anthropic_body(kwargs: Mapping[str, Any], model: str) -> dict[str, Any] | None:
    """Anthropic's Messages as LiteLLM writes them (``AnthropicConfig.transform_request``): the system
    (and developer) messages' texts in ``system``, each other message a turn, consecutive turns of one role merged into
    one (a user's text and the tools' results beside it), the function tools as Anthropic's; None
    for messages that are not a list (the SDK's error to raise), read as OpenAI's instead."""
    messages = _get(kwargs, "messages")
    if not isinstance(messages, (list, tuple)):
        return None
    system: list[Any] = []
    turns: list[tuple[str, list[Any]]] = []
    for message in messages:
        if _get(message, "role") in _SYSTEM_ROLES:
            system += _anthropic_blocks(_get(message, "content"))
        else:
            turns.append(_anthropic_turn(message))
    body = {"model": model, "messages": _merged(turns),
            "max_tokens": _int_arg(kwargs, "max_tokens", "max_completion_tokens"), **_picked(kwargs, _ANTHROPIC_PARAMS)}
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


#: Converse's ``inferenceConfig`` names of the OpenAI parameters (LiteLLM's ``AmazonConverseConfig.map_openai_params``).
_CONVERSE_PARAMS = {"temperature": "temperature", "top_p": "topP", "stop": "stopSequences"}
#: What LiteLLM writes before a system message that comes after the first turn, which it sends as a
#: user turn (``mid_conversation_system.CONVERTED_SYSTEM_NOTE``; Converse takes no system role in
#: ``messages``).
CONVERTED_SYSTEM_NOTE = ("Operator note (not from the user): the following was originally a "
                         "mid-conversation system-role reminder.")


def _converse_image(image: Any) -> dict[str, Any]:
    """An image part as Converse's image block: a ``data:`` URL's bytes, as boto3 takes them; a URL's,
    which LiteLLM downloads to send, are not known before (an image of unknown size: the family's most)."""
    url = (image if isinstance(image, str) else _str(_get(image, "url"))) or ""
    _, found, data = url.partition(";base64,")
    try:
        return {"image": {"source": {"bytes": base64.b64decode(data)} if found else {}}}
    except ValueError:  # not base64: LiteLLM's own error reaches the app
        return {"image": {"source": {}}}


def _converse_blocks(content: Any) -> list[Any]:
    """OpenAI content as Converse's content blocks (``_bedrock_converse_messages_pt``): a text as a
    text block (none for an empty one), a list's text parts as text blocks and its images as image
    blocks; other parts are not read."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    blocks: list[Any] = []
    for part in content if isinstance(content, list) else ():
        kind = _get(part, "type")
        if kind == "text":
            blocks.append({"text": _get(part, "text")})
        elif kind == "image_url":
            blocks.append(_converse_image(_get(part, "image_url")))
    return blocks


def _converse_turn(message: Any) -> tuple[str, list[Any]]:
    """A message as the role and content blocks of Converse's turn it goes into: a tool's result is
    a user turn's ``toolResult``, an assistant's calls its ``toolUse`` blocks, a system message after
    the first turn a user turn, LiteLLM's note before its texts."""
    role = _get(message, "role")
    if role == "tool":
        return "user", [{"toolResult": {"toolUseId": _get(message, "tool_call_id"),
                                        "content": _converse_blocks(_get(message, "content"))}}]
    blocks = _converse_blocks(_get(message, "content"))
    if role in _SYSTEM_ROLES:
        return "user", [{"text": CONVERTED_SYSTEM_NOTE}, *blocks]
    if role != "assistant":
        return "user", blocks
    blocks += [{"toolUse": {"toolUseId": id_, "name": name, "input": parsed}}
               for id_, name, parsed in _tool_calls(message)]
    return "assistant", blocks


def _converse_tool(tool: Any) -> Any:
    """An OpenAI function tool as Converse's ``toolSpec`` (``_bedrock_tools_pt``): its description
    the tool's name where it has none, its schema's type, properties and required alone."""
    function = _get(tool, "function")
    parameters = _get(function, "parameters") or {}
    name = _get(function, "name")
    schema = {"type": _get(parameters, "type") or "object", "properties": _get(parameters, "properties") or {},
              "required": _get(parameters, "required") or []}
    return {"toolSpec": {"inputSchema": {"json": schema}, "name": name,
                         "description": _get(function, "description") or name}}


def _converse_tool_choice(choice: Any) -> Any:
    """OpenAI's ``tool_choice`` as Converse's where it forces a tool (what Claude's count reads):
    ``required`` is ``any``, a named function ``tool``."""
    if choice == "required":
        return {"any": {}}
    name = _get(_get(choice, "function"), "name") if _get(choice, "type") == "function" else None
    return {"tool": {"name": name}} if name else None


def _bedrock_body(kwargs: Mapping[str, Any], model: str) -> dict[str, Any] | None:
    """Bedrock's Converse request as LiteLLM writes it (``AmazonConverseConfig._transform_request``):
    the leading system (and developer) messages' texts in ``system``, each other message a turn,
    consecutive turns of one role merged into one, the function tools in
    ``toolConfig``, the reserved output ``inferenceConfig.maxTokens``; None for messages that are
    not a list (the SDK's error to raise), read as OpenAI's instead. The model is the route's."""
    messages = _get(kwargs, "messages")
    if not isinstance(messages, (list, tuple)):
        return None
    leading = next((i for i, m in enumerate(messages) if _get(m, "role") not in _SYSTEM_ROLES), len(messages))
    system = [block for m in messages[:leading] for block in _converse_blocks(_get(m, "content"))]
    turns = [_converse_turn(message) for message in messages[leading:]]
    config = {"maxTokens": _int_arg(kwargs, "max_tokens", "max_completion_tokens"),
              **_picked(kwargs, _CONVERSE_PARAMS)}
    body: dict[str, Any] = {"messages": _merged(turns), "inferenceConfig": config}
    if system:
        body["system"] = system
    tools = _get(kwargs, "tools")
    if isinstance(tools, list) and tools:
        specs = [_converse_tool(tool) for tool in tools]
        choice = _converse_tool_choice(_get(kwargs, "tool_choice"))
        body["toolConfig"] = {"tools": specs, **({"toolChoice": choice} if choice else {})}
    return body


#: Provider labels whose modules read an OpenAI-shaped request -> how the call's arguments become
#: the body that provider's SDK sends, and that module's ``as_call`` and adapter.
_AS_SENT: dict[str, tuple[Callable[[Mapping[str, Any], str], dict[str, Any] | None], Any, Any]] = {
    "cohere": (_cohere_body, cohere_provider.as_call, cohere_provider.ADAPTER),
    "mistral_ai": (_mistral_body, mistral_provider.as_call, mistral_provider.ADAPTER),
    "ollama": (_ollama_body, ollama_provider.as_call, ollama_provider.ADAPTER),
    "anthropic": (_anthropic_body, anthropic_provider.as_call, anthropic_provider.ADAPTER),
    # Converse, as LiteLLM's ``bedrock`` route writes it (its only caller: ``COMPATIBLE`` leaves it out).
    "aws.bedrock": (_bedrock_body, bedrock_provider.as_call, bedrock_provider.ADAPTER),
}

#: The labels whose OpenAI-compatible endpoint the openai SDK reaches (told by its host,
#: ``identity``) and that endpoint reads a Chat Completions request as its own API's. Not Ollama's
#: ``/v1`` (no host tells it), nor Bedrock's OpenAI endpoint, which serves OpenAI Chat Completions
#: itself rather than Converse.
COMPATIBLE = ("anthropic", "mistral_ai", "cohere")


def read_as(label: str, kwargs: Mapping[str, Any], model: str, memo: Memo | None) -> RequestView | None:
    """An OpenAI Chat Completions call (``kwargs``) read as the provider ``label`` reads it, ``model``
    the model sent there; None for a label no module reads here, or a call its mapping cannot write
    (messages that are not a list: the SDK's error to raise). The view's model is the call's, as
    the app names it (the span's ``gen_ai.request.model``, the budget's window)."""
    found = _AS_SENT.get(label)
    if found is None:
        return None
    body_of, as_call, adapter = found
    body = body_of(kwargs, model)
    if body is None:
        return None
    if _get(kwargs, "stream") is True:
        body["stream"] = True
    api, call = as_call({key: value for key, value in body.items() if value is not None}, model)
    view: RequestView = adapter.normalise(api, call, memo)
    view.model = _str(_get(kwargs, "model"))
    return view
