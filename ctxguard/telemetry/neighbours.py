"""Other instrumentations' spans of the same call: how ctxguard tells them apart, so a trace
shows one span per call and one set of ``gen_ai.usage`` attributes.

They are read through the span API's public ``is_recording``, ``get_span_context`` and the
SDK span's read-only ``attributes``, ``name``, ``kind`` and ``instrumentation_scope``
(``getattr``: another SDK's span may lack them).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from . import spans as attr

__all__ = ["claimed_beneath", "inference_span", "ours_to_add", "records_usage", "started_beneath", "their_call_span"]


def inference_span(span: trace.Span, model: str | None) -> bool:
    """Whether ``span`` is another instrumentation's span of an inference call, still open: its
    start attributes name a GenAI inference operation (and the model, if they name one, is this
    call's). An enclosing framework or agent span names another operation, or none."""
    if not span.is_recording() or getattr(getattr(span, "instrumentation_scope", None), "name", None) == "ctxguard":
        return False
    attributes = getattr(span, "attributes", None) or {}
    if attributes.get(attr.OPERATION) not in _INFERENCE:
        return False
    theirs = attributes.get(attr.REQUEST_MODEL)
    return theirs is None or model is None or theirs == model


#: GenAI semantic-convention operation names of one model call.
_INFERENCE = frozenset({"chat", "text_completion", "generate_content"})
#: Instrumentations known to record ``gen_ai.usage.*`` on a span of their own, by the module of
#: their wrapper: when one wraps a call site above ctxguard without making its span current
#: (OpenLLMetry's anthropic and Responses wrappers), ctxguard's span leaves usage out.
_USAGE_RECORDERS = ("opentelemetry.", "openlit.")


def their_call_span(span: trace.Span, operation: str, model: str | None) -> bool:
    """Whether ``span``, current under another library's wrapper of this call site, is that
    library's span of this call: a GenAI inference span (``inference_span``); or, for those that
    name the operation their own way or only once the answer is in, a recording span of another
    scope that is OpenInference's LLM span of this model, or a CLIENT span named as the GenAI
    conventions name one (``chat gpt-4o``: OpenLIT's, whose attributes come with the answer)."""
    if inference_span(span, model):
        return True
    if not span.is_recording() or getattr(getattr(span, "instrumentation_scope", None), "name", None) == "ctxguard":
        return False
    attributes = getattr(span, "attributes", None) or {}
    if attributes.get("openinference.span.kind") == "LLM":
        theirs = attributes.get("llm.model_name")
        return theirs is None or model is None or theirs == model
    return getattr(span, "kind", None) is SpanKind.CLIENT and getattr(span, "name", None) == f"{operation} {model}"


#: The OpenTelemetry context key an instrumentation sets to suppress the ones beneath it (the API's
#: own name for it, private but the one every instrumentation checks).
_SUPPRESSED = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", None)


def started_beneath(span: trace.Span, ours: trace.Span | None) -> bool:
    """Whether ``span`` started as a child of ``ours``. A span current when the transport sends is
    not beneath ctxguard's because it is current: the anthropic SDK's own span of a
    ``messages.stream`` request opens in ``__enter__``, after ctxguard's span stopped being current,
    as the root of another trace (or a child of the app's span)."""
    parent = getattr(span, "parent", None)
    return ours is not None and parent is not None and parent.span_id == ours.get_span_context().span_id


def claimed_beneath(current: trace.Span, ours: trace.Span | None) -> bool:
    """Whether an instrumentation between the call site and the transport took this call over:
    it suppressed the ones beneath it, and the current span is a non-recording stand-in carrying
    the context of a span ctxguard did not start (Logfire gives a suppressed span the context of
    its own request span, which records the usage)."""
    if current.is_recording() or _SUPPRESSED is None or not otel_context.get_value(_SUPPRESSED):
        return False
    theirs = current.get_span_context()
    return theirs.is_valid and (ours is None or theirs.span_id != ours.get_span_context().span_id)


def records_usage(over: Any) -> bool:
    wrapper = getattr(over, "_self_wrapper", None)
    return str(getattr(wrapper, "__module__", "")).startswith(_USAGE_RECORDERS)


def ours_to_add(key: str, span: trace.Span) -> bool:
    """What ctxguard adds to an adopted span: its own attributes, and a GenAI one the owner lacks
    (the conversation id, say); never one the owner set."""
    if key.startswith("ctxguard."):
        return True
    return key not in (getattr(span, "attributes", None) or {})
