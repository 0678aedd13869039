"""Checking captured request bodies offline: the engine behind ``ctxguard check`` and ``report``.

Each captured body goes through the same inspection as a live call (the provider
module's normalise, measure, the checks: ``inspection.Inspector``), in a private
inspector that touches nothing of the process: its own fact sinks, no telemetry.
Fact lines of the capture feed its ledger, so the fact checks judge each turn
against the facts recorded before it. A body is read by the provider module of the SDK
that wrote it (the line's ``sdk``; a line without one, by its label when that is an SDK's
own), never by a guess: a body no module reads is counted as not judged
(``offline_reader`` says why). Checks judged only after sending
(``wire_intact``: the capture *is* the wire body; ``answer_consistent`` and
``provider_kept_all``: no answer is captured) are not part of offline results.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import facts as facts_mod
from ._isolation import add_error_hook, remove_error_hook
from .budget import Budget
from .capture import CaptureError, FactLine, RequestLine, printable
from .checks import CHECKS
from .config import Config
from .facts.evaluate import FactView
from .facts.matching import MIN_MATCH_CHARS
from .guard import inspector_for
from .inspection import Verdict
from .policy import Pinned, Policy
from .providers import BY_DISTRIBUTION, BY_LABEL, LABELS
from .providers.base import Provider
from .violations import Violation

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "FACT_STATUSES",
    "NO_CONVERSATION",
    "CAPTURED_PROVIDERS",
    "OFFLINE_CHECKS",
    "PROVIDERS",
    "READERS",
    "Checker",
    "TurnResult",
    "as_call",
    "conversation_line",
    "first_violation",
    "load_policy",
    "not_read_because",
    "offline_reader",
]

#: Providers whose captured bodies are judged offline, by the SDK that wrote them (a line's ``sdk``).
READERS: dict[str, Provider] = {sdk: p for sdk, p in BY_DISTRIBUTION.items() if p.adapter.reads_captures}

#: The same, by their own label: how a line without ``sdk`` is read (older and hand-written captures).
PROVIDERS: dict[str, Provider] = {label: p for label, p in BY_LABEL.items() if p.adapter.reads_captures}

#: Every provider label a capture may carry; lines of others are refused as unknown.
CAPTURED_PROVIDERS = frozenset(LABELS)

#: How a request without a conversation id is listed.
NO_CONVERSATION = "(no conversation id)"

#: The checks judged offline, in contract order.
OFFLINE_CHECKS: tuple[str, ...] = tuple(CHECKS)

#: Per-turn status of a fact, worst first (the grid shows one word per fact per turn).
#: ``deleted``: forgotten, and correctly absent; ``unjudged``: a value too short to match
#: reliably (under 3 characters), neither present nor absent.
FACT_STATUSES = ("leaked", "stale", "missing", "present", "deleted", "unjudged")


@dataclass(slots=True)
class TurnResult:
    """What the checks found in one captured request."""

    line: int
    conversation_id: str | None
    turn: int
    provider: str
    model: str | None
    messages: int
    head_role: str | None
    tokens: int
    #: The budget line: tokens the input may take (window minus the reservations), if known.
    input_limit: int | None
    window: int | None
    outcomes: dict[str, str]  # check -> "pass" | "fail" | "skip"
    violations: list[Violation] = field(default_factory=list)
    #: fact id -> one of FACT_STATUSES (``leaked`` also covers another conversation's value)
    facts: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [check for check, outcome in self.outcomes.items() if outcome == "fail"]


def offline_reader(sdk: str | None, label: str) -> Provider | None:
    """The provider module that reads a body written by ``sdk`` (a line without one: by ``label``,
    when it is an SDK's own), or None: no module does, and the line is not judged offline
    (``not_read_because`` says why). Never a guess: a route's label (``azure.ai.openai``,
    ``aws.bedrock`` by another SDK than botocore, ...) does not say what wrote the body.

    >>> offline_reader("openai", "azure.ai.openai").distribution
    'openai'
    >>> offline_reader(None, "azure.ai.openai") is None
    True
    """
    return READERS.get(sdk) if sdk is not None else PROVIDERS.get(label)


def as_call(provider: Provider, body: Mapping[str, Any], model: str | None = None) -> tuple[str, Mapping[str, Any]]:
    """``(api, kwargs)``: a captured body as ``provider``'s call site would have seen it (its
    adapter's ``from_capture``; ``offline_reader`` finds only providers that have one)."""
    found = provider.adapter.from_capture(body, model)
    if found is None:
        raise ValueError(f"{provider.distribution} does not read captured bodies")
    return found


