"""Finding and patching SDK call sites, whenever the SDK is imported.

One post-import hook per SDK (wrapt): patching happens when the SDK is
imported, or at once if it already is, so import order never matters. A hook
that fails is isolated (a broken hook would otherwise break the app's
``import openai``). ``uninstall()`` puts the original functions back, by identity.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
import threading
import warnings
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

import wrapt

from .._isolation import guarded
from . import anthropic as anthropic_provider
from . import google_genai as google_provider
from . import litellm as litellm_provider
from . import openai as openai_provider
from . import streams, wire
from .base import Adapter
from .frames import transparent, warn_through

if TYPE_CHECKING:
    from ..guard import Guard

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
#: (owner class or module, attribute, original function) for every patched call site
_patched: list[tuple[Any, str, Any]] = []


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


def _sync_wrapper(adapter: Adapter, api: str) -> Any:
    @transparent
    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        guard = _guard_for(adapter)
        if guard is None:
            return wrapped(*args, **kwargs)
        call = guard.before(adapter, api, _request(adapter, args, kwargs))
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


def _async_wrapper(adapter: Adapter, api: str) -> Any:
    @transparent
    async def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        guard = _guard_for(adapter)
        if guard is None:
            return await wrapped(*args, **kwargs)
        call = guard.before(adapter, api, _request(adapter, args, kwargs))
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


def _patch(distribution: str) -> None:
    provider = INTEGRATIONS[distribution][1]
    adapter: Adapter = provider.ADAPTER
    low, high = provider.SUPPORTED
    major = _major(distribution)
    if major is None or not low <= major <= high:
        logger.warning(
            "ctxguard: %s %s is not supported (majors %d-%d); its calls are not guarded",
            distribution,
            metadata.version(distribution) if major is not None else "(unknown version)",
            low,
            high,
        )
        return
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
        original = owner.__dict__.get(method)
        if original is None or isinstance(original, wrapt.FunctionWrapper):
            continue
        # Async clients' call sites return coroutines (often through a plain-def decorator, so
        # inspect cannot tell), except stream helpers, which return a context manager at once.
        # Module functions (LiteLLM) are plain ``async def``.
        is_async = (class_name.startswith("Async") and not api.endswith(".stream")) or (
            not class_name and inspect.iscoroutinefunction(original)
        )
        wrapper = (_async_wrapper if is_async else _sync_wrapper)(adapter, api)
        setattr(owner, method, wrapt.FunctionWrapper(original, wrapper))
        _patched.append((owner, method, original))


def _patch_wire(distribution: str) -> None:
    for module_name, attribute, is_async in wire.TARGETS[distribution]:
        class_name, method = attribute.split(".")
        try:
            owner = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        original = owner.__dict__.get(method)
        if original is None or isinstance(original, wrapt.FunctionWrapper):
            continue
        setattr(owner, method, wrapt.FunctionWrapper(original, wire.async_send if is_async else wire.sync_send))
        _patched.append((owner, method, original))


def _on_import(distribution: str) -> Any:
    patch = _patch_wire if distribution in wire.TARGETS else _patch

    def hook(module: Any) -> None:
        with guarded("hook"), _lock:
            if _active is not None:
                patch(distribution)

    return hook


def install(guard: Guard, *, only: list[str] | None = None) -> None:
    """Activate ``guard`` and patch the supported SDKs (``only`` these), now or when imported."""
    global _active
    unknown = set(only or ()) - set(INTEGRATIONS)
    if unknown:
        raise ValueError(f"unknown providers {sorted(unknown)}; supported: {sorted(INTEGRATIONS)}")
    with _lock:
        _active = guard
        if not any(owner is warnings for owner, _, _ in _patched):
            _patched.append((warnings, "warn", warnings.warn))
            warnings.warn = wrapt.FunctionWrapper(warnings.warn, warn_through)  # type: ignore[assignment]
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
        streams.forget_http_results()
        while _patched:
            owner, method, original = _patched.pop()
            setattr(owner, method, original)
