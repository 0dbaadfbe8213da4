"""perfscope analyze / report through the real CLI entry point (in-process)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from scenario_runs import EXPECTED, MS, T0, US, RankTrace, _run, _step, finish

from perfscope.cli.main import main

EVIL = '<script>alert("x")</script> ncclDevKernel_AllReduce|`*_[x]'


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = EXPECTED["straggler"][0](tmp_path_factory.mktemp("cli") / "straggler")
    finish(path)
    return path


@pytest.fixture(scope="module")
def evil_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = _run(tmp_path_factory.mktemp("evil") / "evil", 1)
    tr = RankTrace()
    for i in range(3):
        t = T0 + i * 10 * MS
        _step(tr, i, t, t + 10 * MS)
        tr.kernel(t, t + 100 * US, 9 * MS, name=EVIL)
    tr.write(path, 0)
    finish(path)
    return path


def test_analyze_json(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(run), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"steps", "gpu_summary", "recommendations", "stragglers", "collectives", "warnings"} <= set(doc)
    assert doc["recommendations"][0]["id"] == "comm.straggler"
    assert {r["rank"] for r in doc["steps"]} == {0, 1, 2, 3}


def test_analyze_text_and_ranks(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(run), "--ranks", "0-1"]) == 0
    out = capsys.readouterr().out
    assert "Median step per rank" in out and "Top findings" in out
    assert main(["analyze", str(run), "--ranks", "0,3", "--format", "json"]) == 0
    assert {r["rank"] for r in json.loads(capsys.readouterr().out)["steps"]} == {0, 3}


@pytest.mark.parametrize("args", [["--ranks", "x"], ["--ranks", "9"], ["--step-pattern", "("]])
def test_analyze_bad_options(run: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(run), *args]) == 2
    assert "perfscope: error:" in capsys.readouterr().err


def test_analyze_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path)]) != 0
    assert "not a perfscope run" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_report_written_and_force(run: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"r.{fmt}"
    assert main(["report", str(run), "--format", fmt, "-o", str(out)]) == 0
    text = out.read_text()
    assert "comm.straggler" in text
    if fmt == "html":
        assert text.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in text
        assert "<script src=" not in text  # self-contained: plotly.js is inlined
    assert main(["report", str(run), "--format", fmt, "-o", str(out)]) != 0  # exists, no --force
    assert main(["report", str(run), "--format", fmt, "-o", str(out), "--force"]) == 0


def test_names_from_traces_are_escaped(evil_run: Path, tmp_path: Path) -> None:
    for fmt in ("html", "md"):
        out = tmp_path / f"e.{fmt}"
        assert main(["report", str(evil_run), "--format", fmt, "-o", str(out)]) == 0
        text = out.read_text()
        assert '<script>alert("x")</script>' not in text
        assert "&lt;script&gt;" in text
