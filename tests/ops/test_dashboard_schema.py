"""dashboards/ctxguard.json against Grafana's published schema (dashboards/schema/check.py).

The check type-checks the dashboard with tsc against @grafana/schema's types. These tests
prove it on the real dashboard and on copies broken on purpose: a misspelled dashboard key,
a misspelled panel key and wrong-typed fields must each fail, at the JSON path of the break.

Skipped when node/npm/npx are absent, unless CTXGUARD_REQUIRE_NODE=1 (then they fail).
All the broken copies are checked in one check.py run (one tsc run).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECK = "dashboards/schema/check.py"
REAL = "dashboards/ctxguard.json"
TIMEOUT_S = 900

# A small dashboard valid against the schema: the broken copies are made from it too, so the
# check is proven even before (or whatever) the real dashboard contains.
SAMPLE: dict[str, Any] = {
    "title": "Sample",
    "uid": "sample",
    "schemaVersion": 39,
    "time": {"from": "now-6h", "to": "now"},
    "panels": [
        {
            "type": "row",
            "id": 1,
            "title": "Overview",
            "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0},
            "panels": [],
        },
        {
            "type": "timeseries",
            "id": 2,
            "title": "Requests",
            "gridPos": {"h": 8, "w": 12, "x": 0, "y": 1},
            "datasource": {"type": "prometheus", "uid": "prom"},
            "fieldConfig": {"defaults": {"unit": "short", "color": {"mode": "palette-classic"}}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
            "targets": [{"expr": "sum(rate(x[5m]))", "refId": "A"}],
        },
    ],
}


def _require_node() -> None:
    missing = [tool for tool in ("node", "npm", "npx") if shutil.which(tool) is None]
    if missing:
        reason = f"{', '.join(missing)} not found: Node.js with npm is needed for the dashboard schema check"
        if os.environ.get("CTXGUARD_REQUIRE_NODE") == "1":
            pytest.fail(f"{reason} (CTXGUARD_REQUIRE_NODE=1)")
        pytest.skip(reason)


def _run_check(*paths: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, CHECK, *(str(p) for p in paths)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env=env,
    )


def _parse(stdout: str) -> dict[str, list[str]]:
    """check.py's report: file -> its error lines (empty when OK)."""
    report: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith(("OK   ", "FAIL ")):
            current = report.setdefault(line[5:], [])
        elif line.startswith("  ") and current is not None:
            current.append(line.strip())
    return report


# -- how the copies are broken --------------------------------------------------------------


