"""Correlation ids are per process: one rank's NCCL ids never relabel another rank's kernels."""
from __future__ import annotations

from pathlib import Path

from perfscope.analyzers import analyze_run
from perfscope.store import create_run, open_run, update_run, write_rank_meta, write_rank_tables

T0 = 1_764_000_000_000_000_000


def test_other_ranks_nccl_correlation_does_not_make_a_gemm_communication(tmp_path: Path) -> None:
    # GIVEN rank 0 runs a compute kernel with correlation 5 and rank 1 an NCCL kernel with the same id
    path = tmp_path / "r"
    create_run(path, world_size=2)
    for rank, name in ((0, "sm90_xmma_gemm_bf16"), (1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")):
        write_rank_meta(path, rank, {"status": "complete"})
        tables = {
            "steps": {"step": [1], "start_ns": [T0], "dur_ns": [1_000_000], "name": ["ProfilerStep#1"], "source": ["profiler_step"]},
            "api": {"start_ns": [T0 + 10], "dur_ns": [5_000], "correlation": [5], "name": ["cudaLaunchKernel"], "kind": ["runtime"]},
            "kernels": {"start_ns": [T0 + 100_000], "dur_ns": [500_000], "correlation": [5], "name": [name], "stream": [7]},
        }
        if rank == 1:
            tables["collectives"] = {"start_ns": [T0 + 100_000], "dur_ns": [500_000], "correlation": [5], "func": ["AllReduce"],
                                     "kernel_name": [name], "comm_id": ["c"], "bytes": [4096], "nranks": [2], "source": ["kineto"]}
        write_rank_tables(path, rank, tables)
    update_run(path, status="complete")
    # WHEN analysed
    steps = analyze_run(open_run(path)).steps.set_index("rank")
    # THEN rank 0's kernel time is compute and rank 1's is not
    assert steps.loc[0, "compute_ns"] == 500_000
    assert steps.loc[1, "compute_ns"] == 0
