"""Fault injection at every internal stage: the app's result is identical, the error is counted."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest

import ctxguard
from ctxguard import Pinned, Policy
from ctxguard.conversation import ConversationMemory
from ctxguard.measure import Measurer
from ctxguard.providers import openai as openai_provider
from ctxguard.testing import FakeLLM
from ctxguard.tokens import Calibration
from ctxguard.wiredigest import WireDigests

#: Long enough for its report to teach calibration (``measure._LEARNS_FROM_TEXT``), so that a fault
#: there is reached.
HISTORY = [{"role": "system", "content": "sys"},
           {"role": "user", "content": "hi, where is my parcel to Lyon? It left the depot on Monday. " * 12}]


class Boom(RuntimeError):
    pass


def boom(*args, **kwargs):
    raise Boom("injected")


def answer(client, **kwargs):
    reply = client.chat.completions.create(model="gpt-4o", messages=HISTORY, **kwargs)
    return reply.choices[0].message.content, reply.usage.prompt_tokens, reply.model


def judging_the_answer(mp):  # a check that runs after sending: the checks before it still enforce
    mp.setattr("ctxguard.inspection.Inspector.answer", boom)


FAULTS = [
    ("normalise", lambda mp: mp.setattr(openai_provider.OpenAIAdapter, "normalise", boom)),
    ("digest", lambda mp: mp.setattr(Measurer, "measure", boom)),
    ("checks", lambda mp: mp.setattr("ctxguard.inspection.run_checks", boom)),
    ("conversation", lambda mp: mp.setattr(ConversationMemory, "observe", boom)),
    ("telemetry", lambda mp: mp.setattr("ctxguard.telemetry.spans.violation_events", boom)),
    ("response", lambda mp: mp.setattr(openai_provider.OpenAIAdapter, "read_response", boom)),
    ("response", lambda mp: mp.setattr(WireDigests, "digest", boom)),  # judging the body on the wire
    ("tokens", lambda mp: mp.setattr(Calibration, "observe", boom)),
    ("checks", judging_the_answer),
    ("telemetry", lambda mp: mp.setattr("ctxguard.record._reply_attributes", boom)),  # ending the span
]


@pytest.mark.parametrize("mode", ["observe", "enforce"])
@pytest.mark.parametrize(("where", "inject"), FAULTS, ids=[f"{f[0]}-{i}" for i, f in enumerate(FAULTS)])
def test_fault_in_stage_leaves_the_call_unchanged(harness, llm, client, internal_errors, monkeypatch,
                                                    where, inject, mode):
    llm.script("same answer")
    expected = answer(client)
    harness.start(mode=mode, policy=Policy(pinned=Pinned()))  # pinned_present fails: enforce would block
    inject(monkeypatch)
    llm.script("same answer")
    with ctxguard.conversation("c"):
        if where in ("checks", "normalise", "digest") and inject is not judging_the_answer:
            assert answer(client) == expected  # no verdict, so nothing to enforce
        elif mode == "enforce":
            with pytest.raises(ctxguard.ContextViolation):
                answer(client)
            return internal_errors.clear()
        else:
            assert answer(client) == expected
    assert harness.metric("ctxguard_guard_errors_total", where=where) >= 1
    assert internal_errors and all(isinstance(e, Boom) for _, e in internal_errors)
    assert {w for w, _ in internal_errors} == {where}
    internal_errors.clear()


def test_fault_in_stream_chunk_handling_keeps_chunks(harness, llm, client, internal_errors, monkeypatch):
    harness.start(mode="observe")
    monkeypatch.setattr(openai_provider._ChatStream, "feed", boom)
    llm.script("streamed text")
    stream = client.chat.completions.create(model="gpt-4o", messages=HISTORY, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "streamed text"
    assert harness.metric("ctxguard_guard_errors_total", where="stream") >= 1
    assert len(harness.spans()) == 1
    internal_errors.clear()


def test_fault_in_user_callback(harness, llm, client, internal_errors):
    harness.start(mode="observe", conversation_id=boom)
    assert answer(client)[0] == "ok 1"
    assert harness.metric("ctxguard_guard_errors_total", where="callback") == 1
    internal_errors.clear()


def test_sdk_exception_is_the_same_object(harness, llm, client):
    harness.start(mode="observe")
    import openai

    from ctxguard.testing import Reply

    llm.script(Reply(status=400, text="bad"))
    with pytest.raises(openai.BadRequestError) as info:
        answer(client)
    assert info.value.status_code == 400
    assert info.value.__traceback__ is not None


def test_failing_post_import_hook_does_not_break_import_openai():
    with FakeLLM() as llm:
        script = textwrap.dedent(f"""
            import ctxguard, ctxguard.intercept as p
            from prometheus_client import CollectorRegistry
            registry = CollectorRegistry()
            def boom(*a, **k):
                raise RuntimeError("hook failure")
            p._patch = boom
            ctxguard.instrument(registry=registry, digest_key="k")
            import openai
            c = openai.OpenAI(base_url="{llm.base_url}", api_key="x", max_retries=0)
            print(c.chat.completions.create(model="m", messages=[{{"role": "user", "content": "x"}}])
                  .choices[0].message.content)
            print(registry.get_sample_value("ctxguard_guard_errors_total", {{"where": "hook"}}))
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "1", "1.0"]


def test_a_fault_while_the_span_starts_still_ends_it_and_restores_the_context(harness, llm, client, internal_errors,
                                                                              monkeypatch):
    """A telemetry fault after ctxguard's span became current (its violation events): the span still
    ends with the call, and the app's context is the one it had before (no span left current)."""
    from opentelemetry import trace

    harness.start(mode="observe", policy=Policy(pinned=Pinned()))  # pinned_present fails: events are written
    monkeypatch.setattr("ctxguard.telemetry.spans.violation_events", boom)
    llm.script("same answer")
    before = trace.get_current_span()
    with ctxguard.conversation("c"):
        answer(client)
    assert trace.get_current_span() is before
    assert len(harness.spans()) == 1
    assert {w for w, _ in internal_errors} == {"telemetry"}
    internal_errors.clear()


def test_a_fault_while_placing_a_warning_still_lets_it_out(harness, internal_errors, monkeypatch):
    harness.start(mode="observe")
    monkeypatch.setattr("ctxguard.intercept.frames._attributed", boom)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("still out", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["still out"]
    assert harness.metric("ctxguard_guard_errors_total", where="warnings") == 1
    assert [w for w, _ in internal_errors] == ["warnings"]
    internal_errors.clear()
