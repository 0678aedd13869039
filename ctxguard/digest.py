"""Keyed digests: evidence that a message was (or was not) sent, without its content.

BLAKE2b in keyed mode is a MAC: without the key nobody can confirm a guessed
value (a phone number, a city) against a digest found in telemetry.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Iterable

__all__ = ["Digester"]

logger = logging.getLogger("ctxguard")


#: Characters encoded at a time when digesting a large text.
_PIECE = 1 << 20


@functools.cache  # said once a process
def _say_no_key() -> None:
    logger.warning("ctxguard: no digest key configured (digest_key= or CTXGUARD_DIGEST_KEY); "
                   "using a random per-process key, so digests are not comparable across processes")


class Digester:
    """``Digester(b"secret").text("hello")`` -> 32 hex characters, stable for one key.

    ``None`` draws a random per-process key (with one warning); an empty key is refused,
    since BLAKE2b with an empty key is unkeyed and anyone could confirm a guessed value.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes | None = None) -> None:
        if key is not None and not key:
            raise ValueError("the digest key must not be empty (it would leave digests unkeyed): pass a secret, "
                             "or None for a random per-process key")
        if key is None:
            key = os.urandom(32)
            _say_no_key()
        # BLAKE2b accepts keys up to 64 bytes; longer secrets are condensed first.
        self._key = key if len(key) <= 64 else hashlib.blake2b(key, digest_size=64).digest()

    def derived(self, purpose: str) -> Digester:
        """A digester keyed for ``purpose`` from this one's key: the same in every process that
        shares the key, and its digests never equal this one's (no digest of one use can be
        matched against a digest of another)."""
        return Digester(hashlib.blake2b(purpose.encode(), key=self._key, digest_size=32).digest())

    def bytes(self, data: bytes) -> str:
        return hashlib.blake2b(data, key=self._key, digest_size=16).hexdigest()

    def hasher(self) -> hashlib.blake2b:
        """An incremental hasher whose ``hexdigest()`` equals ``bytes()`` of everything fed to it."""
        return hashlib.blake2b(key=self._key, digest_size=16)

    def text(self, text: str) -> str:
        # surrogatepass: a lone surrogate from a broken client must digest, not raise.
        if len(text) <= _PIECE:
            return self.bytes(text.encode("utf-8", "surrogatepass"))
        return self.texts((text,))

    def texts(self, texts: Iterable[str]) -> str:
        """``text()`` of the texts joined, without joining them: a large text is encoded a piece
        at a time, so digesting 100 MB never holds a second copy of it."""
        hasher = self.hasher()
        for text in texts:
            for start in range(0, len(text), _PIECE):
                hasher.update(text[start : start + _PIECE].encode("utf-8", "surrogatepass"))
        return hasher.hexdigest()
