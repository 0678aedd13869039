"""The budget equation and the model window table.

    history available = window - system - tools - retrieved - reserved output - reserved reasoning

Reasoning ("thinking") tokens are drawn from ``max_tokens`` / ``max_completion_tokens``
on both OpenAI and Anthropic, so the reserved output already covers them; the
``reserved_reasoning`` term is only for apps that budget reasoning separately.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = [
    "MODEL_WINDOWS",
    "WINDOWS_FILE_MAX_BYTES",
    "Budget",
    "BudgetBreakdown",
    "BudgetEval",
    "add_model_windows",
    "budget_for",
    "evaluate",
    "load_model_windows",
    "window_for",
]

#: The shipped table (docs/budget.md, "The window table"): each entry's window, its source and the
#: date it was read there, and what the number counts.
_DATA_FILE = "data/model_windows.toml"

#: The two fields the budget needs, read without a TOML parser: tomllib takes ~10 ms on this file, a
#: cost every ``import ctxguard`` would pay; one regex takes a few hundred µs. The file keeps
#: ``window`` the first key of each ``[models."id"]`` table, and tests/test_model_windows.py holds
#: this reading equal to tomllib's full parse.
_ENTRY = re.compile(r'^\[models\."([^"]+)"\]\nwindow = (\d+)$', re.MULTILINE)


def _shipped() -> dict[str, int]:
    text = resources.files(__package__ or "ctxguard").joinpath(_DATA_FILE).read_text(encoding="utf-8")
    return {model: int(window) for model, window in _ENTRY.findall(text)}


#: Context windows in tokens by model id, read from the shipped data file at import; user entries
#: (``add_model_windows``, ``instrument(model_windows=)``, ``CTXGUARD_MODEL_WINDOWS``) are added to
#: it and win. ``window_for`` resolves ids to these keys; anything else unknown is *not* guessed.
#: Module-level and mutated at run time: it is the public table, the process's (SPEC §2).
MODEL_WINDOWS: dict[str, int] = _shipped()

#: Dated snapshots (``-2024-08-06``, ``-20250514``, Cohere's ``-08-2024``), four- and three-digit
#: versions (``-0613``, ``-001``) and ``-latest`` name their family.
_SNAPSHOT = re.compile(r"^(.+?)-(\d{4}-\d{2}-\d{2}|\d{8}|\d{2}-\d{4}|\d{4}|\d{3}|latest)$")
#: A Bedrock model id (``anthropic.claude-sonnet-4-5-20250929-v1:0``), optionally behind a
#: cross-region inference profile's geography (``us.``, ``global.`` ...): the vendor prefix, the
#: ``-v1:0`` version and a ``:200k`` context variant are Bedrock's, not the model's.
_BEDROCK = re.compile(
    r"^(?:(?:us|eu|apac|global|us-gov|jp|au|ca)\.)?"
    r"(?:anthropic|meta|amazon|mistral|cohere|deepseek|openai|qwen|google|writer|ai21|nvidia|minimax|moonshotai)\."
    r"(.+?)(?:-v\d+(?::\d+)?)?(?::\d+k)?$"
)
#: A model id's version: a major and, after "." or "-", a minor (``gpt-5.6``, ``gemini-3.8-flash``,
#: ``claude-sonnet-5-5``, ``llama3.2``), one or two digits each and standing alone: ``gpt-4o``, ``70b``,
#: ``v3p3`` and ``2508`` are not versions. The id without its minor is its family (``gemini-3.*-flash``).
_VERSION = re.compile(r"(?<![0-9])(\d{1,2})(?:([.-])(\d{1,2}))?(?![0-9a-z])")
#: Resolutions remembered (``_remembered``): at most ``_RESOLVED_MAX`` model strings of at most
#: ``_REMEMBERED_CHARS`` characters (a model string is the app's, of any length): a longer one is
#: resolved again each time.
_RESOLVED_MAX = 1024
_REMEMBERED_CHARS = 256


def _names(model: str) -> tuple[str, str]:
    """The ids ``model`` is looked up as: a provider or ARN prefix (``openai/``, ``models/``,
    ``...:inference-profile/``) and a Vertex ``@version`` dropped, a Bedrock id unwrapped; with its
    Ollama ``:tag``, then without."""
    name = model.strip().lower().rsplit("/", 1)[-1].split("@", 1)[0]
    bedrock = _BEDROCK.match(name)
    if bedrock:
        name = bedrock.group(1)
    return name, name.split(":", 1)[0]


def _version(model: str) -> tuple[tuple[str, int, str], int] | None:
    """``model``'s family (the id before and after its version, and the major) and its minor (0 when
    it has none: ``claude-sonnet-5`` is 5.0); None without a version."""
    found = _VERSION.search(model)
    if found is None:
        return None
    major, _, minor = found.groups()
    return (model[: found.start()], int(major), model[found.end() :]), int(minor or 0)


@functools.lru_cache(maxsize=1)
def _families(table_size: int) -> dict[tuple[str, int, str], list[tuple[int, str]]]:
    """The table's families, each with its members' minors and ids in order, made again when the
    table's size changes."""
    families: dict[tuple[str, int, str], list[tuple[int, str]]] = {}
    for model in list(MODEL_WINDOWS):
        found = _version(model)
        if found is not None:
            families.setdefault(found[0], []).append((found[1], model))
    for members in families.values():
        members.sort()
    return families


