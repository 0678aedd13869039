"""Span attribute names (SPEC §5) and how a guarded call is written onto its span.

Only digests, counts, roles and check names go on a span; message text only
with ``capture_content=True``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import Span

from ..violations import Violation

__all__ = ["MESSAGE_ATTR_CAP", "set_attributes"]

# OpenTelemetry GenAI semantic conventions.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CONVERSATION_ID = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"

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
        with bounded._lock:
            bounded._dict.update(attributes)
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


def content_json(messages: list[dict[str, str]]) -> str:
    text = json.dumps(messages, ensure_ascii=False)
    return text if len(text) <= CONTENT_ATTR_CAP else text[:CONTENT_ATTR_CAP]
