"""The architecture, held by tests as well as by the import contracts (``lint-imports``,
run by the test command): function sizes, the lifecycle's size, and the registries that
every list of providers and checks is read from (docs/design.md)."""

from __future__ import annotations

import ast
import inspect
import json
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
        assert all(site.kind in ("sync", "async", "manager") for site in provider.family.sites)
        assert all((site.kind == "manager") == (site.final is not None) for site in provider.family.sites)


def test_every_check_is_declared_once_with_a_phase_and_documented():
    names = [c.name for c in REGISTRY]
    assert len(names) == len(set(names)) and tuple(names) == CHECK_NAMES
    assert {c.phase for c in REGISTRY} <= {"before", "wire", "answer"}
    documented = (PACKAGE.parent / "README.md").read_text() + "".join(p.read_text() for p in DOCS.glob("*.md"))
    assert all(f"`{name}`" in documented for name in names)


# -- state: what an installation owns, and the little that is the process's --------------------

#: The ``global`` statements allowed in ctxguard (outside ``testing/``): the active installation
#: (set by ``install``, cleared by ``uninstall``) and the fact sinks record_fact writes to.
GLOBALS = {("intercept/__init__.py", "install"), ("intercept/__init__.py", "uninstall"),
           ("facts/__init__.py", "configure")}

#: Module-level containers that a process mutates at run time, each for the reason given: none of
#: them is an installation's (those die with ``uninstrument()``: ``intercept.Installation``, and
#: what inspection keeps, ``Inspector``). Each is justified in a comment where it is defined.
PROCESS_STATE = {
    "ctxguard.forksafe._owned": "every lock to give back to a forked child: the process is what forks",
    "ctxguard._isolation._hooks": "where swallowed errors are told: counted by the installation, failed in tests",
    "ctxguard.intercept._hooked": "modules with a post-import hook: wrapt cannot remove one",
    "ctxguard.telemetry.sinks._made": "a registry's series and a meter provider's instruments, made once: "
                                      "neither sink can forget them",
    "ctxguard.budget.MODEL_WINDOWS": "the public window table, added to by add_model_windows()",
}
#: Memos of pure functions on the per-call path, bounded in entries and bytes, in ``providers/``
#: (which keeps no installation's state): the memos of pure functions that an entry bound is enough
#: for are ``functools.lru_cache``'d functions, not containers; the rest are the inspector's.
MEMOS = {
    "ctxguard.providers.identity._urls": "a client's base URL object -> who it reaches (by identity)",
    "ctxguard.providers._read._RENDERINGS": "tools and formats -> their texts as each provider reads them",
    # An entry-bounded memo of a pure function on the per-call path, a dict with __missing__ where
    # an lru_cache (which this count does not see) costs 2,100 instructions a call more
    # (bench/instructions.py --own): the state is the same, the form is the kernel's.
    "ctxguard.providers._read._is_mapping": "a type -> whether it is a Mapping",
}
#: Both lists together, at most (issue 38).
MAX_MODULE_STATE = 8


def test_global_statements_are_the_few_the_installation_needs():
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("testing/"):
            continue
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found |= {(relative, function.name) for node in ast.walk(function) if isinstance(node, ast.Global)}
    assert found == GLOBALS
    assert len(GLOBALS) <= 3


def _containers() -> dict[str, object]:
    """Every module-level container of ctxguard's modules (outside ``testing``), by dotted name."""
    import importlib
    import pkgutil
    import weakref
    from collections import OrderedDict, deque

    from ctxguard.cache import BoundedLRU, TwoGenerationCache

    kinds = (dict, list, set, bytearray, deque, OrderedDict, weakref.WeakSet, weakref.WeakKeyDictionary,
             weakref.WeakValueDictionary, TwoGenerationCache, BoundedLRU)
    found = {}
    for info in pkgutil.walk_packages(ctxguard.__path__, "ctxguard."):
        if ".testing" in info.name or info.name.endswith(("instrumentor", "__main__")):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, kinds) and not name.startswith("__"):
                found[f"{info.name}.{name}"] = value
    return found


def _contents(container: object) -> object:
    """What a container holds, by identity, to tell a mutated one from an untouched one."""
    from ctxguard.cache import BoundedLRU, TwoGenerationCache

    if isinstance(container, TwoGenerationCache):
        return sorted(id(k) for part in (container._new, container._old) for k in part)  # type: ignore[attr-defined]
    if isinstance(container, BoundedLRU):
        return [id(k) for k in container._data]  # type: ignore[attr-defined]
    if hasattr(container, "items"):
        return sorted((id(k), id(v)) for k, v in list(container.items()))  # type: ignore[attr-defined]
    return sorted(id(x) for x in list(container))  # type: ignore[call-overload]


