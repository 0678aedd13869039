"""Budget equation, pinned rendering, token counting/calibration, config and metric series."""

from __future__ import annotations

import logging
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard import Budget, Pinned, Policy, budget_for, render_pinned
from ctxguard import budget as budget_mod
from ctxguard.budget import window_for
from ctxguard.checks import CHECK_NAMES
from ctxguard.config import Config
from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.payload import RequestView
from ctxguard.pinned import find_block
from ctxguard.tokens import REPLY_PRIMING, Calibration, EstimateCounter


def test_budget_for_is_the_equation():
    b = budget_for("gpt-4o", system=1200, tools=800, retrieved=2000, reserved_output=4000, reserved_reasoning=0)
    assert b.window == 128_000
    assert b.history_available == 128_000 - 1200 - 800 - 2000 - 4000
    assert "history available" in str(b) and "reserved output" in str(b)
    assert budget_for("anything", window=1000, system=100).history_available == 900
    with pytest.raises(ValueError, match="unknown context window"):
        budget_for("mystery-model")
    with pytest.raises(ValueError):
        Budget(window=-1)
    assert budget_for("gpt-4o").history_available == 128_000  # every term defaults to 0
    for term in ("window", "system", "tools", "retrieved", "reserved_output", "reserved_reasoning"):
        with pytest.raises(ValueError, match=term):
            budget_for("gpt-4o", **{term: -1})


def test_budget_evaluate_derives_the_missing_terms_from_the_request():
    def judge(budget: Budget, model: str | None = "m", input_tokens: int = 100, max_output_tokens: int | None = None):
        ev = budget_mod.evaluate(budget, model=model, input_tokens=input_tokens, system_tokens=10, tools_tokens=5,
                                 max_output_tokens=max_output_tokens)
        assert not isinstance(ev, str), ev
        return ev

    ev = judge(Budget(window=1000))
    assert (ev.breakdown.model, ev.breakdown.reserved_output, ev.history, ev.headroom) == ("m", 0, 85, 900)
    short = judge(Budget(window=1000), model=None, input_tokens=10, max_output_tokens=50)
    assert (short.breakdown.model, short.history, short.headroom) == ("", 0, 940)  # history never below 0
    assert budget_mod.evaluate(Budget(window=0), model="m", input_tokens=1, system_tokens=0, tools_tokens=0,
                               max_output_tokens=None) == "window must be positive"
    judge(Budget(window=1))  # the smallest window is judged
    assert not judge(Budget(window=1000, history_max=85)).over_history_max  # history exactly at the cap
    assert judge(Budget(window=1000, history_max=84)).over_history_max


@pytest.mark.parametrize(("model", "window"), [
    ("gpt-4o", 128_000), ("gpt-4o-2024-08-06", 128_000), ("gpt-4-0613", 8_192), ("gpt-4.1-mini", 1_047_576),
    ("claude-sonnet-4-20250514", 200_000), ("claude-3-5-sonnet-latest", 200_000), ("openai/gpt-4o", 128_000),
    ("gemini-2.5-flash", 1_048_576), ("models/gemini-2.0-flash-001", 1_048_576), ("gemini-3-ultra", None),
    ("gpt-4o-mini-tts", None), ("gpt-4.5-turbo", None), ("", None), (None, None), (41, None), (b"gpt-4o", None),
])
def test_window_table_resolves_snapshots_and_never_guesses(model, window):
    assert window_for(model) == window


def test_render_pinned_drops_oldest_whole_and_parses_back():
    facts = {f"fact_{i}": f"value number {i}" for i in range(30)}
    block = render_pinned(facts, max_tokens=60)
    assert EstimateCounter().count(block) <= 60 or len(block) < 400
    lines = block.split("\n")
    assert lines[-1] == "[end of Pinned facts]"
    kept = lines[1:-1]
    assert kept and kept[-1] == "fact_29: value number 29"  # newest kept, oldest dropped
    assert all(": value number " in line for line in kept)  # never cut mid-entry
    assert lines[0] == f"[Pinned facts: {len(kept)} entries]"
    assert render_pinned(facts, max_tokens=10_000, max_entries=2).count("\n") == 3
    assert "a b" in render_pinned({"k": "a\nb"}, max_tokens=100)  # one line per entry


