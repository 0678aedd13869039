"""Beside the real LLM instrumentations most apps already run, in either install order: ctxguard
guards every call (its checks, its metrics, ``ctxguard.wire.hash`` the body that arrived), its
``ctxguard.*`` record is on exactly one span of the call (the other's when it adopts that span,
else its own), exactly one OpenTelemetry span carries ``gen_ai.usage.*``, the app gets the same
with and without it, and uninstrumenting either one leaves the other working.

Each run (an instrumentation, an install order, which one is uninstrumented first) is a process
of its own (``driver.py``), forked from this one so that the SDKs are imported once; the tests read
what it recorded. An instrumentation that is not installed skips, unless
``CTXGUARD_REQUIRE_INSTRUMENTATIONS`` names it (the test command builds the virtualenvs that have
them).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import multiprocessing
import os
from collections.abc import Callable
from typing import Any

import pytest

from ctxguard.checks import CHECK_NAMES
from tests.coexistence import driver
from tests.coexistence.others import OTHERS

#: Names (``others.OTHERS``) of the instrumentations this run must test: absent, they fail.
REQUIRED = frozenset(os.environ.get("CTXGUARD_REQUIRE_INSTRUMENTATIONS", "").split())
unknown = REQUIRED - set(OTHERS)
assert not unknown, f"CTXGUARD_REQUIRE_INSTRUMENTATIONS names unknown instrumentations {sorted(unknown)}"

NAMES = [name for name in OTHERS if name != "none"]
ORDERS = ("other-first", "ctxguard-first")
CHAT = ("chat", "chat-stream", "chat-raw")
OPENAI = (*CHAT, "responses", "responses-stream", "responses-raw")
MESSAGES = ("messages", "messages-stream", "messages-raw")
BEDROCK = ("converse", "converse-stream", "invoke-model", "invoke-model-stream")

#: The outcome of every check for the app's calls (a system instruction at the head, no
#: conversation, no policy), the body judged on the wire.
OUTCOMES = {check: "skip" for check in CHECK_NAMES} | {
    "system_at_head": "pass", "payload_under_budget": "pass", "wire_intact": "pass", "tool_pairs_intact": "pass",
    "provider_kept_all": "pass"}

#: Where ctxguard puts its record while both are on: the other's span (by scope) where it wraps
#: the call site above ctxguard and its span of the call is current; elsewhere ctxguard's own.
ADOPTED = {
    **{("opentelemetry", call): "opentelemetry.util.genai.handler" for call in CHAT},
    **{("genai", call): "opentelemetry.instrumentation.genai.openai" for call in OPENAI},
    **{("genai", call): "opentelemetry.instrumentation.genai.anthropic" for call in MESSAGES},
    **{("genai-bedrock", call): "opentelemetry.instrumentation.genai.bedrock" for call in BEDROCK},
    **{("botocore", call): "opentelemetry.instrumentation.botocore.bedrock-runtime" for call in BEDROCK},
    **{("genai-bedrock-botocore", call): "opentelemetry.instrumentation.genai.bedrock" for call in BEDROCK},
    **{("openllmetry", call): "opentelemetry.instrumentation.openai.v1" for call in CHAT},
    **{("openlit", call): "openlit.instrumentation.openai" for call in OPENAI},
    **{("openlit", call): "openlit.instrumentation.anthropic" for call in MESSAGES},
    **{("openinference", call): "openinference.instrumentation.anthropic" for call in MESSAGES},
}
#: What the other still records after its own uninstrument(): OpenLLMetry's openai unwrap misses,
#: OpenLIT's does nothing, Langfuse has none.
STAYS = {"openllmetry": OPENAI, "openlit": OTHERS["openlit"].calls, "langfuse": OPENAI}
#: The calls each other instrumentation records (all it is run with, ``Other.calls``, unless named here).
INSTRUMENTS = {"opentelemetry": CHAT, "langfuse": OPENAI}
#: Calls two spans of the others record usage on without ctxguard (OpenLLMetry's and OpenTelemetry's
#: genai anthropic span, each beside the anthropic SDK's own; genai-bedrock's and botocore's): there
#: ctxguard adds none.
FOREIGN_DOUBLES = {(name, call) for name in ("openllmetry", "genai") for call in MESSAGES} | {
    ("genai-bedrock-botocore", call) for call in BEDROCK}
SDK_SCOPE = "com.anthropic.sdk.python"  # the anthropic SDK's own span (2.x), not the other's


class Unguarded(AssertionError):
    """A call went out without ctxguard's checks and metrics."""


class NotAdopted(AssertionError):
    """ctxguard's record is on another span than the one it should be on."""


class UsageNotOnce(AssertionError):
    """Not exactly one span of the call carries gen_ai.usage.*."""


def cases(phases: tuple[str, ...]) -> list[Any]:
    """Every (phase, instrumentation, order, call)."""
    params = []
    for phase in phases:
        for name in NAMES:
            for order in ORDERS:
                for call in OTHERS[name].calls:
                    params.append(pytest.param(phase, name, order, call, id=f"{phase}-{name}-{order}-{call}"))
    return params


