"""GPU tests of recording a JAX program with `perfscope record` (no code change, no torch).

The program (jax_workload.py) marks its steps with ``jax.profiler.StepTraceAnnotation``;
perfscope's start-up hook turns them into steps.  XLA emits NVTX ranges of its own (domain
``TSL``), and ranges the program makes through the ``nvtx`` package mark steps with
``--step-pattern``.  When ``$OUT`` is set the runs are kept under ``$OUT/jax_gpu/``.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import perfscope
from perfscope.analyzers import AnalysisConfig, analyze_run

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")]
HERE = Path(__file__).resolve().parent
WARMUP, STEPS = 2, 6


def _record(base: Path, name: str, *extra: str) -> tuple[Any, dict, str]:
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    env.pop("PERFSCOPE_RUN_DIR", None)
    summary = base / f"{name}.json"
    cmd = [sys.executable, "-m", "perfscope", "record", "-o", str(base / f"{name}.perfscope"), "--force", "--",
           sys.executable, str(HERE / "jax_workload.py"), "--warmup", str(WARMUP), "--steps", str(STEPS),
           "--summary", str(summary), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return perfscope.open_run(base / f"{name}.perfscope"), json.loads(summary.read_text()), proc.stderr


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = os.environ.get("OUT")
    path = Path(out) / "jax_gpu" if out else tmp_path_factory.mktemp("jax_gpu")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def plain(base: Path) -> tuple[Any, dict, str]:
    return _record(base, "jax")


def test_jax_program_records_kernels_copies_syncs_and_steps(plain: tuple[Any, dict, str]) -> None:
    run, summary, _ = plain
    assert summary["torch_imported"] is False  # neither the program nor perfscope imported torch
    meta = run.rank_meta(0)
    assert "cupti" in meta["collectors"], meta["warnings"]
    assert len(run.table("kernels")) > 0
    kinds = run.table("memcpy")["copy_kind"].astype(str)
    assert (kinds == "H2D").sum() >= 2 * STEPS and (kinds == "D2H").sum() >= STEPS
    assert len(run.table("sync")) >= STEPS
    steps = run.table("steps")
    assert list(steps["source"].astype(str).unique()) == ["annotation"]
    assert sorted(steps["step"]) == list(range(STEPS))
    a = analyze_run(run)
    assert len(a.steps) == STEPS and set(a.steps["source"]) == {"annotation"}
    assert (a.steps["compute_ns"] > 0).all() and (a.steps["pcie_ns"] > 0).all()


def test_xla_nvtx_ranges_and_step_pattern(plain: tuple[Any, dict, str]) -> None:
    run, summary, _ = plain
    markers = run.table("markers")
    assert (markers["domain"].astype(str) == "TSL").any()  # XLA's own ranges reach CUPTI
    if not summary["nvtx"]:
        pytest.skip("the nvtx package is not installed: no program NVTX ranges to mark steps with")
    a = analyze_run(run, AnalysisConfig(step_pattern="^jax_step$"))
    assert len(a.steps) == STEPS and set(a.steps["source"]) == {"pattern"}


def test_jax_profiler_trace_does_not_take_cupti(base: Path) -> None:
    run, summary, _ = _record(base, "jax_trace", "--trace")
    warnings = run.rank_meta(0)["warnings"]
    assert any("jax.profiler.start_trace" in w for w in warnings), warnings
    kernels = run.table("kernels")["start_ns"].to_numpy()
    for t0, t1 in summary["steps_ns"]:  # perfscope kept recording through JAX's trace
        assert ((kernels >= t0) & (kernels < t1)).sum() > 0
