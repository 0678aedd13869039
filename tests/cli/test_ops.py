"""``ctxguard ops export DIR``: the operations artefacts as the package ships them, written where
an operator asks, never over a file of theirs without ``--force``."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ctxguard.cli import main
from ctxguard.cli.ops import ARTEFACTS

ROOT = Path(__file__).resolve().parents[2]


def export(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    status = main(["ops", "export", *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def test_export_creates_the_directory_and_writes_the_repositorys_files(tmp_path, capsys):
    target = tmp_path / "new" / "ops"
    status, out, err = export(capsys, str(target))
    assert (status, err) == (0, [])
    assert out == [f"wrote {target / name}" for name in ARTEFACTS]
    assert sorted(os.listdir(target)) == sorted(ARTEFACTS)
    for name in ARTEFACTS:  # dashboards/ in the repository is what SPEC §6 names: the same bytes
        assert (target / name).read_bytes() == (ROOT / "dashboards" / name).read_bytes(), name


def test_the_artefacts_are_every_file_of_the_repositorys_ops_directory():
    shipped = {p.name for p in (ROOT / "ctxguard" / "ops").iterdir()}
    assert shipped == set(ARTEFACTS)
    for name in ARTEFACTS:  # one copy: dashboards/X is a link to it, not a second file to keep in step
        link = ROOT / "dashboards" / name
        assert link.is_symlink() and os.readlink(link) == f"../ctxguard/ops/{name}", name


def test_a_second_export_changes_nothing_and_exits_0(tmp_path, capsys):
    assert export(capsys, str(tmp_path))[0] == 0
    status, out, err = export(capsys, str(tmp_path))
    assert (status, err) == (0, [])
    assert out == [f"unchanged {tmp_path / name}" for name in ARTEFACTS]


def test_a_different_file_there_is_kept_and_nothing_is_written_without_force(tmp_path, capsys):
    mine = tmp_path / "alerts.yml"
    mine.write_text("groups: []  # my own\n", encoding="utf-8")
    status, out, err = export(capsys, str(tmp_path))
    assert (status, out) == (2, [])
    assert len(err) == 1 and str(mine) in err[0] and "--force" in err[0], err
    assert mine.read_text(encoding="utf-8") == "groups: []  # my own\n"
    assert os.listdir(tmp_path) == ["alerts.yml"]

    status, out, err = export(capsys, "--force", str(tmp_path))
    assert (status, err) == (0, [])
    assert out == [f"wrote {tmp_path / name}" for name in ARTEFACTS]
    assert mine.read_bytes() == (ROOT / "dashboards" / "alerts.yml").read_bytes()


def test_a_directory_that_cannot_be_made_is_one_line_and_exit_2(tmp_path, capsys):
    taken = tmp_path / "file"
    taken.write_text("x", encoding="utf-8")
    for target in (taken, taken / "below"):
        status, out, err = export(capsys, str(target))
        assert (status, out) == (2, []), target
        assert len(err) == 1 and err[0].startswith(f"ctxguard: {taken}"), err


def test_the_files_are_read_through_importlib_resources_even_from_a_zip(tmp_path):
    """Imported from a zip archive there is no file on disk to open: only importlib.resources reads them."""
    archive = tmp_path / "ctxguard.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted((ROOT / "ctxguard").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                z.write(path, path.relative_to(ROOT).as_posix())
    target = tmp_path / "out"
    code = "import sys, ctxguard.cli; print(ctxguard.cli.__file__); sys.exit(ctxguard.cli.main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(archive)}
    out = subprocess.run([sys.executable, "-c", code, "ops", "export", str(target)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(str(archive)), out.stdout
    for name in ARTEFACTS:
        assert (target / name).read_bytes() == (ROOT / "ctxguard" / "ops" / name).read_bytes(), name

