"""Hugging Face Hub (``huggingface_hub`` 2.x on httpx2, 1.x on httpx): ``InferenceClient.chat_completion``, sync
and async.

``InferenceClient`` / ``AsyncInferenceClient`` is Hugging Face's own client: for its Inference
Providers router, a dedicated Inference Endpoint, or any OpenAI-compatible server (TGI, vLLM)
named by a URL ``model`` / ``base_url``. Its chat API is OpenAI's Chat Completions: ``messages``
(dicts or the SDK's ``ChatCompletionInputMessage``, a dataclass that is also a dict) with roles
``system``, ``user``, ``assistant`` and ``tool``, content a string or ``text`` / ``image_url``
chunks, ``tool_calls`` and ``tool_call_id``; ``max_tokens`` is the reserved output. The answer
(``ChatCompletionOutput``) and the stream's chunks (``ChatCompletionStreamOutput``) have OpenAI's
shape too. So the OpenAI module reads the messages and the answers, and this one reads what is
Hugging Face's own: ``tools`` count as their JSON (the open models' chat templates render them
so, not as OpenAI's TypeScript declarations), with ``tool_prompt``, the text TGI puts before
them; a ``response_format`` (TGI's grammar, ``{"type": "json" | "regex", "value": ...}``, or
OpenAI's ``json_schema``) counts like the tools.

``chat_completion(stream=True)`` sends the request, then returns a generator of chunks (the
async client: an async generator); the generator is observed as the app iterates it.
``client.chat.completions.create`` is a property returning the client's bound
``chat_completion``: the one call site covers it.

Not read: a model set on the client (``InferenceClient("meta-llama/...")``) rather than passed
to the call: the call site's arguments are all a request is read from, so such a call has no
``gen_ai.request.model`` and no window from the model table. Nor the arguments of a tool call
built as the SDK's ``ChatCompletionInputToolCall``, which spells them ``parameters`` (TGI's input
schema); dicts and the assistant messages the SDK returns spell them ``arguments``, as OpenAI does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..memo import Memo
from ..payload import Answer, RequestView
from . import openai as openai_provider
from ._read import as_str as _str
from ._read import canonical, output_type, schemas
from ._read import get as _get
from .base import CallSite, Identity, Methods, Provider, StreamReader, Translation
from .identity import url_server

__all__ = ["ADAPTER", "PROVIDER"]

#: The api this module's call sites are read as; the OpenAI module reads its messages and answers.
API = "chat_completion"
_OPENAI_API = "chat.completions"

# ``chat_completion`` is a plain method on both classes (not a generator function): it sends the
# request, then returns the answer or the stream of chunks.
SITES = (
    CallSite("huggingface_hub.inference._client", "InferenceClient.chat_completion", API),
    CallSite("huggingface_hub.inference._generated._async_client", "AsyncInferenceClient.chat_completion", API,
             "async"),
)

#: Arguments read here rather than by the OpenAI module, which would read them as OpenAI renders them.
_OWN = frozenset({"tools", "response_format"})


def _format_schema(value: Any) -> Any:
    """What a ``response_format`` constrains the answer to: TGI's grammar ``value`` (a JSON schema
    or a regex), or OpenAI's ``json_schema.schema``; None for none."""
    kind = _get(value, "type")
    if kind in ("json", "regex"):
        return _get(value, "value")
    if kind == "json_schema":
        spec = _get(value, "json_schema")
        return _get(spec, "schema") if spec is not None else None
    return None


