"""What a provider module declares: one ``Provider`` record, translation only, no decisions.

A provider module knows an SDK's call sites and how to turn its requests and answers
into the neutral ``RequestView`` / ``Answer``. It imports nothing of the guard, the
call lifecycle or telemetry (the import contracts in ``pyproject.toml`` hold it to that);
patching, metrics' label set, offline checking and docs/supported.md all read the
records in ``ctxguard.providers.PROVIDERS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from ..memo import Memo
from ..payload import Answer, RequestView
from ._read import get, tool_definitions

__all__ = [
    "Adapter",
    "CallSite",
    "Delegating",
    "Dispatch",
    "Family",
    "Identity",
    "Kind",
    "Methods",
    "Pending",
    "Provider",
    "SharedDispatch",
    "StreamReader",
    "Translation",
    "WireReaders",
    "WireRoute",
]

_Self = TypeVar("_Self")

#: How a call site answers, declared (never guessed from a class name):
#: ``sync``: returns the answer, a stream or an HTTP-holding result; a generator function is one,
#: sync or async (``async def`` with ``yield``: called without ``await``, it returns its async
#: generator at once, and sends nothing until the first item is asked for; cohere's ``chat_stream``);
#: ``async``: returns a coroutine of one of those;
#: ``manager``: returns at once a stream helper (a context manager, sync or async), whose
#: final answer the site's ``final`` reads.
Kind = Literal["sync", "async", "manager"]


class StreamReader(Protocol):
    """Accumulates a streamed answer chunk by chunk. One that knows its answer's last event sets
    ``complete`` (True) on it: the observation then ends there, before the event goes on up (an
    instrumentation above ctxguard may end the span ctxguard adopted as that event passes it)."""

    def feed(self, chunk: Any) -> None: ...

    def reply(self) -> Answer: ...


class Adapter(Protocol):
    """A provider's translation of its SDK: requests to the neutral ``RequestView``, answers to
    ``Answer``, and what else it knows of its API (who a call reaches, a captured body read back).
    Provider modules subclass ``Translation``, which says "nothing" for the last two."""

    def normalise(self, api: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        """``memo``: the conversation's previous call, to skip what is unchanged (see ``ctxguard.memo``)."""
        ...

    def read_response(self, api: str, result: Any) -> Answer | None: ...

    def stream_reader(self, api: str) -> StreamReader: ...

    def identity(self, instance: Any) -> Identity | None:
        """Who a call reaches, read off its call site's ``instance`` (the SDK's resource or client):
        the provider its client reaches (one of the record's ``routes``) and the server's address
        and port; None when the SDK's client does not say."""
        ...

    def for_route(self, label: str) -> Adapter:
        """Its accounting for a call that reaches ``label`` (what ``identity`` read off the client,
        read before the request is measured; offline, the capture line's label): itself, unless its
        API counts a request differently there (google-genai: Vertex AI and the Gemini Developer API)."""
        ...

    def tool_definitions(self, api: str, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The request's tools in the conventions' shape (``gen_ai.tool.definitions``), read only when
        content is captured (opt-in)."""
        ...

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]] | None:
        """A captured request body (with the capture line's model) as its call site would have seen
        it, ``(api, kwargs)``; None: this SDK's captures are not read offline (``reads_captures``)."""
        ...

    #: Whether ``from_capture`` reads this SDK's captures.
    reads_captures: bool


class Translation:
    """What every adapter says unless its SDK says more: no identity read off its clients, one
    accounting whoever answers, its captures not read offline, its tools in the request's ``tools``
    (``_read.tool_definitions``)."""

    reads_captures = False

    def tool_definitions(self, api: str, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
        return tool_definitions(get(kwargs, "tools"))

    def identity(self, instance: Any) -> Identity | None:
        return None

    def for_route(self: _Self, label: str) -> _Self:
        return self

    def from_capture(self, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]] | None:
        return None


@dataclass(frozen=True, slots=True)
class CallSite:
    """One SDK function ctxguard wraps: ``module``'s ``attribute`` (``"Class.method"``, or a
    module function), whose keyword arguments the adapter reads as ``api``."""

    module: str
    attribute: str
    api: str
    kind: Kind = "sync"
    #: A ``manager`` site: the final answer of its stream helper, once the helper has finished.
    final: Callable[[Any], Answer | None] | None = None


#: Who a call reaches, read off its call site's ``instance``: ``(label, server address, server
#: port)``; a None label keeps the record's own (``ctxguard.providers.identity``).
Identity = tuple["str | None", "str | None", "int | None"]

#: A call site shared by many operations (botocore's ``BaseClient._make_api_call``, beneath every
#: method of every AWS client): from the call's ``(instance, args, kwargs)``, the api it is and its
#: arguments by name; None for a call that is no model call (another service, another operation),
#: which goes through untouched.
Dispatch = Callable[[Any, "tuple[Any, ...]", "Mapping[str, Any]"], "tuple[str, Mapping[str, Any]] | None"]


@dataclass(frozen=True, slots=True)
class Pending:
    """Where a returned result holds an answer the app has yet to read: ``holder[name]`` (an item
    of a mapping) or ``holder.name``, observed as the app reads it, the app keeping what the SDK
    returned around it.

    ``events``: an iterable of events (botocore's ``EventStream``), replaced by a transparent
    proxy that feeds each event to the provider's stream reader; ``body``: a readable raw body
    (``read(amt)``, ``readinto``; beneath botocore's ``StreamingBody``), replaced by a proxy that
    hands the whole body, once read, to ``read`` (its JSON document)."""

    holder: Any
    name: str
    kind: Literal["events", "body"]
    read: Callable[[Any], Answer | None] | None = None


#: Reads a provider's answer off the HTTP response another SDK got for it: ``(read a whole
#: body, a stream reader)``, or None when that provider's wire format is not read here.
WireReaders = Callable[[str], "tuple[Callable[[Any], Answer | None], StreamReader] | None"]


@dataclass(frozen=True, slots=True)
class Methods:
    """A family: the SDK is hooked at its clients' methods (``sites``), each returning an answer, a
    stream, an object holding the HTTP response, or a stream helper (a ``manager`` site).

    ``positional``: argument names a site may be called with positionally, in order.
    ``http_results``: SDK results that hold the HTTP response instead of a parsed answer (streams,
    raw responses), ``(module, class, attribute holding it)``: their bodies are read as they pass."""

    sites: tuple[CallSite, ...]
    positional: tuple[str, ...] = ()
    http_results: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SharedDispatch:
    """A family: one call site beneath every operation of every client (botocore's
    ``BaseClient._make_api_call``). ``dispatch`` says which calls are model calls, and what api and
    arguments; a result may hold its answer still to be read (``pending``); the SDK's own transport
    (``transport``: ``(module, "Class.method", attribute)``, after signing) holds the body as sent."""

    sites: tuple[CallSite, ...]
    dispatch: Dispatch
    pending: Callable[[str, Any], Pending | None]
    transport: tuple[tuple[str, str, str], ...]
    positional: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Delegating:
    """A family: the SDK runs other SDKs beneath its call sites (LiteLLM): their call sites, reached
    during one of its calls, are part of it. ``wire_readers``: how the routed provider's own answer
    is read off the wire; ``sends_as``: from a call's arguments, the SDK whose request format the
    body it sends is in (another SDK it runs, or whose format it writes), None for its own."""

    sites: tuple[CallSite, ...]
    wire_readers: WireReaders
    sends_as: Callable[[Mapping[str, Any]], str | None]
    positional: tuple[str, ...] = ()


#: How an SDK is hooked: one of the families ``ctxguard.intercept`` knows how to observe.
Family = Methods | SharedDispatch | Delegating

#: A request body read as the call its call site would have seen, ``(api, kwargs)``, from the
#: body and the request's path (where the API puts the model: Gemini, Bedrock); None: not read.
WireCall = Callable[["Mapping[str, Any]", str], "tuple[str, Mapping[str, Any]] | None"]


@dataclass(frozen=True, slots=True)
class WireRoute:
    """One of a provider's model endpoints as its requests look on the wire, whoever sends them
    (its SDK past a call site, a gateway's client, an app's own HTTP code): a ``POST`` whose path
    (without its query) ends with ``path`` and whose body is a JSON object holding every key of
    ``keys``, which ``call`` reads as the call its call site would have seen. A request that is not
    all of that is not this API's: it is left alone, never guessed at.

    >>> from ctxguard.providers import BY_DISTRIBUTION
    >>> [route.path for route in BY_DISTRIBUTION["anthropic"].wire]
    ['/v1/messages']
    >>> BY_DISTRIBUTION["anthropic"].wire[0].keys
    ('model', 'messages', 'max_tokens')
    """

    path: str
    keys: tuple[str, ...]
    call: WireCall

    def read(self, body: Mapping[str, Any], path: str) -> tuple[str, Mapping[str, Any]] | None:
        """``body`` (a JSON object sent to ``path``) as its call, if it has this route's shape."""
        for key in self.keys:
            if key not in body:
                return None
        return self.call(body, path)


@dataclass(frozen=True, slots=True)
class Provider:
    """One supported SDK, declared: who it is, how it is translated, how it is hooked.

    >>> from ctxguard.providers.mistral import ADAPTER, SITES
    >>> PROVIDER = Provider(distribution="mistralai", module="mistralai.client", supported=(3, 3),
    ...                     label="mistral_ai", adapter=ADAPTER, family=Methods(SITES))
    >>> PROVIDER.labels
    ('mistral_ai',)
    >>> PROVIDER.adapter.normalise("chat.complete", {"model": "mistral-small-latest",
    ...                            "messages": [{"role": "user", "content": "Hi"}]}).items
    [('user', 'Hi', (), 'message', 0)]
    """

    #: The distribution name (``pip install``; ``instrument(providers=[...])``).
    distribution: str
    #: The import name whose import triggers patching.
    module: str
    #: Supported majors, inclusive: ``(lowest, highest)``.
    supported: tuple[int, int]
    #: ``gen_ai.provider.name`` and the Prometheus ``provider`` label of its calls.
    label: str
    #: Its translation: requests, answers, identity, captures.
    adapter: Adapter
    #: How it is hooked.
    family: Family
    #: Every other label its calls may carry (the providers its clients reach), each a fixed value.
    routes: tuple[str, ...] = ()
    #: Its model endpoints as they look on the wire: requests to one that no guarded call sent
    #: are guarded from the wire (``ctxguard.intercept.routes``), whichever HTTP client sent them.
    wire: tuple[WireRoute, ...] = ()

    @property
    def labels(self) -> tuple[str, ...]:
        """Every ``provider`` label its calls may carry."""
        return (self.label, *(r for r in self.routes if r != self.label))

    def wire_sdk(self, request: Mapping[str, Any]) -> str:
        """The SDK whose request format the body sent for ``request`` (a call's arguments) is in, by
        its distribution name: a capture line's ``sdk``, which says how the body is read offline.

        >>> from ctxguard.providers import BY_DISTRIBUTION
        >>> BY_DISTRIBUTION["openai"].wire_sdk({"model": "gpt-4o"})
        'openai'
        """
        if isinstance(self.family, Delegating):
            return self.family.sends_as(request) or self.distribution
        return self.distribution
