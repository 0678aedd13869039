"""The call lifecycle: before send -> on the wire -> answer or stream -> end, with a failure
possible at any point. It neither inspects nor records; it says when (``Inspector`` judges,
``Recorder`` records).

States: *inspected* (``Guard.before`` made it; enforce mode may ``block`` it here) ->
*sent* (the SDK returned or is streaming; the wire body, seen at most once, is judged
whenever the transport sends it) -> *ended* (``end(how)``, or ``block``: whichever comes first;
the call ends once). Every check has exactly one outcome when the call has ended. It implements
``intercept.protocol.Observed``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from opentelemetry import trace

from ._isolation import guarded, report_internal_error
from .capture import capture_body
from .inspection import Inspector, Verdict
from .intercept.observation import How
from .payload import Answer
from .providers.base import Provider
from .record import CallTelemetry, Recorder
from .telemetry import spans as attr
from .telemetry.neighbours import inference_span
from .violations import ContextViolation
from .wiredigest import WireDigests

__all__ = ["Call", "CallServices"]

_perf = time.perf_counter


@dataclass(frozen=True, slots=True)
class CallServices:
    """What a call hands its events to: one set per guard."""

    inspector: Inspector
    recorder: Recorder
    wire_digests: WireDigests


class Call:
    """One guarded LLM call, from inspection to the end of its answer."""

    __slots__ = (
        "_provider_said", "_stages", "done", "elapsed", "first_chunk", "label", "provider", "streamed", "trace",
        "verdict", "wire_hash",
    )

    def __init__(self, stages: CallServices, provider: Provider, verdict: Verdict, t: CallTelemetry) -> None:
        self._stages = stages
        self.provider = provider
        self.verdict = verdict
        self.trace = t
        self.elapsed = 0.0
        self.first_chunk: float | None = None  # when the answer's first piece arrived (an Observation sets it)
        self.done = False
        self.wire_hash: str | None = None
        self._provider_said: Answer | None = None  # the provider's own answer, read off the transport
        self.label = verdict.payload.provider
        self.streamed = verdict.payload.stream

    def block(self) -> None:
        """Enforce mode: count, close the span, and refuse to send."""
        self.trace.unsent = True
        with guarded("telemetry"):
            self._stages.recorder.blocked(self.verdict)
        self._record_end(None, _perf(), error_type=ContextViolation.__name__, unanswered="not sent (enforce mode)")
        raise ContextViolation(self.verdict.violations)

    def sent(self) -> None:
        self.trace.detach()

    def wire(self, body: object) -> None:
        """The transport is sending ``body`` for this call: judge ``wire_intact`` (once)."""
        if self.wire_hash is not None or self.verdict.ctx is None:
            return
        if not isinstance(body, (bytes, bytearray)) or not body:
            return
        started = _perf()
        stages, verdict, t = self._stages, self.verdict, self.trace
        sent = bytes(body)
        self.wire_hash = stages.wire_digests.digest(verdict.scope, sent)
        t.sees_usage_beneath()
        if t.request is not None:
            request, t.request = t.request, None
            with guarded("capture"):
                stages.recorder.request(verdict.scope, verdict.payload.provider, json.loads(sent),
                                        verdict.payload.model, self.provider.wire_sdk(request))
        t.attrs[attr.WIRE_HASH] = self.wire_hash
        for outcome in stages.inspector.wire(verdict, sent):
            # Counted with the call's end when the end follows the response at once; a stream's
            # end may never come (an app can abandon it), so its verdict is counted now.
            stages.recorder.late(t, verdict, outcome, at_end=not self.streamed)
        self.elapsed += _perf() - started  # ctxguard's own time includes judging the wire

    def from_wire(self, body: bytes, beneath: trace.Span) -> None:
        """This call is guarded from the wire (``intercept._unguarded``): ``body`` is what it judged,
        so it is what was sent; ``beneath`` was current when it started (another GenAI span of the
        same call, such as the SDK's own, records the usage)."""
        self.trace.attrs[attr.GUARDED_AT] = "wire"
        self.trace.usage_elsewhere = inference_span(beneath, self.verdict.payload.model)
        self.wire(body)

    def provider_said(self, reply: Answer) -> None:
        self._provider_said = reply

    def end(
        self, how: How, reply: Answer | None = None, *, error: BaseException | None = None, status: int | None = None,
        started: float | None = None,
    ) -> None:
        """The call ended (``intercept.observation``'s ``How``): ``complete`` with its whole
        ``reply``; ``failed`` with the SDK's or the transport's ``error`` (after answering ``reply``
        so far, if a stream); ``abandoned`` by the app before its end (a stream with what it said
        so far: ``ctxguard.stream.abandoned``; a response body unread); ``refused`` with the HTTP
        error ``status`` the server answered (seen on the wire, not as the SDK's exception).
        ``started``: when ctxguard's own work on the end began, if before now."""
        began = _perf() if started is None else started
        if how == "complete":
            self._record_end(reply, began)
        elif how == "failed":
            error_type = type(error).__qualname__ if error is not None else "error"
            self._record_end(reply, began, error_type=error_type, unanswered="the call failed")
        elif how == "refused":
            self._record_end(None, began, error_type=str(status), unanswered="the call failed")
        elif reply is not None and reply.error is not None:
            # Abandoned after the answer reported an error: it ended there (the SDK raised it to
            # the app, which then closed the stream).
            self._record_end(reply, began, unanswered="the call failed")
        else:
            if self.streamed:
                self.trace.attrs[attr.STREAM_ABANDONED] = True
            why = "the stream was abandoned" if self.streamed else "the answer was not read"
            self._record_end(reply, began, unanswered=why)

    def _record_end(
        self, reply: Answer | None, started: float, *, error_type: str | None = None, unanswered: str = "no answer"
    ) -> None:
        """End the call, once: every check not judged yet gets its outcome (``unanswered`` says
        why the answer could not be judged), then the span ends."""
        if self.done:
            return
        self.done = True
        stages, verdict, t = self._stages, self.verdict, self.trace
        payload = verdict.payload
        if self._provider_said is not None:
            reply = self._provider_said  # what the provider said, not its translation
        if error_type is None and reply is not None and reply.error is not None:
            error_type = reply.error
        try:
            judged = stages.inspector.answer(verdict, reply, unanswered)  # and the calibration learns from it
            if self.wire_hash is None:
                # The transport was not observed (not sent, a helper that sends later, another
                # HTTP stack): counted as skips, so every call still yields one outcome per check.
                why = unanswered if error_type is not None else "the body sent was not observed"
                judged += stages.inspector.wire_not_observed(verdict, why)
            for outcome in judged:
                stages.recorder.late(t, verdict, outcome, at_end=True)
        except Exception as exc:
            report_internal_error("checks", exc)
        if t.request is not None and self.wire_hash is None and error_type is None:
            with guarded("capture"):
                stages.recorder.request(verdict.scope, payload.provider, capture_body(t.request), payload.model,
                                        self.provider.distribution)
        t.request = None
        t.first_chunk = self.first_chunk
        try:
            self.elapsed += _perf() - started
            stages.recorder.end(t, verdict, self.elapsed, reply, error_type)
        except Exception as exc:
            report_internal_error("telemetry", exc)
