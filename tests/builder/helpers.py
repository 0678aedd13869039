"""Judging a built payload with the guard's own pipeline, and an independent orphan check."""

from __future__ import annotations

from typing import Any

from ctxguard.checks import Outcome
from ctxguard.conversation import current_conversation
from ctxguard.guard import Guard
from ctxguard.providers.anthropic import PROVIDER as ANTHROPIC
from ctxguard.providers.openai import PROVIDER as OPENAI


def judge(guard: Guard, kwargs: dict[str, Any], provider: str = "openai") -> dict[str, Outcome]:
    """Every check's outcome for this request, through normalise -> measure -> checks (nothing sent)."""
    record, api = (OPENAI, "chat.completions") if provider == "openai" else (ANTHROPIC, "messages")
    payload = guard.measurer.measure(record.adapter.normalise(api, kwargs))
    verdict = guard._inspector.inspect(payload, current_conversation(), guard.policy)
    return {o.check: o for o in verdict.outcomes}


def openai_orphans(messages: list[dict[str, Any]]) -> list[str]:
    """Tool calls without all their results right after them, and results without their call."""
    problems = []
    open_ids: set[str] = set()
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            if m.get("tool_call_id") not in open_ids:
                problems.append(f"result {i} answers no open call")
            open_ids.discard(m.get("tool_call_id"))
            continue
        if open_ids:
            problems.append(f"calls {sorted(open_ids)} unanswered before message {i}")
        open_ids = {c["id"] for c in m.get("tool_calls") or ()}
    if open_ids:
        problems.append(f"calls {sorted(open_ids)} unanswered at the end")
    return problems


def _blocks(m: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = m.get("content")
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind] if isinstance(content, list) else []


def anthropic_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Orphans, and roles that do not alternate starting with user."""
    problems = []
    if not messages or messages[0]["role"] != "user":
        problems.append("first message is not a user message")
    for i, m in enumerate(messages):
        if i and m["role"] == messages[i - 1]["role"]:
            problems.append(f"messages {i - 1} and {i} are both {m['role']}")
        calls = {b["id"] for b in _blocks(m, "tool_use")}
        if calls:
            after = messages[i + 1] if i + 1 < len(messages) else {}
            answered = {b["tool_use_id"] for b in _blocks(after, "tool_result")}
            if calls - answered:
                problems.append(f"tool_use {sorted(calls - answered)} in message {i} unanswered")
        results = {b["tool_use_id"] for b in _blocks(m, "tool_result")}
        if results:
            opened = {b["id"] for b in _blocks(messages[i - 1], "tool_use")} if i else set()
            if results - opened:
                problems.append(f"tool_result {sorted(results - opened)} in message {i} answers no call")
    return problems
