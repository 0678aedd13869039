"""No raw content or secrets in spans (through the real OTLP exporter), logs or metrics by default."""

from __future__ import annotations

import hashlib
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry, generate_latest

import ctxguard
from ctxguard import Pinned, Policy, render_pinned
from ctxguard._instrument import active_guard
from ctxguard.digest import Digester
from ctxguard.testing.plugin import GuardHarness
from tests.events import violation_events

CANARY = "CANARY-7f3a9c-secret"


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes]

    def do_POST(self) -> None:
        self.server.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def export_spans(client, *, capture_content: bool) -> tuple[str, ExportTraceServiceRequest, str]:
    """Run leaky calls with a real OTLP/HTTP exporter to a loopback receiver."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{server.server_port}/v1/traces"))
    )
    registry = CollectorRegistry()
    try:
        ctxguard.instrument(
            registry=registry, tracer_provider=provider, digest_key="k", capture_content=capture_content,
            ledger=ctxguard.MemoryLedger(),
            policy=Policy(pinned=Pinned(max_tokens=5)),
        )
        block = render_pinned({"phone": CANARY}, max_tokens=500)
        with ctxguard.conversation("other"):
            ctxguard.record_fact("account", "FOREIGN-" + CANARY)
        with ctxguard.conversation("c"):
            ctxguard.record_fact("phone", CANARY)
            ctxguard.record_fact("city", "OLD-" + CANARY)
            ctxguard.record_fact("city", "NEW-" + CANARY)
            ctxguard.record_fact("email", "GONE-" + CANARY)
            ctxguard.forget_fact("email")
            ctxguard.checkpoint("selection", f"OLD-{CANARY} GONE-{CANARY}")
            client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "system", "content": f"secret {CANARY}\n{block}"},
                          {"role": "user", "content": f"{CANARY} OLD-{CANARY} GONE-{CANARY} FOREIGN-{CANARY}"}],
            )
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": CANARY}])
    finally:
        ctxguard.uninstrument()
        provider.shutdown()
        server.shutdown()
        server.server_close()
    request = ExportTraceServiceRequest()
    raw = b"".join(server.bodies)  # type: ignore[attr-defined]
    for body in server.bodies:  # type: ignore[attr-defined]
        part = ExportTraceServiceRequest()
        part.ParseFromString(body)
        request.resource_spans.extend(part.resource_spans)
    return raw.decode("latin-1"), request, generate_latest(registry).decode()


def test_canary_absent_from_exported_spans_logs_and_metrics(llm, client, caplog):
    caplog.set_level(logging.DEBUG, logger="ctxguard")
    llm.script(f"Noted, {CANARY}.", f"Again, ANSWER-{CANARY}.")  # the model's answers carry it too
    raw, request, metrics = export_spans(client, capture_content=False)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == 2
    keys = {kv.key for s in spans for kv in s.attributes}
    assert {"ctxguard.payload.hash", "ctxguard.message.hashes", "ctxguard.pinned.hash"} <= keys
    assert any(e.name == "ctxguard.violation" for s in spans for e in s.events)
    violated = {kv.value.string_value for s in spans for e in violation_events(s) for kv in e.attributes
                if kv.key == "check"}
    assert {"fact_current", "fact_forgotten", "fact_scoped", "fact_present"} <= violated
    assert CANARY not in raw
    assert CANARY not in metrics
    assert any(r.levelno == logging.WARNING for r in caplog.records)
    for record in caplog.records:
        assert CANARY not in record.getMessage()
        assert CANARY not in repr(record.__dict__)


def test_capture_content_opt_in_puts_content_on_spans(llm, client):
    llm.script("Noted.", f"Again, ANSWER-{CANARY}.")
    raw, _, metrics = export_spans(client, capture_content=True)
    assert CANARY in raw  # positive control: the canary is findable when it is there
    assert f"ANSWER-{CANARY}" in raw  # and in the answer
    assert CANARY not in metrics


# -- the digest key -------------------------------------------------------------------

KEY_CANARY = "KEY-CANARY-5e1d0b"


def head_digest(harness: GuardHarness, client) -> str:
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
    return str(harness.spans()[-1].attributes["ctxguard.head.hash"])


def canonical_hello(key: bytes | None) -> str:
    """The documented canonical form of the message ``hello`` (docs/privacy.md), keyed or not."""
    data = b"user\x1fhello\x1f"
    return hashlib.blake2b(data, key=key or b"", digest_size=16).hexdigest()


@pytest.mark.parametrize("key", ["", b""])
def test_an_empty_digest_key_in_code_is_refused(key):
    with pytest.raises(ValueError, match="digest_key must not be empty"):
        ctxguard.instrument(digest_key=key, registry=CollectorRegistry())
    assert active_guard() is None
    with pytest.raises(ValueError, match="must not be empty"):
        Digester(b"")


@pytest.mark.parametrize("given", [None, b"from-code"])
def test_an_empty_digest_key_in_the_environment_is_ignored_with_one_warning(
    monkeypatch, caplog, harness, llm, client, given
):
    monkeypatch.setenv("CTXGUARD_DIGEST_KEY", "")
    caplog.set_level(logging.DEBUG, logger="ctxguard")
    harness.start(mode="observe", digest_key=given)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "CTXGUARD_DIGEST_KEY is set but empty" in warnings[0], warnings
    digest = head_digest(harness, client)
    assert digest != canonical_hello(None)  # never unkeyed
    if given is None:
        assert "random per-process key" in warnings[0]
        harness.start(mode="observe", digest_key=None)
        assert head_digest(harness, client) != digest  # a fresh random key, not a fixed one
    else:
        assert "digest_key= as given in code" in warnings[0]
        assert digest == canonical_hello(given)


def test_the_digest_key_is_never_in_a_repr_or_a_log(monkeypatch, caplog, harness, llm, client):
    monkeypatch.setenv("CTXGUARD_DIGEST_KEY", KEY_CANARY)
    caplog.set_level(logging.DEBUG, logger="ctxguard")
    guard = harness.start(mode="observe")
    with ctxguard.conversation("c"):
        ctxguard.record_fact("phone", "+91 98200 12345")
        assert head_digest(harness, client) == canonical_hello(KEY_CANARY.encode())  # the key is in use
    assert guard.config.digest_key == KEY_CANARY.encode()
    assert KEY_CANARY not in repr(guard.config) and KEY_CANARY not in str(guard.config)
    assert KEY_CANARY not in repr(guard.measurer.digester)
    assert caplog.records  # the violation was logged, the key was not
    for record in caplog.records:
        assert KEY_CANARY not in record.getMessage() and KEY_CANARY not in repr(record.__dict__)


# -- hash_ids: ids as keyed digests -----------------------------------------------------

ID = "IDCANARY-41d9"
CONV = f"alice.{ID}@example.com"  # an e-mail address as the conversation id: personal data
TENANT = f"tenant-{ID}"
CITY, PHONE, EMAIL, ACCOUNT, TINY, REFUND = (f"{name}-{ID}" for name in
                                             ("city", "phone", "email", "account", "tiny", "refund"))
FACT_IDS = (CITY, PHONE, EMAIL, ACCOUNT, TINY, REFUND)
DAVE = f"dave.{ID}@example.com"


def keyed(raw: str) -> str:
    """The documented digest of an id: keyed BLAKE2b of its UTF-8, with the payload digests' key."""
    return hashlib.blake2b(raw.encode(), key=b"ctxguard-tests", digest_size=16).hexdigest()