def _resolve(model: str) -> tuple[str, bool]:
    """``(table key, False)`` for the entry ``model`` names: the id itself, else its family when it
    ends in a snapshot suffix, or the entry of its version written with ``.`` for ``-`` or the other
    way (OpenRouter's ``anthropic/claude-opus-4.7`` is ``claude-opus-4-7``). Else, for an id with a
    version whose family the table knows, ``(key of the member it follows, True)``: the highest
    minor below its own (``gemini-3.9-flash`` follows ``gemini-3.8-flash``, ``claude-sonnet-5-1``
    follows ``claude-sonnet-5``). Else ``("", False)``. Never across families: the rest of the id
    and the major must match, so an unknown vendor, a new major or a minor below every known one
    stays unknown."""
    bases = []
    for candidate in _names(model):
        if candidate in MODEL_WINDOWS:
            return candidate, False
        snapshot = _SNAPSHOT.match(candidate)
        base = snapshot.group(1) if snapshot else candidate
        if snapshot and base in MODEL_WINDOWS:
            return base, False
        bases.append(base)
    families = _families(len(MODEL_WINDOWS))
    for base in bases:
        found = _version(base)
        if found is None:
            continue
        family, minor = found
        members = families.get(family, ())
        same = [member for known, member in members if known == minor]
        if same:  # the version written with the other separator (OpenRouter's ``claude-opus-4.7``)
            return same[0], False
        before = [member for known, member in members if known < minor]
        if before:
            return before[-1], True
    return "", False


@functools.lru_cache(maxsize=_RESOLVED_MAX)
def _remembered(model: str, table_size: int) -> tuple[str, bool]:
    """``_resolve(model)``, remembered per size of the table: an id added to it (by
    ``add_model_windows`` or an edit of ``MODEL_WINDOWS``) makes every model resolve again."""
    return _resolve(model)


def _window(model: str | None) -> tuple[int | None, str]:
    """``model``'s window and, when it is inferred (``_resolve``), the table id it is inferred from
    (else ""); ``(None, "")`` when unknown. Runs on every call: a resolution is remembered."""
    if not isinstance(model, str) or not model:
        return None, ""
    key, inferred = _remembered(model, len(MODEL_WINDOWS)) if len(model) <= _REMEMBERED_CHARS else _resolve(model)
    if not key:
        return None, ""
    return MODEL_WINDOWS.get(key), key if inferred else ""


def window_for(model: str | None) -> int | None:
    """The model's context window in tokens as the table has it (``MODEL_WINDOWS``); snapshots,
    aliases, Bedrock, Vertex, provider-prefixed ids and Ollama tags resolve to their entry
    (docs/budget.md), any other model to None. A new minor of a known family is None here too: the
    budget infers its window (``budget_for``, ``evaluate``) and says so; this is the table's word.

    >>> window_for("gpt-4o-2024-08-06")
    128000
    >>> window_for("us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    200000
    >>> window_for("my-finetune-v7") is None
    True
    """
    if not isinstance(model, str) or not model:
        return None
    key, inferred = _remembered(model, len(MODEL_WINDOWS)) if len(model) <= _REMEMBERED_CHARS else _resolve(model)
    return MODEL_WINDOWS.get(key) if key and not inferred else None


@functools.lru_cache(maxsize=_RESOLVED_MAX)
def _unknown(model: str | None) -> str:
    """Why a model has no window, and the settings that give it one; remembered, as its resolution is."""
    if not isinstance(model, str) or not model:
        return "unknown context window: the request names no model (set Budget(window=...))"
    name = _names(model)[1]
    return (f"unknown context window for model {model!r} (set Budget(window=...), or give {name!r} a window: "
            "instrument(model_windows=) or the CTXGUARD_MODEL_WINDOWS file)")


