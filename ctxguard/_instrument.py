"""``instrument()`` / ``uninstrument()``: the one-line set-up and its undo."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from opentelemetry.trace import TracerProvider
from prometheus_client import REGISTRY, CollectorRegistry

from . import facts
from . import providers as _providers
from ._isolation import set_error_counter
from .config import Config
from .guard import Guard
from .policy import Policy

__all__ = ["instrument", "uninstrument"]

logger = logging.getLogger("ctxguard")
_lock = threading.Lock()
_guard: Guard | None = None
_server: Any = None


def instrument(
    *,
    policy: Policy | None = None,
    mode: str = "observe",
    providers: list[str] | None = None,
    digest_key: str | bytes | None = None,
    capture_content: bool = False,
    registry: CollectorRegistry | None = None,
    tracer_provider: TracerProvider | None = None,
    metrics_port: int | None = None,
    ledger: object | None = None,
    conversation_id: Callable[[Mapping[str, Any]], str | None] | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Guard | None:
    """Guard every call of the installed (or later imported) LLM SDKs.

    >>> guard = ctxguard.instrument(policy=ctxguard.Policy(pinned=ctxguard.Pinned()))  # doctest: +SKIP

    Idempotent: a second call returns the active guard unchanged. Returns None
    when ``CTXGUARD_DISABLED=1``.
    """
    global _guard, _server
    if Config.disabled():
        logger.info("ctxguard: disabled by CTXGUARD_DISABLED")
        return None
    with _lock:
        if _guard is not None:
            logger.debug("ctxguard: instrument() called again; keeping the active guard")
            return _guard
        config = Config.resolve(
            mode=mode, digest_key=digest_key, capture_content=capture_content, metrics_port=metrics_port
        )
        guard = Guard(
            config,
            policy=policy,
            registry=registry,
            tracer_provider=tracer_provider,
            ledger=ledger,
            conversation_id=conversation_id,
            clock=clock,
        )
        if config.metrics_port is not None:
            from prometheus_client import start_http_server

            _server = start_http_server(
                config.metrics_port, addr="127.0.0.1", registry=registry if registry is not None else REGISTRY
            )
        _providers.install(guard, only=providers)
        _guard = guard
        return guard


def uninstrument() -> None:
    """Remove every wrapper: the SDKs behave, and are, exactly as before."""
    global _guard, _server
    with _lock:
        _providers.uninstall()
        set_error_counter(None)
        facts.configure(None, None)  # facts recorded from now on go to the process default
        _guard = None
        if _server is not None:
            server, _thread = _server if isinstance(_server, tuple) else (_server, None)
            server.shutdown()
            server.server_close()
            _server = None