def id_scenario(harness: GuardHarness, llm, client) -> None:
    """Every place an id is exported: conversation id, fact lists, divergence, violation events
    (early and late), skip reasons, a lossy summary, the log."""
    llm.script("Noted.", "It ships to Mumbai.", "ok", "ok")
    ask = client.chat.completions.create
    with ctxguard.conversation(f"bob.{ID}@example.com"):
        ctxguard.record_fact(ACCOUNT, "4417-2231-9902")  # another conversation's: a foreign leak below
    with ctxguard.conversation(CONV, tenant=TENANT):
        ctxguard.record_fact(CITY, "Mumbai")
        ctxguard.record_fact(CITY, "Pune")
        ctxguard.record_fact(PHONE, "+91 98200 12345")
        ctxguard.record_fact(EMAIL, "alice@example.com")
        ctxguard.forget_fact(EMAIL)
        ctxguard.checkpoint("selection", ["deliver to Mumbai"])
        ask(model="gpt-4o", messages=[{"role": "system", "content": "s"}, {"role": "user", "content":
            "deliver to Mumbai, call +91 98200 12345, mail alice@example.com, account 4417-2231-9902"}])
        ask(model="gpt-4o", messages=[{"role": "system", "content": "s"}, {"role": "user", "content":
            "deliver to Pune, call +91 98200 12345"}])  # the answer states Mumbai: answer_consistent
    with ctxguard.conversation(f"carol.{ID}@example.com"):
        ctxguard.record_fact(TINY, "No")  # too short to match: skipped, naming the fact
        ask(model="gpt-4o", messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])
    with ctxguard.conversation(DAVE):
        ctxguard.record_fact(REFUND, "1,249.50 EUR")
        builder = ctxguard.ContextBuilder("gpt-4o", system="s", tail_tokens=300)
        ask(model="gpt-4o", messages=builder.build([], "status?", summary="A refund of about 1,200 euros."))


def exported(harness: GuardHarness, caplog) -> tuple[list, str, str]:
    spans = harness.spans()
    text = encode_spans(spans).SerializeToString().decode("latin-1") + "".join(s.to_json() for s in spans)
    logs = "".join(r.getMessage() + repr(r.__dict__) for r in caplog.records)
    return spans, text, logs + generate_latest(harness.registry).decode()


