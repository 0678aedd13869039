"""Tool exchanges: every tool call has its result, every result its call.

A history trimmer that cuts through a tool exchange leaves an assistant tool call whose result is
gone, or a result whose call is gone; every provider answers that request with a 400. The
providers put each message's calls and results in the neutral form (``payload.TOOL_CALL`` /
``TOOL_RESULT`` refs, which the measurer keeps on ``Message.tool_refs``) and say where the API wants
the results (``Payload.tool_results``): ``"next"``, in the run of result messages right after the
call's message (Chat Completions, Anthropic, Gemini), or ``"later"``, anywhere after it (the
Responses API). This check reads only that: nothing at all of a payload without tool refs
(``Payload.first_tool``), and of a conversation that grows, only what each call adds (``_Run``).
"""

from __future__ import annotations

from sys import getsizeof

from ..cache import ENTRY_BYTES, TwoGenerationCache
from ..payload import TOOL_CALL, TOOL_REFS, TOOL_RESULT, Payload
from ..violations import Violation
from .base import Context, Skip

__all__ = ["ELSEWHERE", "run_cache", "tool_pairs_intact"]

_CALL, _RESULT, _KIND = len(TOOL_CALL), len(TOOL_RESULT), len(TOOL_REFS)
_SHORT = 40  # characters of an id or a name in a violation's detail
#: Why results whose call is not in the payload were not judged, when a message stands for stored
#: items (an OpenAI ``item_reference``): their calls may be among them.
ELSEWHERE = "tool calls may be in items the provider holds (item_reference)"


def _key(body: str) -> tuple[str, str]:
    """A ref's key after its kind: ``=<id>``, ``:<name>`` or ``:<name>=<id>`` -> (name, id), each
    ``""`` when absent. A name holds no ``=`` (the providers' function names do not)."""
    if body[:1] == ":":
        name, _, call_id = body[1:].partition("=")
        return name, call_id
    return "", body[1:]


def _answers(result: tuple[str, str], call: tuple[str, str]) -> bool:
    """By id when both carry one, else by name: Gemini's own function calling answers an id'd
    call by name only."""
    if result[1] and call[1]:
        return result[1] == call[1]
    return bool(result[0]) and result[0] == call[0]


def _short(text: str) -> str:
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def _named(key: tuple[str, str]) -> str:
    """The id, or the function's name (quoted) when there is no id: never a message's content."""
    name, call_id = key
    if call_id:
        return _short(call_id)
    return repr(_short(name)) if name else "without an id"


#: Calls awaiting their result: key (what follows ``TOOL_CALL``) -> the messages they are in, in
#: order (a tuple, replaced when it changes, so that a copy of the dict is a copy of the state).
Pending = dict[str, tuple[int, ...]]


class _Run:
    """What the check knew after the messages of a payload, before its end, and its verdict: the
    next call of a conversation that grows (its payload begins with all of this one's messages:
    ``Payload.extends``) goes on from there and reads only the messages it adds; a call that
    resends the same messages has its verdict at once. Never changed once kept."""

    __slots__ = ("adjacent", "length", "pending", "previous", "stored", "unjudged", "verdict", "violations")

    def __init__(self, adjacent: bool, unjudged: str | None, stored: bool, length: int, previous: int,
                 pending: Pending, violations: list[Violation], verdict: list[Violation] | Skip) -> None:
        self.adjacent, self.unjudged, self.stored = adjacent, unjudged, stored
        self.length, self.previous, self.pending, self.violations = length, previous, pending, violations
        self.verdict = verdict


def _run_bytes(digest: str, run: _Run) -> int:
    """The run, its dict and lists; a pending call's key (an id of any length) and tuple; a
    violation and its detail (counted in both lists, though the verdict's are mostly the same)."""
    verdict = () if isinstance(run.verdict, Skip) else run.verdict
    return (ENTRY_BYTES + _RUN_BYTES + sum(getsizeof(key) + _PENDING_BYTES for key in run.pending)
            + sum(getsizeof(v.detail) + _VIOLATION_BYTES for v in (*run.violations, *verdict)))


_RUN_BYTES, _PENDING_BYTES, _VIOLATION_BYTES = 400, 150, 400


def run_cache() -> TwoGenerationCache[str, _Run]:
    """The last run of each payload with tool refs, by its digest (a digest names its messages, so a
    run found is the run of these messages; the rest of what it depends on is compared)."""
    return TwoGenerationCache(4096, 1 << 20, _run_bytes)


