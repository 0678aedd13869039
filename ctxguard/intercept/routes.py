"""Which HTTP requests are model calls, told by what they are, never by who sends them.

A request is a model call when it is a ``POST`` to one of the model endpoints the provider modules
declare (``Provider.wire``: a path suffix and a JSON body shape each, ``providers.base.WireRoute``)
and its body is a JSON object of that shape, on any host: the provider's own, a gateway, a local
server. Nothing else is read: a ``GET``, any other path, a body that is not JSON, not an object, or
not the API's shape is left alone. Adding a provider's endpoints is a line in its module; this one
reads them all.

The first test, ``model_path``, is what every request through an observed HTTP client pays: a
method comparison and, for a ``POST``, one ``str.endswith`` over the suffixes (and a slice of the
query string when there is one). Only a request that passes it has its body read.

>>> model_path("GET", "/v1/chat/completions"), model_path("POST", "/v1/chat/completions?x=1")
(None, '/v1/chat/completions')
>>> provider, api, kwargs = recognise("/v1/messages", b'{"model": "m", "messages": [], "max_tokens": 5}',
...                                   frozenset({"anthropic"}))
>>> provider.distribution, api
('anthropic', 'messages')
>>> recognise("/v1/messages", b'{"model": "m", "messages": []}', frozenset({"anthropic"})) is None
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..providers import PROVIDERS
from ..providers.base import Provider, WireRoute

__all__ = ["BODY_LIMIT", "ROUTES", "SUFFIXES", "model_path", "recognise"]

#: A request body past this size is not read from the wire: it is left alone, unjudged. A model
#: request's JSON is far smaller (images inline included, the APIs cap bodies at 20-32 MB).
BODY_LIMIT = 32 * 1024 * 1024

#: Every declared model endpoint, in the registry's order (the first whose shape fits reads a body).
ROUTES: tuple[tuple[WireRoute, Provider], ...] = tuple((route, p) for p in PROVIDERS for route in p.wire)

#: How the model endpoints' paths end. A module global read at each request, so a benchmark can
#: set it to ``()`` and observe nothing (bench/overhead.py).
SUFFIXES: tuple[str, ...] = tuple(dict.fromkeys(route.path for route, _ in ROUTES))


def model_path(method: str, target: str) -> str | None:
    """The path of a request that may be a model call (a ``POST`` whose path ends as a model
    endpoint's), else None. ``target``: the request target as the client holds it (a path with
    its query string, or an absolute URL through a proxy)."""
    if method != "POST" or type(target) is not str:  # bytes, say: the client's to refuse or send
        return None
    query = target.find("?")
    path = target if query < 0 else target[:query]
    return path if path.endswith(SUFFIXES) else None


def recognise(path: str, body: bytes, chosen: frozenset[str]) -> tuple[Provider, str, Mapping[str, Any]] | None:
    """The provider, api and call (``(provider, api, kwargs)``) of a body sent to ``path`` (one
    ``model_path`` returned), if it is a model request of one of the ``chosen`` SDKs' APIs."""
    if len(body) > BODY_LIMIT:
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None  # not JSON (an upload, a form): not a model call
    if type(document) is not dict:
        return None
    for route, provider in ROUTES:
        if provider.distribution in chosen and path.endswith(route.path):
            found = route.read(document, path)
            if found is not None:
                return provider, found[0], found[1]
    return None