def test_render_pinned_edges():
    assert render_pinned({"city": "Pune"}, max_tokens=100).startswith("[Pinned facts: 1 entry]\n")
    assert render_pinned({"city": "Pune"}, max_tokens=100, max_entries=0) == "[Pinned facts: 0 entries]\n" \
        "[end of Pinned facts]"
    assert render_pinned({}, max_tokens=1)  # the smallest cap still renders the empty block
    for bad in ({"max_tokens": 0}, {"max_tokens": 100, "max_entries": -1}, {"max_tokens": 100, "marker": ""}):
        with pytest.raises(ValueError):
            render_pinned({"city": "Pune"}, **bad)


def test_render_pinned_keeps_as_many_newest_facts_as_fit_exactly():
    class Chars:
        name = "chars"

        def count(self, text: str) -> int:
            return len(text)

    facts = {"a": "1", "b": "2", "c": "3"}
    two = render_pinned({"b": "2", "c": "3"}, max_tokens=10_000, counter=Chars())
    assert render_pinned(facts, max_tokens=len(two), counter=Chars()) == two  # exactly at the cap: kept
    one = render_pinned({"c": "3"}, max_tokens=10_000, counter=Chars())
    assert render_pinned(facts, max_tokens=len(two) - 1, counter=Chars()) == one


def test_find_block_intact_and_cut():
    from ctxguard.payload import Message

    block = render_pinned({"a": "1", "b": "2"}, max_tokens=100)
    ok = find_block([Message("system", "intro\n" + block + "\nrest", "d", 1)], "Pinned facts")
    assert ok is not None and ok.rendered and ok.intact and ok.entries == 2
    cut = find_block([Message("system", block[:-5], "d", 1)], "Pinned facts")
    assert cut is not None and cut.intact is False
    assert find_block([Message("user", "nothing here", "d", 1)], "Pinned facts") is None


class CountingCounter(EstimateCounter):
    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return super().count(text)


def test_growing_conversation_counts_only_new_messages():
    counter = CountingCounter()
    measurer = Measurer(Digester(b"k"), counter, Calibration())
    items = [("system", "sys", (), "message", 0)]
    for turn in range(50):
        items = [*items, ("user", f"message {turn}", (), "message", 0)]
        before = counter.calls
        payload = measurer.measure(RequestView("openai", "chat", "gpt-4o", items))
        assert counter.calls - before == (2 if turn == 0 else 1)
        assert payload.tokens == sum(m.tokens for m in payload.messages) + REPLY_PRIMING


def test_calibration_from_reported_usage(harness, llm, client):
    from ctxguard.testing import Reply

    harness.start(mode="observe")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello there"}]
    for _ in range(Calibration.MIN_REPORTS):
        llm.script(Reply(text="a", input_tokens=30))
        client.chat.completions.create(model="gpt-4o", messages=messages)
        first = harness.spans()[-1].attributes
        assert first["ctxguard.payload.tokens_source"] in ("tiktoken", "estimate")  # not enough reports yet
    client.chat.completions.create(model="gpt-4o", messages=messages)
    calibrated = harness.spans()[-1].attributes
    assert calibrated["ctxguard.payload.tokens_source"] == "calibrated"
    assert calibrated["ctxguard.payload.tokens"] == 30  # the count the provider reported for it
    c = Calibration()
    for _ in range(Calibration.MIN_REPORTS):
        c.observe("m", 100, 100_000)
    assert c.factor("m") == 4.0  # bounded


def _calibrated(reports: list[float], *, exact: bool = False) -> float | None:
    c = Calibration(exact=lambda model: exact)
    for ratio in reports:
        c.observe("m", 1000, round(1000 * ratio))
    return c.factor("m")


def test_calibration_waits_for_enough_reports():
    assert _calibrated([1.2] * (Calibration.MIN_REPORTS - 1)) is None
    assert _calibrated([1.2] * Calibration.MIN_REPORTS) == 1.2


@pytest.mark.parametrize("odd", [0.003, 100.0], ids=["10 tokens for 3000", "a hundredfold"])
@pytest.mark.parametrize("at", ["first", "among them", "last"])
def test_one_odd_report_never_moves_the_factor_outside_the_others(odd, at):
    normal = [1.18, 1.2, 1.21, 1.19, 1.22, 1.2]
    reports = {"first": [odd, *normal], "among them": [*normal[:3], odd, *normal[3:]], "last": [*normal, odd]}[at]
    factor = _calibrated(reports)
    assert factor is not None and min(normal) <= factor <= max(normal)


