"""GPU tests of perfscope.profile and `perfscope record` (marked gpu; run on the device machine).

Each recording runs in its own process (one CUPTI client per process; NVTX picks its tool
at its first call).  When ``$OUT`` is set the runs are kept under ``$OUT/record_gpu/`` so
they can be inspected (or a small one committed under tests/data/).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import perfscope

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "record_workload.py"
EXAMPLE = HERE.parents[1] / "examples" / "train_tiny.py"
WARMUP, STEPS = 3, 8
H2D_BYTES = 64 * 256 * 4  # one input batch, float32


def _run(cmd: list[str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PERFSCOPE_RUN_DIR", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = os.environ.get("OUT")
    path = Path(out) / "record_gpu" if out else tmp_path_factory.mktemp("record_gpu")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def runs(base: Path) -> dict[str, Any]:
    wl = [sys.executable, str(WORKLOAD), "--warmup", str(WARMUP), "--steps", str(STEPS)]
    _run([*wl, "--mode", "profile", "--run", str(base / "profile.perfscope"), "--summary", str(base / "profile.json")])
    _run([*wl, "--mode", "torch", "--summary", str(base / "torch.json")])
    rec = _run([sys.executable, "-m", "perfscope", "record", "-o", str(base / "record.perfscope"), "--force", "--",
                *wl, "--mode", "plain", "--summary", str(base / "plain.json")])
    (base / "record.stderr.txt").write_text(rec.stderr)
    return {
        "profile": perfscope.open_run(base / "profile.perfscope"),
        "record": perfscope.open_run(base / "record.perfscope"),
        "torch": json.loads((base / "torch.json").read_text()),
        "record_stderr": rec.stderr,
    }


def _check_gpu_meta(run: Any) -> None:
    meta = run.rank_meta(0)
    assert "cupti" in meta["collectors"], meta["warnings"]
    assert meta["gpu"].get("name") and meta["gpu"].get("uuid", "").startswith("GPU-"), meta["gpu"]
    assert meta["versions"].get("cuda") and meta["versions"].get("torch")
    assert isinstance(meta["clock_offset_ns"], int)
    assert not any("no NVIDIA GPU" in w for w in meta["warnings"]), meta["warnings"]


def _check_copies(run: Any, n_steps: int) -> None:
    memcpy = run.table("memcpy")
    kinds = memcpy["copy_kind"].astype(str)
    h2d = memcpy[(kinds == "H2D") & (memcpy["bytes"] == H2D_BYTES)]
    assert len(h2d) >= 2 * n_steps, memcpy.groupby(kinds, observed=True).size()
    assert set(h2d["pageable"].dropna().astype(bool)) == {True, False}  # one pageable, one pinned per step
    assert ((kinds == "D2H") & (memcpy["bytes"] > 0)).sum() >= n_steps  # loss.item()


def test_context_manager_records_kernels_copies_steps_and_markers(runs: dict[str, Any]) -> None:
    run = runs["profile"]
    assert run.status == "complete"
    _check_gpu_meta(run)
    steps = run.table("steps")
    assert steps["step"].tolist() == list(range(STEPS)) and set(steps["source"].astype(str)) == {"explicit"}
    kernels = run.table("kernels")
    assert len(kernels) > 0 and (kernels["dur_ns"] > 0).all()
    # kernels ran inside the recorded window (not before start)
    assert kernels["start_ns"].min() >= steps["start_ns"].min() - 1_000_000
    _check_copies(run, STEPS)
    markers = run.table("markers")
    ours = markers[markers["source"].astype(str) == "perfscope"]
    assert (ours["name"].astype(str) == "forward").sum() == STEPS
    assert (ours["name"].astype(str) == "backward").sum() == STEPS
    host = run.table("host")
    assert (host["kind"].astype(str) == "optimizer_step").sum() == STEPS


def test_kernel_count_equals_torch_profiler(runs: dict[str, Any]) -> None:
    ours = runs["profile"].row_counts()["kernels"]
    theirs = runs["torch"]["kernels"]
    assert ours == theirs, f"perfscope.profile saw {ours} kernels, torch.profiler {theirs} for the same {STEPS} steps"


def test_record_cli_records_gpu_tables(runs: dict[str, Any]) -> None:
    run = runs["record"]
    assert run.status == "complete", runs["record_stderr"][-3000:]
    assert run.meta["source"] == "record" and run.ranks == [0]
    _check_gpu_meta(run)
    counts = run.row_counts()
    # the whole process is recorded: warm-up steps too
    assert counts["kernels"] >= runs["torch"]["kernels"] * (WARMUP + STEPS) // STEPS
    _check_copies(run, WARMUP + STEPS)
    steps = run.table("steps")
    assert set(steps["source"].astype(str)) == {"optimizer"}
    assert steps["step"].tolist() == list(range(1, WARMUP + STEPS))
    markers = run.table("markers")
    ours = markers[markers["source"].astype(str) == "perfscope"]
    assert (ours["name"].astype(str) == "forward").sum() == WARMUP + STEPS
    # CUPTI was subscribed before the first NVTX call, so it sees the same ranges
    nvtx = markers[markers["source"].astype(str) == "nvtx"]
    assert (nvtx["name"].astype(str) == "forward").sum() == WARMUP + STEPS, markers.groupby(["source", "name"], observed=True).size()
    if "nvml" in run.rank_meta(0)["collectors"]:
        assert counts["metrics"] > 0


def test_torchrun_two_gpus_records_two_shards(base: Path) -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    out = base / "ddp.perfscope"
    _run([sys.executable, "-m", "perfscope", "record", "-o", str(out), "--force", "--", sys.executable, "-m",
          "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(EXAMPLE), "--steps", "20"])
    run = perfscope.open_run(out)
    assert run.status == "complete" and run.ranks == [0, 1]
    kernels = run.table("kernels", columns=["start_ns", "rank"])
    assert set(kernels["rank"]) == {0, 1}
    host = run.table("host")
    assert ((host["kind"].astype(str) == "barrier")).groupby(host["rank"]).sum().tolist() == [1, 1]
    plugin_missing = any("NCCL profiler plugin" in n for n in run.meta.get("notes", []))
    if not plugin_missing:  # perfscope's NCCL plugin was configured: DDP's all-reduces are there
        assert run.row_counts()["collectives"] > 0, run.meta.get("notes")
