"""Finding and patching SDK call sites, whenever the SDK is imported.

One post-import hook per SDK (wrapt): patching happens when the SDK is
imported, or at once if it already is, so import order never matters. A hook
that fails is isolated (a broken hook would otherwise break the app's
``import openai``).

The call sites are the ones each provider record declares (``ctxguard.providers``),
wrapped as their ``kind`` says. Beside other instrumentations see ``patching``:
``uninstall()`` puts back only what is still as ctxguard left it; a wrapper of ctxguard's
that someone wrapped over stays, inert (it passes every call straight through while no
installation is active), and is found again by the next ``install()``.

What one ``install()`` changes is one ``Installation``: the guard its calls go to, the SDKs it
patches, the call sites it wrapped, the result types whose HTTP responses it reads, what it has
said, and what ``uninstall()`` must close beside it (``closing``). The process holds at most one,
``active()``; the wrappers and post-import hooks, which outlive an installation, ask for it.

This package never inspects or records: it tells the call what happened
(``protocol.Observed``) and asks the active guard to start one (``protocol.CallStarter``).
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

import wrapt
from opentelemetry import trace

from .. import forksafe
from .._isolation import guarded, report_internal_error
from ..providers import BY_DISTRIBUTION, PROVIDERS
from ..providers.base import CallSite, Delegating, Methods, Provider, SharedDispatch
from . import routes, wire
from .answers import HttpResults, observe_answer
from .frames import transparent, warn_through
from .inflight import IN_FLIGHT
from .patching import Site, unwrap, wrap
from .protocol import CallStarter, Observed
from .transports import TARGETS

__all__ = ["Installation", "active", "install", "uninstall"]

logger = logging.getLogger("ctxguard")

class Installation:
    """What one ``install()`` changed in the process, and undoes at ``uninstall()``.

    >>> installation = install(guard, only=["openai"])  # doctest: +SKIP
    >>> installation.closing.append(server.shutdown)     # doctest: +SKIP
    """

    def __init__(self, guard: CallStarter, chosen: frozenset[str]) -> None:
        self.guard = guard
        #: The SDKs it patches (``install(only=...)``).
        self.chosen = chosen
        #: Every call site it wrapped, in order (``uninstall`` puts back those still as it left them).
        self.sites: list[Site] = []
        #: The SDK result types whose HTTP response it reads as it passes.
        self.http_results = HttpResults()
        #: Unsupported SDKs it warned about, and what it said of unguarded requests (each once).
        self.warned: set[str] = set()
        self.said: set[str] = set()
        #: When an unguarded model request last made it look for removed wrappers (monotonic s).
        self.repaired_at = float("-inf")
        #: What its owner (``ctxguard.instrument``) closes after ``uninstall()``, in order: sinks,
        #: servers, exporters.
        self.closing: list[Callable[[], object]] = []


# The active installation: one per process at most. A module-level name because what reads it
# outlives every installation: post-import hooks (wrapt cannot remove one) and wrappers left,
# inert, in another library's chain.
_active: Installation | None = None
_lock = forksafe.rlock()
#: Module names with a post-import hook registered: hooks cannot be removed, so at most one each,
#: for the process (``_loaded``, ``install``).
_hooked: set[str] = set()


def active() -> Installation | None:
    """The installation ``install()`` made, while it is active."""
    return _active


def _guard_for() -> CallStarter | None:
    """The active guard, unless this call runs inside a delegating call already in flight
    (LiteLLM running the openai SDK): then it is part of that call, not a second one."""
    outer = IN_FLIGHT.get()
    if outer is not None and isinstance(outer.provider.family, Delegating):
        return None
    installation = _active
    return installation.guard if installation is not None else None


def _request(provider: Provider, args: Any, kwargs: Any) -> Mapping[str, Any]:
    """The call's arguments by name (SDK methods are keyword-only; some functions are not)."""
    if not args:
        return kwargs  # type: ignore[no-any-return]
    return {**dict(zip(provider.family.positional, args, strict=False)), **kwargs}


def _dispatched(family: SharedDispatch, instance: Any, args: Any, kwargs: Any) -> tuple[str, Mapping[str, Any]] | None:
    """A shared call site's api and arguments (``SharedDispatch.dispatch``); None: not a model call."""
    try:
        return family.dispatch(instance, args, kwargs)
    except Exception as exc:
        report_internal_error("normalise", exc)
        return None


def _http_results() -> HttpResults:
    installation = _active
    return installation.http_results if installation is not None else HttpResults()


