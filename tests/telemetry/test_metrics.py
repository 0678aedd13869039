"""ctxguard's own metric cells expose exactly what prometheus_client's collectors would.

The oracle is prometheus_client itself: the same observations go into a
``Counter``/``Histogram`` on one registry and into ctxguard's cells on another, and
the scraped samples must match, bucket boundaries (``le`` is inclusive) and sums
included.
"""

from __future__ import annotations

import socket
import time
import urllib.request

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import ctxguard
from ctxguard.checks import CHECK_NAMES
from ctxguard.providers import LABELS
from ctxguard.providers import openai as openai_provider
from ctxguard.telemetry.metrics import _PINNED_BUCKETS, _RATIO_BUCKETS, Metrics
from ctxguard.wiredigest import WireDigests
from tests.conftest import race


def samples(registry: CollectorRegistry, family: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        if f.name == family
        for s in f.samples
        if not s.name.endswith("_created")
    }


def test_histograms_match_prometheus_client_on_and_between_bounds() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    m = Metrics(ours, CHECK_NAMES, LABELS)
    pinned = prometheus_client.Histogram(
        "ctxguard_pinned_tokens", "Tokens of the pinned facts block.", buckets=_PINNED_BUCKETS, registry=theirs
    )
    ratio = prometheus_client.Histogram(
        "ctxguard_budget_utilization_ratio", "x", ["provider"], buckets=_RATIO_BUCKETS, registry=theirs
    )
    values = [0, 25, 25.5, 50, 99, 100, 3200, 3201, 10**6, 7]  # on a bound, just above, past the last
    for v in values:
        m.add((), [(m.pinned_h, v), (m.utilization_h["anthropic"], v / 100)])
        pinned.observe(v)
        ratio.labels("anthropic").observe(v / 100)
    for family in ("ctxguard_pinned_tokens", "ctxguard_budget_utilization_ratio"):
        got, want = samples(ours, family), samples(theirs, family)
        want = {k: v for k, v in want.items() if dict(k[1]).get("provider", "anthropic") == "anthropic"}
        got_anthropic = {k: v for k, v in got.items() if dict(k[1]).get("provider", "anthropic") == "anthropic"}
        assert got_anthropic == want, family
    # The other providers' series exist, at zero, before their first call.
    assert got[("ctxguard_budget_utilization_ratio_count", (("provider", "openai"),))] == 0


def test_counters_are_exact_under_concurrent_calls() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, CHECK_NAMES, LABELS)
    cell = m.checks_at[("system_at_head", "fail")]
    calls = m.calls_at[("openai", "chat")]

    def work() -> None:
        for _ in range(20_000):
            m.add((calls, cell, cell))
            m.add_amount(m.dropped_at["user"], 2)

    # (CPython 3.11 only switches threads at calls and loop back-edges, so this cannot show a
    # lost update without the lock; other builds can.)
    race(work, work, work, work)
    got = samples(registry, "ctxguard_checks")
    assert got[("ctxguard_checks_total", (("check", "system_at_head"), ("outcome", "fail")))] == 160_000
    assert registry.get_sample_value("ctxguard_calls_total", {"provider": "openai", "operation": "chat"}) == 80_000
    assert registry.get_sample_value("ctxguard_messages_dropped_total", {"role": "user"}) == 160_000


def _listening(port: int) -> list[str]:
    """Local IPv4 addresses listening on ``port``, as the kernel reports them (/proc/net/tcp)."""
    found = []
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":  # LISTEN
                found.append(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return found


def test_metrics_port_listens_on_loopback_only(harness):
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    harness.start(mode="observe", metrics_port=port)
    assert _listening(port) == ["127.0.0.1"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        assert b"ctxguard_calls_total" in page.read()


def _slowed(cls: type, name: str, monkeypatch) -> None:
    original = getattr(cls, name)

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.03)
        return original(*args, **kwargs)

    monkeypatch.setattr(cls, name, slow)


@pytest.mark.parametrize("stage", ["before sending", "the wire", "the response", "stream chunks"])
def test_the_duration_counts_ctxguards_time_at_every_stage(harness, client, monkeypatch, stage):
    """Each stage of ctxguard's own work, slowed by 30 ms, shows in its duration histogram."""
    slowed = {"the wire": (WireDigests, "digest"), "the response": (openai_provider.OpenAIAdapter, "read_response"),
              "stream chunks": (openai_provider._ChatStream, "feed")}
    if stage == "before sending":
        harness.start(mode="observe", conversation_id=lambda kwargs: time.sleep(0.03) or "slow")
    else:
        harness.start(mode="observe")
        _slowed(*slowed[stage], monkeypatch)
    messages = [{"role": "user", "content": "hi"}]
    if stage == "stream chunks":
        for _ in client.chat.completions.create(model="gpt-4o", messages=messages, stream=True):
            pass
    else:
        client.chat.completions.create(model="gpt-4o", messages=messages)
    assert harness.metric("ctxguard_guard_duration_seconds_sum") >= 0.03
    assert harness.metric("ctxguard_guard_duration_seconds_count") == 1


def test_every_completed_call_counts_one_outcome_per_check(harness, client):
    """pass + fail + skip of every check equals the calls made: dashboards divide by it."""
    harness.start(mode="observe")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    client.chat.completions.create(model="gpt-4o", messages=messages)
    with ctxguard.conversation("c"):
        client.chat.completions.create(model="gpt-4o", messages=messages)
        client.chat.completions.create(model="gpt-4o", messages=messages[1:])  # a violation
        for _ in client.chat.completions.create(model="gpt-4o", messages=messages, stream=True):
            pass
        client.responses.create(model="gpt-4o", instructions="Be brief.", input="hi")
    for check in CHECK_NAMES:
        counted = sum(harness.metric("ctxguard_checks_total", check=check, outcome=o) for o in ("pass", "fail", "skip"))
        assert counted == 5, check


def test_an_unknown_provider_is_refused_before_the_metrics_port_is_taken(harness):
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ValueError, match=r"unknown providers \['opena1'\]"):
        harness.start(mode="observe", metrics_port=port, providers=["opena1"])
    assert _listening(port) == []
    harness.start(mode="observe", metrics_port=port, providers=["openai"])  # the port is still free
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        assert b"ctxguard_calls_total" in page.read()


def test_every_labelled_series_exists_at_zero_from_instrument():
    registry = CollectorRegistry()
    ctxguard.instrument(registry=registry, digest_key="k")
    for check in CHECK_NAMES:
        for outcome in ("pass", "fail", "skip"):
            assert registry.get_sample_value("ctxguard_checks_total", {"check": check, "outcome": outcome}) == 0
        assert registry.get_sample_value("ctxguard_violations_total", {"check": check, "provider": "openai"}) == 0
        assert registry.get_sample_value("ctxguard_blocked_total", {"check": check}) == 0
    for kind in ("system", "pinned", "fact"):
        assert registry.get_sample_value("ctxguard_evictions_total", {"kind": kind}) == 0
    assert registry.get_sample_value("ctxguard_calls_total", {"provider": "openai", "operation": "chat"}) == 0
    assert registry.get_sample_value("ctxguard_guard_errors_total", {"where": "checks"}) == 0
    assert registry.get_sample_value("ctxguard_messages_dropped_total", {"role": "user"}) == 0
    assert registry.get_sample_value("ctxguard_lossy_summaries_total") == 0


def test_metrics_port_serves_on_loopback():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    registry = CollectorRegistry()
    ctxguard.instrument(registry=registry, digest_key="k", metrics_port=port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "ctxguard_checks_total" in body
    ctxguard.uninstrument()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
