"""``ctxguard ops export DIR``: the operations artefacts, from the installed package.

Writes the Grafana dashboard, the Prometheus alert rules, the Alertmanager routing example
and the OpenTelemetry Collector tail-sampling policy (docs/operations.md) into DIR, creating
it, and prints one line per file: ``wrote DIR/alerts.yml``, or ``unchanged DIR/alerts.yml``
when the file there already holds this version's. A file there that differs is kept unless
``--force``: exit 2, one line naming it, and nothing is written. The files are read through
``importlib.resources``, so they come from wherever ctxguard is installed (a wheel, a zip).
"""

from __future__ import annotations

import argparse
import os
from importlib import resources

from ..capture import printable
from .check import fail
from .report import write_atomically

__all__ = ["ARTEFACTS", "add_arguments", "artefact", "run_ops"]

#: The files of ``ctxguard/ops/`` (the repository's ``dashboards/`` links to them), in export order.
ARTEFACTS = ("ctxguard.json", "alerts.yml", "alertmanager.example.yml", "otelcol-tail-sampling.yaml")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    export = actions.add_parser(
        "export", help="write the dashboard, alert rules, Alertmanager example and Collector policy into DIR")
    export.add_argument("dir", metavar="DIR", help="where to write them (created if missing)")
    export.add_argument("--force", action="store_true", help="overwrite the files there that differ")


def artefact(name: str) -> str:
    """The text of one of ``ARTEFACTS`` as this installation ships it.

    >>> "alert: CtxguardFactLeak" in artefact("alerts.yml")
    True
    """
    return (resources.files("ctxguard") / "ops" / name).read_text(encoding="utf-8")


def _existing(path: str) -> str | None:
    try:
        # Text mode both ways (universal newlines), so a file written here on Windows compares equal.
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def run_ops(args: argparse.Namespace) -> int:
    texts = {name: artefact(name) for name in ARTEFACTS}
    paths = {name: os.path.join(args.dir, name) for name in ARTEFACTS}
    try:
        os.makedirs(args.dir, exist_ok=True)
        existing = {name: _existing(paths[name]) for name in ARTEFACTS}
    except FileExistsError:
        return fail(f"{printable(args.dir)}: not a directory")
    except OSError as exc:
        return fail(f"{printable(exc.filename or args.dir)}: {exc.strerror or exc}")
    differing = [paths[name] for name in ARTEFACTS if existing[name] not in (None, texts[name])]
    if differing and not args.force:
        them = "it" if len(differing) == 1 else "them"
        return fail(f"{', '.join(map(printable, differing))}: not this version's (--force overwrites {them}); "
                    "nothing written")
    for name in ARTEFACTS:
        if existing[name] == texts[name]:
            print(f"unchanged {printable(paths[name])}")
            continue
        try:
            write_atomically(paths[name], texts[name])
        except OSError as exc:
            return fail(f"{printable(paths[name])}: {exc.strerror or exc}")
        print(f"wrote {printable(paths[name])}")
    return 0
