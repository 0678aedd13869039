"""``ctxguard diff A.json B.json``: diff the request, not the response.

Compares two request payloads message by message, by keyed digest: each message
is ``kept`` (same content, same relative order), ``moved`` (same content, out of
order), ``changed`` (same role and place, other content), ``added`` or
``removed``. Prints the head role of each payload; exit 0 when the payloads carry
the same messages in the same order, 1 when they differ, 2 on unreadable input.
A file holds a request body, or one capture line (``{"provider": ..., "sdk": ..., "body": ...}``),
read as ``ctxguard check`` reads it.
Bounded: a file is read up to ``MAX_LINE_BYTES``, and payloads that differ in more
than ``MAX_PAIRS`` message pairs between their common head and tail are refused
(exit 2) rather than compared for minutes in gigabytes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..capture import MAX_LINE_BYTES, SDKS, loads, printable
from ..config import ENV_DIGEST_KEY
from ..digest import Digester
from ..measure import Measurer
from ..offline import CAPTURED_PROVIDERS, as_call, not_read_because, offline_reader
from ..payload import Payload
from ..providers.base import Provider
from ..tokens import Calibration, default_counter
from .check import fail

__all__ = ["MAX_PAIRS", "Row", "TooDifferent", "add_arguments", "diff_payloads", "run_diff"]

STATUSES = ("kept", "moved", "changed", "added", "removed")

#: The longest common subsequence is a table of len(A) by len(B) cells, once the common head
#: and tail are set aside: past this many, the payloads are refused (``TooDifferent``).
MAX_PAIRS = 16_000_000


class TooDifferent(ValueError):
    """The payloads differ in more message pairs than ``MAX_PAIRS``."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A.json", help="the earlier request body (or capture line)")
    parser.add_argument("b", metavar="B.json", help="the later request body (or capture line)")
    parser.add_argument("--provider", choices=sorted(CAPTURED_PROVIDERS | SDKS), metavar="P",
                        help="the SDK that wrote the bodies, or a provider label (default: the capture line's "
                             "sdk and provider, else guessed from the body)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout instead of text")


@dataclass(frozen=True, slots=True)
class Row:
    status: str
    role: str
    a: int | None  # index in A
    b: int | None  # index in B
    a_digest: str | None
    b_digest: str | None


