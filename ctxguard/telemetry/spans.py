"""Span attribute names (SPEC §5) and how a guarded call is written onto its span.

Only digests, counts, roles and check names go on a span; message text only
with ``capture_content=True``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import Span

from ..payload import Answer, Message
from ..violations import Violation

__all__ = ["MESSAGE_ATTR_CAP", "set_attributes"]

# OpenTelemetry GenAI semantic conventions, spelled as the revision docs/operations.md names ("GenAI
# conventions"). Written out, not imported: the opentelemetry-semantic-conventions modules that hold
# them are large (importing the two ctxguard would read, for 30 strings, cost ~0.8 MB of RSS at
# instrument(), bench/footprint.py), and the oldest release accepted (0.51b0) lacks the newer names.
# tests/telemetry/test_genai_conventions.py holds each equal to the installed package's constant.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOKEN_TYPE = "gen_ai.token.type"
CONVERSATION_ID = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
#: ``RequestView.settings`` names -> the span's keys.
REQUEST_SETTINGS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "stop_sequences": "gen_ai.request.stop_sequences",
    "seed": "gen_ai.request.seed",
    "choice.count": "gen_ai.request.choice.count",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "output.type": "gen_ai.output.type",
    # Newer than the pinned revision (docs/operations.md): no constant yet.
    "previous_response.id": "gen_ai.request.previous_response.id",
}
#: Newer than the pinned revision (docs/operations.md): ``true`` on the request of a conversation
#: that lost turns since its previous one; never ``false``.
CONVERSATION_COMPACTED = "gen_ai.conversation.compacted"
#: Sentry's conventions (getsentry/sentry-conventions): the model's window, and the share of it
#: the call used (its input and output tokens, as the provider reported them).
CONTEXT_WINDOW_SIZE = "gen_ai.context.window_size"
CONTEXT_UTILIZATION = "gen_ai.context.utilization"
#: The conventions' evaluation event: one per check judged (docs/operations.md says which).
EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATION_LABEL = "gen_ai.evaluation.score.label"
EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"

# ctxguard's own.
PAYLOAD_HASH = "ctxguard.payload.hash"
PAYLOAD_MESSAGES = "ctxguard.payload.messages"
PAYLOAD_TOKENS = "ctxguard.payload.tokens"
TOKENS_SOURCE = "ctxguard.payload.tokens_source"
#: ``under-counted`` / ``over-counted``: the model's reports stay past what calibration corrects
TOKENS_OUT_OF_RANGE = "ctxguard.payload.tokens_out_of_range"
#: On a call whose verdicts its bytes proved (no exact count made): the ceiling they were proven with.
TOKENS_CEILING = "ctxguard.payload.tokens_ceiling"
MESSAGE_ROLES = "ctxguard.message.roles"
MESSAGE_HASHES = "ctxguard.message.hashes"
MESSAGE_TRUNCATED = "ctxguard.message.truncated"
HEAD_ROLE = "ctxguard.head.role"
HEAD_HASH = "ctxguard.head.hash"
PREV_HASH = "ctxguard.prev.hash"
MESSAGES_ADDED = "ctxguard.messages.added"
MESSAGES_DROPPED = "ctxguard.messages.dropped"
BUDGET_WINDOW = "ctxguard.budget.window"
#: The window of a model the table does not have, taken from the table id named here (the version
#: it follows in its family: docs/budget.md, "Resolution"): inferred, not read.
BUDGET_WINDOW_INFERRED = "ctxguard.budget.window_inferred"
BUDGET_RESERVED_OUTPUT = "ctxguard.budget.reserved_output"
BUDGET_RESERVED_REASONING = "ctxguard.budget.reserved_reasoning"
BUDGET_TOOLS = "ctxguard.budget.tools"
BUDGET_HISTORY_AVAILABLE = "ctxguard.budget.history_available"
BUDGET_HEADROOM = "ctxguard.budget.headroom"
BUDGET_UTILIZATION = "ctxguard.budget.utilization"
BUDGET_REPLY_ROOM = "ctxguard.budget.reply_room"
BUDGET_REPLY_ROOM_LOW = "ctxguard.budget.reply_room_low"
PINNED_PRESENT = "ctxguard.pinned.present"
PINNED_TOKENS = "ctxguard.pinned.tokens"
PINNED_ENTRIES = "ctxguard.pinned.entries"
PINNED_HASH = "ctxguard.pinned.hash"
SUMMARY_LOSSY = "ctxguard.summary.lossy"  # fact ids a supplied summary lost (ContextBuilder)
FACTS_PRESENT = "ctxguard.facts.present"
FACTS_MISSING = "ctxguard.facts.missing"
FACTS_STALE = "ctxguard.facts.stale"
FACTS_LEAKED = "ctxguard.facts.leaked"
FACTS_TOO_SHORT = "ctxguard.facts.too_short"  # values under 3 characters: never judged, so never listed above
#: ``fleet`` or ``process``: where fact_scoped looked for other conversations' values (a shared RedisLedger:
#: every process, or this one only while sharing is starting, failing or impossible); absent when not shared.
FACTS_REACH = "ctxguard.facts.reach"
DIVERGENCE_STAGE = "ctxguard.divergence.stage"
DIVERGENCE_FACT = "ctxguard.divergence.fact"
WIRE_HASH = "ctxguard.wire.hash"
VIOLATIONS = "ctxguard.violations"
EVICTED = "ctxguard.evicted"
STREAM_ABANDONED = "ctxguard.stream.abandoned"
#: ``wire``: the call was guarded from its HTTP request, not at its call site (observed, never refused).
GUARDED_AT = "ctxguard.guarded_at"
SKIPPED = "ctxguard.checks.skipped"
HISTORY_ELSEWHERE = "ctxguard.history.elsewhere"
MODE = "ctxguard.mode"
VIOLATION_EVENT = "ctxguard.violation"

#: Per-message lists stop here; ``ctxguard.message.truncated`` says so.
MESSAGE_ATTR_CAP = 128
#: Captured content (opt-in) is cut to this many characters per span attribute.
CONTENT_ATTR_CAP = 64 * 1024


#: The opentelemetry-sdk releases (major, minor) whose span attribute store ``set_attributes`` was
#: written for and tested on: the oldest that pyproject.toml accepts to the newest tested. Any other
#: release takes the public path (docs/design.md, "Span attributes: the one private write").
WRITTEN_FOR = ((1, 30), (1, 45))


def _store_as_written_for() -> bool:
    """Whether the installed SDK keeps a span's attributes as ``set_attributes`` expects, checked
    once, at import: a release in ``WRITTEN_FOR``, and a span of a provider of its own (sampled,
    no resource detection, no processor, no exit hook) whose container has the fields the fast
    path reads and which, once ended, shows in its public ``attributes`` what was written into
    that container. Any surprise: False."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON
        from opentelemetry.sdk.version import __version__

        major, minor = (int(part) for part in __version__.split(".")[:2])
        if not WRITTEN_FOR[0] <= (major, minor) <= WRITTEN_FOR[1]:
            return False
        provider = TracerProvider(sampler=ALWAYS_ON, resource=Resource.get_empty(), shutdown_on_exit=False)
        span: Any = provider.get_tracer("ctxguard").start_span("ctxguard.probe")
        bounded = span._attributes
        if not (
            type(bounded) is BoundedAttributes
            and span._end_time is None
            and bounded._immutable is False
            and type(bounded._dict) is dict
            and hasattr(bounded._lock, "__enter__")
            and hasattr(bounded, "maxlen")
            and hasattr(bounded, "max_value_len")
        ):
            return False
        with bounded._lock:
            bounded._dict.update({"ctxguard.probe": "written"})
        span.end()
        return span._end_time is not None and dict(span.attributes or {}) == {"ctxguard.probe": "written"}
    except Exception:
        return False


