"""The shipped examples run as documented."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_example_suites_need_nothing_but_pytest():
    """README.md, "Quick start": `pip install pytest && pytest examples/test_retention_suite.py`.
    In the README's venv (ctxguard[openai,tiktoken] and pytest, no pytest-asyncio) the examples run
    under their own examples/pytest.ini, not the repository's settings (before: "Unknown config
    option: asyncio_mode" on every run). Without the asyncio plugin, an unknown option is an error here."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:asyncio",
                          "-W", "error::pytest.PytestConfigWarning", "examples/test_retention.py",
                          "examples/test_retention_suite.py", "examples/test_context_builder.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning" not in out.stdout.lower()


def _suite(bug: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SHOP_BUG"}
    env["COLUMNS"] = "1000"  # each FAILED line of the summary carries its whole message
    if bug is not None:
        env["SHOP_BUG"] = bug
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
                           "examples/test_retention_suite.py"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env=env)


def test_retention_suite_example_passes_the_fixed_app():
    out = _suite(None)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 passed" in out.stdout


@pytest.mark.parametrize(
    ("bug", "caught"),
    [
        ("revert", {"test_a_correction_wins": "fact_present: delivery_city diverged at payload: expected 'Lyon' (v2), "
                                              "sent 'Pune' (v1); fact_current"}),
        ("undelete", {"test_a_deleted_phone_number_stays_deleted": "fact_forgotten: phone diverged at payload"}),
        # Carol's phone in Dave's request: blocked by fact_scoped before it is sent (a grouped number,
        # "+33 6 12 34 56 78", found in another conversation's payload: docs/facts.md, "Matching").
        ("shared", {"test_customers_never_see_each_others_facts": "fact_scoped: phone of conversation 'carol'"}),
        ("uncapped", {"test_the_pinned_block_stays_under_its_cap": "pinned_capped: pinned block is"}),
        # The sweep finds where the prompt is lost; the enforce-mode tests whose conversations run past
        # the buffer's 8 messages are blocked by system_stable (the pinned block became the first instruction).
        ("rotating", {"test_the_system_prompt_survives_4_8_16_32_turns": "FactLost: the system prompt lost in the "
                                                                         "8-turn conversation",
                      "test_a_correction_wins": "system_stable",
                      "test_a_deleted_phone_number_stays_deleted": "system_stable",
                      "test_the_pinned_block_stays_under_its_cap": "system_stable"}),
    ],
)
def test_retention_suite_example_catches_each_bug(bug: str, caught: dict[str, str]):
    """docs/testing.md, "A retention suite for an app": which tests each bug fails, and which check says so."""
    out = _suite(bug)
    assert out.returncode == 1, out.stdout + out.stderr
    failed = {line.split("::")[1].split(" ")[0]: line for line in out.stdout.splitlines() if line.startswith("FAILED")}
    assert set(failed) == set(caught), out.stdout
    for test, says in caught.items():
        assert says in failed[test], failed[test]


def test_fleet_app_refuses_to_start_without_a_multiprocess_directory(tmp_path):
    """examples/fleet_app runs end to end in tests/ops/test_fleet_app.py; this is the one rule that
    test cannot show: without PROMETHEUS_MULTIPROC_DIR each worker would count on its own."""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    out = subprocess.run([sys.executable, "-m", "gunicorn", "-c", "examples/fleet_app/gunicorn.conf.py",
                          "--bind", "127.0.0.1:0", "--control-socket", str(tmp_path / "gunicorn.ctl")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0
    assert "set PROMETHEUS_MULTIPROC_DIR" in out.stderr
