"""The options every analysing command shares, and the one report-file writer."""
from __future__ import annotations

import warnings
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from perfscope.cli.options import (
    analysis_options,
    import_warnings_on_stderr,
    parse_ranks,
    progress_reporter,
)
from perfscope.errors import RunExistsError, UsageError
from perfscope.reports.output import check_output, write_atomic


def test_parse_ranks() -> None:
    assert parse_ranks("0,2,4-6") == (0, 2, 4, 5, 6)
    assert parse_ranks(" 3, 1 ,1") == (1, 3)
    assert parse_ranks(None) is None and parse_ranks("") is None
    for bad in ("a", "3-1", "1-"):
        with pytest.raises(UsageError, match="--ranks"):
            parse_ranks(bad)


def test_analysis_options_hand_the_command_one_config() -> None:
    seen = []

    @click.command()
    @analysis_options
    def cmd(config: object) -> None:
        seen.append(config)

    result = CliRunner().invoke(cmd, ["--step-pattern", "train_step", "--ranks", "0-1"])
    assert result.exit_code == 0, result.output
    assert seen[0].step_pattern == "train_step" and seen[0].ranks == (0, 1)  # type: ignore[attr-defined]
    CliRunner().invoke(cmd, [])
    assert seen[1].step_pattern is None and seen[1].ranks is None  # type: ignore[attr-defined]


def test_no_progress_outside_a_terminal() -> None:
    with progress_reporter() as progress:  # pytest's stderr is not a terminal
        assert progress is None


def test_import_warnings_go_to_stderr_and_others_pass_through(capsys: pytest.CaptureFixture[str]) -> None:
    from perfscope.pipeline import TraceImportWarning

    with pytest.warns(RuntimeWarning, match="other"):
        with import_warnings_on_stderr():
            warnings.warn("rank guessed", TraceImportWarning)
            warnings.warn("other", RuntimeWarning)
    assert capsys.readouterr().err == "perfscope: warning: rank guessed\n"


def test_write_atomic_replaces_whole_files_and_makes_folders(tmp_path: Path) -> None:
    out = tmp_path / "new" / "report.md"
    assert write_atomic(out, "one") == out and out.read_text() == "one"
    write_atomic(out, "two")
    assert out.read_text() == "two"
    assert [p.name for p in out.parent.iterdir()] == ["report.md"]  # no temporary file left


def test_check_output_refuses_an_existing_file_without_force(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert check_output(out, force=False) == out
    out.write_text("x")
    with pytest.raises(RunExistsError, match="--force"):
        check_output(out, force=False)
    assert check_output(out, force=True) == out
