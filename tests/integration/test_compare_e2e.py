"""`perfscope compare` end to end: runs written to the store, analysed by analyze_run, judged.

GIVEN two-rank runs whose steps are one GEMM each (lognormal step times, 5 % spread)
WHEN `perfscope compare` runs on them THEN the exit code says regression / no regression.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from perfscope.cli.main import main

from compare_fixtures import write_run

STEPS = 30


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    rng = np.random.default_rng(42)
    walls = lambda slow: 50e6 * (1 + slow) * rng.lognormal(0, 0.05, STEPS)  # noqa: E731
    return {
        "base": write_run(root / "base.perfscope", walls(0.0)),
        "same": write_run(root / "same.perfscope", walls(0.0)),
        "slow": write_run(root / "slow.perfscope", walls(0.10)),
        "fast": write_run(root / "fast.perfscope", walls(-0.15)),
    }


def test_noise_only_rerun_passes(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["same"]), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    step = next(r for r in doc["rows"] if r["metric"] == "step_time")
    assert step["n_base"] == STEPS and doc["passed"] is True


def test_identical_run_passes(runs: dict[str, Path]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["base"])]) == 0


def test_ten_percent_slower_fails_with_junit(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "perf.xml"
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--format", "junit", "-o", str(out)]) == 1
    root = ET.parse(out).getroot()
    assert root.get("failures") == "1"
    assert root.find(".//testcase[@name='step_time']/failure") is not None


def test_faster_run_says_improvement(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["fast"]), "--format", "md"]) == 0
    assert "improvement" in capsys.readouterr().out.lower()


def test_per_rank(runs: dict[str, Path]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--per-rank"]) == 1


def test_subprocess_exit_codes(runs: dict[str, Path], tmp_path: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "perfscope", "compare", *map(str, a)],  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=120)
    slow = run(runs["base"], runs["slow"], "--max-regression", "5%")
    assert slow.returncode == 1, slow.stderr
    assert "Regression" in slow.stdout
    missing = run(runs["base"], tmp_path / "no-such-run")
    assert missing.returncode == 2 and "no such run" in missing.stderr


def test_step_pattern_and_ranks_apply_to_both_runs(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--ranks", "1", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["base"]["ranks"] == doc["new"]["ranks"] == [1]
    assert doc["base"]["steps"] == doc["new"]["steps"] == STEPS
    assert main(["compare", str(runs["base"]), str(runs["same"]), "--ranks", "5"]) == 2
    assert "no rank" in capsys.readouterr().err
    assert main(["compare", str(runs["base"]), str(runs["same"]), "--step-pattern", "("]) == 2
    assert "--step-pattern" in capsys.readouterr().err
