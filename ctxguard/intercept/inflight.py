"""The guarded call whose request is on its way: set by the call-site wrappers and stream
proxies while the SDK runs, read by the transport observer (``wire``)."""

from __future__ import annotations

from contextvars import ContextVar

from .protocol import Observed

__all__ = ["IN_FLIGHT"]

IN_FLIGHT: ContextVar[Observed | None] = ContextVar("ctxguard_in_flight", default=None)
