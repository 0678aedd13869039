"""Wire truth: the request body the HTTP client actually sends, for ``wire_intact``.

The SDK wrappers mark the call in flight (a context variable); the last step of
httpx / httpx2 before the transport (``_send_single_request``, after event hooks
and auth) hands the body to that call. Private, but the one place that sees the
bytes as sent whatever transport is configured; when it is missing the check
simply does not run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._isolation import report_internal_error
from .answers import observe_provider_answer, observe_wire_answer
from .frames import transparent
from .inflight import IN_FLIGHT
from .protocol import Observed

if TYPE_CHECKING:
    from ..providers.base import Provider

__all__ = ["MODEL_PATHS", "TARGETS", "Unguarded", "async_send", "body_send", "sent_body", "sync_send"]

#: distribution -> (module, "Class.method", is_async)
TARGETS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "httpx": (("httpx._client", "Client._send_single_request", False),
              ("httpx._client", "AsyncClient._send_single_request", True)),
    "httpx2": (("httpx2._client", "Client._send_single_request", False),
               ("httpx2._client", "AsyncClient._send_single_request", True)),
}


#: How the model endpoints' request paths end (Chat Completions, Responses, Anthropic Messages,
#: Gemini). A request to one with no guarded call in flight went past a call site ctxguard does
#: not hold (another library's uninstrument removed its wrapper; the app looked the SDK method
#: up before ``instrument()``). Whole path segments: ``/v1/threads/{id}/messages`` (openai's
#: Assistants) is not Anthropic's ``/v1/messages``.
MODEL_PATHS = ("/chat/completions", "/responses", "/v1/messages", ":generateContent", ":streamGenerateContent")


def sent_body(request: Any) -> bytes | None:
    """The body of an httpx / httpx2 request, if it is in memory: a one-shot body (a generator the
    app passed as ``content``) is streamed to the server unread, and httpx raises ``RequestNotRead``
    for it; ctxguard leaves it unread (reading it would consume it)."""
    try:
        content = request.content
    except Exception as exc:
        if type(exc).__name__ == "RequestNotRead":
            return None
        raise
    return bytes(content) if isinstance(content, (bytes, bytearray)) else None


#: Told of a model request with no guarded call in flight; returns the call it guards from the
#: wire, with the api its adapter reads, if it does (``intercept._unguarded``).
Unguarded = Callable[[Any], "tuple[Observed, str] | None"]


def _observe(unguarded: Unguarded, args: Any, kwargs: Any) -> tuple[Observed, str] | None:
    """Hand the body to the call in flight; or, for a model request with none, to ``unguarded``."""
    try:
        request = args[0] if args else kwargs.get("request")
        call = IN_FLIGHT.get()
        if call is not None:
            call.wire(sent_body(request))
        elif request.method == "POST" and request.url.path.endswith(MODEL_PATHS):
            return unguarded(request)
    except Exception as exc:
        report_internal_error("response", exc)
    return None


def _answered(response: Any, ours: tuple[Observed, str] | None) -> None:
    """The transport answered: the call guarded from the wire reads its answer from it; a call in
    flight may read the provider's own answer off it (``answers.observe_provider_answer``)."""
    try:
        if ours is not None:
            observe_wire_answer(*ours, response)
            return
        call = IN_FLIGHT.get()
        if call is not None:
            observe_provider_answer(call, response)
    except Exception as exc:
        report_internal_error("response", exc)


@transparent
def sync_send(unguarded: Unguarded, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of httpx's ``_send_single_request`` (``functools.partial`` binds ``unguarded``)."""
    ours = _observe(unguarded, args, kwargs)
    try:
        response = wrapped(*args, **kwargs)
    except BaseException as exc:
        if ours is not None:
            ours[0].end("failed", error=exc)
        raise
    _answered(response, ours)
    return response


@transparent
async def async_send(unguarded: Unguarded, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    ours = _observe(unguarded, args, kwargs)
    try:
        response = await wrapped(*args, **kwargs)
    except BaseException as exc:
        if ours is not None:
            ours[0].end("failed", error=exc)
        raise
    _answered(response, ours)
    return response


@transparent
def body_send(provider: Provider, attribute: str) -> Any:
    """The wrapper of an SDK's own transport (``Provider.transport``: botocore's
    ``URLLib3Session.send``, after signing): the request's ``attribute`` is the body as sent,
    handed to that provider's call in flight. Requests no call of its is in flight for (another
    AWS service's, credentials being fetched) pass untouched."""

    def send(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        call = IN_FLIGHT.get()
        if call is not None and call.provider is provider:
            try:
                request = args[0] if args else kwargs.get("request")
                call.wire(getattr(request, attribute, None))
            except Exception as exc:
                report_internal_error("response", exc)
        return wrapped(*args, **kwargs)

    return send