def _panels(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(JSON path, panel) for every non-row panel, rows' nested panels included, in order."""
    found: list[tuple[str, dict[str, Any]]] = []
    for i, panel in enumerate(dashboard.get("panels", [])):
        if not isinstance(panel, dict):
            continue
        if panel.get("type") == "row":
            for j, inner in enumerate(panel.get("panels", [])):
                if isinstance(inner, dict):
                    found.append((f"panels[{i}].panels[{j}]", inner))
        else:
            found.append((f"panels[{i}]", panel))
    if not found:
        raise AssertionError("dashboard has no (non-row) panel to break")
    return found


def _rename(obj: dict[str, Any], old: str, new: str, default: Any) -> None:
    obj[new] = obj.pop(old, default)


def _dashboard_key_typo(d: dict[str, Any]) -> tuple[str, str]:
    _rename(d, "title", "titel", "x")
    return "titel", 'unknown key "titel"'


def _panel_key_typo(d: dict[str, Any]) -> tuple[str, str]:
    path, panel = _panels(d)[0]
    _rename(panel, "title", "titel", "x")
    return f"{path}.titel", 'unknown key "titel"'


def _panel_wrong_type_gridpos(d: dict[str, Any]) -> tuple[str, str]:
    path, panel = _panels(d)[-1]
    grid = panel.setdefault("gridPos", {"h": 8, "w": 12, "x": 0, "y": 0})
    grid["h"] = str(grid.get("h", 8))
    return f"{path}.gridPos.h", "not assignable to type 'number'"


def _panel_wrong_type_title(d: dict[str, Any]) -> tuple[str, str]:
    path, panel = _panels(d)[0]
    panel["title"] = 5
    return f"{path}.title", "not assignable to type 'string'"


def _dashboard_wrong_type(d: dict[str, Any]) -> tuple[str, str]:
    d["schemaVersion"] = str(d.get("schemaVersion", 39))
    return "schemaVersion", "not assignable to type 'number'"


MUTATIONS: dict[str, Callable[[dict[str, Any]], tuple[str, str]]] = {
    "dashboard_key_typo": _dashboard_key_typo,
    "panel_key_typo": _panel_key_typo,
    "panel_wrong_type_gridpos_h": _panel_wrong_type_gridpos,
    "panel_wrong_type_title": _panel_wrong_type_title,
    "dashboard_wrong_type_schemaVersion": _dashboard_wrong_type,
}


@dataclass(frozen=True)
class Case:
    base: str  # "sample" or "real"
    mutation: str


@dataclass
class Outcome:
    path: Path
    expected_path: str
    expected_text: str


@dataclass
class BatchRun:
    returncode: int
    output: str
    report: dict[str, list[str]]
    outcomes: dict[Case, Outcome]
    bases: dict[str, Path]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> BatchRun:
    """One check.py run over both bases and every broken copy of each."""
    _require_node()
    workdir = tmp_path_factory.mktemp("dashboards")
    sources: dict[str, dict[str, Any]] = {"sample": SAMPLE}
    real = REPO_ROOT / REAL
    if real.exists():
        sources["real"] = json.loads(real.read_text(encoding="utf-8"))
    bases: dict[str, Path] = {}
    outcomes: dict[Case, Outcome] = {}
    for base, dashboard in sources.items():
        bases[base] = workdir / f"{base}.json"
        bases[base].write_text(json.dumps(dashboard, indent=2), encoding="utf-8")
        for name, mutate in MUTATIONS.items():
            broken = copy.deepcopy(dashboard)
            expected_path, expected_text = mutate(broken)
            path = workdir / f"{base}-{name}.json"
            path.write_text(json.dumps(broken, indent=2), encoding="utf-8")
            outcomes[Case(base, name)] = Outcome(path, expected_path, expected_text)
    files = [*bases.values(), *(o.path for o in outcomes.values())]
    proc = _run_check(*files)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"check.py exited {proc.returncode}, expected 1 (some copies are broken):\n{output}"
    report = _parse(proc.stdout)
    assert set(report) == {str(f) for f in files}, f"check.py did not report on every file:\n{output}"
    return BatchRun(proc.returncode, output, report, outcomes, bases)


# -- (a) the real dashboard --------------------------------------------------------------------


def test_real_dashboard_matches_grafana_schema() -> None:
    if not (REPO_ROOT / REAL).exists():
        pytest.skip(f"{REAL} does not exist yet")
    _require_node()
    proc = _run_check(REAL)
    assert proc.returncode == 0, f"{REAL} does not match Grafana's schema:\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.startswith(f"OK   {REAL}")


def test_sample_dashboard_passes(batch: BatchRun) -> None:
    """The unbroken sample passes, so its broken copies fail only for what was broken."""
    assert batch.report[str(batch.bases["sample"])] == [], batch.output


# -- (b), (c), (d) broken copies fail, at the broken place -------------------------------------


@pytest.mark.parametrize("base", ["sample", "real"])
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_broken_copy_fails(batch: BatchRun, base: str, mutation: str) -> None:
    if base not in batch.bases:
        pytest.skip(f"{REAL} does not exist yet")
    if batch.report[str(batch.bases[base])]:
        # tsc reports one problem per object literal: an existing error could mask the one added here.
        pytest.skip(f"{base} dashboard is invalid itself (see test_real_dashboard_matches_grafana_schema)")
    outcome = batch.outcomes[Case(base, mutation)]
    errors = batch.report[str(outcome.path)]
    assert errors, f"{mutation} copy of {base} was accepted:\n{batch.output}"
    assert any(e.startswith(f"{outcome.expected_path}: ") and outcome.expected_text in e for e in errors), (
        f"{mutation} copy of {base}: expected {outcome.expected_path!r} / {outcome.expected_text!r}, got {errors}"
    )


# -- tooling missing ---------------------------------------------------------------------------


def test_exit_2_when_node_missing(tmp_path: Path) -> None:
    """Without node/npm on PATH check.py says so and exits 2 (not 0: no silent pass)."""
    dashboard = tmp_path / "d.json"
    dashboard.write_text(json.dumps(SAMPLE), encoding="utf-8")
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    proc = _run_check(dashboard, env={**os.environ, "PATH": str(empty_bin)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not found" in proc.stderr
