"""OpenTelemetry auto-instrumentation launcher support (SPEC §2).

ctxguard registers an ``opentelemetry_instrumentor`` entry point named ``ctxguard``,
so an app run under the OpenTelemetry launcher is guarded without any ctxguard code
of its own::

    pip install ctxguard opentelemetry-distro opentelemetry-instrumentation
    opentelemetry-instrument python app.py

The launcher configures the SDK first (its global tracer provider receives
ctxguard's spans), then calls ``CtxguardInstrumentor().instrument()``, which is
``ctxguard.instrument()`` with its defaults and the ``CTXGUARD_*`` environment
overrides (``CTXGUARD_MODE=enforce``, ``CTXGUARD_DIGEST_KEY``,
``CTXGUARD_DISABLED=1``, ...). ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=ctxguard``
skips it, as for any instrumentor.

In code, ``CtxguardInstrumentor().instrument(tracer_provider=tp, mode="enforce")``
passes every keyword ``ctxguard.instrument()`` accepts through to it; other
keywords (such as ``meter_provider``, which the OpenTelemetry instrumentors share)
are ignored.

``opentelemetry-instrumentation`` is an optional dependency: ``import ctxguard``
never imports it, only this module does.

Failure isolation: the launcher must never crash the app, so an exception raised
while instrumenting or uninstrumenting is logged (logger ``ctxguard``), counted in
``ctxguard_guard_errors_total{where="config"}`` and swallowed; the app then runs
unguarded. ``ContextViolation`` is not raised here: enforce mode raises it from
the app's LLM calls, as with ``ctxguard.instrument()``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Collection
from typing import Any

# The module starts with a file-level ``# type: ignore``, so mypy sees none of its names.
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from ._instrument import instrument, uninstrument
from ._isolation import report_internal_error
from .guard import Guard

__all__ = ["CtxguardInstrumentor"]

logger = logging.getLogger("ctxguard")

#: Keywords ``ctxguard.instrument()`` accepts (all keyword-only), passed through as given.
_INSTRUMENT_KWARGS = frozenset(
    name for name, p in inspect.signature(instrument).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
)


class CtxguardInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Activates ctxguard from ``opentelemetry-instrument python app.py``.

    >>> CtxguardInstrumentor().instrument(tracer_provider=provider)  # doctest: +SKIP
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        # ctxguard wraps whichever supported SDKs are installed or imported later
        # (post-import hooks); naming one here would make the launcher skip ctxguard
        # whenever that SDK is absent.
        return ()

    def _instrument(self, **kwargs: Any) -> Guard | None:
        options = {k: v for k, v in kwargs.items() if k in _INSTRUMENT_KWARGS}
        ignored = sorted(k for k in kwargs if k not in _INSTRUMENT_KWARGS)
        if ignored:
            logger.debug("ctxguard: CtxguardInstrumentor ignores %s", ", ".join(ignored))
        try:
            return instrument(**options)
        except Exception as exc:
            logger.warning("ctxguard: not activated by the OpenTelemetry launcher: %r", exc, exc_info=exc)
            report_internal_error("config", exc)
            return None

    def _uninstrument(self, **kwargs: Any) -> None:
        try:
            uninstrument()
        except Exception as exc:
            logger.warning("ctxguard: uninstrument failed: %r", exc, exc_info=exc)
            report_internal_error("config", exc)
