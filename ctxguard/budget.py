"""The budget equation and the model window table.

    history available = window - system - tools - retrieved - reserved output - reserved reasoning

Reasoning ("thinking") tokens are drawn from ``max_tokens`` / ``max_completion_tokens``
on both OpenAI and Anthropic, so the reserved output already covers them; the
``reserved_reasoning`` term is only for apps that budget reasoning separately.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = [
    "MODEL_WINDOWS",
    "Budget",
    "BudgetBreakdown",
    "BudgetEval",
    "budget_for",
    "evaluate",
    "window_for",
]

#: Context windows in tokens, maintained by hand (see docs/budget.md for sources and
#: the update rule). Dated snapshots (``-2024-08-06``, ``-20250514``) and ``-latest``
#: resolve to their family; anything else unknown is *not* guessed.
MODEL_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-3.5-turbo": 16_385,
    "gpt-4": 8_192,
    "gpt-4-32k": 32_768,
    "gpt-4-turbo": 128_000,
    "gpt-4-turbo-preview": 128_000,
    "gpt-4-1106-preview": 128_000,
    "gpt-4-0125-preview": 128_000,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-4.5-preview": 128_000,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o1-pro": 200_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o3-pro": 200_000,
    "o4-mini": 200_000,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "gpt-5-chat": 128_000,
    "gpt-5-codex": 400_000,
    "gpt-5.1": 400_000,
    # Anthropic
    "claude-3-haiku": 200_000,
    "claude-3-sonnet": 200_000,
    "claude-3-opus": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-opus-4": 200_000,
    "claude-opus-4-1": 200_000,
    "claude-sonnet-4-5": 200_000,
    "claude-haiku-4-5": 200_000,
    "claude-opus-4-5": 200_000,
    # Google Gemini: the published input token limit (output has its own, separate limit,
    # so input + reserved output against this window errs on the safe side).
    "gemini-2.0-flash": 1_048_576,
    "gemini-2.0-flash-lite": 1_048_576,
    "gemini-2.5-pro": 1_048_576,
    "gemini-2.5-flash": 1_048_576,
}

_SNAPSHOT = re.compile(r"^(.+?)-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|\d{3}|latest)$")


def window_for(model: str | None) -> int | None:
    """The model's context window in tokens (``MODEL_WINDOWS``); dated snapshots and ``-latest``
    resolve to their family, unknown models to None (never guessed).

    >>> window_for("gpt-4o-2024-08-06")
    128000
    >>> window_for("my-finetune-v7") is None
    True
    """
    if not model or not isinstance(model, str):
        return None
    name = model.rsplit("/", 1)[-1].strip().lower()
    window = MODEL_WINDOWS.get(name)
    if window is None:
        match = _SNAPSHOT.match(name)
        if match:
            window = MODEL_WINDOWS.get(match.group(1))
    return window


def _check_terms(**terms: int | None) -> None:
    for name, value in terms.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"{name} must be a non-negative int or None, got {value!r}")


@dataclass(frozen=True)
class Budget:
    """What the budget check demands. ``None`` terms are derived from each request.

    >>> Budget(reserved_output=2000, history_max=30_000).window is None
    True
    """

    window: int | None = None
    reserved_output: int | None = None
    reserved_reasoning: int = 0
    tools: int | None = None
    retrieved: int = 0
    history_max: int | None = None

    def __post_init__(self) -> None:
        _check_terms(
            window=self.window,
            reserved_output=self.reserved_output,
            reserved_reasoning=self.reserved_reasoning,
            tools=self.tools,
            retrieved=self.retrieved,
            history_max=self.history_max,
        )


@dataclass(frozen=True)
class BudgetBreakdown:
    """The equation as a value; ``str()`` prints it term by term."""

    model: str
    window: int
    system: int
    tools: int
    retrieved: int
    reserved_output: int
    reserved_reasoning: int

    @property
    def history_available(self) -> int:
        return (
            self.window
            - self.system
            - self.tools
            - self.retrieved
            - self.reserved_output
            - self.reserved_reasoning
        )

    def __str__(self) -> str:
        rows = [
            ("window", self.window, " "),
            ("system", self.system, "-"),
            ("tools", self.tools, "-"),
            ("retrieved", self.retrieved, "-"),
            ("reserved output", self.reserved_output, "-"),
            ("reserved reasoning", self.reserved_reasoning, "-"),
        ]
        lines = [f"{sign} {name:<20}{value:>12,}" for name, value, sign in rows]
        lines.append(f"= {'history available':<20}{self.history_available:>12,}")
        return "\n".join(lines)


def budget_for(
    model: str,
    *,
    window: int | None = None,
    system: int = 0,
    tools: int = 0,
    retrieved: int = 0,
    reserved_output: int = 0,
    reserved_reasoning: int = 0,
) -> BudgetBreakdown:
    """The equation for ``model``, every term given (the window from the table unless given).

    >>> budget_for("gpt-4o", system=1200, reserved_output=4000).history_available
    122800
    >>> print(budget_for("gpt-4o", system=1200, tools=800, reserved_output=4000))
      window                   128,000
    - system                     1,200
    - tools                        800
    - retrieved                      0
    - reserved output            4,000
    - reserved reasoning             0
    = history available        122,000
    """
    _check_terms(
        window=window,
        system=system,
        tools=tools,
        retrieved=retrieved,
        reserved_output=reserved_output,
        reserved_reasoning=reserved_reasoning,
    )
    resolved = window if window is not None else window_for(model)
    if resolved is None:
        raise ValueError(f"unknown context window for model {model!r}; pass window=")
    return BudgetBreakdown(model, resolved, system, tools, retrieved, reserved_output, reserved_reasoning)


# The same terms recur call after call; a frozen dataclass is costly to build each time.
_breakdown = functools.lru_cache(maxsize=4096)(BudgetBreakdown)


@dataclass(slots=True, init=False)
class BudgetEval:
    """One request measured against the equation. ``reserved``, ``headroom`` and
    ``utilization`` are derived once, here: each is read several times per call."""

    breakdown: BudgetBreakdown
    input_tokens: int
    history: int
    history_max: int | None
    reserved: int
    headroom: int
    utilization: float

    def __init__(self, breakdown: BudgetBreakdown, input_tokens: int, history: int, history_max: int | None) -> None:
        self.breakdown, self.input_tokens = breakdown, input_tokens
        self.history, self.history_max = history, history_max
        self.reserved = reserved = breakdown.reserved_output + breakdown.reserved_reasoning
        self.headroom = breakdown.window - input_tokens - reserved
        self.utilization = (input_tokens + reserved) / breakdown.window

    @property
    def over_history_max(self) -> bool:
        return self.history_max is not None and self.history > self.history_max


def evaluate(
    budget: Budget,
    *,
    model: str | None,
    input_tokens: int,
    system_tokens: int,
    tools_tokens: int,
    max_output_tokens: int | None,
    request_window: int | None = None,
) -> BudgetEval | str:
    """Measure one request; returns the reason as a string when it cannot be judged. The window:
    ``budget.window`` if set, else the one the request sets (``request_window``: Ollama's
    ``num_ctx``), else the model table's (``window_for``).

    >>> ev = evaluate(Budget(window=1000), model="m", input_tokens=900, system_tokens=0, tools_tokens=0,
    ...               max_output_tokens=200)
    >>> ev.headroom, ev.utilization
    (-100, 1.1)
    >>> evaluate(Budget(), model="my-finetune-v7", input_tokens=900, system_tokens=0, tools_tokens=0,
    ...          max_output_tokens=None)
    "unknown context window for model 'my-finetune-v7' (set Budget(window=...))"
    """
    window = budget.window if budget.window is not None else request_window
    if window is None:
        window = window_for(model)
    if window is None:
        return f"unknown context window for model {model!r} (set Budget(window=...))"
    if window <= 0:
        return "window must be positive"
    reserved_output = budget.reserved_output if budget.reserved_output is not None else max_output_tokens or 0
    tools = budget.tools if budget.tools is not None else tools_tokens
    breakdown = _breakdown(
        model or "", window, system_tokens, tools, budget.retrieved, reserved_output, budget.reserved_reasoning
    )
    history = max(0, input_tokens - system_tokens - tools_tokens - budget.retrieved)
    return BudgetEval(breakdown, input_tokens, history, budget.history_max)