def _entries(data: object, where: str) -> dict[str, int]:
    """``{id: window}`` from a mapping of ids to windows, or to tables with a ``window`` (the shipped
    file's shape), and the tables under a top-level ``models`` beside them (a TOML file may mix
    ``"gpt-4o" = 64000`` with ``[models."acme-ft"]``). An id given twice is refused: which one
    was meant cannot be told."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a mapping of model id to window, got {type(data).__name__}")
    items = [(model, value) for model, value in data.items() if not (model == "models" and isinstance(value, Mapping))]
    tables = data.get("models")
    if isinstance(tables, Mapping):
        items.extend(tables.items())
    entries: dict[str, int] = {}
    for model, value in items:
        window = value.get("window") if isinstance(value, Mapping) else value
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"{where}: a model id must be a non-empty string, got {model!r}")
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            raise ValueError(f"{where}: {model!r}: the window must be a positive number of tokens, got {window!r}")
        key = model.strip().lower()
        if key in entries:
            raise ValueError(f"{where}: {key!r} is given twice")
        entries[key] = window
    return entries


def add_model_windows(windows: Mapping[str, object]) -> None:
    """Add or override entries of ``MODEL_WINDOWS`` (ids are matched in lower case); they win over
    the shipped ones. ``ValueError`` for an entry that is not a model id and a positive window.

    >>> add_model_windows({"acme-support-ft": 32_768})  # doctest: +SKIP
    """
    MODEL_WINDOWS.update(_entries(windows, "model windows"))


#: A windows file larger than this is refused unread (the shipped table, every model there is,
#: is under 40 KiB).
WINDOWS_FILE_MAX_BYTES = 4 * 1024 * 1024


def _read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, without ever waiting: a FIFO, a
    device (``/dev/zero``), a directory or a larger file is refused (``ValueError``) unread;
    ``OSError`` when it cannot be opened. Opened non-blocking, so opening a FIFO returns at once."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise ValueError(f"{kind}, not a file of windows")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"larger than {limit // (1024 * 1024)} MiB, not read")
    return b"".join(chunks)


def load_model_windows(path: str | Path) -> dict[str, int]:
    """The entries of a TOML or JSON file (JSON when it ends in ``.json``): a mapping of model id to
    window, or tables in the shipped file's shape. ``ValueError`` says what is wrong (a FIFO, a
    device, a file over ``WINDOWS_FILE_MAX_BYTES``: refused unread), ``OSError`` when the file cannot
    be read."""
    raw = _read_regular_file(path, WINDOWS_FILE_MAX_BYTES)
    if str(path).lower().endswith(".json"):
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # also a JSONDecodeError, and bytes that are not UTF-8
            raise ValueError(f"not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    else:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
            raise ValueError(f"not TOML: {type(exc).__name__}: {str(exc)[:200]}") from None
    return _entries(data, "entries")


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
    """The equation as a value; ``str()`` prints it term by term. ``window_inferred``: for a model
    the table does not have, the table id whose window it was given (the version it follows in its
    family: ``gpt-5.6`` for ``gpt-5.7``); None when the window is the table's or the caller's."""

    model: str
    window: int
    system: int
    tools: int
    retrieved: int
    reserved_output: int
    reserved_reasoning: int
    window_inferred: str | None = None

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
        if self.window_inferred is not None:
            lines[0] += f"  inferred from {self.window_inferred}"
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
    """The equation for ``model``, every term given (the window from the table unless given; for a
    new minor of a family the table knows, the window of the version it follows, named in
    ``window_inferred``).

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
    >>> budget_for("gemini-3.9-flash").window_inferred
    'gemini-3.8-flash'
    """
    _check_terms(
        window=window,
        system=system,
        tools=tools,
        retrieved=retrieved,
        reserved_output=reserved_output,
        reserved_reasoning=reserved_reasoning,
    )
    inferred = ""
    if window is None:
        window, inferred = _window(model)
        if window is None:
            raise ValueError(f"unknown context window for model {model!r}; pass window= (or add it: add_model_windows)")
    return BudgetBreakdown(
        model, window, system, tools, retrieved, reserved_output, reserved_reasoning, inferred or None
    )


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
    ``num_ctx``), else the model table's, else its family's (``breakdown.window_inferred``).

    >>> ev = evaluate(Budget(window=1000), model="m", input_tokens=900, system_tokens=0, tools_tokens=0,
    ...               max_output_tokens=200)
    >>> ev.headroom, ev.utilization
    (-100, 1.1)
    >>> evaluate(Budget(), model="my-finetune-v7", input_tokens=900, system_tokens=0, tools_tokens=0,
    ...          max_output_tokens=None)  # doctest: +ELLIPSIS
    "unknown context window for model 'my-finetune-v7' (set Budget(window=...), or give 'my-finetune-v7' a window: ...)"
    """
    window = budget.window if budget.window is not None else request_window
    inferred = ""
    if window is None:
        window, inferred = _window(model)
        if window is None:
            return _unknown(model) if model is None or len(model) <= _REMEMBERED_CHARS else _unknown.__wrapped__(model)
    if window <= 0:
        return "window must be positive"
    reserved_output = budget.reserved_output if budget.reserved_output is not None else max_output_tokens or 0
    tools = budget.tools if budget.tools is not None else tools_tokens
    breakdown = _breakdown(
        model or "",
        window,
        system_tokens,
        tools,
        budget.retrieved,
        reserved_output,
        budget.reserved_reasoning,
        inferred or None,
    )
    history = max(0, input_tokens - system_tokens - tools_tokens - budget.retrieved)
    return BudgetEval(breakdown, input_tokens, history, budget.history_max)
