"""``ctxguard budget``: the equation, term by term, and the turns that fit."""

from __future__ import annotations

import argparse
import sys

from ..budget import budget_for


def run_budget(args: argparse.Namespace) -> int:
    try:
        breakdown = budget_for(
            args.model,
            window=args.window,
            system=args.system,
            tools=args.tools,
            retrieved=args.retrieved,
            reserved_output=args.max_tokens,
            reserved_reasoning=args.reasoning,
        )
    except ValueError as exc:
        message = str(exc)
        if args.window is None and message.startswith("unknown context window"):
            message = (f"unknown context window for model {args.model!r}: not in the window table, nor a later "
                       "version of a model there; pass --window N")
        print(f"ctxguard budget: {message}", file=sys.stderr)
        return 2
    print(f"model {args.model}")
    print(breakdown)
    if breakdown.window_inferred is not None:
        print(f"the window is inferred: {args.model} is not in the window table, and has the window of "
              f"{breakdown.window_inferred}, the version before it in its family; pass --window N if it differs")
    available = breakdown.history_available
    if available < 0:
        print(f"the fixed parts exceed the window by {-available:,} tokens: no history fits")
        return 1
    if args.median_turn:
        if args.median_turn <= 0:
            print("ctxguard budget: --median-turn must be positive", file=sys.stderr)
            return 2
        print(f"turns that fit: {available // args.median_turn:,} (median turn {args.median_turn:,} tokens)")
    return 0
