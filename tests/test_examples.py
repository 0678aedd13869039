"""The shipped examples run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_reports_the_eviction():
    out = subprocess.run([sys.executable, "examples/quickstart.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'ctxguard_violations_total{check="system_at_head",provider="openai"} 1.0' in out.stdout
    assert 'ctxguard_evictions_total{kind="system"} 1.0' in out.stdout
    assert "WARNING ctxguard: ctxguard violation system_at_head" in out.stderr


def test_retention_example_suite_passes():
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/test_retention.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 passed" in out.stdout
