"""What ``pip install ctxguard`` gives an operator, proven from the wheel a release builds.

Once per module: ``python -m build`` makes the sdist and then the wheel from the unpacked sdist,
as a release is built, from a copy of the working tree without what an earlier build left in it
(``build/``, ``ctxguard.egg-info/``: setuptools reuses both, which would hide a file that
pyproject.toml no longer selects); the wheel is installed
with ``[openai,tiktoken]``, not editable, into a fresh virtualenv (pip's cache keeps it quick),
and everything runs from a directory outside the repository with no ``PYTHONPATH``, so the
repository's sources cannot be imported by accident. From there: ``ctxguard demo``,
``ctxguard ops export``, and the exported files through the real ``promtool`` and ``amtool``
(skipped when absent unless CTXGUARD_REQUIRE_PROMETHEUS=1, like the other tests here).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from ctxguard.cli.ops import ARTEFACTS
from tests.ops.conftest import ROOT, binary

#: What the sdist holds beyond the repository's files: the metadata the build writes.
SDIST_GENERATED = ("PKG-INFO", "setup.cfg", "ctxguard.egg-info/")
#: What may be in the wheel's package: modules and the package data of pyproject.toml.
WHEEL_SUFFIXES = (".py", ".typed", ".toml", ".json", ".yml", ".yaml")


@dataclass(frozen=True)
class Release:
    sdist: Path
    wheel: Path


def clean_env() -> dict[str, str]:
    """The environment without what would point Python at the repository or another venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def run(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=timeout)


def leftovers(directory: str, names: list[str]) -> list[str]:
    """What an earlier build or install left at the top of the tree, which setuptools would reuse:
    ``ctxguard.egg-info/SOURCES.txt`` (the last sdist's file list: a file that pyproject.toml no
    longer selects would still be packed) and ``build/lib``; the venvs and git are not the source."""
    if Path(directory) != ROOT:
        return []
    return [n for n in names if n in (".git", "build", "dist") or n.startswith(".venv") or n.endswith(".egg-info")]


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    dist = tmp_path_factory.mktemp("dist")
    source = dist / "source"  # the working tree as a clean checkout has it (links kept as links)
    shutil.copytree(ROOT, source, symlinks=True, ignore=leftovers)
    out = run(sys.executable, "-m", "build", "--outdir", dist, source, cwd=dist)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (sdist,), (wheel,) = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    return Release(sdist, wheel)


