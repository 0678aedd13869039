"""Reading a call's answer from what the SDK returned, or from the transport's response,
without changing what the app gets: the carrier that fits what was returned is chosen here
(``intercept.carriers``), and it ends the call once the answer is known."""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any

from .._isolation import guarded, report_internal_error
from ..payload import Answer
from ..providers.base import CallSite, Delegating, SharedDispatch
from .bodies import NOTHING, body_reader, decoded
from .carriers import manager_proxy, observe_pending, stream_proxy, tap_response
from .observation import Observation
from .protocol import Observed

__all__ = ["HttpResults", "observe_answer", "observe_provider_answer", "observe_wire_answer", "tap_wire_answer"]

class HttpResults:
    """The SDK result types that hold their HTTP response instead of a parsed answer (streams, raw
    responses), each with the attribute that holds it: registered when an SDK is patched, from
    its provider record's ``http_results``; every result type seen resolved once through its MRO.

    >>> class Stream: response = "the httpx response"
    >>> results = HttpResults()
    >>> results.register(Stream, "response")
    >>> results.response_of(Stream()), results.response_of("a parsed answer")
    ('the httpx response', None)
    """

    __slots__ = ("_by_type", "_resolved")

    def __init__(self) -> None:
        self._by_type: dict[type, str] = {}
        self._resolved: dict[type, str | None] = {}  # bounded: result types are few

    def register(self, cls: type, attribute: str) -> None:
        self._by_type[cls] = attribute
        self._resolved.clear()

    def response_of(self, result: Any) -> Any | None:
        """The httpx / httpx2 ``Response`` inside ``result`` if it is one of the registered types,
        else None. One dict look-up per call for a type seen before."""
        if not self._by_type:
            return None
        cls = type(result)
        name = self._resolved.get(cls, "")
        if name == "":
            name = next((self._by_type[base] for base in cls.__mro__ if base in self._by_type), None)
            if len(self._resolved) < 1024:
                self._resolved[cls] = name
        return getattr(result, name, None) if name is not None else None


def observe_answer(
    call: Observed, site: CallSite, result: Any, http_results: HttpResults, *, asynchronous: bool = False,
    api: str | None = None,
) -> Any:
    """The SDK returned ``result`` at ``site`` (to an ``async`` call site if ``asynchronous``) for
    ``api`` (the site's own unless it is shared: ``SharedDispatch``); returns it: the same
    object, or a transparent stand-in for it. ``http_results``: the result types whose HTTP response
    is read as it passes."""
    started = perf_counter()
    try:
        call.sent()
    except Exception as exc:
        report_internal_error("telemetry", exc)
    provider = call.provider
    api = site.api if api is None else api
    adapter = provider.adapter
    family = provider.family
    if isinstance(family, SharedDispatch) and _observed_pending(call, family, api, result, started):
        return result
    if site.final is not None:  # a stream helper: the answer is its own, at its end
        with guarded("stream"):
            proxy = manager_proxy(result, call, site.final)
            call.elapsed += perf_counter() - started
            return proxy
    try:
        http = http_results.response_of(result)
        if http is not None:
            # A stream or a raw response: its body is read as it passes, the object stays the SDK's.
            call.elapsed += perf_counter() - started
            tap_response(http, call, adapter.stream_reader(api), lambda body: adapter.read_response(api, body))
            return result
    except Exception as exc:
        report_internal_error("response", exc)
        call.end("complete", started=started)
        return result
    if call.streamed and _is_stream(result):
        with guarded("stream"):
            proxy = stream_proxy(result, call, adapter.stream_reader(api), asynchronous=asynchronous)
            call.elapsed += perf_counter() - started
            return proxy
    try:
        reply = adapter.read_response(api, result)
    except Exception as exc:
        report_internal_error("response", exc)
        reply = None
    call.end("complete", reply, started=started)
    return result


def _observed_pending(call: Observed, family: SharedDispatch, api: str, result: Any, started: float) -> bool:
    """Whether ``result`` holds its answer still to be read (``SharedDispatch.pending``), now observed;
    the call ends as the app reads it. A result that fails to be observed ends the call unanswered."""
    try:
        pending = family.pending(api, result)
        if pending is None:
            return False
        observe_pending(pending, call, call.provider.adapter.stream_reader(api))
    except Exception as exc:
        report_internal_error("response", exc)
        call.end("complete", started=started)
        return True
    call.elapsed += perf_counter() - started
    return True


def _is_stream(result: Any) -> bool:
    cls = type(result)
    return hasattr(cls, "__next__") or hasattr(cls, "__anext__")


def observe_wire_answer(call: Observed, api: str, response: Any) -> None:
    """A call guarded from the wire: the httpx / httpx2 ``response`` is its answer (an HTTP error,
    or a body read as it passes, as a Stainless result's is)."""
    call.sent()
    if not 200 <= response.status_code < 300:
        call.end("refused", status=response.status_code)
        return
    adapter = call.provider.adapter
    tap_response(response, call, adapter.stream_reader(api), lambda document: adapter.read_response(api, document))


def tap_wire_answer(call: Observed, api: str, status: int, content_type: str, encoding: str | None,
                    place: Callable[[Observation], None]) -> None:
    """A call guarded from the wire got its response's head (``status``, ``content_type``, and the
    ``Content-Encoding`` its body still has: None once the client decoded it): ``place`` puts the
    observation of its body where the app's reads pass, so the answer is read as the app reads it.
    An HTTP error status is the server refusing the request: the call ends. Never raises: if reading
    cannot be set up, the call ends with no answer."""
    try:
        call.sent()
        if not 200 <= status < 300:
            call.end("refused", status=status)
            return
        adapter = call.provider.adapter
        body = body_reader(content_type, adapter.stream_reader(api),
                           lambda document: adapter.read_response(api, document))
        place(Observation(call, decoded(body, encoding)))
    except Exception as exc:
        report_internal_error("response", exc)
        Observation(call, NOTHING).end("complete")


class _Heard:
    """Where the provider's own answer under a delegating call goes (``observe_provider_answer``): to the call,
    for its span; its end is not the call's, which ends with the answer the delegating SDK returns."""

    __slots__ = ("_call",)

    def __init__(self, call: Observed) -> None:
        self._call = call

    @property
    def elapsed(self) -> float:
        return self._call.elapsed

    @elapsed.setter
    def elapsed(self, value: float) -> None:
        self._call.elapsed = value

    @property
    def first_chunk(self) -> float | None:
        return self._call.first_chunk

    @first_chunk.setter
    def first_chunk(self, value: float | None) -> None:
        self._call.first_chunk = value

    def end(
        self, how: str, reply: Answer | None = None, *, error: BaseException | None = None, status: int | None = None
    ) -> None:
        if reply is not None:
            self._call.provider_said(reply)


def observe_provider_answer(call: Observed, response: Any) -> None:
    """The transport got ``response`` for ``call``. A delegating call (LiteLLM) reads the
    provider's own answer off it, for the span; the call still ends with the answer returned."""
    family = call.provider.family
    if not isinstance(family, Delegating) or call.done or not 200 <= response.status_code < 300:
        return
    found = family.wire_readers(call.label)
    if found is not None:
        read, reader = found
        tap_response(response, _Heard(call), reader, read)
