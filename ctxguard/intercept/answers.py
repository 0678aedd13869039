"""Reading a call's answer from what the SDK returned, or from the transport's response,
without changing what the app gets; the call is told (``Observed``) once it is known."""

from __future__ import annotations

from time import perf_counter
from typing import Any

from .._isolation import guarded, report_internal_error
from ..payload import Answer
from ..providers.base import CallSite
from .protocol import Observed
from .streams import http_response_of, observe_pending, tap_response, wrap_manager, wrap_stream

__all__ = ["answered", "overheard", "returned"]


def returned(call: Observed, site: CallSite, result: Any, *, asynchronous: bool = False, api: str | None = None) -> Any:
    """The SDK returned ``result`` at ``site`` (to an ``async`` call site if ``asynchronous``) for
    ``api`` (the site's own unless it is shared: ``Provider.dispatch``); returns it: the same
    object, or a transparent stream proxy."""
    started = perf_counter()
    try:
        call.sent()
    except Exception as exc:
        report_internal_error("telemetry", exc)
    provider = call.provider
    api = site.api if api is None else api
    adapter = provider.adapter
    if provider.pending is not None and _observed_pending(call, api, result, started):
        return result
    if site.kind == "manager" and provider.final_reply is not None:
        with guarded("stream"):
            proxy = wrap_manager(result, call, provider.final_reply)
            call.elapsed += perf_counter() - started
            return proxy
    try:
        http = http_response_of(result)
        if http is not None:
            # A stream or a raw response: its body is read as it passes, the object stays the SDK's.
            call.elapsed += perf_counter() - started
            tap_response(http, call, adapter.stream_reader(api), lambda body: adapter.read_response(api, body))
            return result
    except Exception as exc:
        report_internal_error("response", exc)
        call.answer(None, started)
        return result
    if call.streamed and _is_stream(result):
        with guarded("stream"):
            proxy = wrap_stream(result, call, adapter.stream_reader(api), asynchronous=asynchronous)
            call.elapsed += perf_counter() - started
            return proxy
    try:
        reply = adapter.read_response(api, result)
    except Exception as exc:
        report_internal_error("response", exc)
        reply = None
    call.answer(reply, started)
    return result


def _observed_pending(call: Observed, api: str, result: Any, started: float) -> bool:
    """Whether ``result`` holds its answer still to be read (``Provider.pending``), now observed;
    the call ends as the app reads it. A result that fails to be observed ends the call unanswered."""
    try:
        pending = call.provider.pending(api, result)  # type: ignore[misc]
        if pending is None:
            return False
        observe_pending(pending, call, call.provider.adapter.stream_reader(api))
    except Exception as exc:
        report_internal_error("response", exc)
        call.answer(None, started)
        return True
    call.elapsed += perf_counter() - started
    return True


def _is_stream(result: Any) -> bool:
    cls = type(result)
    return hasattr(cls, "__next__") or hasattr(cls, "__anext__")


def answered(call: Observed, api: str, response: Any) -> None:
    """A call guarded from the wire: the server's ``response`` is its answer (an HTTP error, or a
    body read as it passes, as a Stainless result's is)."""
    call.sent()
    if not 200 <= response.status_code < 300:
        call.refused(response.status_code)
        return
    adapter = call.provider.adapter
    tap_response(response, call, adapter.stream_reader(api), lambda body: adapter.read_response(api, body))


def overheard(call: Observed, response: Any) -> None:
    """The transport got ``response`` for ``call``. A delegating call (LiteLLM) reads the
    provider's own answer off it, for the span; the call still ends with the answer returned."""
    readers = call.provider.wire_readers
    if readers is None or call.done or not 200 <= response.status_code < 300:
        return
    found = readers(call.label)
    if found is not None:
        read, reader = found

        def heard(reply: Answer | None, exc: BaseException | None, *, early: bool, streamed: bool) -> None:
            if reply is not None:
                call.heard(reply)

        tap_response(response, call, reader, read, settle=heard)