def _lcs(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence: the common head and tail, and between them
    a table of cells (O(n·m); payloads are hundreds long). ``TooDifferent`` past ``MAX_PAIRS``."""
    n, m = len(a), len(b)
    head = 0
    while head < min(n, m) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(n, m) - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    mid_a, mid_b = a[head : n - tail], b[head : m - tail]
    if len(mid_a) * len(mid_b) > MAX_PAIRS:
        raise TooDifferent(f"{len(mid_a):,} and {len(mid_b):,} messages differ between the common head and tail "
                           f"(more than {MAX_PAIRS:,} pairs to compare)")
    pairs = [(i, i) for i in range(head)]
    pairs.extend((head + i, head + j) for i, j in _table_lcs(mid_a, mid_b))
    pairs.extend((n - tail + k, m - tail + k) for k in range(tail))
    return pairs


def _table_lcs(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    n, m = len(a), len(b)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if a[i] == b[j] else max(below[j], row[j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def diff_payloads(a: Payload, b: Payload) -> list[Row]:
    """One row per message of either payload, in B's order with removals where they were.
    Raises ``TooDifferent`` past ``MAX_PAIRS``."""
    ra, rb = [m.role for m in a.messages], [m.role for m in b.messages]
    da, db = a.digests, b.digests
    match_a, matched_b = _match(ra, rb, da, db)
    keyed: list[tuple[float, Row]] = []
    for i in range(len(da)):
        if i in match_a:
            status, j = match_a[i]
            keyed.append((j, Row(status, rb[j], i, j, da[i], db[j])))
    for j in range(len(db)):
        if j not in matched_b:
            keyed.append((j, Row("added", rb[j], None, j, None, db[j])))
    last_b = -1  # the latest place in B of a matched message before this one in A
    for i in range(len(da)):
        if i in match_a:
            last_b = max(last_b, match_a[i][1])
        else:
            keyed.append((last_b + 0.5, Row("removed", ra[i], i, None, da[i], None)))
    keyed.sort(key=lambda kr: (kr[0], kr[1].a if kr[1].a is not None else -1))
    return [row for _, row in keyed]


def _match(
    ra: list[str], rb: list[str], da: list[str], db: list[str]
) -> tuple[dict[int, tuple[str, int]], set[int]]:
    """A index -> (status, B index) for every message of A found in B (kept, moved, changed),
    and the B indexes matched."""
    match_a: dict[int, tuple[str, int]] = {}
    for i, j in _lcs(da, db):
        match_a[i] = ("kept", j)
    matched_b = {j for _, j in match_a.values()}
    free_a: dict[str, deque[int]] = {}
    for i, d in enumerate(da):
        if i not in match_a:
            free_a.setdefault(d, deque()).append(i)
    for j, d in enumerate(db):
        if j not in matched_b and free_a.get(d):
            match_a[free_a[d].popleft()] = ("moved", j)
            matched_b.add(j)
    # Unmatched messages of the same role pair up as "changed": at the same index first,
    # then in order between consecutive kept anchors.
    for i in range(min(len(da), len(db))):
        if i not in match_a and i not in matched_b and ra[i] == rb[i]:
            match_a[i] = ("changed", i)
            matched_b.add(i)
    anchors = sorted((i, j) for i, (s, j) in match_a.items() if s == "kept")
    bounds = [(-1, -1), *anchors, (len(da), len(db))]
    for (i0, j0), (i1, j1) in itertools.pairwise(bounds):
        gap_b = [j for j in range(j0 + 1, j1) if j not in matched_b]
        for i in (i for i in range(i0 + 1, i1) if i not in match_a):
            pair = next((j for j in gap_b if rb[j] == ra[i]), None)
            if pair is not None:
                gap_b.remove(pair)
                match_a[i] = ("changed", pair)
                matched_b.add(pair)
    return match_a, matched_b


def _guess_provider(body: Mapping[str, Any]) -> str:
    system = body.get("system")
    if system is not None and "messages" in body:
        return "anthropic"
    return "openai"


def _reader(line: Mapping[str, Any], body: Mapping[str, Any], provider: str | None) -> Provider | str:
    """The provider module that reads ``body``: the one of ``--provider`` (an SDK, or a label), else
    of the capture ``line``'s ``sdk`` and ``provider``, else guessed from the body; or what is wrong."""
    label, sdk = line.get("provider"), line.get("sdk")
    if provider in SDKS:
        sdk = provider
    elif provider is not None:
        label = provider
    for key, value, known in (("provider", label, CAPTURED_PROVIDERS), ("sdk", sdk, SDKS)):
        if value is not None and (not isinstance(value, str) or value not in known):
            unknown = printable(value, 80) if isinstance(value, str) else type(value).__name__
            return f"unknown {key} '{unknown}' (known: {', '.join(sorted(known))})"
    if label is None:
        label = _guess_provider(body)
    reader = offline_reader(sdk, label)
    if reader is None:
        return f"not read offline: {not_read_because(sdk, label)} (--provider names the SDK that wrote it)"
    return reader


def _load(path: str, provider: str | None, measurer: Measurer) -> Payload | str:
    shown = printable(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_LINE_BYTES + 1)
    except OSError as exc:
        return f"{shown}: {exc.strerror or exc}"
    if len(raw) > MAX_LINE_BYTES:
        return f"{shown}: larger than {MAX_LINE_BYTES // (1024 * 1024)} MiB"
    try:
        data = loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        return f"{shown}: not UTF-8 text (is this a request body?)"
    except ValueError as exc:
        return f"{shown}: {exc}"
    if not isinstance(data, dict):
        return f"{shown}: expected a JSON object (a request body or a capture line)"
    line = "body" in data  # a capture line: its provider, sdk and model come with it
    body = data.get("body") if line else data
    if not isinstance(body, dict):
        return f"{shown}: 'body' must be an object"
    reader = _reader(data if line else {}, body, provider)
    if isinstance(reader, str):
        return f"{shown}: {reader}"
    model = data.get("model") if line else None
    if model is not None and not isinstance(model, str):
        return f"{shown}: 'model' must be a string or null"
    try:
        api, kwargs = as_call(reader, body, model)
        label = data.get("provider") if line else None  # the provider the call reached: how it counts
        adapter = reader.adapter.for_route(label) if isinstance(label, str) else reader.adapter
        view = adapter.normalise(api, kwargs)
        if view.unreadable is not None:
            return f"{shown}: {view.unreadable}"
        return measurer.measure(view)
    except Exception as exc:  # a body no reader anticipated: named, not a traceback
        return f"{shown}: could not be read ({type(exc).__name__}: {printable(str(exc), 200)}); please report it"


def run_diff(args: argparse.Namespace) -> int:
    # Without the app's key, one of this run's own: digests compare A with B, and a digest
    # printed here (and pasted into a ticket) cannot confirm a guessed message.
    key = os.fsencode(os.environ.get(ENV_DIGEST_KEY, "")) or os.urandom(16)
    measurer = Measurer(Digester(key), default_counter(), Calibration())
    a = _load(args.a, args.provider, measurer)
    b = _load(args.b, args.provider, measurer)
    for loaded in (a, b):
        if isinstance(loaded, str):
            return fail(loaded)
    assert isinstance(a, Payload) and isinstance(b, Payload)
    try:
        rows = diff_payloads(a, b)
    except TooDifferent as exc:
        return fail(f"{printable(args.a)}, {printable(args.b)}: too different to compare: {exc}")
    heads = [p.head.role if p.head is not None else None for p in (a, b)]
    counts = {s: sum(1 for r in rows if r.status == s) for s in STATUSES}
    same = counts["kept"] == len(a.messages) == len(b.messages)
    if args.json:
        print(json.dumps({
            "a": {"file": args.a, "messages": len(a.messages), "head_role": heads[0], "hash": a.digest},
            "b": {"file": args.b, "messages": len(b.messages), "head_role": heads[1], "hash": b.digest},
            "messages": [{"status": r.status, "role": r.role, "a": r.a, "b": r.b,
                          "a_hash": r.a_digest, "b_hash": r.b_digest} for r in rows],
            "counts": counts,
        }, indent=2))
        return 0 if same else 1
    heads = [printable(h) if h is not None else None for h in heads]
    print(f"A {printable(args.a)}: {len(a.messages)} messages, head role {heads[0] or '(none)'}")
    print(f"B {printable(args.b)}: {len(b.messages)} messages, head role {heads[1] or '(none)'}")
    print(f"{'A':>4} {'B':>4}  {'role':<10} {'status':<8} digest")
    for r in rows:
        ia = "-" if r.a is None else str(r.a)
        ib = "-" if r.b is None else str(r.b)
        digest = (r.b_digest or r.a_digest or "")[:12]
        if r.status == "changed":
            digest = f"{(r.a_digest or '')[:12]} -> {(r.b_digest or '')[:12]}"
        print(f"{ia:>4} {ib:>4}  {printable(r.role):<10} {r.status:<8} {digest}")
    summary = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
    head = heads[0] if heads[0] == heads[1] else f"{heads[0]} -> {heads[1]}"
    print(f"{summary}; head role {head}")
    return 0 if same else 1