def not_read_because(sdk: str | None, label: str) -> str:
    """Why a line that ``offline_reader`` finds no reader for is not judged."""
    if sdk is not None:
        return f"written by {sdk} in a request format not read offline"
    return f"captured without 'sdk', and the label '{label}' does not say which SDK wrote the body"


class Checker:
    """Feeds capture lines, in file order, through a private inspector.

    >>> body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Where is my parcel?"}]}
    >>> result = Checker(Policy()).request(RequestLine(1, "order-41", 1, "openai", body, None))
    >>> result.failed, result.head_role
    (['system_at_head'], 'user')
    """

    def __init__(self, policy: Policy | None = None, *, digest_key: bytes | None = None) -> None:
        self.sinks = facts_mod.Sinks()
        self.policy = policy if policy is not None else Policy()
        self.inspector = inspector_for(Config(digest_key=digest_key or os.urandom(16)), self.sinks)

    def fact(self, line: FactLine) -> None:
        self.sinks.record(line.event)

    def request(self, line: RequestLine) -> TurnResult | None:
        """Judge one captured body; None for one not judged offline (``offline_reader``)."""
        provider = offline_reader(line.sdk, line.provider)
        if provider is None:
            return None
        api, kwargs = as_call(provider, line.body, line.model)
        cid = line.conversation_id
        scope = (cid, line.tenant) if cid is not None else None
        # The line's label is the provider the call reached: it says how the request was counted.
        payload = self.inspector.measure(provider, api, kwargs, scope, line.provider)
        verdict = self.inspector.inspect(payload, scope, self.policy) if payload is not None else None
        if verdict is None or verdict.ctx is None:
            raise RuntimeError("the request was not inspected")
        return _result(line, verdict)

    def judge(self, lines: Iterable[RequestLine | FactLine]) -> Iterator[tuple[RequestLine, TurnResult | None]]:
        """Feed every line in order; yield each request line with its result.

        A line ctxguard fails on (an error it would swallow on a live call, where the call
        must go on) raises ``CaptureError`` naming it: offline, a partial verdict would read
        as a clean one.

        >>> for line, result in Checker().judge(read_capture(f, CAPTURED_PROVIDERS)): ...  # doctest: +SKIP
        """
        me = threading.get_ident()
        swallowed: list[tuple[str, BaseException]] = []

        def hook(where: str, exc: BaseException) -> None:
            if threading.get_ident() == me:
                swallowed.append((where, exc))

        add_error_hook(hook)
        try:
            for line in lines:
                result = None
                try:
                    if isinstance(line, RequestLine):
                        result = self.request(line)
                    else:
                        self.fact(line)
                except Exception as exc:
                    swallowed.append(("offline", exc))
                if swallowed:
                    where, error = swallowed[0]
                    raise CaptureError(line.line, f"could not be judged ({where}: {type(error).__name__}: "
                                                  f"{printable(str(error), 200)}); please report it as a ctxguard bug")
                if isinstance(line, RequestLine):
                    yield line, result
        finally:
            remove_error_hook(hook)


def first_violation(name: str, result: TurnResult) -> str:
    """The line ``ctxguard check`` prints: ``order-41: first violation at turn 5: system_at_head``."""
    return f"{name}: first violation at turn {result.turn}: {', '.join(result.failed)}"


