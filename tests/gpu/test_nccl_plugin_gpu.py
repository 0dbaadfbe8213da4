"""The NCCL plugin inside real NCCL (2.28+) on a GPU: 2 ranks on one GPU over loopback.

Runs tests/gpu/nccl_plugin_job.py with the installed plugin, converts its files into a run
and checks the collectives table against the calls each rank made (same checks as
tests/unit/test_nccl_recorded.py, which runs them on files recorded this way).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfscope.collectors.nccl import ingest_dir, plugin_path
from perfscope.store import create_run, open_run

JOB = Path(__file__).resolve().parent / "nccl_plugin_job.py"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("nranks", [2, 4])
def test_collectives_match_calls_on_gpu(tmp_path: Path, nranks: int) -> None:
    from test_nccl_recorded import expected_ops

    subprocess.run([sys.executable, str(JOB), "--nranks", str(nranks), "--mode", "workload", "--out", str(tmp_path),
                    "--plugin", str(plugin_path()), "--level", "3", "--port", str(29600 + nranks)], check=True, timeout=300)
    run = tmp_path / "run"
    create_run(run, world_size=nranks)
    assert sorted(ingest_dir(tmp_path / "nccl", run)) == list(range(nranks))
    coll = open_run(run).table("collectives")
    for rank in range(nranks):
        calls = json.loads((tmp_path / f"calls-rank{rank}.json").read_text())
        mine = coll[coll["rank"] == rank]
        got = [(r.func, int(r.bytes), None if pd.isna(r.root) else int(r.root), None if pd.isna(r.peer) else int(r.peer))
               for r in mine.itertuples()]
        assert sorted(got, key=str) == sorted(expected_ops(calls), key=str)


def _check_calls(coll: pd.DataFrame, calls_dir: Path, nranks: int) -> None:
    from test_nccl_recorded import expected_ops

    for rank in range(nranks):
        calls = json.loads((calls_dir / f"calls-rank{rank}.json").read_text())
        mine = coll[coll["rank"] == rank]
        got = [(r.func, int(r.bytes), None if pd.isna(r.root) else int(r.root), None if pd.isna(r.peer) else int(r.peer))
               for r in mine.itertuples()]
        assert sorted(got, key=str) == sorted(expected_ops(calls), key=str), f"rank {rank}"


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("nranks", [2, 4])
def test_record_torchrun_collectives_match_calls(tmp_path: Path, nranks: int) -> None:
    """`perfscope record -- torchrun ...` with no plugin setting of the job's own: the
    recorder loads the plugin into every rank, and the run's collectives table lists every
    call of every rank (all_reduce, all_gather, reduce_scatter, broadcast, send/recv,
    barrier at three sizes), with the channel and kernel rows NCCL reported."""
    import os
    import shutil

    run = tmp_path / "run.perfscope"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_PROFILER", "PERFSCOPE_NCCL"))}
    torchrun = shutil.which("torchrun") or "torchrun"
    subprocess.run([sys.executable, "-m", "perfscope", "record", "-o", str(run), "--", torchrun, "--standalone",
                    "--nproc-per-node", str(nranks), str(JOB), "--mode", "workload", "--out", str(tmp_path)],
                   check=True, timeout=300, env=env)
    r = open_run(run)
    assert r.ranks == list(range(nranks)) and r.meta["status"] == "complete"
    coll = r.table("collectives")
    _check_calls(coll, tmp_path, nranks)
    assert (coll["dur_ns"] > 0).all() and (coll["source"] == "nccl_plugin").all()
    channels = r.table("nccl_channels")
    assert len(channels) and set(channels["rank"]) == set(range(nranks))
    kernels = r.table("kernels")
    assert kernels["name"].str.contains("nccl", case=False).sum() >= len(coll) // nranks
    keep = os.environ.get("PERFSCOPE_GPU_KEEP")  # the device session copies the run out
    if keep:
        shutil.copytree(run, Path(keep) / f"record_{nranks}rank.perfscope", dirs_exist_ok=True)
        for f in tmp_path.glob("calls-rank*.json"):
            shutil.copy(f, Path(keep) / f"record_{nranks}rank.perfscope" / f.name)