@pytest.fixture(scope="module")
def venv(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("wheel-venv")
    made = run(sys.executable, "-m", "venv", home / "venv", cwd=home)
    assert made.returncode == 0, made.stderr
    pip = run(home / "venv" / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              f"{release.wheel}[openai,tiktoken]", cwd=home)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return home / "venv"


@pytest.fixture(scope="module")
def exported(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    # dashboards/ under a stand-in root, so tests/ops/alerts_test.yml's `../../dashboards/alerts.yml`
    # finds the exported rules when the test file is put beside them at tests/ops/.
    layout = tmp_path_factory.mktemp("layout")
    return run(venv / "bin" / "ctxguard", "ops", "export", "dashboards", cwd=layout, timeout=60), layout


def test_the_wheel_carries_the_artefacts_as_real_files_and_nothing_stray(release: Release):
    with zipfile.ZipFile(release.wheel) as wheel:
        infos = {info.filename: info for info in wheel.infolist()}
        for name in ARTEFACTS:
            info = infos.get(f"ctxguard/ops/{name}")
            assert info is not None, f"ctxguard/ops/{name} is not in the wheel"
            assert not stat.S_ISLNK(info.external_attr >> 16), f"ctxguard/ops/{name} is a link in the wheel"
            assert wheel.read(info) == (ROOT / "ctxguard" / "ops" / name).read_bytes(), name
    package = [n for n in infos if not n.split("/")[0].endswith(".dist-info")]
    for name in package:
        assert name.startswith("ctxguard/") and name.endswith(WHEEL_SUFFIXES), f"stray {name} in the wheel"
        assert "__pycache__" not in name and (ROOT / name).is_file(), f"{name} is in the wheel, not in ctxguard/"


def test_the_sdist_holds_real_files_every_tracked_file_and_nothing_git_ignores(release: Release):
    git = shutil.which("git")
    with tarfile.open(release.sdist) as sdist:
        members = {m.name.split("/", 1)[1]: m for m in sdist.getmembers() if "/" in m.name and not m.isdir()}
        for name in ARTEFACTS:
            for path in (f"dashboards/{name}", f"ctxguard/ops/{name}"):
                assert path in members and members[path].isreg(), f"{path} is not a real file in the sdist"
                data = sdist.extractfile(members[path])
                assert data is not None and data.read() == (ROOT / "ctxguard" / "ops" / name).read_bytes(), path
    if git is None or run(git, "rev-parse", "--is-inside-work-tree", cwd=ROOT).stdout.strip() != "true":
        pytest.skip("not a git work tree: the sdist cannot be compared with the tracked files")
    tracked = run(git, "ls-files", "-z", cwd=ROOT).stdout.split("\0")
    missing = [p for p in tracked if p and (ROOT / p).exists() and p not in members]
    assert not missing, f"tracked files missing from the sdist (MANIFEST.in): {missing[:10]}"
    ours = "\n".join(p for p in members if not p.startswith(SDIST_GENERATED))
    ignored = subprocess.run([git, "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input=ours,
                             capture_output=True, text=True, timeout=60).stdout.split()
    assert not ignored, f"files git ignores are in the sdist (MANIFEST.in): {ignored[:10]}"


def test_the_venv_imports_the_installed_wheel_not_the_sources(venv: Path, tmp_path: Path):
    code = ("import ctxguard, importlib.metadata as m; print(ctxguard.__file__); "
            "print(m.distribution('ctxguard').read_text('direct_url.json'))")
    out = run(venv / "bin" / "python", "-c", code, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    where, direct_url = out.stdout.split("\n", 1)
    assert Path(where).resolve().is_relative_to(venv.resolve()), where
    origin = json.loads(direct_url)
    assert "archive_info" in origin and origin["url"].endswith(".whl"), origin  # a wheel, not editable


def test_demo_runs_from_the_wheel(venv: Path, tmp_path: Path):
    """README.md, "The two commands": a fresh virtualenv, ctxguard[openai,tiktoken] and `ctxguard demo`
    (installed from the wheel here, as a user's pip does; the README installs the clone editable)."""
    out = run(venv / "bin" / "ctxguard", "demo", cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "flip point: turn" in out.stdout, out.stdout


def test_ops_export_from_the_wheel_writes_the_four_files(exported: tuple[subprocess.CompletedProcess[str], Path]):
    """docs/operations.md, "From the wheel": `pip install ctxguard && ctxguard ops export ./ops`."""
    out, layout = exported
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.splitlines() == [f"wrote {os.path.join('dashboards', name)}" for name in ARTEFACTS]
    for name in ARTEFACTS:
        assert (layout / "dashboards" / name).read_bytes() == (ROOT / "dashboards" / name).read_bytes(), name


def test_the_exported_rules_pass_promtool_and_the_rule_unit_tests(exported: tuple[subprocess.CompletedProcess[str],
                                                                                   Path]):
    _, layout = exported
    promtool = binary("promtool")
    checked = run(promtool, "check", "rules", "dashboards/alerts.yml", cwd=layout, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (layout / "tests" / "ops").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "ops" / "alerts_test.yml", layout / "tests" / "ops" / "alerts_test.yml")
    tested = run(promtool, "test", "rules", "tests/ops/alerts_test.yml", cwd=layout, timeout=60)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout + tested.stderr, tested.stdout + tested.stderr


def test_the_exported_alertmanager_example_passes_amtool(exported: tuple[subprocess.CompletedProcess[str], Path]):
    _, layout = exported
    out = run(binary("amtool"), "check-config", "dashboards/alertmanager.example.yml", cwd=layout, timeout=60)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_the_exported_dashboard_and_collector_policy_parse(exported: tuple[subprocess.CompletedProcess[str], Path]):
    _, layout = exported
    dashboard = json.loads((layout / "dashboards" / "ctxguard.json").read_text(encoding="utf-8"))
    assert dashboard["title"] and dashboard["panels"]
    policy = yaml.safe_load((layout / "dashboards" / "otelcol-tail-sampling.yaml").read_text(encoding="utf-8"))
    assert policy["processors"]["tail_sampling"]["policies"]
