"""Retention-test helpers: is a value in a payload, where does a property flip, do the
answer's claims match, does a fact survive long conversations, capture to a file.

They match text the way the fact checks do (``ctxguard.facts.matching``): Unicode
NFKC, case-folded, whitespace collapsed, a grouped number in any grouping; values
shorter than three characters are refused rather than matched everywhere.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._instrument import active_guard
from ..capture import CaptureWriter, Redact
from ..facts.ledger import Version
from ..facts.matching import MIN_MATCH_CHARS, match_key, normalise, strings_in, value_text
from ..facts.stages import Checkpoint

__all__ = [
    "ClaimProblem",
    "ClaimsMismatch",
    "FactLost",
    "FlipPoint",
    "assert_claims",
    "assert_fact_survives",
    "find_flip_point",
    "payload_contains",
    "record",
]

#: Request-body fields that carry what the model reads (OpenAI, Anthropic, Google GenAI).
_CONTENT_FIELDS = ("messages", "input", "instructions", "system", "contents", "system_instruction",
                   "systemInstruction", "prompt")


def _needle(value: object) -> Version:
    text = value_text(value)
    needle = normalise(text)
    if len(needle) < MIN_MATCH_CHARS:
        raise ValueError(f"{value!r} is too short to be matched reliably (fewer than {MIN_MATCH_CHARS} characters)")
    return Version("", text, needle, 0)


def _body_text(body: Any) -> str:
    if isinstance(body, (bytes, bytearray)):
        body = json.loads(body)
    elif isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return str(body)  # plain text
    elif hasattr(body, "json") and isinstance(getattr(body, "body", None), (bytes, bytearray)):
        body = body.json  # a FakeLLM RecordedRequest
    if isinstance(body, Mapping) and any(k in body for k in _CONTENT_FIELDS):
        body = [body[k] for k in _CONTENT_FIELDS if k in body]
    return strings_in(body)  # SEPARATOR (NUL) survives: no value matches across messages


def payload_contains(body: Any, value: object) -> bool:
    """Whether ``value`` is somewhere the model reads in ``body``.

    ``body``: a request body (dict, JSON text or bytes), a ``FakeLLM`` recorded
    request, or a message list. Only what the model reads counts (messages,
    instructions, system), not the model name or other parameters.

    >>> payload_contains({"messages": [{"role": "user", "content": "Ship to LYON"}]}, "Lyon")
    True
    >>> payload_contains({"messages": [{"role": "user", "content": "call 0612345678"}]}, "06 12 34 56 78")
    True
    """
    return Checkpoint.of(_body_text(body)).holds(_needle(value))


# -- flip points ---------------------------------------------------------------


@dataclass(frozen=True)
class FlipPoint:
    """Where a property stopped holding, and what kind of history policy that suggests.

    ``length``: the first length at which the predicate failed (None: it held at
    every length tried). ``signature``:

    - ``"fixed-window"``: the flip is at the same length whatever the message size,
      the mark of a turn-count buffer (``deque(maxlen=N)``);
    - ``"token-budget"``: longer messages flip it earlier, the mark of trimming by tokens;
    - ``"holds"``: it never flipped; ``"unknown"``: ``build`` takes no ``verbosity``,
      so one run cannot tell the two apart.
    """

    length: int | None
    signature: str
    by_verbosity: dict[int, int | None] = field(default_factory=dict)

    def __str__(self) -> str:
        where = "never flips" if self.length is None else f"flip point: length {self.length}"
        return f"{where} ({self.signature})"


def _first_failure(build: Callable[..., Any], lengths: Sequence[int], predicate: Callable[[Any], bool],
                   **kwargs: Any) -> int | None:
    for n in lengths:
        if not predicate(build(n, **kwargs)):
            return n
    return None


def find_flip_point(
    build: Callable[..., Any],
    lengths: Iterable[int],
    predicate: Callable[[Any], bool],
    *,
    verbosities: tuple[int, int] = (1, 4),
) -> FlipPoint:
    """The first of ``lengths`` at which ``predicate(build(length))`` is false.

    When ``build`` accepts a ``verbosity`` keyword (a multiplier of message size),
    the search runs at both ``verbosities`` and names the policy signature.

    >>> find_flip_point(lambda n: list(range(n))[-6:], [2, 4, 8], lambda p: 0 in p).length
    8
    """
    ordered = sorted(set(lengths))
    if not ordered:
        raise ValueError("lengths must not be empty")
    try:
        takes_verbosity = "verbosity" in inspect.signature(build).parameters
    except (TypeError, ValueError):
        takes_verbosity = False
    if not takes_verbosity:
        first = _first_failure(build, ordered, predicate)
        return FlipPoint(first, "holds" if first is None else "unknown")
    by = {v: _first_failure(build, ordered, predicate, verbosity=v) for v in verbosities}
    short, long = (by[v] for v in verbosities)
    if short is None and long is None:
        return FlipPoint(None, "holds", by)
    signature = "fixed-window" if short == long else "token-budget"
    first = min(x for x in (short, long) if x is not None)
    return FlipPoint(first, signature, by)


# -- claims --------------------------------------------------------------------

_KINDS = ("duplicate", "stale", "wrong", "missing", "unexpected")


@dataclass(frozen=True)
class ClaimProblem:
    kind: str  # one of duplicate, stale, wrong, missing, unexpected
    claim: str
    expected: str | None = None
    actual: tuple[str, ...] = ()

    def __str__(self) -> str:
        got = ", ".join(repr(a) for a in self.actual)
        if self.kind == "duplicate":
            return f"duplicate {self.claim}: claimed {len(self.actual)} times ({got})"
        if self.kind == "stale":
            return f"stale {self.claim}: got {got}, an earlier value; expected {self.expected!r}"
        if self.kind == "wrong":
            return f"wrong {self.claim}: got {got}, expected {self.expected!r}"
        if self.kind == "missing":
            return f"missing {self.claim}: expected {self.expected!r}"
        return f"unexpected {self.claim}: {got}"


class ClaimsMismatch(AssertionError):
    """The answer's claims differ from the expected ones; ``problems`` lists each, in a stable order."""

    def __init__(self, problems: list[ClaimProblem]) -> None:
        self.problems = problems
        super().__init__("claims do not match:\n" + "\n".join(f"  {p}" for p in problems))


