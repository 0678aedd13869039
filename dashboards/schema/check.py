#!/usr/bin/env python3
"""Validate Grafana dashboard JSON files against Grafana's published schema.

    python dashboards/schema/check.py dashboards/ctxguard.json [more.json ...]

How: each dashboard is turned into a generated TypeScript file in which the
JSON appears as object literals assigned to typed consts (types from the
pinned ``@grafana/schema`` package, adapted in ``dashboard_types.ts``), and
``tsc --noEmit --strict`` checks them all in one run. Object literals get
TypeScript's excess-property check, so a misspelled key fails, as does a value
of the wrong type or a missing required key. Each panel is its own const, typed
by its ``"type"`` (see dashboard_types.ts), so errors in one panel do not hide
errors in another.

The Node tooling is installed on demand: when ``node_modules`` is missing or
does not hold the versions pinned in package.json, ``npm ci`` runs here first.

Output: one ``OK   <file>`` or ``FAIL <file>`` line per file; under FAIL, one
``  <json path>: <message> [TSxxxx]`` line per error. TypeScript reports at most
one problem per object literal in some cases (a wrong-typed value can mask an
unknown key in the same object), so fix and re-run until it passes.

Exit status: 0 all valid; 1 at least one invalid (or unreadable / not JSON);
2 tooling missing or unusable (node, npm or npx not found, npm ci failed);
3 internal error (tsc failed in a way that is not about a dashboard).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

SCHEMA_DIR = Path(__file__).resolve().parent
TYPES_MODULE = "../dashboard_types"
NPM_TIMEOUT_S = 600
TSC_TIMEOUT_S = 300

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_TOOLING = 2
EXIT_INTERNAL = 3


class JsonObject:
    """A JSON object as its (key, value) pairs, in order, duplicates kept (so tsc can flag them)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, JsonValue]] | None = None) -> None:
        self.pairs: list[tuple[str, JsonValue]] = list(pairs or [])


JsonValue: TypeAlias = "bool | int | float | str | JsonObject | list[JsonValue] | _Ref | None"


@dataclass(frozen=True)
class _Ref:
    """Stands for a generated const (a panel checked on its own) inside a literal."""

    name: str


class ToolingError(Exception):
    """Node tooling is missing or unusable (exit 2)."""


class InternalError(Exception):
    """tsc failed for a reason that is not about a dashboard (exit 3)."""


# --------------------------------------------------------------------------- JSON loading


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def load_json(path: Path) -> JsonValue:
    text = path.read_text(encoding="utf-8")
    value: JsonValue = json.loads(text, object_pairs_hook=JsonObject, parse_constant=_reject_constant)
    return value


# --------------------------------------------------------------------------- TS generation

_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")


def child_path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _IDENT.match(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{json.dumps(key)}]"


def _ts_key(key: str) -> str:
    """Property name as written in TS: bare when possible, so tsc offers "did you mean" spelling hints."""
    return key if _IDENT.match(key) and key != "__proto__" else json.dumps(key)


def display_path(path: str) -> str:
    return path or "(dashboard)"


@dataclass
class GeneratedFile:
    """A generated .ts file and, per line, the JSON path its text came from (None: not from the JSON)."""

    lines: list[str] = field(default_factory=list)
    paths: list[str | None] = field(default_factory=list)

    def add(self, text: str, path: str | None) -> None:
        self.lines.append(text)
        self.paths.append(path)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def path_at(self, line: int) -> str | None:
        """JSON path for a 1-based line number."""
        if 1 <= line <= len(self.paths):
            return self.paths[line - 1]
        return None

    def render(self, value: JsonValue, path: str, indent: str, prefix: str, suffix: str) -> None:
        if isinstance(value, _Ref):
            self.add(f"{indent}{prefix}{value.name}{suffix}", path)
        elif isinstance(value, JsonObject):
            if not value.pairs:
                self.add(f"{indent}{prefix}{{}}{suffix}", path)
                return
            self.add(f"{indent}{prefix}{{", path)
            for key, item in value.pairs:
                self.render(item, child_path(path, key), indent + "  ", f"{_ts_key(key)}: ", ",")
            self.add(f"{indent}}}{suffix}", path)
        elif isinstance(value, list):
            if not value:
                self.add(f"{indent}{prefix}[]{suffix}", path)
                return
            self.add(f"{indent}{prefix}[", path)
            for index, item in enumerate(value):
                self.render(item, child_path(path, index), indent + "  ", "", ",")
            self.add(f"{indent}]{suffix}", path)
        else:
            # json.dumps of a str/int/float/bool/None is a valid TS literal (ensure_ascii escapes U+2028/9).
            self.add(f"{indent}{prefix}{json.dumps(value)}{suffix}", path)