# -- the runs -------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Any]]:
    """``runs(other, order, first_out, span)``: what that run recorded (one process each, run once per
    session). The other's modules are imported here first, once, never instrumented here: each
    process forked from this one starts with them loaded (a run takes a third of the time)."""
    done: dict[tuple[str, ...], dict[str, Any] | str] = {}

    def get(*key: str) -> dict[str, Any]:
        if key not in done:
            for module in OTHERS[key[0]].modules:
                importlib.import_module(module)
            out = tmp_path_factory.mktemp("run") / "run.json"
            process = multiprocessing.get_context("fork").Process(target=driver.write, args=(str(out), *key))
            process.start()
            process.join(timeout=180)
            if process.exitcode == 0:
                done[key] = json.loads(out.read_text())
            else:
                process.kill()
                done[key] = f"the run {key} ended with exit code {process.exitcode} (its traceback is on stderr)"
        found = done[key]
        if isinstance(found, str):
            pytest.fail(found, pytrace=False)
        return found

    return get


def installed(name: str) -> None:
    """Skip unless ``name``'s packages are installed (fail instead if this run requires them);
    they are imported only once a run needs them (``runs``)."""
    for module in OTHERS[name].modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found and name in REQUIRED:
            pytest.fail(f"{module} is not installed and CTXGUARD_REQUIRE_INSTRUMENTATIONS names {name}", pytrace=False)
        if not found:
            pytest.skip(f"{module} is not installed")


#: Which run holds a phase: the one that uninstruments the other first, or ctxguard first.
FIRST_OUT = {"both": "other", "without-other": "other", "without-ctxguard": "ctxguard", "again": "ctxguard"}


def recorded(runs: Callable[..., dict[str, Any]], phase: str, name: str, order: str, call: str,
             span: str = "auto") -> dict[str, Any]:
    installed(name)
    return runs(name, order, FIRST_OUT[phase], span)["phases"][phase][call]


def has_record(span: dict[str, Any]) -> bool:
    return any(key.startswith("ctxguard.") for key in span["attributes"])


def with_usage(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in r["spans"] if "gen_ai.usage.input_tokens" in s["attributes"]]


def theirs(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The other packages' spans of the call (the SDK's own included), as (scope, name, kind)."""
    return sorted((s["scope"], s["name"], s["kind"]) for s in r["spans"] if s["scope"] != "ctxguard")


def other_on(phase: str, name: str, call: str) -> bool:
    """Whether the other still records ``call`` in ``phase``."""
    recorded = INSTRUMENTS.get(name, OTHERS[name].calls)
    return call in recorded and (phase != "without-other" or call in STAYS.get(name, ()))


def owner(phase: str, name: str, call: str) -> str:
    """The scope of the span that should carry ctxguard's record in ``phase``."""
    return ADOPTED.get((name, call), "ctxguard") if other_on(phase, name, call) else "ctxguard"


# -- with both on (and after ctxguard.instrument() again, and after the other's uninstrument) --

GUARDED = ("both", "again", "without-other")


@pytest.mark.parametrize(("phase", "name", "order", "call"), cases(GUARDED))
def test_ctxguard_guards_every_call(runs, phase, name, order, call):
    """One ``ctxguard_calls_total`` and one outcome per check for each call, no swallowed error."""
    r = recorded(runs, phase, name, order, call)
    assert r["failure"] is None, r["failure"]
    counted = {k: v for k, v in r["counters"].items() if k.startswith("ctxguard_calls_total")}
    if counted != {f"ctxguard_calls_total{{operation=chat,provider={driver.CALLS[call]}}}": 1.0}:
        raise Unguarded(f"ctxguard_calls_total moved by {counted}")
    checked = {k: v for k, v in r["counters"].items() if k.startswith("ctxguard_checks_total")}
    assert checked == {f"ctxguard_checks_total{{check={c},outcome={o}}}": 1.0 for c, o in OUTCOMES.items()}
    assert not any(k.startswith("ctxguard_guard_errors_total") for k in r["counters"]), r["counters"]
    assert r["swallowed"] == []


@pytest.mark.parametrize(("phase", "name", "order", "call"), cases(GUARDED))
def test_ctxguards_record_is_on_exactly_one_span(runs, phase, name, order, call):
    """``ctxguard.*`` on one span of the call, naming the body that arrived; that span is the
    other's where ctxguard adopts it, else ctxguard's own."""
    r = recorded(runs, phase, name, order, call)
    records = [s for s in r["spans"] if has_record(s)]
    spans = [(s["scope"], s["name"]) for s in r["spans"]]
    if not records:
        raise Unguarded(f"no span carries ctxguard's record: {spans}")
    assert len(records) == 1, spans
    record = records[0]["attributes"]
    assert [record["ctxguard.wire.hash"]] == r["wire"]  # the digest of the body the server received
    assert record["ctxguard.head.role"] == "system"
    if records[0]["scope"] != owner(phase, name, call):
        raise NotAdopted(f"the record is on {records[0]['scope']}'s span, not {owner(phase, name, call)}'s: {spans}")