def _pairs(actual: Any) -> list[tuple[str, str]]:
    if isinstance(actual, Mapping):
        return [(str(k), value_text(v)) for k, v in actual.items()]
    pairs = []
    for i, item in enumerate(actual):
        if isinstance(item, Mapping):
            key = item.get("claim", item.get("key", item.get("id", item.get("fact_id"))))
            value = item.get("value")
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            key, value = item
        else:
            raise TypeError(f"claim {i}: expected a (claim, value) pair or a mapping with claim/key/id and value")
        if not isinstance(key, str) or value is None:
            raise TypeError(f"claim {i}: needs a string claim name and a value")
        pairs.append((key, value_text(value)))
    return pairs


def _same(value: object) -> str:
    """What two claimed values compare as: equal when the fact checks would match one for the other."""
    return match_key(value_text(value))


def _values(stale: object) -> Iterable[object]:
    """One stale value (a string, a number, a date) or several (a list, tuple or set of them)."""
    return stale if isinstance(stale, (list, tuple, set, frozenset)) else (stale,)


def assert_claims(
    actual: Mapping[str, Any] | Iterable[Any],
    expected: Mapping[str, Any],
    *,
    stale: Mapping[str, Any] | None = None,
) -> None:
    """Assert that structured answer claims are exactly ``expected``.

    ``actual``: claims parsed from the model's answer, as (name, value) pairs or
    mappings with ``claim``/``key``/``id`` and ``value`` (a claim made twice is a
    duplicate even if both agree). ``stale``: earlier values per claim, one value or a
    list of them (``{"city": "Mumbai"}``, ``{"city": ["Mumbai", "Pune"]}``), so that a
    reverted correction reads as ``stale`` rather than ``wrong``. Values compare as the
    fact checks match them (case, Unicode form, spacing; a grouped number in any
    grouping). Raises ``ClaimsMismatch``.

    >>> assert_claims([("city", "Lyon")], {"city": "lyon"})
    """
    claimed: dict[str, list[str]] = {}
    for key, value in _pairs(actual):
        claimed.setdefault(key, []).append(value)
    old = {k: {_same(v) for v in _values(vs)} for k, vs in (stale or {}).items()}
    problems: list[ClaimProblem] = []
    for key, values in claimed.items():
        if key not in expected:
            problems.append(ClaimProblem("unexpected", key, None, tuple(values)))
            continue
        want = value_text(expected[key])
        if len(values) > 1:
            problems.append(ClaimProblem("duplicate", key, want, tuple(values)))
        wrong = [v for v in values if _same(v) != _same(want)]
        if wrong:
            kind = "stale" if all(_same(v) in old.get(key, ()) for v in wrong) else "wrong"
            problems.append(ClaimProblem(kind, key, want, tuple(wrong)))
    for key, value in expected.items():
        if key not in claimed:
            problems.append(ClaimProblem("missing", key, value_text(value)))
    if problems:
        problems.sort(key=lambda p: (_KINDS.index(p.kind), p.claim))
        raise ClaimsMismatch(problems)