def _get(obj: JsonObject, key: str) -> JsonValue:
    for k, v in obj.pairs:
        if k == key:
            return v
    return None


def _panel_type(panel: JsonObject) -> str:
    kind = _get(panel, "type")
    if kind == "row":
        return "RowPanelJson"
    if isinstance(kind, str):
        return f"PanelOf<{json.dumps(kind)}>"
    return "PanelJson"


def generate(dashboard: JsonValue, source_name: str) -> GeneratedFile:
    """TS source checking `dashboard`: one typed const per panel, then the dashboard itself."""
    out = GeneratedFile()
    out.add(f"// Generated by dashboards/schema/check.py from {json.dumps(source_name)}; do not edit.", None)
    out.add(f'import type {{ DashboardJson, PanelJson, PanelOf, RowPanelJson }} from "{TYPES_MODULE}";', None)
    counter = 0

    def split_panels(container: JsonObject, container_path: str, nested: bool) -> JsonObject:
        """Copy of `container` whose "panels" objects are emitted as consts and replaced by references."""
        nonlocal counter
        result = JsonObject()
        for key, value in container.pairs:
            if key != "panels" or not isinstance(value, list):
                result.pairs.append((key, value))
                continue
            refs: list[JsonValue] = []
            for index, panel in enumerate(value):
                path = child_path(child_path(container_path, "panels"), index)
                if not isinstance(panel, JsonObject):
                    refs.append(panel)  # checked inline; tsc reports the wrong type
                    continue
                type_name = "PanelJson" if nested and _get(panel, "type") == "row" else _panel_type(panel)
                body = split_panels(panel, path, nested=True) if type_name == "RowPanelJson" else panel
                name = f"panel_{counter}"
                counter += 1
                out.render(body, path, "", f"const {name}: {type_name} = ", ";")
                refs.append(_Ref(name))
            result.pairs.append((key, refs))
        return result

    root = split_panels(dashboard, "", nested=False) if isinstance(dashboard, JsonObject) else dashboard
    out.render(root, "", "", "const dashboard: DashboardJson = ", ";")
    out.add("void dashboard;", None)
    return out


# --------------------------------------------------------------------------- tooling


def _require_tools() -> dict[str, str]:
    tools: dict[str, str] = {}
    for name in ("node", "npm", "npx"):
        found = shutil.which(name)
        if found is None:
            raise ToolingError(f"{name} not found on PATH (Node.js 18+ with npm is needed to check dashboards)")
        tools[name] = found
    return tools


def _installed_matches_pins() -> bool:
    manifest = json.loads((SCHEMA_DIR / "package.json").read_text(encoding="utf-8"))
    pins: dict[str, str] = {**manifest.get("dependencies", {}), **manifest.get("devDependencies", {})}
    for name, version in pins.items():
        installed = SCHEMA_DIR / "node_modules" / name / "package.json"
        try:
            if json.loads(installed.read_text(encoding="utf-8")).get("version") != version:
                return False
        except (OSError, ValueError):
            return False
    return True


