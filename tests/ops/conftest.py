"""The real Prometheus tools, and a real Prometheus + Alertmanager + webhook stack.

Skipped when absent, unless CTXGUARD_REQUIRE_PROMETHEUS=1 (the test command sets it after
installing the Debian packages as root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.servers import free_port, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("CTXGUARD_REQUIRE_PROMETHEUS") == "1"
#: The scrape job of the app under test (the alerts carry it as their ``job`` label).
JOB = "ctxguard-app"


def binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found is None:
        reason = f"{name} not installed (Debian packages prometheus, prometheus-alertmanager)"
        if REQUIRE:
            pytest.fail(f"{reason} (CTXGUARD_REQUIRE_PROMETHEUS=1)")
        pytest.skip(reason)
    return found


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@dataclass
class Stack:
    """Prometheus (scraping ``127.0.0.1:app_port/metrics`` every second and evaluating the shipped
    ``dashboards/alerts.yml``) → Alertmanager → a webhook that collects what it is sent."""

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

    def firing(self, alertname: str) -> dict[str, Any] | None:
        """The first firing ``alertname`` the webhook received, if any."""
        return next(
            (alert for body in self.webhooks for alert in body.get("alerts", ())
             if alert["labels"].get("alertname") == alertname and alert["status"] == "firing"),
            None,
        )


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
    """One stack per test module; the module starts its app on ``stack.app_port``."""
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
            stop(proc)
        hook.shutdown()
        hook.server_close()
