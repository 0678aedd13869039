"""The examples in ctxguard's docstrings run, as part of the test command.

Every module of the package (``pkgutil.walk_packages``) is imported and the examples of its
docstrings (``doctest.DocTestFinder``: the module's, its classes', functions' and methods')
are run; any failure fails the module's test. An example that needs an instrumented app, a
live SDK or a file says ``# doctest: +SKIP``. A module whose import needs an optional SDK that
is not installed is skipped; any other import error, ctxguard's own included, fails.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ctxguard

#: The optional SDKs (top-level import names) a module may need to be imported.
SDKS = frozenset({"openai", "anthropic", "google", "litellm", "mistralai"})


def _modules() -> list[str]:
    found = [m.name for m in pkgutil.walk_packages(ctxguard.__path__, "ctxguard.", onerror=lambda name: None)]
    # A package's __main__ runs its command when imported: it holds no examples.
    return ["ctxguard", *sorted(name for name in found if not name.endswith(".__main__"))]


MODULES = _modules()


def test_the_walk_finds_the_package() -> None:
    assert {"ctxguard.budget", "ctxguard.checks", "ctxguard.checks.structure", "ctxguard.facts.matching",
            "ctxguard.providers.base", "ctxguard.telemetry.metrics"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing in SDKS:
            pytest.skip(f"{name} needs {missing}, which is not installed")
        raise
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
