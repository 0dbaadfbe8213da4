"""Damaged runs and --force through the CLI: one-line errors with exit 2, warnings shown,
nothing of the user's removed."""
from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from perfscope.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "kineto" / "ddp_rank0.json.gz"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``perfscope ARGV``; return (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    run = tmp_path / "run"
    assert cli(capsys, "import", "kineto", str(TRACE), "-o", str(run))[0] == 0
    return run


def one_part(run: Path, table: str) -> Path:
    parts = sorted((run / table).glob("rank=*/part-*.parquet"))
    assert parts, table
    return parts[0]


@pytest.mark.parametrize("command", [["analyze"], ["info"], ["report", "--format", "md"]])
def test_a_kernels_part_replaced_by_a_memcpy_part_is_refused(imported: Path, capsys: pytest.CaptureFixture[str],
                                                             command: list[str]) -> None:
    victim = one_part(imported, "kernels")
    shutil.copyfile(one_part(imported, "memcpy"), victim)
    code, _, err = cli(capsys, *command, str(imported))
    assert code == 2 and err.count("\n") == 1, err
    assert str(victim) in err and "part of table 'memcpy'" in err


def test_a_fixture_run_with_a_foreign_part_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A run written before manifests: the part's columns show it is not a kernels part.
    run = tmp_path / "run"
    shutil.copytree(DATA / "h200" / "pageable_copies.perfscope", run)
    victim = one_part(run, "kernels")
    shutil.copyfile(one_part(run, "memcpy"), victim)
    code, _, err = cli(capsys, "analyze", str(run), "--format", "json")
    assert code == 2 and str(victim) in err and "does not declare" in err


@pytest.mark.parametrize("damage", ["table folder", "part file"])
def test_a_deleted_table_folder_or_part_is_refused_not_read_as_no_rows(imported: Path, capsys: pytest.CaptureFixture[str],
                                                                       damage: str) -> None:
    if damage == "table folder":
        shutil.rmtree(imported / "kernels")
    else:
        one_part(imported, "kernels").unlink()
    for command in ("analyze", "info"):
        code, _, err = cli(capsys, command, str(imported))
        assert code == 2 and err.count("\n") == 1 and "kernels" in err and "missing" in err, err


def test_a_part_not_in_the_manifest_is_read_and_shown(imported: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = one_part(imported, "kernels")
    extra = src.with_name("part-00042.parquet")
    pq.write_table(pq.read_table(src), extra)
    code, out, _ = cli(capsys, "info", str(imported), "--json")
    doc = json.loads(out)
    assert code == 0 and any(str(extra) in w for w in doc["integrity_warnings"])
    code, out, _ = cli(capsys, "info", str(imported))
    assert code == 0 and "not in the run's manifest" in out.replace("\n", " ")
    code, out, _ = cli(capsys, "analyze", str(imported), "--format", "json")
    assert code == 0 and any("not in the run's manifest" in w for w in json.loads(out)["warnings"])


def test_force_never_removes_a_users_file_in_a_folder_named_like_a_table(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine"
    (out / "kernels").mkdir(parents=True)
    (out / "kernels" / "thesis.tex").write_text("years of work")
    code, _, err = cli(capsys, "import", "kineto", str(TRACE), "-o", str(out), "--force")
    assert code == 2 and err.count("\n") == 1 and "thesis.tex" in err
    code, _, err = cli(capsys, "record", "-o", str(out), "--force", "--", sys.executable, "-c", "pass")
    assert code == 2 and "thesis.tex was not written by perfscope" in err.splitlines()[-1]
    assert (out / "kernels" / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in out.rglob("*")) == ["kernels", "thesis.tex"]


def test_import_force_refuses_a_non_run_folder_with_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = cli(capsys, "import", "kineto", str(TRACE), "-o", str(out), "--force")
    assert code == 2 and "not a perfscope run" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_an_imported_run_has_the_modes_mkdir_gives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = os.umask(0o022)
    try:
        assert cli(capsys, "import", "kineto", str(TRACE), "-o", str(tmp_path / "run"))[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o755


def test_force_replaces_an_imported_run(imported: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (imported / "report.md").write_text("kept")
    code, _, err = cli(capsys, "import", "kineto", str(DATA / "kineto" / "ddp_rank1.json.gz"), "-o", str(imported), "--force")
    assert code == 0, err
    assert (imported / "report.md").read_text() == "kept"
    code, out, _ = cli(capsys, "info", str(imported), "--json")
    assert code == 0 and [r["rank"] for r in json.loads(out)["ranks"]] == [1] and not json.loads(out)["integrity_warnings"]
