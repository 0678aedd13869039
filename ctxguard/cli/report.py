"""``ctxguard report FILE.jsonl -o report.html [--policy P.toml]``: the fact-survival page.

Runs the same offline checks as ``ctxguard check`` and writes one self-contained
HTML file (see ``ctxguard.report``), then prints
``wrote report.html (N conversations, M requests)``. Exit 0 once written, whatever
the checks found (the report is the product); 2 on unreadable input, naming the
line, and then no file is written: the page goes to a temporary file in the same
directory, renamed into place only when complete.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from ..capture import printable
from ..report import Report
from .check import capture_arguments, fail, judge_capture

__all__ = ["add_arguments", "run_report", "write_atomically"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    capture_arguments(parser)
    parser.add_argument("-o", "--output", required=True, metavar="report.html", help="where to write the page")


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temp file renamed into place)."""
    fd, temp = tempfile.mkstemp(prefix=".ctxguard-", suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp's 0600 would surprise whoever opens the report
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def run_report(args: argparse.Namespace) -> int:
    report = Report()
    error = judge_capture(args, report.add)
    if error is not None:
        return error
    try:
        write_atomically(args.output, report.render(os.path.basename(args.file)))
    except OSError as exc:
        return fail(f"{printable(args.output)}: {exc.strerror or exc}")
    print(f"wrote {printable(args.output)} ({len(report.conversations)} conversations, {report.requests} requests)")
    return 0