@contextlib.contextmanager
def _install_lock() -> Iterator[None]:
    """Serialise `npm ci` between concurrent check.py runs (POSIX; no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(SCHEMA_DIR / "package-lock.json", "rb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def ensure_installed(npm: str) -> None:
    if _installed_matches_pins():
        return
    with _install_lock():
        if _installed_matches_pins():
            return
        cmd = [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        try:
            proc = subprocess.run(
                cmd, cwd=SCHEMA_DIR, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolingError(f"`npm ci` in {SCHEMA_DIR} failed: {exc}") from exc
        if proc.returncode != 0 or not _installed_matches_pins():
            raise ToolingError(
                f"`npm ci` in {SCHEMA_DIR} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}".rstrip()
            )


def run_tsc(npx: str, files: list[Path]) -> str:
    cmd = [
        npx, "--no-install", "tsc",
        "--noEmit", "--strict", "--pretty", "false",
        "--target", "es2022", "--module", "esnext", "--moduleResolution", "bundler",
        "--skipLibCheck",
        *[str(f.relative_to(SCHEMA_DIR)) for f in files],
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, cwd=SCHEMA_DIR, capture_output=True, text=True, timeout=TSC_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolingError(f"running tsc failed: {exc}") from exc
    if proc.returncode not in (0, 1, 2):
        raise InternalError(f"tsc exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0 and not proc.stdout.strip():
        raise InternalError(f"tsc exited {proc.returncode} without diagnostics:\n{proc.stderr}")
    return proc.stdout


# --------------------------------------------------------------------------- diagnostics

_DIAG = re.compile(r"^(?P<file>.+?)\((?P<line>\d+),(?P<col>\d+)\): error (?P<code>TS\d+): (?P<msg>.*)$")
_LONG_QUOTED = re.compile(r"'([^']{70,}?)'(?=[ .,;:]|$)")


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    code: str
    message: str


def parse_diagnostics(output: str) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    for raw in output.splitlines():
        if not raw.strip():
            continue
        match = _DIAG.match(raw)
        if match:
            diags.append(Diagnostic(match["file"], int(match["line"]), match["code"], match["msg"]))
        elif raw[:1].isspace() and diags:
            last = diags[-1]
            diags[-1] = Diagnostic(last.file, last.line, last.code, f"{last.message}\n{raw.strip()}")
        else:
            raise InternalError(f"unexpected tsc output:\n{output}")
    return diags


def _shorten_types(text: str) -> str:
    return _LONG_QUOTED.sub(lambda m: f"'{m[1][:60]}...'", text)


def readable(code: str, message: str) -> str:
    first = message.splitlines()[0]
    if code in ("TS2353", "TS2561"):
        key = re.search(r"""and '(.*?)' does not exist|but '(.*?)' does not exist""", first)
        hint = re.search(r"Did you mean to write '(.*?)'\?", first)
        name = next((g for g in key.groups() if g), "?") if key else "?"
        if not name.startswith('"'):
            name = json.dumps(name)
        text = f"unknown key {name}"
        if hint:
            text += f" (did you mean {json.dumps(hint[1].strip(chr(34)))}?)"
        return text
    if code == "TS1117":
        return "duplicate key"
    missing_one = re.search(r"Property '(.*?)' is missing in type .* but required in type", message)
    if missing_one and code in ("TS2741", "TS2322"):
        return f"missing required key {json.dumps(missing_one[1])}"
    if code in ("TS2739", "TS2740"):
        missing = re.search(r"missing the following properties from type '.*?': (.*)$", first)
        if missing:
            return f"missing required keys: {missing[1]}"
    return _shorten_types(" / ".join(line.strip() for line in message.splitlines()))


# --------------------------------------------------------------------------- main


@dataclass
class Result:
    source: str
    errors: list[str] = field(default_factory=list)


def check(paths: list[str], keep_generated: bool = False) -> tuple[int, list[Result]]:
    results = [Result(p) for p in paths]
    dashboards: dict[int, JsonValue] = {}
    for index, result in enumerate(results):
        try:
            loaded = load_json(Path(result.source))
        except (OSError, UnicodeDecodeError) as exc:
            result.errors.append(f"(file): cannot read: {exc}")
        except ValueError as exc:
            result.errors.append(f"(file): not valid JSON: {exc}")
        else:
            if isinstance(loaded, JsonObject):
                dashboards[index] = loaded
            else:
                result.errors.append("(file): top level is not a JSON object")
    if not dashboards:
        return EXIT_INVALID, results

    tools = _require_tools()
    ensure_installed(tools["npm"])

    workdir = Path(tempfile.mkdtemp(prefix=".check-", dir=SCHEMA_DIR))
    try:
        generated: dict[str, tuple[int, GeneratedFile]] = {}
        files: list[Path] = []
        for index, dashboard in dashboards.items():
            gen = generate(dashboard, results[index].source)
            ts_file = workdir / f"dashboard_{index}.ts"
            ts_file.write_text(gen.text(), encoding="utf-8")
            generated[ts_file.name] = (index, gen)
            files.append(ts_file)
        output = run_tsc(tools["npx"], files)
        for diag in parse_diagnostics(output):
            name = Path(diag.file).name
            if name not in generated or Path(diag.file).parent.name != workdir.name:
                raise InternalError(f"tsc reported an error outside the generated files:\n{output}")
            index, gen = generated[name]
            json_path = gen.path_at(diag.line)
            if json_path is None:
                raise InternalError(f"tsc reported an error in generated boilerplate:\n{output}")
            message = readable(diag.code, diag.message)
            results[index].errors.append(f"{display_path(json_path)}: {message} [{diag.code}]")
    finally:
        if keep_generated:
            print(f"generated TypeScript kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    status = EXIT_INVALID if any(r.errors for r in results) else EXIT_OK
    return status, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dashboards", nargs="+", help="Grafana dashboard JSON file(s)")
    parser.add_argument("--keep-generated", action="store_true", help="keep the generated .ts files (debugging)")
    args = parser.parse_args(argv)
    try:
        status, results = check(args.dashboards, keep_generated=args.keep_generated)
    except ToolingError as exc:
        print(f"check.py: tooling unavailable: {exc}", file=sys.stderr)
        return EXIT_TOOLING
    except InternalError as exc:
        print(f"check.py: internal error: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    for result in results:
        print(f"{'FAIL' if result.errors else 'OK  '} {result.source}")
        for error in result.errors:
            print(f"  {error}")
    return status


if __name__ == "__main__":
    sys.exit(main())
