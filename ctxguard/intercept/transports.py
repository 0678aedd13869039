"""The HTTP clients observed on the wire, one table: where each is hooked, and the wrapper.

Each row is ``(module, "Class.method", make)``: ``make(unguarded)`` builds the wrapper, which hands
a request's body to the call in flight, or guards a model request with none from the wire
(``intercept.wire``). Rows are grouped by the module whose import patches them (a post-import
hook: nothing here imports a client the app does not use).

=================  ==============================================================================
client             hooked at
=================  ==============================================================================
httpx, httpx2      ``Client._send_single_request`` (sync and async): the request after event
                   hooks and auth, the response before its body is read
http.client        ``HTTPConnection.request`` (urllib.request, hand-made clients) and
                   ``getresponse`` (its response's socket file tapped: ``intercept.http_client``)
urllib3            ``HTTPConnection.request`` (urllib3, requests): its own, which writes through
                   http.client's primitives; the response through http.client's ``getresponse``
aiohttp            ``ClientRequest.send`` (the body as serialised) and ``ClientResponse.start``
                   (its body reader proxied: ``intercept.aiohttp_client``)
lm15 (DSPy)        ``StdlibTransport.stream`` and ``StdlibAsyncTransport._do_stream``: lm15 writes
                   HTTP over sockets itself (``intercept.lm15_client``); vendored by DSPy 3.4 as
                   ``dspy._vendor.lm15``, and on its own as ``lm15``
=================  ==============================================================================

A client stacked on another (requests on urllib3 on http.client, httpx on LiteLLM's aiohttp
transport) is observed once: the outer one's request is the one guarded, and while it is sent its
call is in flight, so the one beneath only hands it the body it already has.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import aiohttp_client, http_client, lm15_client
from .wire import Unguarded, async_send, sync_send

__all__ = ["TARGETS"]

Make = Callable[[Unguarded], Any]

#: hooked module -> ((module, "Class.method", make the wrapper), ...)
TARGETS: dict[str, tuple[tuple[str, str, Make], ...]] = {
    "httpx": (("httpx._client", "Client._send_single_request", functools.partial(functools.partial, sync_send)),
              ("httpx._client", "AsyncClient._send_single_request", functools.partial(functools.partial, async_send))),
    "httpx2": (("httpx2._client", "Client._send_single_request", functools.partial(functools.partial, sync_send)),
               ("httpx2._client", "AsyncClient._send_single_request",
                functools.partial(functools.partial, async_send))),
    "http.client": (("http.client", "HTTPConnection.request", lambda unguarded: http_client.request(unguarded,
                                                                                                    "iso-8859-1")),
                    ("http.client", "HTTPConnection.getresponse", lambda unguarded: http_client.getresponse)),
    "urllib3": (("urllib3.connection", "HTTPConnection.request",
                 lambda unguarded: http_client.request(unguarded, "utf-8")),),
    "aiohttp": (("aiohttp.client_reqrep", "ClientRequest.send", aiohttp_client.send),
                ("aiohttp.client_reqrep", "ClientResponse.start", lambda unguarded: aiohttp_client.start)),
    **{f"{package}.transports": ((f"{package}.transports", "StdlibTransport.stream", lm15_client.stream),
                                 (f"{package}.transports", "StdlibAsyncTransport._do_stream",
                                  lm15_client.async_stream))
       for package in ("dspy._vendor.lm15", "lm15")},
}
