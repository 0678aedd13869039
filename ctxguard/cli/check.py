"""``ctxguard check FILE.jsonl [--policy P.toml] [--json]``: the checks, offline, over a capture.

Prints one line per conversation, in order of first appearance::

    order-41: first violation at turn 5: system_at_head, pinned_present
    order-42: ok (12 turns)
    order-43: not judged (1 of 4 requests not read offline)

then a summary line, and why requests were not read offline. Exit 0 clean, 1 on
violations, 2 on unreadable input (the line is named), 3 when nothing failed but
some requests were not judged. The file is streamed: memory grows with the number of
conversations, not of lines. Ids from the file are printed through ``printable``,
so no id can forge a line of this output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from ..capture import CaptureError, RequestLine, printable, read_capture
from ..offline import (
    CAPTURED_PROVIDERS,
    NO_CONVERSATION,
    Checker,
    TurnResult,
    conversation_line,
    load_policy,
    not_read_because,
)

__all__ = ["NOT_JUDGED", "add_arguments", "capture_arguments", "judge_capture", "progress_bar", "run_check"]

#: The exit status of a check that found no violation but could not judge every request.
NOT_JUDGED = 3

def capture_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of every verb that reads a capture (``check``, ``report``)."""
    parser.add_argument("file", metavar="FILE.jsonl", help="capture file (one request per line)")
    parser.add_argument("--policy", metavar="P.toml", help="policy: [pinned] and [budget] tables, top-level flags")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal and the file is large)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    capture_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout instead of text")


@dataclass
class _Checked:
    turns: int = 0
    unread: int = 0  # requests not read offline
    first: TurnResult | None = None
    checks: dict[str, int] = field(default_factory=dict)  # failed check -> turns it failed in


def fail(message: str) -> int:
    """Print the one line of an error (on stderr) and return exit status 2."""
    print(f"ctxguard: {message}", file=sys.stderr)
    return 2


def progress_bar(total: int, enabled: bool | None, stream: IO[str] | None = None) -> Callable[[int], None] | None:
    """A ``progress(done_bytes)`` callback drawing a bar on stderr, or None when not wanted."""
    stream = stream if stream is not None else sys.stderr
    if enabled is None:
        enabled = stream.isatty() and total >= 8 * 1024 * 1024
    if not enabled or total <= 0:
        return None
    shown = [-1]

    def progress(done: int) -> None:
        percent = min(100, done * 100 // total)
        if percent != shown[0]:
            shown[0] = percent
            bar = "#" * (percent // 4)
            stream.write(f"\r[{bar:<25}] {percent:3d}% {done / 1e6:.1f}/{total / 1e6:.1f} MB")
            if percent == 100:
                stream.write("\n")
            stream.flush()

    return progress


def judge_capture(args: argparse.Namespace, consume: Callable[[RequestLine, TurnResult | None], None]) -> int | None:
    """Load ``args.policy``, stream ``args.file`` through the offline checks and hand each request
    line with its result to ``consume``. Returns an exit code (2) when the input is unusable."""
    try:
        policy = load_policy(args.policy) if args.policy else None
    except OSError as exc:
        return fail(f"{printable(args.policy)}: {exc.strerror or exc}")
    except ValueError as exc:
        return fail(f"{printable(args.policy)}: {printable(str(exc), 300)}")
    name = printable(args.file)
    try:
        handle = open(args.file, "rb")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        return fail(f"{name}: {exc.strerror or exc}")
    requests = 0
    with handle:
        size = os.fstat(handle.fileno()).st_size
        try:
            lines = read_capture(handle, CAPTURED_PROVIDERS, progress=progress_bar(size, args.progress))
            for line, result in Checker(policy).judge(lines):
                requests += 1
                consume(line, result)
        except CaptureError as exc:
            return fail(f"{name}: {exc}")
    if requests == 0:
        return fail(f"{name}: no request lines")
    return None


def run_check(args: argparse.Namespace) -> int:
    conversations: dict[str | None, _Checked] = {}
    unjudged: dict[tuple[str, str | None], int] = {}  # (provider, sdk) -> requests not judged offline

    def consume(line: RequestLine, result: TurnResult | None) -> None:
        seen = conversations.setdefault(line.conversation_id, _Checked())
        seen.turns += 1
        if result is None:
            seen.unread += 1
            unjudged[line.provider, line.sdk] = unjudged.get((line.provider, line.sdk), 0) + 1
        elif result.failed:
            for check in result.failed:
                seen.checks[check] = seen.checks.get(check, 0) + 1
            if seen.first is None:
                seen.first = result

    error = judge_capture(args, consume)
    if error is not None:
        return error
    requests = sum(c.turns for c in conversations.values())
    violating = sum(1 for c in conversations.values() if c.first is not None)
    not_judged = sum(1 for c in conversations.values() if c.first is None and c.unread)
    if args.json:
        document = _document(args.file, requests, conversations, violating)
        document["not_judged_conversations"] = not_judged
        document["not_judged_offline"] = [
            {"provider": provider, "sdk": sdk, "requests": count, "reason": not_read_because(sdk, provider)}
            for (provider, sdk), count in unjudged.items()
        ]
        print(json.dumps(document, indent=2))
    else:
        for cid, seen in conversations.items():
            name = printable(cid) if cid is not None else NO_CONVERSATION
            print(conversation_line(name, seen.first, seen.turns, seen.unread))
        judged = requests - sum(unjudged.values())
        also = f", {not_judged} not judged" if not_judged else ""
        of = f" of {requests}" if judged != requests else ""
        print(f"checked {judged}{of} requests in {len(conversations)} conversations: {violating} with violations{also}")
        for (provider, sdk), count in unjudged.items():
            print(f"not judged offline: {count} {provider} requests ({not_read_because(sdk, provider)})")
    return 1 if violating else NOT_JUDGED if unjudged else 0


def _document(path: str, requests: int, conversations: dict[str | None, _Checked], violating: int) -> Any:
    out = []
    for cid, seen in conversations.items():
        entry: dict[str, Any] = {"conversation_id": cid, "turns": seen.turns, "not_read": seen.unread,
                                 "first_violation": None, "failed_turns_by_check": seen.checks}
        first = seen.first
        if first is not None:
            entry["first_violation"] = {
                "turn": first.turn,
                "line": first.line,
                "checks": first.failed,
                "violations": [
                    {"check": v.check, "detail": v.detail, "fact_id": v.fact_id, "stage": v.stage}
                    for v in first.violations
                ],
            }
        out.append(entry)
    return {"file": path, "requests": requests, "conversations": out, "violating_conversations": violating}
