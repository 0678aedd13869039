"""The docs cannot drift from the code: every code block of README.md and docs/*.md that a user
would run is run here, or by the test it names (docs/testing.md, "Snippets in these docs"); every
command-line flag, read from the argparse parsers themselves, is documented on a line that names
its verb; every ``where`` label value of ``ctxguard_guard_errors_total`` is explained in the
runbook that alerts on it; every metric family is in the operations table and every
``ctxguard.*`` span key in the design's."""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ctxguard._isolation import WHERE
from ctxguard.checks import CHECK_NAMES
from ctxguard.cli import _parser
from ctxguard.providers import LABELS
from ctxguard.telemetry import spans
from ctxguard.telemetry.metrics import Metrics
from ctxguard.testing import FakeLLM
from tests.docblocks import DOCS, ROOT, Block, all_blocks
from tests.servers import free_port


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


# -- every code block runs, or names the test that runs it --------------------------------------

BLOCKS = all_blocks()


def marks(b: Block) -> dict[str, str]:
    """The parts of a block's ``<!-- snippet: ... -->`` marker, ``;``-separated: kind -> argument."""
    found = {}
    for part in (b.marker or "").split(";"):
        part = part.strip()
        for kind in ("continues", "pytest", "expect:", "mirrored by", "excerpt of", "not run:"):
            if part.startswith(kind):
                found[kind.rstrip(":")] = part[len(kind):].strip()
                break
        else:
            if part:
                raise AssertionError(f"{b.name}: unknown snippet marker {part!r}")
    return found


def _statements(source: str) -> tuple[dict[str, set[str]], list[str]]:
    """What an excerpt is compared by: the names imported from each module, and every other top-level
    statement, without annotations or comments (a doc may leave out the typing the example has)."""
    imported: dict[str, set[str]] = {}
    others = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom):
            imported.setdefault(node.module or "", set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            imported.setdefault("", set()).update(a.name for a in node.names)
        else:
            for inner in ast.walk(node):
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inner.returns = None
                    for arg in (*inner.args.args, *inner.args.kwonlyargs):
                        arg.annotation = None
            others.append(ast.dump(node))
    return imported, others


@pytest.mark.parametrize("b", BLOCKS, ids=[b.name for b in BLOCKS])
def test_every_code_block_says_how_it_is_held(b: Block):
    """A block without a language is output or a picture; a python block runs here unless it names
    the test that holds it; any other block (sh, toml, json) names that test, or why it is not run."""
    m = marks(b)
    if not b.lang:
        assert not m, f"{b.name}: a block without a language is never run: give it one"
        return
    if b.lang != "python":
        assert m.keys() & {"mirrored by", "not run", "excerpt of"}, (
            f"{b.name}: a {b.lang} block says which test holds it (<!-- snippet: mirrored by tests/...::test_... -->), "
            "or why it is not run")
    else:
        assert "not run" not in m, f"{b.name}: every python block runs, or is mirrored by a named test"
        if m.keys() & {"mirrored by", "excerpt of"}:  # not run here, so checked here: complete as shown
            _assert_complete(b.name, b.text)
    if "mirrored by" in m:
        path, _, name = m["mirrored by"].partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        at = source.find(f"def {name}(")
        assert at >= 0, f"{b.name}: {m['mirrored by']} does not exist"
        body = source[at:].split("\ndef ", 1)[0]
        doc = str(b.path.relative_to(ROOT))
        assert doc in body and b.section in body, f"{m['mirrored by']} names neither {doc} nor \"{b.section}\""
    if "excerpt of" in m:  # what the block shows is what the file, run by the mirroring test, does
        file_imports, file_statements = _statements((ROOT / m["excerpt of"]).read_text(encoding="utf-8"))
        imports, statements = _statements(b.text)
        for module, names in imports.items():
            assert names <= file_imports.get(module, set()), f"{b.name}: {m['excerpt of']} imports no {names}"
        rest = iter(file_statements)
        missing = [s for s in statements if not any(s == other for other in rest)]
        assert not missing, f"{b.name}: not in {m['excerpt of']}, in this order: {missing}"


def _assert_complete(name: str, code: str) -> None:
    """Every name the code uses is defined or imported in it, in function bodies too, which running
    it does not prove (a hook of gunicorn.conf.py runs only under gunicorn)."""
    if code.startswith(">>>"):
        return
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "F821",
                           "--stdin-filename", "snippet.py", "-"], input=code, capture_output=True, text=True,
                          timeout=60)
    assert lint.returncode == 0, f"{name}:\n{lint.stdout}"


def programs() -> list[tuple[str, str, dict[str, str]]]:
    """(name, code, marks) of each python program the docs show: a block, and the blocks marked
    ``continues`` after it in the same file."""
    found: list[tuple[str, str, dict[str, str]]] = []
    last: dict[Path, int] = {}
    for b in BLOCKS:
        m = marks(b)
        if b.lang != "python" or "mirrored by" in m or "excerpt of" in m:
            continue
        if "continues" in m:
            at = last[b.path]
            name, code, before = found[at]
            found[at] = (name, code + b.text, {**before, **m})
            continue
        last[b.path] = len(found)
        found.append((b.name, b.text, m))
    return found


PROGRAMS = programs()


@pytest.mark.parametrize(("name", "code", "m"), PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_every_python_snippet_runs_as_written(name: str, code: str, m: dict[str, str], tmp_path: Path,
                                             fake_llm: FakeLLM):
    """In a fresh interpreter, in an empty directory, as a user with API keys set would run it, against
    the fake: the SDKs' own variables point them at it (``openai.OpenAI()`` as written), and
    ``CTXGUARD_METRICS_PORT`` (which wins over ``metrics_port=``) keeps a documented port free. A
    block starting with ``>>>`` is a doctest; one marked ``pytest`` is a test file, run by pytest."""
    _assert_complete(name, code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXGUARD_", "OTEL_", "PROMETHEUS_"))}
    env.update(PYTHONPATH=str(ROOT), OPENAI_BASE_URL=fake_llm.base_url, OPENAI_API_KEY="docs",
               ANTHROPIC_BASE_URL=fake_llm.anthropic_base_url, ANTHROPIC_API_KEY="docs",
               CTXGUARD_METRICS_PORT=str(free_port()))
    if "pytest" in m:
        (tmp_path / "test_snippet.py").write_text(code, encoding="utf-8")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_snippet.py"]
    elif code.startswith(">>>"):
        (tmp_path / "snippet.txt").write_text(code, encoding="utf-8")
        command = [sys.executable, "-m", "doctest", "snippet.txt"]
    else:
        (tmp_path / "snippet.py").write_text(code, encoding="utf-8")
        command = [sys.executable, "snippet.py"]
    out = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    said = out.stdout + out.stderr
    assert out.returncode == 0, f"{name} failed:\n{said}"
    assert "Traceback" not in said, f"{name}:\n{said}"
    if "expect" in m:
        assert m["expect"] in said, f"{name} does not say {m['expect']!r}:\n{said}"
