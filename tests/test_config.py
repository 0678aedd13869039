"""Configuration (ctxguard/config.py): the environment over the code, a mistyped variable one warning."""

from __future__ import annotations

import logging

import pytest

from ctxguard.config import Config


def test_env_overrides(monkeypatch):
    monkeypatch.setenv("CTXGUARD_MODE", "enforce")
    monkeypatch.setenv("CTXGUARD_CAPTURE_CONTENT", "true")
    monkeypatch.setenv("CTXGUARD_DIGEST_KEY", "from-env")
    config = Config.resolve(mode="observe", digest_key="from-code")
    assert (config.mode, config.capture_content, config.digest_key) == ("enforce", True, b"from-env")
    with pytest.raises(ValueError):  # a mistake in code raises at the call
        Config.resolve(mode="panic")


@pytest.mark.parametrize(("variable", "value", "field", "expected"), [
    ("CTXGUARD_MODE", "enforcee", "mode", "observe"),
    ("CTXGUARD_SPAN", "mine", "span", "auto"),
    ("CTXGUARD_CAPTURE_CONTENT", "sure", "capture_content", False),
    ("CTXGUARD_METRICS_PORT", "ninety", "metrics_port", None),
    ("CTXGUARD_METRICS_PORT", "70000", "metrics_port", None),
    ("CTXGUARD_MAX_CONVERSATIONS", "0", "max_conversations", 10_000),
    ("CTXGUARD_MAX_CONVERSATIONS", "lots", "max_conversations", 10_000),
    ("CTXGUARD_CACHE_BYTES", "0", "cache_bytes", 16 * 1024 * 1024),
    ("CTXGUARD_CACHE_BYTES", "64MiB", "cache_bytes", 16 * 1024 * 1024),
    ("CTXGUARD_OLLAMA_NUM_CTX", "0", "ollama_num_ctx", 4096),
    ("CTXGUARD_OLLAMA_NUM_CTX", "4k", "ollama_num_ctx", 4096),
])
def test_a_mistyped_variable_is_one_warning_and_the_codes_value(monkeypatch, caplog, variable, value, field, expected):
    """The environment never makes instrument() raise into the app: the operator's typo is named
    in one warning, and the value given in code (or the default) stands."""
    monkeypatch.setenv(variable, value)
    caplog.set_level(logging.WARNING, logger="ctxguard")
    assert getattr(Config.resolve(), field) == expected
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and variable in warned[0] and repr(value) in warned[0]
