"""Digests of large request bodies, computed off the request path.

``wire.hash`` is the keyed digest of the body the HTTP client sends, taken right
before it leaves. Hashing is linear in the body (BLAKE2b here: about 1.1 µs per KB),
so a 200-message payload would wait ~0.1 ms for it and a 2,000-message one ~1 ms.
CPython's hashlib releases the GIL on buffers over 2 KB, so a large body is hashed
by one worker thread while the request travels, and the digest is collected when
the span ends. Small bodies are hashed at once (a hand-off would cost more).

Fork-safe: a child process starts without the parent's worker; a digest the child
can never receive (its call was in flight in another thread at fork time) is
computed in place after ``WAIT_S``.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from .digest import Digester

__all__ = ["OFFLOAD_MIN_BYTES", "PendingDigest", "digest_body"]

#: Bodies at least this large are hashed by the worker thread.
OFFLOAD_MIN_BYTES = 32 * 1024
#: How long the span's end waits for the worker before hashing in place.
WAIT_S = 1.0

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def _forget_worker() -> None:
    global _executor
    _executor = None  # the worker thread does not exist in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker)


class PendingDigest:
    """The digest of ``data``, being computed; ``value()`` returns it."""

    __slots__ = ("_data", "_digester", "_future")

    def __init__(self, digester: Digester, data: bytes, future: Future[str]) -> None:
        self._digester = digester
        self._data = data
        self._future = future

    def value(self) -> str:
        try:
            return self._future.result(timeout=WAIT_S)
        except FutureTimeout:
            return self._digester.bytes(self._data)


def digest_body(digester: Digester, data: bytes) -> str | PendingDigest:
    """The keyed digest of ``data`` now (small), or a ``PendingDigest`` (large)."""
    global _executor
    if len(data) < OFFLOAD_MIN_BYTES:
        return digester.bytes(data)
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxguard-digest")
        try:
            future = _executor.submit(digester.bytes, data)
        except RuntimeError:  # interpreter shutting down: no new threads
            return digester.bytes(data)
    return PendingDigest(digester, data, future)
