"""The units a history can be trimmed by without the provider rejecting what is left.

An assistant message that calls tools and the results that answer it form one unit:
OpenAI answers each ``tool_calls[].id`` with a ``tool`` message carrying its
``tool_call_id``; Anthropic answers each ``tool_use`` block with a ``tool_result``
block (``tool_use_id``) in the next user message. Every other message is a unit of
its own. A call left without all its results, or a result without its call, would
make the provider reject the request, so such messages are not units at all: they
are never sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["alternate", "split_units", "tool_calls", "tool_results"]


_NONE: frozenset[str] = frozenset()


def _blocks(content: Any) -> Sequence[Any]:
    return content if isinstance(content, (list, tuple)) else ()


def tool_calls(message: Mapping[str, Any]) -> frozenset[str]:
    """Ids of the tool calls an assistant message opens (OpenAI or Anthropic form)."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or (not calls and type(message.get("content")) is str):
        return _NONE  # the common case, decided without a walk
    ids = [call.get("id") for call in calls or () if isinstance(call, Mapping)]
    ids += [
        block.get("id")
        for block in _blocks(message.get("content"))
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
    ]
    return frozenset(i for i in ids if isinstance(i, str))


def tool_results(message: Mapping[str, Any]) -> frozenset[str]:
    """Ids of the tool calls a message answers (OpenAI ``tool`` message or Anthropic blocks)."""
    role = message.get("role")
    if role == "tool":
        call_id = message.get("tool_call_id")
        return frozenset((call_id,)) if isinstance(call_id, str) else frozenset(("",))
    if role != "user" or type(message.get("content")) is str:
        return _NONE
    return frozenset(
        str(block.get("tool_use_id"))
        for block in _blocks(message.get("content"))
        if isinstance(block, Mapping) and block.get("type") == "tool_result"
    )


def split_units(messages: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[int, int]], list[int]]:
    """``(units, orphans)``: ``[start, stop)`` ranges that can be kept or dropped whole, in
    order, and the indices of messages that can never be sent (incomplete tool exchanges)."""
    units: list[tuple[int, int]] = []
    orphans: list[int] = []
    open_at: int | None = None
    pending: set[str] = set()
    for i, message in enumerate(messages):
        answers = tool_results(message)
        if open_at is not None:
            if answers and answers <= pending:
                pending -= answers
                if not pending:
                    units.append((open_at, i + 1))
                    open_at = None
                continue
            orphans.extend(range(open_at, i))  # interrupted before every call was answered
            open_at = None
        if answers:
            orphans.append(i)
            continue
        calls = tool_calls(message)
        if calls:
            open_at, pending = i, set(calls)
        else:
            units.append((i, i + 1))
    if open_at is not None:
        orphans.extend(range(open_at, len(messages)))
    return units, orphans


def _as_blocks(content: Any) -> list[Any]:
    return list(content) if isinstance(content, (list, tuple)) else [{"type": "text", "text": str(content)}]


def alternate(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic form: merge consecutive same-role messages into one (blocks kept whole, in
    order), so roles alternate. Messages that need no merge are returned as they are."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"]:
            prev = out[-1]
            out[-1] = {"role": prev["role"], "content": _as_blocks(prev["content"]) + _as_blocks(message["content"])}
        else:
            out.append(message)
    return out
