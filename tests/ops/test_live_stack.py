"""The shipped rules and dashboard against the real programs: an instrumented app is scraped
by Prometheus, the rules fire, Alertmanager calls a webhook, and every dashboard panel query
returns series. One stack per module; every process is stopped by PID, whatever happens."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator

import openai
import pytest

import ctxguard
from ctxguard.testing import FakeLLM
from ctxguard.testing.plugin import GuardHarness
from tests.ops.conftest import JOB, ROOT, Stack
from tests.servers import wait_for


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
    alert = wait_for("CtxguardSystemPromptEvicted at the webhook",
                     lambda: scraped_app.firing("CtxguardSystemPromptEvicted"), timeout=90)
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