# -- long conversations ----------------------------------------------------------


class FactLost(AssertionError):
    """A fact did not survive a conversation length; names the shortest one and the turn."""

    def __init__(self, value_label: str, length: int, turn: int | None, survived: list[int]) -> None:
        self.length = length
        self.turn = turn
        self.survived = survived
        at = f" (absent from request {turn})" if turn is not None else ""
        kept = f"; it survived {', '.join(map(str, survived))} turns" if survived else ""
        super().__init__(f"{value_label} lost in the {length}-turn conversation{at}{kept}")


def assert_fact_survives(
    run: Callable[[int], Any],
    value: object,
    *,
    turns: Iterable[int] = (4, 8, 16, 32),
    label: str | None = None,
) -> None:
    """Run the scripted conversation at each length in ``turns``; the value must be sent every time.

    ``run(n)`` plays ``n`` turns of the app from a fresh state and returns the
    request bodies it sent (a list: every request must carry the value) or the
    last one. Raises ``FactLost`` naming the shortest failing length.
    """
    needle = _needle(value)
    name = label or "the fact"
    survived: list[int] = []
    for n in sorted(set(turns)):
        sent = run(n)
        bodies = list(sent) if isinstance(sent, (list, tuple)) else [sent]
        if not bodies:
            raise ValueError(f"run({n}) returned no request bodies")
        for i, body in enumerate(bodies, 1):
            if not Checkpoint.of(_body_text(body)).holds(needle):
                raise FactLost(name, n, i if len(bodies) > 1 else None, survived)
        survived.append(n)


# -- capture ---------------------------------------------------------------------


@contextlib.contextmanager
def record(path: str, *, redact: Redact | None = None) -> Iterator[str]:
    """Capture every request body (as sent) and fact event to ``path`` while the block runs;
    yields the file's path (``{pid}`` in ``path`` is replaced by the process id).

    Needs an active ``ctxguard.instrument()`` (the ``ctxguard_guard`` fixture is one).
    The file is what ``ctxguard check`` and ``ctxguard report`` read.
    """
    guard = active_guard()
    if guard is None:
        raise RuntimeError("ctxguard.testing.record() needs ctxguard.instrument() first")
    writer = CaptureWriter(path, redact=redact)
    guard.start_capture(writer)
    try:
        yield writer.path
    finally:
        guard.stop_capture()