def _own_arguments(kwargs: Mapping[str, Any], view: RequestView) -> None:
    """Tools as their JSON, then the prompt TGI puts before them, then the answer's format (and its
    output type)."""
    schemas(_get(kwargs, "tools"), view)
    tool_prompt = _str(_get(kwargs, "tool_prompt"))
    if tool_prompt and view.tools:
        view.tools.append(tool_prompt)
    response_format = _get(kwargs, "response_format")
    if response_format is None:
        return
    kind = output_type(_get(response_format, "type"))  # TGI's "json" and OpenAI's; a regex says nothing
    if kind is not None:
        view.settings["output.type"] = kind
    schema = _format_schema(response_format)
    if schema is not None:
        try:
            view.tools.append(schema if isinstance(schema, str) else canonical(schema))
        except Exception:  # a schema that will not serialise: the SDK's own error reaches the app
            return


def _model(kwargs: Mapping[str, Any]) -> str | None:
    """The model the call names; a URL names an endpoint, not a model (the SDK then sends a
    placeholder in the body)."""
    model = _str(_get(kwargs, "model"))
    return None if model is None or model.startswith(("http://", "https://")) else model


def _with_usage(output: Any) -> Any:
    """``output`` with its ``usage`` as the server sent it. huggingface_hub's outputs are dataclasses
    and dicts at once, and the dict holds only the fields the dataclass declares: the usage details
    an OpenAI-compatible server adds (``prompt_tokens_details.cached_tokens``,
    ``completion_tokens_details.reasoning_tokens``) are kept on the ``usage`` attribute alone."""
    usage = getattr(output, "usage", None)
    if usage is None or type(output) is dict or not isinstance(output, dict):
        return output
    return {**output, "usage": usage}


class _HubChunks:
    """Chat Completions' stream reader, given each chunk with its usage as sent (``_with_usage``)."""

    def __init__(self, chunks: StreamReader) -> None:
        self._chunks = chunks

    def feed(self, chunk: Any) -> None:
        self._chunks.feed(_with_usage(chunk))

    def reply(self) -> Answer:
        return self._chunks.reply()


class HuggingFaceAdapter(Translation):
    """``chat_completion``'s arguments read as Chat Completions, and what is Hugging Face's own.

    >>> view = ADAPTER.normalise("chat_completion", {"messages": [{"role": "user", "content": "Hi"}],
    ...                          "model": "meta-llama/Llama-3.1-8B-Instruct", "tool_prompt": "unused"})
    >>> view.provider, view.model, view.items, view.tools
    ('huggingface', 'meta-llama/Llama-3.1-8B-Instruct', [('user', 'Hi', (), 'message', 0)], [])
    """

    provider = "huggingface"

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        messages = kwargs if _OWN.isdisjoint(kwargs) else {k: v for k, v in kwargs.items() if k not in _OWN}
        view = openai_provider.ADAPTER.normalise(_OPENAI_API, messages, memo)
        view.provider = self.provider
        view.model = _model(kwargs)
        _own_arguments(kwargs, view)
        return view

    def read_response(self, api: str, result: Any) -> Answer | None:
        return openai_provider.ADAPTER.read_response(_OPENAI_API, _with_usage(result))

    def stream_reader(self, api: str) -> StreamReader:
        return _HubChunks(openai_provider.ADAPTER.stream_reader(_OPENAI_API))

    def identity(self, instance: Any) -> Identity | None:
        """The server a client bound to a URL (``base_url``, or a URL ``model``) reaches; a client
        of the router names no URL until the call picks its provider's."""
        target = _str(getattr(instance, "model", None))
        if target is None or not target.startswith(("http://", "https://")):
            return None
        server = url_server(target)
        return (None, *server) if server is not None else None

    reads_captures = True

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
        """A captured body is the call's keyword arguments (the wire's names are the SDK's)."""
        return API, body


ADAPTER = HuggingFaceAdapter()


PROVIDER = Provider(
    distribution="huggingface_hub",
    module="huggingface_hub",
    supported=(1, 2),
    # The GenAI conventions have no value for Hugging Face: LiteLLM's provider name, as SPEC §4 does.
    label="huggingface",
    adapter=ADAPTER,
    # ``chat_completion(messages, *, model=..., ...)``
    family=Methods(SITES, positional=("messages",)),
)
