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


def set_attributes(span: Span, attributes: dict[str, Any]) -> None:
    """Set attributes that are valid by construction, skipping the SDK's per-value cleaning.

    Every value ctxguard builds is a str, int, float, bool or a tuple of str, as the
    OpenTelemetry spec requires, yet the SDK re-validates each value and each list
    element on every call: at 20 messages that is most of ctxguard's own cost. When
    the span is the SDK's, still open, with no attribute count or length limit that
    these attributes could hit, they go straight into its container, under its lock.
    Anything else takes the public, validating ``set_attributes``.
    """
    bounded = getattr(span, "_attributes", None)
    if (
        type(bounded) is BoundedAttributes
        and getattr(span, "_end_time", 0) is None
        and not bounded._immutable
        and bounded.max_value_len is None
        and (bounded.maxlen is None or len(bounded._dict) + len(attributes) <= bounded.maxlen)
    ):
        lock = bounded._lock
        lock.acquire()  # not ``with lock``: half the instructions, on every call
        try:
            bounded._dict.update(attributes)
        finally:
            lock.release()
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
