"""The real Prometheus tools. Skipped when absent, unless CTXGUARD_REQUIRE_PROMETHEUS=1
(the test command sets it after installing the Debian packages as root)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("CTXGUARD_REQUIRE_PROMETHEUS") == "1"


def binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found is None:
        reason = f"{name} not installed (Debian packages prometheus, prometheus-alertmanager)"
        if REQUIRE:
            pytest.fail(f"{reason} (CTXGUARD_REQUIRE_PROMETHEUS=1)")
        pytest.skip(reason)
    return found