def test_calibration_follows_the_model_over_its_last_reports():
    """Old reports age out: a model that changed how it counts is followed, not averaged forever."""
    assert _calibrated([2.0] * 20 + [1.1] * Calibration.WINDOW) == 1.1


def test_an_exact_tokenizer_bounds_how_low_a_calibrated_count_goes():
    assert _calibrated([0.5] * 6, exact=True) == Calibration.EXACT_FLOOR
    assert _calibrated([0.5] * 6, exact=False) == 0.5
    assert _calibrated([1.3] * 6, exact=True) == 1.3  # counting more than the tokenizer is believed


def test_random_digest_key_warns_once(caplog, monkeypatch):
    import ctxguard.digest as digest_mod

    monkeypatch.setattr(digest_mod, "_warned", type(digest_mod._warned)())
    caplog.set_level(logging.WARNING, logger="ctxguard")
    a, b = Digester(), Digester()
    assert a.text("x") != b.text("x")
    assert Digester(b"k").text("x") == Digester(b"k").text("x")
    assert sum("not comparable across processes" in r.getMessage() for r in caplog.records) == 1


def test_digests_are_keyed_blake2b_and_the_kept_keyed_state_is_never_consumed():
    import hashlib

    for key in (b"k", b"long" * 40):  # keys over 64 bytes are condensed first
        digester = Digester(key)
        blake_key = key if len(key) <= 64 else hashlib.blake2b(key, digest_size=64).digest()
        for text in ("hello", "", "x" * 10_000):
            expected = hashlib.blake2b(text.encode(), key=blake_key, digest_size=16).hexdigest()
            assert digester.text(text) == digester.text(text) == expected
        hasher = digester.hasher()
        hasher.update(b"hel")
        hasher.update(b"lo")
        assert hasher.hexdigest() == digester.text("hello")


def test_env_overrides(monkeypatch):
    monkeypatch.setenv("CTXGUARD_MODE", "enforce")
    monkeypatch.setenv("CTXGUARD_CAPTURE_CONTENT", "true")
    monkeypatch.setenv("CTXGUARD_DIGEST_KEY", "from-env")
    config = Config.resolve(mode="observe", digest_key="from-code")
    assert (config.mode, config.capture_content, config.digest_key) == ("enforce", True, b"from-env")
    with pytest.raises(ValueError):  # a mistake in code raises at the call
        Config.resolve(mode="panic")


@pytest.mark.parametrize(("variable", "value", "field", "expected"), [
    ("CTXGUARD_MODE", "enforcee", "mode", "observe"),
    ("CTXGUARD_SPAN", "mine", "span", "auto"),
    ("CTXGUARD_CAPTURE_CONTENT", "sure", "capture_content", False),
    ("CTXGUARD_METRICS_PORT", "ninety", "metrics_port", None),
    ("CTXGUARD_METRICS_PORT", "70000", "metrics_port", None),
    ("CTXGUARD_MAX_CONVERSATIONS", "0", "max_conversations", 10_000),
    ("CTXGUARD_MAX_CONVERSATIONS", "lots", "max_conversations", 10_000),
    ("CTXGUARD_CACHE_BYTES", "0", "cache_bytes", 64 * 1024 * 1024),
    ("CTXGUARD_CACHE_BYTES", "64MiB", "cache_bytes", 64 * 1024 * 1024),
])
def test_a_mistyped_variable_is_one_warning_and_the_codes_value(monkeypatch, caplog, variable, value, field, expected):
    """The environment never makes instrument() raise into the app: the operator's typo is named
    in one warning, and the value given in code (or the default) stands."""
    monkeypatch.setenv(variable, value)
    caplog.set_level(logging.WARNING, logger="ctxguard")
    assert getattr(Config.resolve(), field) == expected
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and variable in warned[0] and repr(value) in warned[0]