def tool_pairs_intact(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    first = payload.first_tool
    elsewhere = payload.history_elsewhere
    if first is None:  # no message has tool refs: the whole cost on most payloads
        return [] if elsewhere is None else Skip(elsewhere)
    adjacent = payload.tool_results != "later"
    runs = ctx.caches.runs
    run = runs.get(payload.extends) if payload.extends is not None else None
    if (run is not None and run.adjacent == adjacent and run.length <= len(payload.messages)
            and run.unjudged == (ELSEWHERE if run.stored else elsewhere)):
        if run.length == len(payload.messages):  # the same messages again
            return run.verdict if isinstance(run.verdict, Skip) else run.verdict[:]
        found = _judge(payload, adjacent, run.stored, run, runs)
        if found is not None:
            return found
    found = _judge(payload, adjacent, False, None, runs)
    if found is None:  # a message stands for stored items: judged again, knowing it
        found = _judge(payload, adjacent, True, None, runs) or []  # never None with ``stored``
    return found


def _judge(payload: Payload, adjacent: bool, stored: bool, run: _Run | None,
           runs: TwoGenerationCache[str, _Run]) -> list[Violation] | Skip | None:
    """The verdict, from ``run`` on if given, else from the first message with tool refs. ``stored``:
    whether a message stands for stored items (``TOOL_ELSEWHERE``); None if one is found while
    that is False (results before it were judged as if every call were in the payload)."""
    messages = payload.messages
    # Where calls may be that the payload does not show: results without their call are then not
    # judged, and the check passes only what it could judge (a skip, unless something failed).
    unjudged = ELSEWHERE if stored else payload.history_elsewhere
    if run is not None:
        start, previous, pending, violations = run.length, run.previous, run.pending.copy(), run.violations[:]
    else:
        start = payload.first_tool or 0
        previous, pending, violations = start - 1, {}, []
    for index in range(start, len(messages)):
        tools = messages[index].tool_refs
        if not tools:
            continue
        if adjacent and index != previous + 1:
            _unanswered(pending, violations, adjacent)  # a message without tool refs came between
        previous = index
        calls = _read(tools, index, pending, violations, unjudged, adjacent, stored)
        if calls is None:
            return None
        if calls:
            if adjacent:
                _unanswered(pending, violations, adjacent)  # a new call message ends the previous run
            for key in calls:
                pending[key] = (*pending.get(key, ()), index)
    kept = pending.copy(), violations[:]
    if stored:
        pending.clear()  # a stored item may be any call's output, too
    _unanswered(pending, violations, adjacent)
    verdict: list[Violation] | Skip = violations if violations else Skip(unjudged) if unjudged is not None else []
    runs.put(payload.digest, _Run(adjacent, unjudged, stored, len(messages), previous, *kept,
                                  verdict[:] if isinstance(verdict, list) else verdict))
    return verdict


def _read(tools: tuple[str, ...], index: int, pending: Pending, violations: list[Violation],
          unjudged: str | None, adjacent: bool, stored: bool) -> list[str] | None:
    """One message's refs: its results close pending calls (or are violations), its calls are
    returned; None if it stands for stored items and ``stored`` is False."""
    calls: list[str] = []
    for ref in tools:
        kind = ref[_KIND : _KIND + 1]  # after "id:tool_": c(all), r(esult) or e(lsewhere)
        if kind == "r":
            key = ref[_RESULT:]
            indices = pending.get(key)
            if indices is None and key[:1] == ":":
                named = _by_name(key, pending)
                if named is not None:
                    key, indices = named, pending[named]
            if indices is not None:
                if len(indices) > 1:
                    pending[key] = indices[1:]
                else:
                    del pending[key]
            elif unjudged is None:
                where = "right before it" if adjacent else "before it"
                detail = f"tool result {_named(_key(ref[_RESULT:]))} (message {index}) answers no call {where}"
                violations.append(Violation("tool_pairs_intact", detail))
        elif kind == "c":
            calls.append(ref[_CALL:])
        elif not stored:
            return None
    return calls


def _unanswered(pending: Pending, violations: list[Violation], adjacent: bool) -> None:
    """Every call still pending is an orphan: its results' run is over."""
    where = "right after it" if adjacent else "after it"
    for key, indices in pending.items():
        for index in indices:
            detail = f"tool call {_named(_key(key))} (message {index}) has no result {where}"
            violations.append(Violation("tool_pairs_intact", detail))
    pending.clear()


def _by_name(key: str, pending: Pending) -> str | None:
    """The key of the earliest open call a result known by name answers (``_answers``), if any."""
    result = _key(key)
    found = [(indices[0], call) for call, indices in pending.items() if _answers(result, _key(call))]
    return min(found)[1] if found else None
