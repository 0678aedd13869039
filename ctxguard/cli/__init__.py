"""``ctxguard`` command line (SPEC §7): ``demo``, ``budget``, ``check``, ``diff``, ``report``, ``ops export``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxguard", description="Observe and guard LLM request payloads.")
    verbs = parser.add_subparsers(dest="verb", required=True)

    demo = verbs.add_parser("demo", help="run a chat app with a buggy history buffer against a local fake model")
    demo.add_argument("--serve", type=int, metavar="PORT", help="keep /metrics up on 127.0.0.1:PORT afterwards")
    demo.add_argument("--turns", type=int, default=8, help="turns per app (default 8)")

    budget = verbs.add_parser("budget", help="print the budget equation for a model")
    budget.add_argument("--model", required=True)
    budget.add_argument("--window", type=int)
    budget.add_argument("--system", type=int, default=0)
    budget.add_argument("--tools", type=int, default=0)
    budget.add_argument("--retrieved", type=int, default=0)
    budget.add_argument("--max-tokens", type=int, default=0, help="reserved output (max_tokens)")
    budget.add_argument("--reasoning", type=int, default=0, help="reasoning reserved outside max_tokens")
    budget.add_argument("--median-turn", type=int, help="median tokens per turn, to count the turns that fit")

    from . import check, diff

    check.add_arguments(verbs.add_parser("check", help="run the checks offline over a capture file"))
    diff.add_arguments(verbs.add_parser("diff", help="compare two request payloads message by message"))

    from . import report

    report.add_arguments(verbs.add_parser("report", help="write a self-contained HTML fact-survival report"))

    from . import ops

    ops.add_arguments(verbs.add_parser("ops", help="the operations artefacts: dashboard, alert rules, ..."))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):
        # Whatever the terminal's encoding, a character it cannot show is written escaped.
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        status = _run(args)
        sys.stdout.flush()  # here, not at exit, where a closed pipe could only be reported
        return status
    except BrokenPipeError:  # `ctxguard check big.jsonl | head`: the reader left, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush there
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    if args.verb == "demo":
        from .demo import run_demo

        return run_demo(turns=args.turns, serve=args.serve)
    if args.verb == "check":
        from .check import run_check

        return run_check(args)
    if args.verb == "diff":
        from .diff import run_diff

        return run_diff(args)
    if args.verb == "report":
        from .report import run_report

        return run_report(args)
    if args.verb == "ops":
        from .ops import run_ops

        return run_ops(args)
    from .budget import run_budget

    return run_budget(args)


if __name__ == "__main__":
    sys.exit(main())