#: ``set_attributes`` may write into the SDK's container (``_store_as_written_for``).
STORE_AS_WRITTEN_FOR = _store_as_written_for()


def set_attributes(span: Span, attributes: dict[str, Any]) -> None:
    """Set attributes that are valid by construction, skipping the SDK's per-value cleaning.

    Every value ctxguard builds is a str, int, float, bool or a tuple of str, as the
    OpenTelemetry spec requires, yet the SDK's public ``set_attributes`` re-validates each
    value and each tuple element on every call: 395,000 more instructions a call at 20
    messages, +65% of ctxguard's own (docs/performance.md). So, on an SDK release this was
    written for (``STORE_AS_WRITTEN_FOR``), when the span is the SDK's, still open, with no
    value-length limit and room under the count limit for these attributes, they go straight
    into its container, under its lock. Anything else takes the public, validating path.
    """
    bounded = getattr(span, "_attributes", None)
    if (
        STORE_AS_WRITTEN_FOR
        and type(bounded) is BoundedAttributes
        and getattr(span, "_end_time", 0) is None
        and not bounded._immutable
        and bounded.max_value_len is None
        and (bounded.maxlen is None or len(bounded._dict) + len(attributes) <= bounded.maxlen)
    ):
        bounded._lock.acquire()  # not ``with``: the call path's locks (forksafe.lock)
        try:
            bounded._dict.update(attributes)
        finally:
            bounded._lock.release()
    else:
        span.set_attributes(attributes)