def assert_one_usage(runs, r: dict[str, Any], phase: str, name: str, order: str, call: str) -> None:
    """Exactly one span carries the usage, what the server reported; where two of the others'
    spans do without ctxguard too, ctxguard adds none."""
    usage = with_usage(r)
    if (name, call) in FOREIGN_DOUBLES and other_on(phase, name, call):
        alone = recorded(runs, "without-ctxguard", name, order, call)
        assert len(with_usage(alone)) == 2, "the others no longer double the usage: drop its FOREIGN_DOUBLES entry"
        assert sorted(s["scope"] for s in usage) == sorted(s["scope"] for s in with_usage(alone))
        return
    if len(usage) != 1:
        raise UsageNotOnce(f"{len(usage)} spans carry gen_ai.usage.input_tokens: {[s['scope'] for s in usage]}")
    assert usage[0]["attributes"]["gen_ai.usage.input_tokens"] == r["served"][0]


@pytest.mark.parametrize(("phase", "name", "order", "call"), cases(GUARDED))
def test_one_span_carries_the_usage(runs, phase, name, order, call):
    """Exactly one OpenTelemetry span of the call carries ``gen_ai.usage.*``, with what the server
    reported; where two of the others' spans do without ctxguard too, ctxguard adds none."""
    assert_one_usage(runs, recorded(runs, phase, name, order, call), phase, name, order, call)


@pytest.mark.parametrize(("phase", "name", "order", "call"), cases(("both",)))
def test_span_own_records_ctxguards_own_span_and_one_usage(runs, phase, name, order, call):
    """``instrument(span="own")``: the record is on ctxguard's own span even where "auto" adopts the
    other's, and still one span carries the usage (not ctxguard's, where the other's span is current)."""
    r = recorded(runs, phase, name, order, call, span="own")
    records = [s for s in r["spans"] if has_record(s)]
    assert [s["scope"] for s in records] == ["ctxguard"]
    assert [records[0]["attributes"]["ctxguard.wire.hash"]] == r["wire"]
    if (name, call) in ADOPTED:
        assert "gen_ai.usage.input_tokens" not in records[0]["attributes"]
    assert_one_usage(runs, r, phase, name, order, call)


# -- with and without ctxguard -------------------------------------------------------------------

@pytest.mark.parametrize(("phase", "name", "order", "call"), cases(("again",)))
def test_the_app_gets_the_same_with_and_without_ctxguard(runs, phase, name, order, call):
    """The app's results (every chunk of a stream, read to its end) and the bodies sent are the
    same beside ctxguard as after ``ctxguard.uninstrument()``."""
    beside = recorded(runs, phase, name, order, call)
    without = recorded(runs, "without-ctxguard", name, order, call)
    assert beside["failure"] is None and without["failure"] is None
    assert beside["result"] == without["result"]
    assert beside["bodies"] == without["bodies"]
    last = beside["result"][-1] if isinstance(beside["result"], list) else None  # a stream read to its end
    if call == "chat-stream":
        assert last["usage"] is not None  # the usage-only chunk that ends the stream
    elif call == "responses-stream":
        assert last["type"] == "response.completed"
    elif call == "messages-stream":
        assert last["type"] == "message_stop"
    elif call == "converse-stream":
        assert "usage" in last["metadata"]
    elif call == "invoke-model-stream":
        assert last["type"] == "message_stop" and "amazon-bedrock-invocationMetrics" in last
    elif call == "langchain-stream":
        assert any(chunk["usage_metadata"] for chunk in beside["result"])  # stream_usage=True


@pytest.mark.parametrize(("phase", "name", "order", "call"), cases(("without-ctxguard",)))
def test_uninstrumenting_ctxguard_leaves_the_other_recording(runs, phase, name, order, call):
    """After ``ctxguard.uninstrument()`` the other records the same spans as beside ctxguard, and
    nothing of ctxguard's is left."""
    without = recorded(runs, phase, name, order, call)
    beside = recorded(runs, "again", name, order, call)
    assert not any(k.startswith("ctxguard_calls_total") for k in without["counters"])
    assert not any(has_record(s) for s in without["spans"])
    assert theirs(without) == theirs(beside)
    assert without["records"] == beside["records"]  # Sentry's spans
    if other_on(phase, name, call):
        assert [s for s in theirs(without) if s[0] != SDK_SCOPE] or without["records"]


@pytest.mark.parametrize(("phase", "name", "order", "call"), cases(("without-other",)))
def test_uninstrumenting_the_other_takes_it_out(runs, phase, name, order, call):
    """After the other's ``uninstrument()`` its spans stop (ctxguard does not keep its wrapper
    alive), except where its uninstrument leaves them (``STAYS``)."""
    r = recorded(runs, phase, name, order, call)
    left = [s for s in theirs(r) if s[0] != SDK_SCOPE] + r["records"]
    assert bool(left) == other_on(phase, name, call), left
