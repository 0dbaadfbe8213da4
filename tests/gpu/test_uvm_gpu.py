"""GPU test of Unified Memory recording: `perfscope record` of uvm_workload.py (128 MiB of
managed memory touched by the host and by a kernel every step) records CUPTI's migration and
page-fault counters, counts migrations as ``pcie`` and advises prefetching.  When ``$OUT``
is set the run is kept under ``$OUT/uvm_gpu/``."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import perfscope
from perfscope.analyzers import analyze_run

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None,
                                 reason="cuda-bindings is not installed")]
HERE = Path(__file__).resolve().parent
STEPS = 6


def test_managed_memory_migrations_are_recorded_as_pcie(tmp_path: Path) -> None:
    out = os.environ.get("OUT")
    base = Path(out) / "uvm_gpu" if out else tmp_path
    base.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("PERFSCOPE_RUN_DIR", None)
    cmd = [sys.executable, "-m", "perfscope", "record", "-o", str(base / "uvm.perfscope"), "--force", "--",
           sys.executable, str(HERE / "uvm_workload.py"), "--steps", str(STEPS), "--summary", str(base / "uvm.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    nbytes = json.loads((base / "uvm.json").read_text())["bytes"]
    run = perfscope.open_run(base / "uvm.perfscope")
    meta = run.rank_meta(0)
    assert meta["collector_stats"]["cupti"]["uvm_counters"]["counters"], meta["warnings"]
    uvm = run.table("uvm")
    kind = uvm["kind"].astype(str)
    assert uvm.loc[kind == "htod", "bytes"].sum() >= nbytes  # a kernel touches every page each step
    assert uvm.loc[kind == "dtoh", "bytes"].sum() > 0
    assert (kind == "cpu_page_fault").any() and (kind == "gpu_page_fault").any()
    a = analyze_run(run)
    assert len(a.steps) >= STEPS - 1
    assert (a.steps["pcie_ns"] > 0).all()  # host-side faults migrate pages while the GPU is idle
    assert len(a.uvm) == 1 and int(a.uvm["htod_bytes"].iloc[0]) > 0 and int(a.uvm["migration_ns"].iloc[0]) > 0
    rec = {r.id: r for r in a.recommendations}
    assert "uvm.migrations" in rec, [(r.id, r.saving_ns) for r in a.recommendations]
    assert rec["uvm.migrations"].evidence["htod_bytes_per_step"] > 0
    assert "cudaMemPrefetchAsync" in rec["uvm.migrations"].change
