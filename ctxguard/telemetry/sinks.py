"""What ctxguard made on a telemetry sink, kept for the process: a Prometheus registry's series
(``metrics.metrics_for``), a meter provider's instruments (``meter.meters_for``).

Neither sink can forget what was registered on it, and both outlive an installation: so
``instrument()`` again with the same sink counts on with what was made on it the first time,
never makes a second set. Kept weakly: a sink gone takes what was made on it along.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from .. import forksafe

__all__ = ["made_on", "one_of"]

T = TypeVar("T")

_lock = forksafe.lock()
#: By sink (a ``CollectorRegistry`` or a ``MeterProvider``): what ctxguard made on it.
_made: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def made_on(sink: Any, make: Callable[[], T], again: Callable[[T], None] | None = None) -> T:
    """What was made on ``sink``: ``make()`` the first time, then the same, passed to ``again``
    each time it is asked for again. One at a time: ``make`` and ``again`` run under a lock."""
    with _lock:
        found: T | None = _made.get(sink)
        if found is None:
            found = _made[sink] = make()
        elif again is not None:
            again(found)
        return found


def one_of(kind: type[T]) -> T | None:
    """Something of ``kind`` made on some sink, if any (for ``make``: called under the lock)."""
    return next((made for made in _made.values() if isinstance(made, kind)), None)
