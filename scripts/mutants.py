"""Break ctxguard on purpose, one small change at a time, and see which changes no test notices.

    .venv/bin/python scripts/mutants.py ctxguard/checks/*.py ctxguard/guard.py   # writes mutants.jsonl
    .venv/bin/python scripts/mutants.py --survivors mutants.jsonl --full ctxguard/guard.py

Each mutant is one edit to one function body: a comparison turned round (``==``/``!=``,
``<``/``<=``, ``is``/``is not``, ``in``/``not in``), ``and``/``or`` swapped, a ``not``
dropped, a small int constant plus one (constants of 16 and more are bounds and cache
sizes, left alone), ``True``/``False`` swapped, a call statement or ``+=`` deleted. The
file is rewritten from its edited syntax tree (comments go, behaviour stays), into a
clone of the repository's HEAD per worker (commit first: edits not committed are not
in the clone), and the tests run there against it
(``PYTHONPATH`` puts the clone ahead of the editable install) with ``-x``: a mutant is
killed when a test fails. Results are appended to the output as JSON lines, so a run can
be stopped and resumed; ``--survivors`` runs again only the mutants a previous output
says survived (``--full``: with the whole suite but the ops tests, which need the
Prometheus binaries).

A surviving mutant is a question, not a verdict: some are equivalent (a cache size, a
fast path that gives the same answer), the others are behaviour no test pins down.
Not run by CI: a sweep of a few hundred mutants takes the better part of an hour here.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
}
#: The tests that judge the core, fast enough to run once per mutant.
QUICK = [
    "tests/checks",
    "tests/test_conversation.py",
    "tests/providers/test_openai.py",
    "tests/providers/test_wire.py",
    "tests/test_budget.py",
    "tests/test_pinned.py",
    "tests/test_measure.py",
    "tests/test_tokens.py",
    "tests/test_digest.py",
    "tests/test_config.py",
    "tests/test_instrument.py",
    "tests/test_policy.py",
    "tests/providers/test_read.py",
    "tests/test_bad_input.py",
    "tests/test_memo.py",
    "tests/test_wiredigest.py",
    "tests/telemetry/test_metrics.py",
    "tests/test_privacy.py",
    "tests/test_isolation.py",
    "tests/facts/test_fact_checks.py",
    "tests/providers/test_anthropic.py",
]
FULL = ["tests", "--ignore=tests/ops"]

Key = tuple[str, int, int, int]  # kind, line, column, index of the operator in a comparison


def mutants(path: Path) -> Iterator[tuple[int, str, Key]]:
    """(line, description, key) of every mutant of the functions in ``path``."""
    tree = ast.parse(path.read_text())
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        strict = {id(k.value) for k in ast.walk(fn) if isinstance(k, ast.keyword) and k.arg == "strict"}
        for node in ast.walk(fn):
            where = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
            if isinstance(node, ast.Compare):
                for i, op in enumerate(node.ops):
                    if type(op) in SWAP:
                        yield where[0], f"{type(op).__name__} -> {SWAP[type(op)].__name__}", ("cmp", *where, i)
            elif isinstance(node, ast.BoolOp):
                yield where[0], f"{type(node.op).__name__} swapped", ("bool", *where, 0)
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                yield where[0], "not dropped", ("not", *where, 0)
            elif isinstance(node, ast.Constant) and type(node.value) is int and node.value < 16:
                yield where[0], f"{node.value} -> {node.value + 1}", ("int", *where, 0)
            elif isinstance(node, ast.Constant) and type(node.value) is bool and id(node) not in strict:
                yield where[0], f"{node.value} -> {not node.value}", ("true", *where, 0)
            for field in ("body", "orelse", "finalbody"):
                statements = getattr(node, field, None)
                if not isinstance(statements, list):
                    continue  # a conditional expression's or a lambda's body is one expression
                for st in statements:
                    deletable = isinstance(st, ast.AugAssign) or (
                        isinstance(st, ast.Expr) and not isinstance(st.value, ast.Constant)
                    )
                    if deletable:
                        yield st.lineno, f"deleted: {ast.unparse(st)[:60]}", ("del", st.lineno, st.col_offset, 0)


class _Mutate(ast.NodeTransformer):
    def __init__(self, key: Key) -> None:
        self.kind, self.line, self.col, self.index = key
        self.done = False

    def generic_visit(self, node: ast.AST) -> Any:
        node = super().generic_visit(node)
        at = (getattr(node, "lineno", None), getattr(node, "col_offset", None))
        if self.done or at != (self.line, self.col):
            return node
        kind = self.kind
        if kind == "cmp" and isinstance(node, ast.Compare):
            node.ops[self.index] = SWAP[type(node.ops[self.index])]()
        elif kind == "bool" and isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif kind == "not" and isinstance(node, ast.UnaryOp):
            self.done = True
            return node.operand
        elif kind == "int" and isinstance(node, ast.Constant) and type(node.value) is int:
            node.value += 1
        elif kind == "true" and isinstance(node, ast.Constant) and type(node.value) is bool:
            node.value = not node.value
        elif kind == "del" and isinstance(node, (ast.Expr, ast.AugAssign)):
            self.done = True
            return ast.Pass()
        else:
            return node
        self.done = True
        return node


def mutated(source: str, key: Key) -> str:
    change = _Mutate(key)
    tree = change.visit(ast.parse(source))
    if not change.done:
        raise LookupError(f"mutant {key} not found")
    return ast.unparse(ast.fix_missing_locations(tree))


def run(work: Path, rel: str, key: Key, tests: list[str]) -> tuple[bool, float, str]:
    """(killed, seconds, pytest's last line) for one mutant, in the clone ``work``."""
    path = work / rel
    original = path.read_text()
    source = mutated(original, key)
    path.write_text(source)
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider", *tests],
            cwd=work, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(work)},
        )
        lines = done.stdout.strip().splitlines()
        return done.returncode != 0, time.monotonic() - started, lines[-1] if lines else done.stderr[-200:]
    except subprocess.TimeoutExpired:
        return True, time.monotonic() - started, "timeout"
    finally:
        path.write_text(original)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="modules to mutate, relative to the repository")
    parser.add_argument("--out", default="mutants.jsonl")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--full", action="store_true", help="the whole suite but tests/ops, not the quick subset")
    parser.add_argument("--survivors", metavar="JSONL", help="only the mutants this earlier output says survived")
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    args = parser.parse_args()

    out = Path(args.out)
    done = {(r["file"], r["line"], r["desc"]) for r in _rows(out)} if out.exists() else set()
    wanted = None
    if args.survivors:
        wanted = {(r["file"], r["line"], r["desc"]) for r in _rows(Path(args.survivors)) if not r["killed"]}
    jobs: queue.Queue[tuple[str, int, str, Key]] = queue.Queue()
    for rel in args.files:
        for line, desc, key in mutants(ROOT / rel):
            if (rel, line, desc) not in done and (wanted is None or (rel, line, desc) in wanted):
                jobs.put((rel, line, desc, key))
    print(f"{jobs.qsize()} mutants", file=sys.stderr)
    if args.list:
        while not jobs.empty():
            rel, line, desc, _ = jobs.get_nowait()
            print(f"{rel}:{line} {desc}")
        return 0
    tests = FULL if args.full else list(QUICK)
    lock = threading.Lock()
    scratch = Path(tempfile.mkdtemp(prefix="ctxguard-mutants-"))

    def worker(n: int) -> None:
        work = scratch / str(n)
        subprocess.run(["git", "clone", "-q", str(ROOT), str(work)], check=True)
        while True:
            try:
                rel, line, desc, key = jobs.get_nowait()
            except queue.Empty:
                return
            killed, seconds, tail = run(work, rel, key, tests)
            row = {"file": rel, "line": line, "desc": desc, "killed": killed, "secs": round(seconds, 1), "tail": tail}
            with lock, out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            if not killed:
                print(f"survived: {rel}:{line} {desc}", file=sys.stderr)

    try:
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(max(1, args.workers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