#: Violation events per check on one span, at most: past it, one event counts the rest.
MAX_EVENTS_PER_CHECK = 16


def violation_events(span: Span, violations: Iterable[Violation]) -> None:
    listed: dict[str, int] = {}
    for v in violations:
        n = listed[v.check] = listed.get(v.check, 0) + 1
        if n > MAX_EVENTS_PER_CHECK:
            continue
        attrs: dict[str, Any] = {"check": v.check, "detail": v.detail}
        if v.fact_id is not None:
            attrs["fact_id"] = v.fact_id
        if v.stage is not None:
            attrs["stage"] = v.stage
        span.add_event(VIOLATION_EVENT, attrs)
    for check, n in listed.items():
        if n > MAX_EVENTS_PER_CHECK:
            more = n - MAX_EVENTS_PER_CHECK
            span.add_event(VIOLATION_EVENT, {"check": check, "detail": f"{more} more {check} violations not listed",
                                             "omitted": more})


class Judged(Protocol):
    """A check's outcome on a call (``checks.Outcome``)."""

    @property
    def check(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def violations(self) -> Sequence[Violation]: ...
    @property
    def reason(self) -> str | None: ...


def evaluation_events(
    span: Span, outcomes: Iterable[Judged], violations: Iterable[Violation], *, every: bool = False
) -> None:
    """One ``gen_ai.evaluation.result`` event per check judged: those that failed, and with ``every``
    those that passed or were skipped too. The explanation is a failed check's first violation's
    detail (as exported: no raw value, ids digested with ``hash_ids``) and how many more, or a
    skipped check's reason."""
    first: dict[str, Violation] = {}
    for v in violations:
        first.setdefault(v.check, v)
    for o in outcomes:
        label = o.outcome
        if label == "fail":
            shown = first.get(o.check)
            more = len(o.violations) - 1
            explanation = (shown.detail if shown is not None else o.check) + (f" (and {more} more)" if more > 0 else "")
        elif not every:
            continue
        else:
            explanation = o.reason or ""
        attrs: dict[str, Any] = {EVALUATION_NAME: "ctxguard." + o.check, EVALUATION_LABEL: label}
        if explanation:
            attrs[EVALUATION_EXPLANATION] = explanation
        span.add_event(EVALUATION_EVENT, attrs)


def content_json(value: list[dict[str, Any]]) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= CONTENT_ATTR_CAP else text[:CONTENT_ATTR_CAP]


def input_content(messages: list[Message], tools: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """Captured content (opt-in), in the conventions' JSON shapes: a provider's system parameter as
    ``gen_ai.system_instructions``, the messages as ``gen_ai.input.messages`` (text parts), the
    request's tools as ``gen_ai.tool.definitions``."""
    instructions = [{"type": "text", "content": m.text} for m in messages if m.source == "instructions"]
    sent = [{"role": m.role, "parts": [{"type": "text", "content": m.text}]}
            for m in messages if m.source != "instructions"]
    captured = {INPUT_MESSAGES: content_json(sent)}
    if instructions:
        captured[SYSTEM_INSTRUCTIONS] = content_json(instructions)
    if tools:
        captured[TOOL_DEFINITIONS] = content_json(tools)
    return captured


def output_content(reply: Answer) -> str:
    """The answer's text as ``gen_ai.output.messages`` (opt-in)."""
    message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "content": reply.text}]}
    if reply.finish_reasons:
        message["finish_reason"] = reply.finish_reasons[0]
    return content_json([message])
