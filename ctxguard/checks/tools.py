"""Tool exchanges: every tool call has its result, every result its call.

A history trimmer that cuts through a tool exchange leaves an assistant tool call whose result is
gone, or a result whose call is gone; every provider answers that request with a 400. The
providers put each message's calls and results in the neutral form (``payload.TOOL_CALL`` /
``TOOL_RESULT`` refs, which the measurer keeps on ``Message.tools``) and say where the API wants
the results (``Payload.tool_results``): ``"next"``, in the run of result messages right after the
call's message (Chat Completions, Anthropic, Gemini), or ``"later"``, anywhere after it (the
Responses API). This check reads only that.
"""

from __future__ import annotations

from itertools import compress, count
from operator import attrgetter

from ..payload import TOOL_CALL, TOOL_ELSEWHERE, TOOL_RESULT, Payload
from ..violations import Violation
from .base import Context, Skip

__all__ = ["ELSEWHERE", "tool_pairs_intact"]

_tools_of = attrgetter("tools")
_CALL, _RESULT = len(TOOL_CALL), len(TOOL_RESULT)
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


def tool_pairs_intact(payload: Payload, ctx: Context) -> list[Violation] | Skip:
    messages = payload.messages
    # The messages with tool refs, found in C: on a payload without any, this is the whole cost.
    at = list(compress(count(), map(_tools_of, messages)))
    elsewhere = payload.history_elsewhere
    if not at:
        return [] if elsewhere is None else Skip(elsewhere)
    adjacent = payload.tool_results != "later"
    after, before = ("right after it", "right before it") if adjacent else ("after it", "before it")
    violations: list[Violation] = []
    # Where calls may be that the payload does not show: results without their call are then not
    # judged, and the check passes only what it could judge (a skip, unless something failed).
    stored = any(TOOL_ELSEWHERE in messages[index].tools for index in at)
    unjudged = ELSEWHERE if stored else elsewhere
    pending: list[tuple[int, tuple[str, str]]] = []  # calls awaiting their result: (message, key)

    def unanswered() -> None:
        for index, key in pending:
            violations.append(Violation(
                "tool_pairs_intact", f"tool call {_named(key)} (message {index}) has no result {after}"))
        pending.clear()

    previous = -2
    for index in at:
        if adjacent and index != previous + 1:
            unanswered()  # a message without tool refs came between: the run of results ended
        previous = index
        calls: list[tuple[int, tuple[str, str]]] = []
        for ref in messages[index].tools:
            if ref.startswith(TOOL_RESULT):
                result = _key(ref[_RESULT:])
                # The earliest open call it answers: by name, parallel calls of one function are
                # answered in order.
                found = next((n for n, (_, key) in enumerate(pending) if _answers(result, key)), None)
                if found is not None:
                    del pending[found]
                elif unjudged is None:
                    detail = f"tool result {_named(result)} (message {index}) answers no call {before}"
                    violations.append(Violation("tool_pairs_intact", detail))
            elif ref.startswith(TOOL_CALL):
                calls.append((index, _key(ref[_CALL:])))
        if calls:
            if adjacent:
                unanswered()  # a new call message: the previous calls' run of results is over
            pending.extend(calls)
    if stored:
        pending.clear()  # a stored item may be any call's output, too
    unanswered()
    if violations:
        return violations
    return Skip(unjudged) if unjudged is not None else []
