"""Wire truth: the request body an HTTP client actually sends, and model requests no call sent.

Two jobs, for every HTTP client observed (``intercept.transports`` lists them: httpx and httpx2,
``http.client`` with urllib3 and requests above it, aiohttp, lm15's sockets beneath DSPy):

- **The call in flight's body** (``wire_intact``). The SDK wrappers mark the call in flight (a
  context variable); the client's last step before the transport hands that call the body.
- **A model request with no call in flight** is guarded from the wire (``leaving``): recognised
  by what it is (``intercept.routes``), its body judged as the call, its response read as its
  answer as the app reads it (``answers.tap_wire_answer``), observed only. While it is being sent the
  call is in flight, so an HTTP client beneath another (httpx over aiohttp, a subclass calling
  ``http.client``'s ``request``) sees a call in flight and starts no second one.

httpx / httpx2's step is ``_send_single_request`` (after event hooks and auth): private, but the
one place that sees the bytes as sent whatever transport is configured; when it is missing the
check simply does not run.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import Token
from typing import TYPE_CHECKING, Any

from .._isolation import report_internal_error
from ..providers.base import Delegating
from .answers import observe_provider_answer, observe_wire_answer
from .frames import transparent
from .inflight import IN_FLIGHT
from .protocol import Observed
from .routes import model_path

if TYPE_CHECKING:
    from ..providers.base import Provider

__all__ = ["Ours", "Sending", "Unguarded", "async_send", "body_send", "leaving", "sent_body", "sync_send"]

#: A request guarded from the wire: its call, and the api its adapter reads.
Ours = tuple[Observed, str]

#: Told of a model request (``(path, body)``) no guarded call sent; returns the call it guards from
#: the wire for it, if it does (``intercept._unguarded``).
Unguarded = Callable[[str, bytes], "Ours | None"]


def leaving(unguarded: Unguarded, method: str, target: str, body: Callable[[], Any]) -> Ours | None:
    """A request (``method``, and ``target`` as the client holds it) is leaving through an observed
    HTTP client. Any other than a model request (``routes.model_path``) passes at the cost of that
    test. A model request's body (``body()``: bytes, or None when the client does not hold it in
    memory) goes to the call in flight; with none in flight, the request is guarded from the wire
    and its call returned. Never raises."""
    try:
        path = model_path(method, target)  # a target of another type than str: not ours to judge
        if path is None:
            return None
        call = IN_FLIGHT.get()
        if call is not None:
            if call.wire_hash is None:
                call.wire(body())
            return None
        sent = body()
        if not isinstance(sent, (bytes, bytearray)) or not sent:
            return None  # a one-shot body, streamed unread (a model call's body is JSON in memory)
        return unguarded(path, sent if type(sent) is bytes else bytes(sent))
    except Exception as exc:
        report_internal_error("response", exc)
        return None


class Sending:
    """``with Sending(ours):`` around the step that sends a request ``leaving`` returned ``ours``
    for (None: no call guarded from the wire, nothing to do). While it is sent its call is in
    flight, so an HTTP client beneath starts no second one; once it is, its span stops being
    current (the app's code runs until it reads the response), or, if sending raised, its call
    ends failed and the error goes on unchanged."""

    __slots__ = ("_ours", "_token")

    def __init__(self, ours: Ours | None) -> None:
        self._ours = ours
        self._token: Token[Observed | None] | None = None

    def __enter__(self) -> None:
        if self._ours is not None:
            self._token = IN_FLIGHT.set(self._ours[0])

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        ours = self._ours
        if ours is None:
            return
        if self._token is not None:
            IN_FLIGHT.reset(self._token)
        if error is not None:
            ours[0].end("failed", error=error)
        else:
            ours[0].sent()


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


#: Model endpoints a delegating library's call may reach beyond ``routes.model_path``'s: Vertex AI's
#: partner models (Claude through LiteLLM's ``vertex_ai/`` route).
_PARTNER_PATHS = (":rawPredict", ":streamRawPredict")


def _observe(unguarded: Unguarded, args: Any, kwargs: Any) -> Ours | None:
    """Hand the body to the call in flight: whatever the request for an SDK's call (its client sends
    only its calls' requests), only a model request for a delegating library's (LiteLLM asks an
    Ollama server for the model's details, ``/api/show``, while its call is in flight); or, for a
    model request with no call in flight, to ``unguarded``."""
    request = args[0] if args else kwargs.get("request")
    call = IN_FLIGHT.get()
    if call is not None:
        try:
            if isinstance(call.provider.family, Delegating):
                path = request.url.path
                if model_path(request.method, path) is None and not path.endswith(_PARTNER_PATHS):
                    return None
            call.wire(sent_body(request))
        except Exception as exc:
            report_internal_error("response", exc)
        return None
    return leaving(unguarded, request.method, request.url.path, lambda: sent_body(request))


def _answered(response: Any, ours: Ours | None) -> None:
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
    with Sending(ours):
        response = wrapped(*args, **kwargs)
    _answered(response, ours)
    return response


@transparent
async def async_send(unguarded: Unguarded, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    ours = _observe(unguarded, args, kwargs)
    with Sending(ours):
        response = await wrapped(*args, **kwargs)
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
