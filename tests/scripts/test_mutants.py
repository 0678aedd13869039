"""scripts/mutants.py, the mutation runner: every mutant it lists can be made, whatever syntax
the function holds (conditional expressions and lambdas, whose bodies are one expression)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutants", ROOT / "scripts" / "mutants.py")
assert _spec is not None and _spec.loader is not None
mutants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutants)

SOURCE = '''
def f(a, b):
    x = a if a is not None else b
    g = lambda y: y == 1
    total = 0
    total += 2
    print(x)
    return x and g(b)
'''


def test_every_listed_mutant_of_conditional_expressions_and_lambdas_is_made(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    listed = list(mutants.mutants(path))
    kinds = {key[0] for _, _, key in listed}
    assert kinds == {"cmp", "bool", "int", "del"}
    unchanged = ast.unparse(ast.parse(SOURCE))
    for _, desc, key in listed:
        changed = mutants.mutated(SOURCE, key)
        assert changed != unchanged, desc
        compile(changed, "m.py", "exec")


def test_the_checks_are_listed_without_error():
    for path in sorted((ROOT / "ctxguard" / "checks").glob("*.py")):
        assert list(mutants.mutants(path)) or path.name in {"base.py"}, path