def test_module_level_state_mutated_at_run_time_is_only_the_processes(harness, llm, client, tmp_path, monkeypatch,
                                                                      request):
    """Instrument, make calls (OpenAI plain, streamed, with tools and facts, through the builder;
    Anthropic plain and streamed; model requests no SDK sent, guarded from the wire through httpx
    and http.client), capture, uninstrument and instrument again: the module-level containers whose
    contents changed are the process's own few and the memos of pure functions, each listed here
    with its reason; no installation keeps state in a module (before: 20 such containers; 17 listed
    before issue 38's last step). What an installation keeps elsewhere dies with it: the first
    guard is collected, and so are the exported-id digests it cached (``telemetry.ids.ExportedIds``'
    cache, ``hash_ids``): the guard's own, no module's."""
    import gc
    import urllib.request
    import weakref

    import anthropic
    import httpx

    from ctxguard import guard as guard_module
    from ctxguard.budget import MODEL_WINDOWS, add_model_windows
    from ctxguard.telemetry.ids import ExportedIds

    ids_made = []

    class Ids(ExportedIds):
        __slots__ = ("__weakref__",)

        def __init__(self, digester: object) -> None:
            super().__init__(digester)  # type: ignore[arg-type]
            ids_made.append(weakref.ref(self))

    monkeypatch.setattr(guard_module, "ExportedIds", Ids)

    containers = _containers()
    before = {name: _contents(c) for name, c in containers.items()}
    add_model_windows({"acme-arch-test": 8_192})
    request.addfinalizer(lambda: MODEL_WINDOWS.pop("acme-arch-test", None))  # the later tests read the table
    guards = []
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "Ship to Lyon"}]}).encode()
    for _ in range(2):
        guards.append(weakref.ref(harness.start(mode="observe", capture_path=str(tmp_path / "capture-{pid}.jsonl"),
                                                policy=ctxguard.Policy(pinned=ctxguard.Pinned()), hash_ids=True)))
        tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
        with ctxguard.conversation("arch"):
            ctxguard.record_fact("city", "Lyon")
            history = ctxguard.ContextBuilder("gpt-4o", system="Be brief.", pinned=ctxguard.Pinned(),
                                              tail_tokens=500).build([], "Ship to Lyon")
            client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
            for _ in client.chat.completions.create(model="gpt-4o", messages=history, stream=True):
                pass
            client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history).parse()
            with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as claude:
                asked = [{"role": "user", "content": "Ship to Lyon"}]
                claude.messages.create(model="claude-sonnet-4-5", max_tokens=100, system="Be brief.", messages=asked)
                for _ in claude.messages.create(model="claude-sonnet-4-5", max_tokens=100, system="Be brief.",
                                                messages=asked, stream=True):
                    pass
            headers = {"Content-Type": "application/json", "Authorization": "Bearer t"}
            assert httpx.post(f"{llm.base_url}/chat/completions", content=body, headers=headers).json()["choices"]
            request = urllib.request.Request(f"{llm.base_url}/chat/completions", data=body, headers=headers)
            with urllib.request.urlopen(request) as answer:
                assert json.loads(answer.read())["choices"]
        ctxguard.uninstrument()  # the harness's providers stay up: the second round's spans are read too
    served = [r.request.path.rsplit("/", 1)[-1] for r in llm.responses]
    assert served.count("messages") == 4 and served.count("completions") == 10
    assert len([s for s in harness.spans() if s.name.startswith("chat ")]) == 14  # every call guarded
    changed = {name for name, c in containers.items() if _contents(c) != before[name]}
    unexplained = changed - set(PROCESS_STATE) - set(MEMOS)
    assert not unexplained, f"module-level state an installation left behind: {sorted(unexplained)}"
    gc.collect()
    assert guards[0]() is None, "the first installation's guard outlived uninstrument()"
    assert len(ids_made) == 2 and ids_made[0]() is None, "the first installation's id digests outlived it"
    assert len(PROCESS_STATE) + len(MEMOS) <= MAX_MODULE_STATE
    assert set(PROCESS_STATE) | set(MEMOS) <= set(containers)  # no stale name: each one is there


# -- the fake: one module per wire format, and a small shared part that names none ---------------

#: The fake's shared part: its server, the wire-format protocol and what every format uses. Every
#: other module of ``testing/fake/`` is a wire format's (``registry.FORMATS``), ``media.py``: each
#: provider's picture prices, one function a provider, or ``tokenizers.py``: what a model's own tokenizer
#: makes of text, on whichever format names the model (Claude's newer one, on Messages, Converse, Chat
#: Completions and Responses alike).
FAKE_SHARED = ("__init__.py", "server.py", "wire.py", "script.py", "tokens.py", "registry.py")
#: Its bound in physical lines: blank lines, comments and docstrings count. Issue 38 asks for 800;
#: 996 were cut to this (903, then framing.py into wire.py, one-format helpers into their formats).
FAKE_SHARED_LINES = 797


def _code_strings(tree: ast.Module) -> list[ast.Constant]:
    """The string constants of a module but its docstrings."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and ast.get_docstring(node) is not None}
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_the_fakes_shared_part_is_small_and_names_no_provider():
    """The fake mirrors the providers: all it knows of an API is in that API's module, listed in the
    registry; the server and what every format uses stay under the bound and name no provider (no
    route, window, address or error of one), so adding a provider's fake is one module and one line."""
    from ctxguard.testing.fake.registry import FORMATS

    fake = PACKAGE / "testing" / "fake"
    formats = {f.body.__module__.rpartition(".")[2] + ".py" for f in FORMATS}
    assert {p.name for p in fake.glob("*.py")} - set(FAKE_SHARED) == formats | {"media.py", "tokenizers.py"}
    lines = sum(len((fake / name).read_text().splitlines()) for name in FAKE_SHARED)
    assert lines <= FAKE_SHARED_LINES, lines
    names = {f.name.partition(".")[0] for f in FORMATS} | {name.removesuffix(".py") for name in formats}
    names |= {p.distribution for p in PROVIDERS} | {"google", "huggingface", "aws", "claude"}
    for name in set(FAKE_SHARED) - {"registry.py"}:  # the one place that names the formats
        strings = [c.value for c in _code_strings(ast.parse((fake / name).read_text()))]
        named = [(s, n) for s in strings for n in names if n.lower() in s.lower()]
        assert not named, (name, named)


def test_no_class_name_is_defined_twice():
    """One name per concept: a class name says which one it is, anywhere in the package."""
    seen: dict[str, str] = {}
    twice = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where = path.relative_to(PACKAGE).as_posix()
                if node.name in seen and seen[node.name] != where:
                    twice.append(f"{node.name}: {seen[node.name]}, {where}")
                seen.setdefault(node.name, where)
    assert not twice, twice
