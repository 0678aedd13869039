"""What an operator sees when importing the dashboard and the routing example."""

from __future__ import annotations

import json
import subprocess

from tests.ops.conftest import ROOT, binary

DASHBOARD = json.loads((ROOT / "dashboards" / "ctxguard.json").read_text())


def test_dashboard_has_datasource_and_job_variables():
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["job"]["type"] == "query"
    assert variables["job"]["multi"] and variables["job"]["includeAll"]
    for panel in DASHBOARD["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"], (panel["title"], target["expr"])


def test_every_panel_is_described_and_the_required_ones_exist():
    titles = set()
    for panel in DASHBOARD["panels"]:
        assert len(panel.get("description", "")) > 20, panel["title"]
        titles.add(panel["title"])
    exprs = " ".join(t["expr"] for p in DASHBOARD["panels"] for t in p["targets"])
    for metric in ("ctxguard_violations_total", "ctxguard_evictions_total", "ctxguard_blocked_total",
                   "ctxguard_budget_utilization_ratio_bucket", "ctxguard_payload_tokens_bucket",
                   "ctxguard_messages_dropped_total", "ctxguard_guard_errors_total",
                   "ctxguard_guard_duration_seconds"):
        assert metric in exprs, metric
    assert {"Fact misses, stale and leaks", "Guard overhead per call"} <= titles


def test_alertmanager_example_is_valid_and_pages_critical_alerts():
    out = subprocess.run([binary("amtool"), "check-config", "dashboards/alertmanager.example.yml"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    routes = subprocess.run(
        [binary("amtool"), "config", "routes", "test", "--config.file=dashboards/alertmanager.example.yml",
         "severity=critical", "alertname=CtxguardFactLeak"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )
    assert routes.stdout.strip() == "pager", routes.stdout + routes.stderr
    warning = subprocess.run(
        [binary("amtool"), "config", "routes", "test", "--config.file=dashboards/alertmanager.example.yml",
         "severity=warning", "alertname=CtxguardGuardErrors"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )
    assert warning.stdout.strip() == "chat", warning.stdout + warning.stderr
