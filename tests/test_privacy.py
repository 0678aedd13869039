"""No raw content or secrets in spans (through the real OTLP exporter), logs or metrics by default."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry, generate_latest

import ctxguard
from ctxguard import Pinned, Policy, render_pinned

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
