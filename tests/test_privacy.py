"""No raw content or secrets in spans (through the real OTLP exporter), logs or metrics by default."""

from __future__ import annotations

import hashlib
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
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
    violated = {kv.value.string_value for s in spans for e in s.events for kv in e.attributes if kv.key == "check"}
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
