"""Finding and patching SDK call sites, whenever the SDK is imported.

One post-import hook per SDK (wrapt): patching happens when the SDK is
imported, or at once if it already is, so import order never matters. A hook
that fails is isolated (a broken hook would otherwise break the app's
``import openai``).

Beside other instrumentations: a call site someone else already wrapped with wrapt
(OpenTelemetry's, OpenLLMetry's, OpenLIT's ...) is wrapped too, innermost, directly
around the SDK's function, so their span is current while ctxguard runs and their
``unwrap()`` (which peels the outermost layer) leaves ctxguard in place. A call site
wrapped some other way is wrapped on top. ``uninstall()`` puts back only what is still
as ctxguard left it; a wrapper of ctxguard's that someone wrapped over stays, inert
(it passes every call straight through while no guard is active), and is found again
by the next ``install()``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

import wrapt
from opentelemetry import trace

from .._isolation import guarded
from . import anthropic as anthropic_provider
from . import google_genai as google_provider
from . import litellm as litellm_provider
from . import openai as openai_provider
from . import streams, wire
from .base import Adapter
from .frames import transparent, warn_through

if TYPE_CHECKING:
    from ..guard import Call, Guard

__all__ = ["install", "uninstall"]

logger = logging.getLogger("ctxguard")

#: distribution -> (import name, provider module). A provider module declares ``ADAPTER``,
#: ``TARGETS`` ((module, "Class.method" or "function", api) per call site), ``SUPPORTED``
#: (majors) and optionally ``HTTP_RESULTS`` (result types holding the HTTP response).
INTEGRATIONS: dict[str, tuple[str, Any]] = {
    "openai": ("openai", openai_provider),
    "anthropic": ("anthropic", anthropic_provider),
    "google-genai": ("google.genai", google_provider),
    "litellm": ("litellm", litellm_provider),
}

_lock = threading.RLock()
_active: Guard | None = None
_hooked: set[str] = set()
#: The SDKs the active guard patches (``install(only=...)``), and the ones warned about.
_chosen: set[str] = set()
_warned: set[str] = set()
#: When an unguarded model request last made ``_repair`` look (monotonic seconds), and what it said
#: (once each, per ``install()``).
_repaired_at = float("-inf")
_said: set[str] = set()


class _Guarded(wrapt.FunctionWrapper):  # type: ignore[misc,type-arg]
    """ctxguard's wrapper of one call site: its own type, so it is found in anyone's chain."""


class Site:
    """A patched attribute: ``owner.name``, and ctxguard's wrapper of it, held by ``holder``
    (None: the attribute itself; else another library's wrapt wrapper, beneath which ours sits)."""

    __slots__ = ("guarded", "holder", "name", "original", "owner")

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name = owner, name
        self.holder: Any = None
        self.original: Any = None
        self.guarded: Any = None

    def wrapped_over(self) -> Any | None:
        """The wrapper someone else put over ctxguard's here, if any (checked per call: another
        instrumentation may be installed after ctxguard)."""
        top = vars(self.owner).get(self.name)
        return None if top is self.guarded else top


#: Every site patched (for ``uninstall``), in patching order.
_patched: list[Site] = []


def _ours(value: Any) -> bool:
    """Whether ctxguard's wrapper is in ``value``'s chain of wrappers (as it is, or bound, which is
    what another library's ``unwrap()`` may leave behind)."""
    for _ in range(32):
        if isinstance(value, _Guarded) or isinstance(getattr(value, "_self_parent", None), _Guarded):
            return True
        value = getattr(value, "__wrapped__", None)
        if value is None:
            return False
    return False


def _wrap(owner: Any, name: str, make: Any) -> Site | None:
    """Put ``make(function)`` (a wrapt wrapper function) on ``owner.name``: beneath any wrapt
    wrappers already there, above anything else; nothing if ctxguard's is there already."""
    top = vars(owner).get(name)
    if top is None or _ours(top):
        return None
    site = Site(owner, name)
    holder, inner = None, top
    for _ in range(32):
        if not isinstance(inner, wrapt.FunctionWrapper):
            break
        holder, inner = inner, inner.__wrapped__
    site.holder, site.original = holder, inner
    site.guarded = _Guarded(inner, make(inner, site))
    if holder is None:
        setattr(owner, name, site.guarded)
    else:
        holder.__wrapped__ = site.guarded
    _patched.append(site)
    return site


def _unwrap(site: Site) -> None:
    """Undo ``_wrap`` if the place still holds ctxguard's wrapper; else leave the chain whole."""
    if site.holder is None:
        if vars(site.owner).get(site.name) is site.guarded:
            setattr(site.owner, site.name, site.original)
    elif site.holder.__wrapped__ is site.guarded:
        site.holder.__wrapped__ = site.original


def _guard_for(adapter: Adapter) -> Guard | None:
    """The active guard, unless this call runs inside a delegating call already in flight
    (LiteLLM running the openai SDK): then it is part of that call, not a second one."""
    outer = wire.IN_FLIGHT.get()
    if outer is not None and getattr(outer.adapter, "delegates", False):
        return None
    return _active


def _request(adapter: Adapter, args: Any, kwargs: Any) -> Mapping[str, Any]:
    """The call's arguments by name (SDK methods are keyword-only; some functions are not)."""
    if not args:
        return kwargs  # type: ignore[no-any-return]
    return {**dict(zip(getattr(adapter, "positional", ()), args, strict=False)), **kwargs}


def _sync_wrapper(adapter: Adapter, api: str, site: Site) -> Any:
    @transparent
    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        guard = _guard_for(adapter)
        if guard is None:
            return wrapped(*args, **kwargs)
        call = guard.before(adapter, api, _request(adapter, args, kwargs), site.wrapped_over())
        if call is None:
            return wrapped(*args, **kwargs)
        token = wire.IN_FLIGHT.set(call)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            call.failed(exc)
            raise
        finally:
            wire.IN_FLIGHT.reset(token)
        return call.finished(result)

    return wrapper


def _async_wrapper(adapter: Adapter, api: str, site: Site) -> Any:
    @transparent
    async def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        guard = _guard_for(adapter)
        if guard is None:
            return await wrapped(*args, **kwargs)
        call = guard.before(adapter, api, _request(adapter, args, kwargs), site.wrapped_over())
        if call is None:
            return await wrapped(*args, **kwargs)
        token = wire.IN_FLIGHT.set(call)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            call.failed(exc)
            raise
        finally:
            wire.IN_FLIGHT.reset(token)
        return call.finished(result, asynchronous=True)

    return wrapper


def _major(distribution: str) -> int | None:
    try:
        return int(metadata.version(distribution).split(".")[0])
    except Exception:
        return None


def _patch(distribution: str) -> int:
    """Wrap ``distribution``'s call sites ctxguard does not hold yet; how many it wrapped."""
    provider = INTEGRATIONS[distribution][1]
    adapter: Adapter = provider.ADAPTER
    low, high = provider.SUPPORTED
    major = _major(distribution)
    if major is None or not low <= major <= high:
        if distribution in _warned:
            return 0
        _warned.add(distribution)
        logger.warning(
            "ctxguard: %s %s is not supported (majors %d-%d); its calls are not guarded",
            distribution,
            metadata.version(distribution) if major is not None else "(unknown version)",
            low,
            high,
        )
        return 0
    wrapped = 0
    for module_name, class_name, attribute in getattr(provider, "HTTP_RESULTS", ()):
        try:
            streams.HTTP_RESULTS[getattr(importlib.import_module(module_name), class_name)] = attribute
        except (ImportError, AttributeError):
            logger.debug("ctxguard: %s.%s not found; its results are read as answers", module_name, class_name)
    for module_name, attribute, api in provider.TARGETS:
        class_name, _, method = attribute.rpartition(".")
        try:
            module = importlib.import_module(module_name)
            owner = getattr(module, class_name) if class_name else module
        except (ImportError, AttributeError):
            logger.debug("ctxguard: %s.%s not found; skipped", module_name, attribute)
            continue
        # Async clients' call sites return coroutines (often through a plain-def decorator, so
        # inspect cannot tell), except stream helpers, which return a context manager at once.
        # Module functions (LiteLLM) are plain ``async def``.
        def make(original: Any, site: Site, class_name: str = class_name, api: str = api) -> Any:
            is_async = (class_name.startswith("Async") and not api.endswith(".stream")) or (
                not class_name and inspect.iscoroutinefunction(original)
            )
            return (_async_wrapper if is_async else _sync_wrapper)(adapter, api, site)

        wrapped += _wrap(owner, method, make) is not None
    return wrapped


def _patch_wire(distribution: str) -> None:
    for module_name, attribute, is_async in wire.TARGETS[distribution]:
        class_name, method = attribute.split(".")
        try:
            owner = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        _wrap(owner, method, lambda original, site, is_async=is_async: wire.async_send if is_async else wire.sync_send)


#: Model endpoints of the Stainless SDKs (openai, anthropic) -> the distribution and api whose
#: adapter reads the request body (JSON: the call's keyword arguments, as the SDK serialised them).
_WIRE_APIS = (
    ("/chat/completions", "openai", "chat.completions"),
    ("/responses", "openai", "responses"),
    ("/messages", "anthropic", "messages"),
)


def _unguarded(request: Any) -> Call | None:
    """A model request is leaving with no guarded call in flight (a call site ctxguard does not hold:
    another library's uninstrument removed ctxguard's wrapper, or the app calls an SDK method it
    looked up before ``instrument()``). Wrap again what was removed, and guard this request from
    the wire: its body is the request, its response the answer. It cannot be refused (the
    request is already leaving): enforce mode only observes it."""
    _repair(request)
    guard = _active
    if guard is None or "x-stainless-lang" not in request.headers:
        return None  # not an SDK's request: an app's own HTTP call to a path that looks alike
    path = request.url.path
    found = next(((d, api) for suffix, d, api in _WIRE_APIS if path.endswith(suffix)), None)
    if found is None or found[0] not in _chosen:
        return None
    try:
        body = json.loads(request.content)
    except ValueError:
        return None  # not a JSON body (the SDK's GET listing stored completions): not a model call
    if not isinstance(body, dict):
        return None
    beneath = trace.get_current_span()
    call = guard.before(INTEGRATIONS[found[0]][1].ADAPTER, found[1], body, may_block=False)
    if call is not None:
        call.from_wire(request.content, beneath)
    return call


def _repair(request: Any) -> None:
    """A model request went out with no guarded call in flight: put back any wrapper of ctxguard's
    that was removed (another instrumentation's uninstrument restoring what it saved), so the
    next calls are guarded at their call site. Looked at most once a second; said once each way."""
    global _repaired_at
    now = time.monotonic()
    if now - _repaired_at < 1.0:
        return
    _repaired_at = now
    with _lock:
        if _active is None:
            return
        restored = sum(_patch(d) for d in _chosen if sys.modules.get(INTEGRATIONS[d][0]) is not None)
    kind = "restored" if restored else "captured"
    if kind in _said:
        return
    _said.add(kind)
    if restored:
        logger.warning("ctxguard: a model request to %s went out unguarded: another library removed ctxguard's "
                       "wrappers (%d call sites); they are back, later calls are guarded", request.url.path, restored)
    else:
        logger.warning("ctxguard: a model request to %s bypassed its call site: the app called an SDK method it "
                       "had looked up before ctxguard.instrument() (a framework client set up earlier, a cached "
                       "with_raw_response); such requests are guarded from the wire, without enforce mode; "
                       "call instrument() before creating clients", request.url.path)


def _on_import(distribution: str) -> Any:
    patch = _patch_wire if distribution in wire.TARGETS else _patch

    def hook(module: Any) -> None:
        with guarded("hook"), _lock:
            if _active is not None:
                patch(distribution)

    return hook


def install(guard: Guard, *, only: list[str] | None = None) -> None:
    """Activate ``guard`` and patch the supported SDKs (``only`` these), now or when imported."""
    global _active, _repaired_at
    unknown = set(only or ()) - set(INTEGRATIONS)
    if unknown:
        raise ValueError(f"unknown providers {sorted(unknown)}; supported: {sorted(INTEGRATIONS)}")
    with _lock:
        _active = guard
        _repaired_at = float("-inf")
        _said.clear()
        _chosen.clear()
        _chosen.update(d for d in INTEGRATIONS if only is None or d in only)
        wire.on_unguarded = _unguarded
        _wrap(warnings, "warn", lambda original, site: warn_through)
        for distribution in (*INTEGRATIONS, *wire.TARGETS):
            if only is not None and distribution in INTEGRATIONS and distribution not in only:
                continue
            name = INTEGRATIONS[distribution][0] if distribution in INTEGRATIONS else distribution
            if distribution in _hooked:
                module = sys.modules.get(name)
                if module is not None:
                    _on_import(distribution)(module)
                continue
            _hooked.add(distribution)
            wrapt.register_post_import_hook(_on_import(distribution), name)


def uninstall() -> None:
    """Restore every original function and deactivate the guard."""
    global _active
    with _lock:
        _active = None
        wire.on_unguarded = None
        streams.forget_http_results()
        while _patched:
            _unwrap(_patched.pop())
