"""The shipped rules and dashboard against the real programs: an instrumented app is scraped
by Prometheus, the rules fire, Alertmanager calls a webhook, and every dashboard panel query
returns series. One stack per module; every process is stopped by PID, whatever happens."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest

import ctxguard
from ctxguard.testing import FakeLLM
from ctxguard.testing.plugin import GuardHarness
from tests.ops.conftest import ROOT, binary

JOB = "ctxguard-app"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = condition()
        except OSError:
            result = None
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@dataclass
class Stack:
    prometheus: str
    alertmanager: str
    app_port: int
    webhooks: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, Path] = field(default_factory=dict)

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = get_json(url)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def samples(self) -> int:
        """Successful scrapes of the app so far."""
        result = self.query(f'sum_over_time(up{{job="{JOB}"}}[10m])')
        return int(float(result[0]["value"][1])) if result else 0


def _webhook_server(sink: list[dict[str, Any]]) -> ThreadingHTTPServer:
    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            sink.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus_bin, alertmanager_bin = binary("prometheus"), binary("prometheus-alertmanager")
    tmp = tmp_path_factory.mktemp("stack")
    webhooks: list[dict[str, Any]] = []
    hook = _webhook_server(webhooks)
    am_port, prom_port, app_port = free_port(), free_port(), free_port()
    (tmp / "alertmanager.yml").write_text(json.dumps({
        "route": {"receiver": "hook", "group_by": ["alertname"], "group_wait": "1s", "group_interval": "1s",
                  "repeat_interval": "1h"},
        "receivers": [{"name": "hook", "webhook_configs": [{"url": f"http://127.0.0.1:{hook.server_port}/"}]}],
    }))
    (tmp / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ROOT / "dashboards" / "alerts.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [f"127.0.0.1:{app_port}"]}]}],
    }))
    commands = {
        "alertmanager": [alertmanager_bin, f"--config.file={tmp / 'alertmanager.yml'}",
                         f"--storage.path={tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                         "--cluster.listen-address="],
        "prometheus": [prometheus_bin, f"--config.file={tmp / 'prometheus.yml'}",
                       f"--storage.tsdb.path={tmp / 'prom-data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
    }
    procs: list[subprocess.Popen[bytes]] = []
    s = Stack(f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}", app_port, webhooks)
    try:
        for name, cmd in commands.items():
            s.logs[name] = tmp / f"{name}.log"
            procs.append(subprocess.Popen(cmd, stdout=s.logs[name].open("wb"), stderr=subprocess.STDOUT))
        for base in (s.alertmanager, s.prometheus):
            wait_for(f"{base}/-/ready", lambda b=base: urllib.request.urlopen(f"{b}/-/ready", timeout=2).status == 200)
        wait_for("Prometheus to discover Alertmanager",
                 lambda: get_json(f"{s.prometheus}/api/v1/alertmanagers")["data"]["activeAlertmanagers"])
        yield s
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        hook.shutdown()
        hook.server_close()


@pytest.fixture(scope="module")
def scraped_app(stack: Stack) -> Iterator[Stack]:
    """The rotating-buffer bug, instrumented, scraped before and after it bites."""
    harness = GuardHarness()
    harness.start(mode="observe", metrics_port=stack.app_port,
                  policy=ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=200)))
    try:
        wait_for("two scrapes of the app", lambda: stack.samples() >= 2)
        pinned = ctxguard.render_pinned({"order_id": "A-1041"}, max_tokens=200)
        history: deque[dict[str, str]] = deque([{"role": "system", "content": "Be brief.\n" + pinned}], maxlen=4)
        with FakeLLM() as llm, openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client, \
                ctxguard.conversation("buggy"):
            for turn in range(6):
                history.append({"role": "user", "content": f"question {turn}"})
                client.chat.completions.create(model="gpt-4o", messages=list(history))
                history.append({"role": "assistant", "content": "answer"})
        assert harness.metric("ctxguard_evictions_total", kind="system") == 1
        before = stack.samples()
        wait_for("two scrapes after the eviction", lambda: stack.samples() >= before + 2)
        yield stack
    finally:
        harness.stop()


def test_system_prompt_eviction_pages_through_alertmanager(scraped_app: Stack) -> None:
    def fired() -> bool:
        return any(
            alert["labels"].get("alertname") == "CtxguardSystemPromptEvicted" and alert["status"] == "firing"
            for body in scraped_app.webhooks for alert in body.get("alerts", ())
        )

    wait_for("CtxguardSystemPromptEvicted at the webhook", fired, timeout=90)
    alert = next(a for b in scraped_app.webhooks for a in b["alerts"]
                 if a["labels"]["alertname"] == "CtxguardSystemPromptEvicted")
    assert alert["labels"]["severity"] == "critical"
    assert alert["labels"]["job"] == JOB
    assert alert["annotations"]["runbook_url"] == "docs/operations.md#ctxguardsystempromptevicted"


def panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads((ROOT / "dashboards" / "ctxguard.json").read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def test_every_dashboard_panel_query_returns_series(scraped_app: Stack) -> None:
    empty = []
    for title, expr in panel_queries():
        query = expr.replace("$job", JOB).replace("$__rate_interval", "2m")
        if not scraped_app.query(query):
            empty.append(f"{title}: {query}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
    assert len(panel_queries()) >= 12