def conversation_line(name: str, first: TurnResult | None, requests: int, unread: int) -> str:
    """What ``ctxguard check`` says of a conversation: its first violation, else ``ok``, unless a
    request of it was not read offline (``unread`` of its ``requests``): a conversation not
    judged whole is never ``ok``, and its first violation may not be the first.

    >>> conversation_line("order-41", None, 3, 1)
    'order-41: not judged (1 of 3 requests not read offline)'
    """
    unjudged = f"{unread} of {requests} request{'' if requests == 1 else 's'} not read offline"
    if first is not None:
        return first_violation(name, first) + (f" ({unjudged})" if unread else "")
    if unread:
        return f"{name}: not judged ({unjudged})"
    return f"{name}: ok ({requests} turn{'' if requests == 1 else 's'})"


def _result(line: RequestLine, verdict: Verdict) -> TurnResult:
    payload, ctx = verdict.payload, verdict.ctx
    assert ctx is not None
    budget = ctx.budget
    window = input_limit = None
    if not isinstance(budget, str):
        window = budget.breakdown.window
        input_limit = window - budget.reserved
    head = payload.head
    return TurnResult(
        line=line.line,
        conversation_id=line.conversation_id,
        turn=line.turn,
        provider=line.provider,
        model=payload.model,
        messages=len(payload.messages),
        head_role=head.role if head is not None else None,
        tokens=payload.tokens,
        input_limit=input_limit,
        window=window,
        outcomes={o.check: o.outcome for o in verdict.outcomes},
        violations=list(verdict.violations),
        facts=_fact_statuses(ctx.facts) if isinstance(ctx.facts, FactView) else {},
    )


def _fact_statuses(view: FactView) -> dict[str, str]:
    state = view.state
    status: dict[str, str] = {}

    def worse(fact_id: str, word: str) -> None:
        old = status.get(fact_id)
        if old is None or FACT_STATUSES.index(word) < FACT_STATUSES.index(old):
            status[fact_id] = word

    for fact_id, version in state.active.items():
        worse(fact_id, "unjudged" if fact_id in view.too_short else "present" if view.sent(version) else "missing")
    for fact_id, versions in state.stale.items():
        if any(view.sent(v) for v in versions):
            worse(fact_id, "stale")
    for fact_id, versions in state.forgotten.items():
        if any(view.sent(v) for v in versions):
            worse(fact_id, "leaked")
        elif all(len(v.norm) < MIN_MATCH_CHARS for v in versions):
            worse(fact_id, "unjudged")
        else:
            worse(fact_id, "deleted")
    for _, version in view.foreign:
        worse(version.fact_id, "leaked")
    return status


def load_policy(path: str) -> Policy:
    """A ``Policy`` from TOML: top-level ``system_at_head``/``require_facts``, tables
    ``[pinned]`` and ``[budget]`` with the constructor's argument names. ``ValueError``
    says what is wrong (``OSError`` when the file cannot be read)."""
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except RecursionError:
            raise ValueError("not readable TOML (nested too deeply)") from None
    known = {"system_at_head", "require_facts", "pinned", "budget"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown policy keys {sorted(unknown)}; known: {sorted(known)}")
    for flag in ("system_at_head", "require_facts"):
        if not isinstance(data.get(flag, True), bool):
            raise ValueError(f"{flag} must be true or false")
    for table in ("pinned", "budget"):
        if not isinstance(data.get(table, {}), dict):
            raise ValueError(f"{table} must be a table ([{table}])")
    pinned = data.get("pinned")
    budget = data.get("budget")
    try:
        return Policy(
            system_at_head=data.get("system_at_head", True),
            require_facts=data.get("require_facts", True),
            pinned=Pinned(**pinned) if pinned is not None else None,
            budget=Budget(**budget) if budget is not None else None,
        )
    except TypeError as exc:  # an unknown argument name in a table
        raise ValueError(str(exc)) from None