@transparent
def _sync_wrapper(provider: Provider, site: CallSite, patched: Site) -> Any:
    api = site.api
    shared = provider.family if isinstance(provider.family, SharedDispatch) else None

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        guard = _guard_for()
        if guard is None:
            return wrapped(*args, **kwargs)
        if shared is not None:
            found = _dispatched(shared, instance, args, kwargs)
            if found is None:
                # Not a model call (another service; credentials fetched during one): whatever it
                # sends is not the body of a call in flight around it.
                token = IN_FLIGHT.set(None)
                try:
                    return wrapped(*args, **kwargs)
                finally:
                    IN_FLIGHT.reset(token)
            this, request = found
        else:
            this, request = api, _request(provider, args, kwargs)
        call = guard.before(provider, this, request, patched.wrapped_over(), instance=instance)
        if call is None:
            return wrapped(*args, **kwargs)
        token = IN_FLIGHT.set(call)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            call.end("failed", error=exc)
            raise
        finally:
            IN_FLIGHT.reset(token)
        return observe_answer(call, site, result, _http_results(), api=this)

    return wrapper


@transparent
def _async_wrapper(provider: Provider, site: CallSite, patched: Site) -> Any:
    api = site.api

    async def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        guard = _guard_for()
        if guard is None:
            return await wrapped(*args, **kwargs)
        call = guard.before(provider, api, _request(provider, args, kwargs), patched.wrapped_over(), instance=instance)
        if call is None:
            return await wrapped(*args, **kwargs)
        token = IN_FLIGHT.set(call)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            call.end("failed", error=exc)
            raise
        finally:
            IN_FLIGHT.reset(token)
        return observe_answer(call, site, result, _http_results(), asynchronous=True)

    return wrapper


def _major(distribution: str) -> int | None:
    try:
        return int(metadata.version(distribution).split(".")[0])
    except Exception:
        return None


def _patch(installation: Installation, distribution: str) -> int:
    """Wrap ``distribution``'s call sites ``installation`` does not hold yet; how many it wrapped."""
    provider = BY_DISTRIBUTION[distribution]
    low, high = provider.supported
    major = _major(distribution)
    if major is None or not low <= major <= high:
        if distribution in installation.warned:
            return 0
        installation.warned.add(distribution)
        logger.warning(
            "ctxguard: %s %s is not supported (majors %d-%d); its calls are not guarded",
            distribution,
            metadata.version(distribution) if major is not None else "(unknown version)",
            low,
            high,
        )
        return 0
    family = provider.family
    for module_name, class_name, attribute in family.http_results if isinstance(family, Methods) else ():
        module = _loaded(module_name, distribution)
        if module is None:
            continue
        try:
            installation.http_results.register(getattr(module, class_name), attribute)
        except AttributeError:
            logger.debug("ctxguard: %s.%s not found; its results are read as answers", module_name, class_name)
    wrapped = 0
    for site in family.sites:
        class_name, _, method = site.attribute.rpartition(".")
        module = _loaded(site.module, distribution)
        if module is None:
            continue
        try:
            owner = getattr(module, class_name) if class_name else module
        except AttributeError:
            logger.debug("ctxguard: %s.%s not found; skipped", site.module, site.attribute)
            continue
        make = _async_wrapper if site.kind == "async" else _sync_wrapper
        made = wrap(owner, method, lambda original, patched, site=site, make=make: make(provider, site, patched))
        if made is not None:
            installation.sites.append(made)
            wrapped += 1
    for module_name, attribute, body in family.transport if isinstance(family, SharedDispatch) else ():
        class_name, method = attribute.split(".")
        module = _loaded(module_name, distribution)
        if module is None:
            continue
        try:
            owner = getattr(module, class_name)
        except AttributeError:
            logger.debug("ctxguard: %s.%s not found; the body sent is not observed", module_name, attribute)
            continue
        _keep(installation, wrap(owner, method, lambda original, site, body=body: wire.body_send(provider, body)))
    return wrapped


def _keep(installation: Installation, site: Site | None) -> None:
    if site is not None:
        installation.sites.append(site)


