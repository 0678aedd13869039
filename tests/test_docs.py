"""The docs cannot drift from the code: every command-line flag, read from the argparse parsers
themselves, is documented on a line that names its verb; every ``where`` label value of
``ctxguard_guard_errors_total`` is explained in the runbook that alerts on it; every metric
family is in the operations table and every ``ctxguard.*`` span key in the design's."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ctxguard._isolation import WHERE
from ctxguard.checks import CHECK_NAMES
from ctxguard.cli import _parser
from ctxguard.providers import LABELS
from ctxguard.telemetry import spans
from ctxguard.telemetry.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def doc_lines() -> list[str]:
    return [line for path in DOCS for line in path.read_text(encoding="utf-8").splitlines()]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def verbs() -> dict[str, argparse.ArgumentParser]:
    """Each verb's parser by the words that name it (``ops export``: a verb of a verb)."""
    named = {}
    for verb, parser in _subcommands(_parser()).items():
        named.update({f"{verb} {sub}": p for sub, p in _subcommands(parser).items()} or {verb: parser})
    return named


def flags() -> list[tuple[str, str]]:
    return [(verb, option) for verb, parser in verbs().items() for action in parser._actions
            for option in action.option_strings if option not in ("-h", "--help")]


def test_the_parsers_are_read():
    assert set(verbs()) == {"demo", "budget", "check", "diff", "report", "ops export"}
    assert ("report", "--no-progress") in flags() and ("report", "-o") in flags()
    assert ("ops export", "--force") in flags()


@pytest.mark.parametrize(("verb", "option"), flags())
def test_every_flag_is_documented_beside_its_verb(verb: str, option: str):
    flag = re.compile(rf"(?<![\w-]){re.escape(option)}(?![\w-])")
    assert any(f"ctxguard {verb}" in line and flag.search(line) for line in doc_lines()), (
        f"`ctxguard {verb} ... {option}` is in no line of README.md or docs/*.md")


def runbook(name: str) -> str:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    start = text.index(f"### {name}")
    end = text.find("\n#", start + 1)
    return text[start:] if end < 0 else text[start:end]


@pytest.mark.parametrize("where", WHERE)
def test_every_where_label_is_explained_in_the_guard_errors_runbook(where: str):
    assert f"`{where}`" in runbook("CtxguardGuardErrors")


def metric_families() -> list[str]:
    registry = CollectorRegistry()
    Metrics(registry, CHECK_NAMES, LABELS)
    return [family.name + ("_total" if family.type == "counter" else "") for family in registry.collect()]


@pytest.mark.parametrize("name", metric_families())
def test_every_metric_is_in_the_operations_table(name: str):
    assert f"| `{name}` |" in (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")


SPAN_KEYS = sorted(value for name, value in vars(spans).items()
                   if name.isupper() and isinstance(value, str) and value.startswith("ctxguard."))


@pytest.mark.parametrize("key", SPAN_KEYS)
def test_every_span_key_is_in_the_design_table(key: str):
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    table = design[design.index("## Span attributes"):]
    assert f"`{key}`" in table[:table.index("\n## ")]