def test_with_hash_ids_no_id_reaches_any_exported_byte(harness, llm, client, caplog):
    caplog.set_level(logging.DEBUG, logger="ctxguard")
    harness.start(mode="observe", hash_ids=True)
    id_scenario(harness, llm, client)
    spans, text, logs = exported(harness, caplog)
    assert ID not in text
    assert ID not in logs
    first, second, tiny, lossy = [s.attributes for s in spans]
    assert first["gen_ai.conversation.id"] == keyed(CONV)  # the same in every process sharing the key
    assert list(first["ctxguard.facts.present"]) == [f"{keyed(PHONE)}@1"]
    assert list(first["ctxguard.facts.missing"]) == [f"{keyed(CITY)}@2"]
    assert list(first["ctxguard.facts.stale"]) == [f"{keyed(CITY)}@1"]
    assert sorted(first["ctxguard.facts.leaked"]) == sorted([f"{keyed(EMAIL)}@1", f"{keyed(ACCOUNT)}@foreign"])
    assert (first["ctxguard.divergence.stage"], first["ctxguard.divergence.fact"]) == ("selection", keyed(CITY))
    events = {(e.attributes["check"], e.attributes["fact_id"], e.attributes["detail"])
              for e in violation_events(spans[0])}
    assert (("fact_present", keyed(CITY), f"{keyed(CITY)}@2 missing from the payload") in events)
    assert (("fact_scoped", keyed(ACCOUNT), f"{keyed(ACCOUNT)} of another conversation is in this payload")
            in events)
    assert list(second["ctxguard.violations"]) == ["answer_consistent"]  # judged late, at the end
    assert second["ctxguard.divergence.fact"] == keyed(CITY)
    assert [e.attributes["fact_id"] for e in violation_events(spans[1])] == [keyed(CITY)]
    assert f"fact_present: values too short to match reliably: {keyed(TINY)}" in tiny["ctxguard.checks.skipped"]
    assert list(lossy["ctxguard.summary.lossy"]) == [keyed(REFUND)]
    warned = [r.ctxguard for r in caplog.records if hasattr(r, "ctxguard")]
    assert {w["conversation_id"] for w in warned} == {keyed(CONV), keyed(DAVE)}  # dave's summary lost the refund
    assert {w["fact_id"] for w in warned} == {keyed(CITY), keyed(EMAIL), keyed(ACCOUNT), keyed(REFUND)}


def test_without_hash_ids_the_ids_are_exported_as_they_are(harness, llm, client, caplog):
    """The positive control: the scenario does put every id where hash_ids digests it."""
    caplog.set_level(logging.DEBUG, logger="ctxguard")
    harness.start(mode="observe")
    id_scenario(harness, llm, client)
    spans, text, logs = exported(harness, caplog)
    assert spans[0].attributes["gen_ai.conversation.id"] == CONV
    for raw in (CONV, *FACT_IDS):
        assert raw in text, raw
    for raw in (CONV, CITY, EMAIL, ACCOUNT, REFUND):
        assert raw in logs, raw
    assert TENANT not in text and TENANT not in logs  # a tenant is never exported


def test_with_hash_ids_enforce_mode_still_raises_in_clear(harness, llm, client):
    harness.start(mode="enforce", hash_ids=True)
    with ctxguard.conversation(CONV), pytest.raises(ctxguard.ContextViolation) as info:
        ctxguard.record_fact(CITY, "Mumbai")
        ctxguard.record_fact(CITY, "Pune")
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "to Mumbai"}])
    assert f"{CITY} diverged at payload: expected 'Pune' (v2), sent 'Mumbai' (v1)" in str(info.value)
    assert {v.fact_id for v in info.value.violations} == {None, CITY}  # in the process: as given
    assert {e.attributes.get("fact_id") for e in violation_events(harness.spans()[-1])} == {None, keyed(CITY)}


@pytest.mark.parametrize(("env", "given", "hashed"), [("1", False, True), ("0", True, False), (None, True, True)])
def test_hash_ids_from_the_environment_wins(monkeypatch, harness, env, given, hashed):
    if env is not None:
        monkeypatch.setenv("CTXGUARD_HASH_IDS", env)
    guard = harness.start(mode="observe", hash_ids=given)
    assert guard.config.hash_ids is hashed
    assert (guard.ids.id(CONV) == keyed(CONV)) is hashed


def test_exported_ids_replace_each_id_whole_in_one_pass():
    from ctxguard.telemetry.ids import ExportedIds

    ids = ExportedIds(Digester(b"ctxguard-tests"))
    assert ids.label("user@example.com@3") == f"{keyed('user@example.com')}@3"  # split at the last @
    assert ids.label("acct@foreign") == f"{keyed('acct')}@foreign"
    # "ea" before "e", and a digest just written (hex: full of e's) is never searched again.
    assert ids.text("ea@1 and e@2", ["e", "ea"]) == f"{keyed('ea')}@1 and {keyed('e')}@2"
    assert ExportedIds(None).text("ea@1", ["ea"]) == "ea@1"