def _loaded(name: str, distribution: str) -> Any:
    """The module ``name`` if the app has imported it, else None, with a hook that patches
    ``distribution`` again when it is imported. The SDKs load their resource modules on first use
    (openai's 500 modules, most of which an app never touches): importing them all here would cost
    every app tens of MB and a large part of a second, and a module not imported yet has no method
    anyone can call. A name that is not a module of the installed SDK is skipped (its hook never
    fires)."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    if name not in _hooked:
        _hooked.add(name)
        wrapt.register_post_import_hook(_on_import(distribution), name)
    return None


def _patch_wire(installation: Installation, hooked: str) -> None:
    for module_name, attribute, make in TARGETS[hooked]:
        class_name, method = attribute.split(".")
        try:
            owner = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        wrapper = make(_unguarded)
        _keep(installation, wrap(owner, method, lambda original, site, wrapper=wrapper: wrapper))


def _unguarded(path: str, sent: bytes) -> tuple[Observed, str] | None:
    """A model request is leaving with no guarded call in flight: an HTTP client no call site
    ctxguard holds sent it (DSPy's, a gateway's, the app's own, an SDK method looked up before
    ``instrument()``, a call site another library's uninstrument unwrapped). Wrap again what was
    removed, and guard this request from the wire if its body is a model request of a chosen
    SDK's API (``routes.recognise``): its body is the request, its response the answer. It cannot
    be refused (the request is already leaving): enforce mode only observes it."""
    installation = _active
    if installation is None:
        return None
    found = routes.recognise(path, sent, installation.chosen)
    if found is None:
        return None
    _repair(installation, path)
    beneath = trace.get_current_span()
    provider, api, request = found
    call = installation.guard.before(provider, api, request, may_block=False)
    if call is None:
        return None
    call.from_wire(sent, beneath)
    return call, api


def _repair(installation: Installation, path: str) -> None:
    """A model request went out with no guarded call in flight: put back any wrapper of ctxguard's
    that was removed (another instrumentation's uninstrument restoring what it saved), so the
    next calls are guarded at their call site. Looked at most once a second; said once each way."""
    now = time.monotonic()
    if now - installation.repaired_at < 1.0:
        return
    installation.repaired_at = now
    with _lock:
        if _active is not installation:
            return
        restored = sum(_patch(installation, d) for d in installation.chosen
                       if sys.modules.get(BY_DISTRIBUTION[d].module) is not None)
    kind = "restored" if restored else "captured"
    if kind in installation.said:
        return
    installation.said.add(kind)
    if restored:
        logger.warning("ctxguard: a model request to %s went out unguarded: another library removed ctxguard's "
                       "wrappers (%d call sites); they are back, later calls are guarded", path, restored)
    else:
        logger.warning("ctxguard: a model request to %s bypassed its call site: an HTTP client of its own sent it "
                       "(DSPy's, a gateway's, the app's), or an SDK method looked up before ctxguard.instrument() "
                       "(a framework client set up earlier, a cached with_raw_response); such requests are guarded "
                       "from the wire, observed only (enforce mode cannot refuse them); where an SDK sends them, "
                       "call instrument() before creating its clients", path)


def _on_import(distribution: str) -> Any:
    patch = _patch_wire if distribution in TARGETS else _patch

    def hook(module: Any) -> None:
        with guarded("hook"), _lock:
            installation = _active
            if installation is not None:
                patch(installation, distribution)

    return hook


def install(guard: CallStarter, *, only: list[str] | None = None) -> Installation:
    """Activate ``guard`` and patch the supported SDKs (``only`` these), now or when imported; the
    ``Installation`` it returns is active until ``uninstall()``."""
    global _active
    unknown = set(only or ()) - set(BY_DISTRIBUTION)
    if unknown:
        raise ValueError(f"unknown providers {sorted(unknown)}; supported: {sorted(BY_DISTRIBUTION)}")
    with _lock:
        installation = _active = Installation(
            guard, frozenset(d for d in BY_DISTRIBUTION if only is None or d in only))
        _keep(installation, wrap(warnings, "warn", lambda original, site: warn_through))
        hooks = [(p.distribution, p.module) for p in PROVIDERS if p.distribution in installation.chosen]
        for distribution, name in (*hooks, *((d, d) for d in TARGETS)):
            if name in _hooked:  # its hook is there from an earlier installation: patch now if imported
                module = sys.modules.get(name)
                if module is not None:
                    _on_import(distribution)(module)
                continue
            _hooked.add(name)
            wrapt.register_post_import_hook(_on_import(distribution), name)  # runs now if imported
        return installation


def uninstall() -> Installation | None:
    """Restore every original function and deactivate the installation; returns it (its owner runs
    its ``closing``), or None if none was active."""
    global _active
    with _lock:
        installation, _active = _active, None
        if installation is not None:
            for site in reversed(installation.sites):
                unwrap(site)
            installation.sites.clear()
        return installation
