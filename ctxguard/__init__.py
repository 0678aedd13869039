"""ctxguard: observe and guard what every LLM request actually carries.

>>> import ctxguard
>>> guard = ctxguard.instrument()   # doctest: +SKIP
"""

from __future__ import annotations

from ._instrument import instrument, uninstrument
from .budget import Budget, BudgetBreakdown, budget_for
from .conversation import conversation
from .guard import Guard
from .pinned import render_pinned
from .policy import Pinned, Policy
from .violations import ContextViolation, Violation

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "BudgetBreakdown",
    "ContextViolation",
    "Guard",
    "Pinned",
    "Policy",
    "Violation",
    "budget_for",
    "conversation",
    "instrument",
    "render_pinned",
    "uninstrument",
]
