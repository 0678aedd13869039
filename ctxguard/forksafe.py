"""Locks and state that a forked child can use.

``os.fork()`` copies one thread, the one that forked. A lock another thread held at that moment
stays held in the child forever, so the child's first guarded call would wait on it for good
(gunicorn and multiprocessing fork workers while the parent's threads are making calls). Every
lock ctxguard owns is made here, and a forked child gets each one back unlocked, as the
standard library does for its own (``logging``, ``threading``, ``concurrent.futures``); an
object whose state belongs to its process (a reader thread, a file named after the pid) is told
``forked()`` in the child.

>>> guard = lock()
>>> with guard:
...     pass
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Protocol

from ._isolation import report_internal_error

__all__ = ["Forked", "adopt", "event", "lock", "on_fork", "rlock"]


class Forked(Protocol):
    def forked(self) -> None:
        """Called in a forked child, after its locks were released."""


# Every lock ctxguard made and every object told of forks. Module-level, and mutated at run time,
# because they are the process's own: a fork copies the whole process, whichever installation
# made them. Weak: what is gone is not kept for this.
_owned: weakref.WeakSet[Any] = weakref.WeakSet()


def lock() -> threading.Lock:
    """A ``threading.Lock`` that a forked child gets back unlocked.

    On the per-call path (the sections every guarded call enters: conversation memory, reuse
    memos, wire digests, calibration, metric cells, span attributes) it is taken with
    ``acquire()`` and released in a ``finally``, not by ``with``: in CPython 3.11 a ``with``
    makes two bound methods and parses ``__exit__``'s three arguments, ~1,300 instructions a
    section more; a call enters ten, 14,500 instructions, 2.3% of ctxguard's own cost at 20
    messages (bench/instructions.py --own). Everywhere else, ``with``."""
    made = threading.Lock()
    _owned.add(made)
    return made


def rlock() -> threading.RLock:
    """A ``threading.RLock`` that a forked child gets back unlocked."""
    made = threading.RLock()
    _owned.add(made)
    return made


def event() -> threading.Event:
    """A ``threading.Event`` (a flag behind a lock) that a forked child gets back usable."""
    made = threading.Event()
    _owned.add(made)
    return made


def adopt(made: Any) -> None:
    """A lock another library made, which ctxguard's objects use: a forked child gets it back
    unlocked too (None, or what cannot be re-initialised, is left as it is)."""
    if hasattr(made, "_at_fork_reinit"):
        _owned.add(made)


def on_fork(obj: Forked) -> None:
    """Call ``obj.forked()`` in every child forked from now on, while ``obj`` lives."""
    _owned.add(obj)


def _after_fork_in_child() -> None:
    owned = list(_owned)
    for made in owned:
        # The method the standard library resets its own locks with after a fork (CPython 3.9+).
        reinit = getattr(made, "_at_fork_reinit", None)
        if reinit is not None:
            reinit()
    for obj in owned:  # the locks first: an object's forked() may take one
        if hasattr(obj, "forked"):
            try:
                obj.forked()
            except Exception as exc:  # a child must start whatever went wrong here
                report_internal_error("hook", exc)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
