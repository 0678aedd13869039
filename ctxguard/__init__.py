"""ctxguard: observe and guard what every LLM request actually carries.

>>> import ctxguard
>>> guard = ctxguard.instrument()   # doctest: +SKIP
"""

from __future__ import annotations

import logging

from ._instrument import instrument, uninstrument
from .budget import Budget, BudgetBreakdown, budget_for
from .builder import AnthropicRequest, BudgetError, ContextBuilder
from .conversation import conversation
from .facts import MemoryLedger, checkpoint, forget_fact, record_fact, stage
from .facts.redis import RedisLedger
from .guard import Guard
from .pinned import render_pinned
from .policy import Pinned, Policy
from .summaries import SUMMARY_PROMPT
from .telemetry.sampling import ViolationSampler
from .violations import ContextViolation, Violation

__version__ = "0.1.0"

# A library never prints on its own: violations reach the app's logging config.
logging.getLogger("ctxguard").addHandler(logging.NullHandler())

__all__ = [
    "SUMMARY_PROMPT",
    "AnthropicRequest",
    "Budget",
    "BudgetError",
    "BudgetBreakdown",
    "ContextBuilder",
    "ContextViolation",
    "Guard",
    "MemoryLedger",
    "Pinned",
    "Policy",
    "RedisLedger",
    "Violation",
    "ViolationSampler",
    "budget_for",
    "checkpoint",
    "conversation",
    "forget_fact",
    "instrument",
    "record_fact",
    "render_pinned",
    "stage",
    "uninstrument",
]
