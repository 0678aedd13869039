"""Alert rules with the real promtool: syntax, unit tests (series in, alerts out), /metrics lint."""

from __future__ import annotations

import re
import subprocess

import yaml
from prometheus_client import generate_latest

import ctxguard
from tests.ops.conftest import ROOT, binary

RULES = ROOT / "dashboards" / "alerts.yml"


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([binary("promtool"), *args], cwd=ROOT, input=stdin, capture_output=True, timeout=60)


def test_rules_are_valid():
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr


def test_rule_unit_tests_pass():
    out = promtool("test", "rules", "tests/ops/alerts_test.yml")
    assert out.returncode == 0, (out.stdout + out.stderr).decode()


def test_every_alert_has_severity_annotations_and_a_runbook_section():
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert {
        "CtxguardSystemPromptEvicted", "CtxguardPinnedBlockMissing", "CtxguardPinnedBlockOverCap",
        "CtxguardPayloadOverBudget", "CtxguardFactLeak", "CtxguardGuardErrors", "CtxguardBudgetHeadroomLow",
        "CtxguardContextDroppedByProvider",
    } <= names
    runbook = (ROOT / "docs" / "operations.md").read_text()
    anchors = {re.sub(r"[^a-z0-9]+", "", h.lower()) for h in re.findall(r"^#+ (.+)$", runbook, re.M)}
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/operations.md#{rule['alert'].lower()}", url
        assert rule["alert"].lower() in anchors, f"no runbook section for {rule['alert']}"
    by_name = {r["alert"]: r for r in rules}
    for paging in ("CtxguardSystemPromptEvicted", "CtxguardFactLeak"):
        assert by_name[paging]["labels"]["severity"] == "critical"
        assert "for" not in by_name[paging], f"{paging} must fire on the first evaluation"


def test_metrics_exposition_passes_promtool_lint(harness, llm, client):
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
    with ctxguard.conversation("c"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    exposition = generate_latest(harness.registry)
    assert b'ctxguard_violations_total{check="system_at_head",provider="openai"} 1.0' in exposition
    out = promtool("check", "metrics", stdin=exposition)
    findings = [line for line in (out.stdout + out.stderr).decode().splitlines() if line.strip()]
    assert out.returncode == 0 and not findings, findings