def test_instrument_never_raises_because_of_the_environment(monkeypatch, caplog, tmp_path):
    """A taken port, an unwritable capture path, a mistyped variable: instrument() returns a guard."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    monkeypatch.setenv("CTXGUARD_MODE", "enforcee")
    caplog.set_level(logging.WARNING, logger="ctxguard")
    try:
        guard = ctxguard.instrument(registry=CollectorRegistry(), metrics_port=port, digest_key=b"k",
                                    capture_path=str(tmp_path / "missing-dir" / "capture.jsonl"))
    finally:
        taken.close()
    assert guard is not None and guard.config.mode == "observe"
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"127.0.0.1:{port} cannot be bound" in said and "CTXGUARD_MODE" in said
    ctxguard.uninstrument()
    with pytest.raises(ValueError):  # an impossible port given in code is the code's mistake
        ctxguard.instrument(registry=CollectorRegistry(), metrics_port=70_000, digest_key=b"k")


def test_policy_rejects_mistakes_at_definition():
    with pytest.raises(ValueError):
        Pinned(max_tokens=0)
    with pytest.raises(ValueError):
        Pinned(marker=" ")
    with pytest.raises(TypeError):
        Policy(budget=1000)  # type: ignore[arg-type]


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
    assert registry.get_sample_value("ctxguard_summary_lossy_total") == 0


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


def test_string_parts_of_a_content_list_are_read_in_order():
    from ctxguard.providers import anthropic as anthropic_provider
    from ctxguard.providers import openai as openai_provider

    content = ["Ship to Lyon", {"type": "text", "text": "please"}, "today"]
    chat = openai_provider.ADAPTER.normalise("chat.completions", {"model": "gpt-4o", "messages": [
        {"role": "user", "content": content}]})
    claude = anthropic_provider.ADAPTER.normalise("messages", {"model": "claude-sonnet-4-20250514", "max_tokens": 5,
                                                               "messages": [{"role": "user", "content": content}]})
    assert [i[:2] for i in chat.items] == [("user", "Ship to Lyon\nplease\ntoday")]
    assert [i[:2] for i in claude.items] == [("user", "Ship to Lyon\nplease\ntoday")]


def test_mappings_and_proxies_of_dicts_read_like_dicts():
    """Messages and arguments may be any Mapping, or a proxy (wrapt) around a dict: the reader's
    per-type cache must not take a proxy's type for the type of what it proxies."""
    from collections.abc import Iterator, Mapping
    from types import SimpleNamespace
    from typing import Any

    import wrapt

    from ctxguard.providers import openai as openai_provider

    class Frozen(Mapping[str, Any]):
        def __init__(self, **items: Any) -> None:
            self._items = items

        def __getitem__(self, key: str) -> Any:
            return self._items[key]

        def __iter__(self) -> Iterator[str]:
            return iter(self._items)

        def __len__(self) -> int:
            return len(self._items)

    messages = [
        Frozen(role="system", content="Be brief."),
        wrapt.ObjectProxy({"role": "user", "content": "Ship to Lyon", "name": "ann"}),
        wrapt.ObjectProxy({"role": "user", "content": "again"}),
        wrapt.ObjectProxy(SimpleNamespace(role="assistant", content="ok")),  # same proxy type, no Mapping
    ]
    for _ in range(2):  # the second time through, from the per-type cache
        view = openai_provider.ADAPTER.normalise(
            "chat.completions", wrapt.ObjectProxy({"model": "gpt-4o", "messages": messages}))
        assert view.model == "gpt-4o"
        assert [i[:3] for i in view.items] == [
            ("system", "Be brief.", ()), ("user", "Ship to Lyon", ("id:name=ann",)), ("user", "again", ()),
            ("assistant", "ok", ())]


def test_shared_check_outcomes_are_bounded_and_keep_their_reason(monkeypatch):
    import ctxguard.checks
    from ctxguard.checks import _SETTLED_CAP, _settled

    settled: dict = {}  # this test's own cache: the process's stays as the other tests left it
    monkeypatch.setattr(ctxguard.checks, "_SETTLED", settled)
    assert _settled("system_at_head", None) is _settled("system_at_head", None)
    assert _settled("system_at_head", None).outcome == "pass"
    outcomes = [_settled("payload_under_budget", f"unknown context window for model 'm{i}'")
                for i in range(_SETTLED_CAP + 50)]
    assert len(settled) == _SETTLED_CAP
    assert [o.reason for o in outcomes[-2:]] == [f"unknown context window for model 'm{i}'"
                                                  for i in (_SETTLED_CAP + 48, _SETTLED_CAP + 49)]


def test_a_tokenizer_is_exact_only_for_the_models_that_use_it():
    from ctxguard.tokens import TiktokenCounter, default_counter

    counter = default_counter()
    assert not EstimateCounter().exact("gpt-4")
    if isinstance(counter, TiktokenCounter):  # the offline cl100k_base: GPT-4 and 3.5, not 4o (o200k)
        assert counter.exact("gpt-4") and counter.exact("gpt-3.5-turbo")
        assert not counter.exact("gpt-4o") and not counter.exact("claude-sonnet-4-5") and not counter.exact("")
