"""The architecture, held by tests as well as by the import contracts (``lint-imports``,
run by the test command): function sizes, the lifecycle's size, and the registries that
every list of providers and checks is read from (docs/design.md)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard.call import Call
from ctxguard.checks import CHECK_NAMES, REGISTRY
from ctxguard.providers import LABELS, PROVIDERS
from ctxguard.telemetry.metrics import Metrics

PACKAGE = Path(ctxguard.__file__).parent
DOCS = PACKAGE.parent / "docs"
#: The functions allowed past 60 lines, each for the reason docs/design.md gives.
LONG_FUNCTIONS = {("_instrument.py", "instrument"), ("testing/fake/openai_responses.py", "stream")}


def _functions() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((path.relative_to(PACKAGE).as_posix(), node.name, node.end_lineno - node.lineno + 1))
    return found


def test_no_function_is_over_60_lines_but_the_two_design_md_names():
    long = {(path, name) for path, name, lines in _functions() if lines > 60}
    assert long <= LONG_FUNCTIONS, long - LONG_FUNCTIONS
    design = (DOCS / "design.md").read_text()
    assert all(f"`{name}`" in design for _, name in LONG_FUNCTIONS)


def test_the_call_lifecycle_stays_small():
    assert len(inspect.getsource(Call).splitlines()) <= 150


def test_every_provider_label_has_its_metric_series_and_every_distribution_its_docs_row():
    metrics = Metrics(CollectorRegistry(), CHECK_NAMES, LABELS)
    assert {p for p, _ in metrics.calls_at} == set(LABELS)
    supported = (DOCS / "supported.md").read_text()
    for provider in PROVIDERS:
        assert f"| `{provider.distribution}` |" in supported, provider.distribution
        assert all(site.kind in ("sync", "async", "manager") for site in provider.sites)


def test_every_check_is_declared_once_with_a_phase_and_documented():
    names = [c.name for c in REGISTRY]
    assert len(names) == len(set(names)) and tuple(names) == CHECK_NAMES
    assert {c.phase for c in REGISTRY} <= {"before", "wire", "answer"}
    documented = (PACKAGE.parent / "README.md").read_text() + "".join(p.read_text() for p in DOCS.glob("*.md"))
    assert all(f"`{name}`" in documented for name in names)
