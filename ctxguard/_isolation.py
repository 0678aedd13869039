"""Failure isolation: ctxguard's own errors never reach the host application.

Every piece of telemetry work runs inside ``guarded(where)``. In production an
exception there is swallowed, counted in ``ctxguard_guard_errors_total{where}``
and logged at debug. Test suites register a hook (see ``ctxguard.testing``) so
that a swallowed error fails the test that caused it instead of hiding.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType

__all__ = [
    "WHERE",
    "add_error_hook",
    "guarded",
    "remove_error_hook",
    "report_internal_error",
]

logger = logging.getLogger("ctxguard")

#: The bounded set of ``where`` label values (pipeline stages that may fail).
WHERE = (
    "config",
    "hook",
    "normalise",
    "digest",
    "tokens",
    "checks",
    "conversation",
    "telemetry",
    "response",
    "stream",
    "callback",
    "ledger",
    "capture",
    "warnings",
)

ErrorHook = Callable[[str, BaseException], None]
# Told of every swallowed error: the active installation's counter (``ctxguard_guard_errors_total``)
# and, in tests, a hook that fails the test. Module-level: a swallowed error is reported from
# anywhere in the process, including code that outlives an installation (a stream read later).
_hooks: list[ErrorHook] = []


def add_error_hook(hook: ErrorHook) -> None:
    """``hook(where, exc)`` is called for every error ctxguard swallows from now on (``where`` one of
    ``WHERE``): ``instrument()`` counts them with one, the test suites fail a test with another."""
    _hooks.append(hook)


def remove_error_hook(hook: ErrorHook) -> None:
    if hook in _hooks:
        _hooks.remove(hook)


def report_internal_error(where: str, exc: BaseException) -> None:
    """Count and log one swallowed error; never raises itself."""
    try:
        where = where if where in WHERE else "checks"
        logger.debug("ctxguard internal error in %s", where, exc_info=exc)
        for hook in list(_hooks):
            hook(where, exc)
    except Exception:
        pass


class _Guarded:
    """A reusable, allocation-free context manager (one per ``where``)."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        report_internal_error(self.where, exc)
        return True


_GUARDS = {where: _Guarded(where) for where in WHERE}


def guarded(where: str) -> _Guarded:
    """``with guarded("checks"): ...`` swallows and reports an ``Exception``."""
    return _GUARDS[where]
