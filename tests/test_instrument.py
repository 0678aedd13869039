"""``instrument()`` (ctxguard/_instrument.py) returns a guard whatever the environment."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

import ctxguard


def test_instrument_never_raises_because_of_the_environment(monkeypatch, caplog, tmp_path):
    """A taken port, an unwritable capture path, a mistyped variable: instrument() returns a guard."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    monkeypatch.setenv("CTXGUARD_MODE", "enforcee")
    caplog.set_level(logging.WARNING, logger="ctxguard")
    try:
        guard = ctxguard.instrument(registry=CollectorRegistry(), metrics_port=port, digest_key=b"k",
                                    capture_path=str(tmp_path / "missing-dir" / "capture.jsonl"))
    finally:
        taken.close()
    assert guard is not None and guard.config.mode == "observe"
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"127.0.0.1:{port} cannot be bound" in said and "CTXGUARD_MODE" in said
    ctxguard.uninstrument()
    with pytest.raises(ValueError):  # an impossible port given in code is the code's mistake
        ctxguard.instrument(registry=CollectorRegistry(), metrics_port=70_000, digest_key=b"k")
