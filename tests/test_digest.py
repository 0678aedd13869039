"""Digests (ctxguard/digest.py): keyed BLAKE2b, and one warning for a random key."""

from __future__ import annotations

import logging

from ctxguard.digest import Digester


def test_random_digest_key_warns_once(caplog):
    import ctxguard.digest as digest_mod

    digest_mod._say_no_key.cache_clear()  # as in a new process
    caplog.set_level(logging.WARNING, logger="ctxguard")
    a, b = Digester(), Digester()
    assert a.text("x") != b.text("x")
    assert Digester(b"k").text("x") == Digester(b"k").text("x")
    assert sum("not comparable across processes" in r.getMessage() for r in caplog.records) == 1


def test_digests_are_keyed_blake2b_and_the_kept_keyed_state_is_never_consumed():
    import hashlib

    for key in (b"k", b"long" * 40):  # keys over 64 bytes are condensed first
        digester = Digester(key)
        blake_key = key if len(key) <= 64 else hashlib.blake2b(key, digest_size=64).digest()
        for text in ("hello", "", "x" * 10_000):
            expected = hashlib.blake2b(text.encode(), key=blake_key, digest_size=16).hexdigest()
            assert digester.text(text) == digester.text(text) == expected
        hasher = digester.hasher()
        hasher.update(b"hel")
        hasher.update(b"lo")
        assert hasher.hexdigest() == digester.text("hello")
