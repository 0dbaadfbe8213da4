"""Synthetic runs for the dashboard tests and benchmark, written through perfscope.store.

:func:`make_run` writes a run whose every step has the same known shape (data loading, a
host-to-device copy, compute kernels, an overlapped and an exposed NCCL all-reduce, a
stream synchronise, an optimizer step), so tests can assert on exact content.  Some names
are hostile on purpose (``<script>alert(1)</script>``) to test that the dashboard shows
them as text.

:func:`analysis_for` returns the run's :class:`~perfscope.analyzers.result.Analysis`:
the real ``perfscope.analyzers.analyze_run`` when it is installed, else the exact analysis
:func:`make_run` computed from the shape it wrote (so the dashboard is coded against the
contract before the analyzers exist).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.result import BUCKETS, Analysis, Recommendation
from perfscope.store import Run, create_run, open_run, update_run, write_rank_meta, write_rank_tables

EVIL_KERNEL = "<script>alert(1)</script>"
EVIL_MARKER = "<img src=x onerror=alert(2)>"
GEMM = "ampere_sgemm_128x64_tn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COMPUTE_NAMES = (GEMM, ELEMENTWISE, EVIL_KERNEL)
T0 = 1_750_000_000_000_000_000  # some Unix-epoch nanosecond instant
COMPUTE_STREAM, NCCL_STREAM = 7, 20

# Fractions of the step's wall time where each part of the step lies.
_DATA = (0.00, 0.10)
_COPY = (0.10, 0.12)
_COMPUTE = (0.12, 0.70)
_OVERLAP_NCCL = (0.50, 0.60)
_EXPOSED_NCCL = (0.72, 0.85)
_SYNC = (0.86, 0.90)
_OPT = (0.90, 0.98)

_REGISTRY: dict[str, Analysis] = {}


@dataclass
class SyntheticRun:
    """A run written by :func:`make_run` and the analysis that matches it exactly."""

    path: Path
    analysis: Analysis
    n_events: int
    steps: int
    ranks: int


def make_run(
    path: str | Path,
    *,
    ranks: int = 2,
    steps: int = 4,
    kernels_per_step: int = 30,
    step_ns: int = 20_000_000,
    straggler_extra_ns: int = 3_000_000,
    first_step: int = 10,
) -> SyntheticRun:
    """Write a synthetic run at ``path`` (created; must not exist or be empty).

    The last rank is a straggler: its steps last ``straggler_extra_ns`` longer and it
    arrives last at every collective.  Step numbers start at ``first_step``.

    Returns:
        the path, the matching Analysis, and the number of events written.
    """
    path = Path(path)
    create_run(path, command=["python", "train.py"], source="record", world_size=ranks,
               environment={"NCCL_DEBUG": "WARN", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}, collectors=["synthetic"])
    n_events = 0
    steps_rows, kernel_frames, coll_frames = [], [], []
    step_idx = np.arange(steps, dtype="int64")
    period = step_ns + straggler_extra_ns + 2_000_000
    for rank in range(ranks):
        wall = step_ns + (straggler_extra_ns if rank == ranks - 1 and ranks > 1 else 0)
        starts = T0 + step_idx * period
        tables, kframe = _rank_tables(rank, starts, wall, kernels_per_step, first_step, ranks)
        n_events += sum(len(next(iter(t.values()))) for name, t in tables.items() if name != "steps")
        write_rank_tables(path, rank, tables)
        write_rank_meta(path, rank, {
            "local_rank": rank, "status": "complete", "started_ns": int(T0), "stopped_ns": int(starts[-1] + period),
            "gpu": {"name": "NVIDIA H200", "uuid": f"GPU-{rank:04d}"},
            "versions": {"driver": "580.65", "cuda": "13.0", "nccl": "2.27.7", "torch": "2.13.0", "python": "3.12"},
            "clock_offset_ns": 0, "dropped_events": {}, "warnings": [],
        })
        kframe["rank"] = rank
        kernel_frames.append(kframe)
        steps_rows.append(_step_rows(rank, starts, wall, kframe, first_step))
        coll_frames.append(_collective_rows(rank, starts, wall, first_step, ranks, straggler_extra_ns))
    update_run(path, status="complete")
    run = open_run(path)
    analysis = _analysis(run, pd.concat(steps_rows, ignore_index=True), pd.concat(kernel_frames, ignore_index=True),
                         pd.concat(coll_frames, ignore_index=True), ranks, steps, straggler_extra_ns)
    _REGISTRY[str(path.resolve())] = analysis
    return SyntheticRun(path=path, analysis=analysis, n_events=n_events, steps=steps, ranks=ranks)


def _span(starts: np.ndarray, wall: int, frac: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    return starts + int(frac[0] * wall), np.full(len(starts), int((frac[1] - frac[0]) * wall), "int64")


def _rank_tables(rank: int, starts: np.ndarray, wall: int, k: int, first_step: int, ranks: int
                 ) -> tuple[dict[str, dict[str, Any]], pd.DataFrame]:
    n = len(starts)
    # Compute kernels: k per step, evenly spread over the compute window, 80% busy.
    slot = (_COMPUTE[1] - _COMPUTE[0]) * wall / k
    kstart = (starts[:, None] + int(_COMPUTE[0] * wall) + (np.arange(k) * slot).astype("int64")[None, :]).ravel()
    kdur = np.full(kstart.size, max(int(slot * 0.8), 1), "int64")
    knames = np.array(COMPUTE_NAMES, dtype=object)[np.arange(kstart.size) % len(COMPUTE_NAMES)]
    o_s, o_d = _span(starts, wall, _OVERLAP_NCCL)
    e_s, e_d = _span(starts, wall, _EXPOSED_NCCL)
    nstart = np.concatenate([o_s, e_s])
    ndur = np.concatenate([o_d, e_d])
    all_start = np.concatenate([kstart, nstart])
    kernels = {
        "start_ns": all_start, "dur_ns": np.concatenate([kdur, ndur]),
        "device": np.full(all_start.size, rank, "int32"),
        "stream": np.concatenate([np.full(kstart.size, COMPUTE_STREAM), np.full(nstart.size, NCCL_STREAM)]),
        "correlation": np.arange(all_start.size, dtype="int64"),
        "name": list(knames) + [NCCL_KERNEL] * nstart.size,
    }
    c_s, c_d = _span(starts, wall, _COPY)
    memcpy = {"start_ns": c_s, "dur_ns": c_d, "device": [rank] * n, "stream": [COMPUTE_STREAM] * n,
              "copy_kind": ["H2D"] * n, "bytes": [64 << 20] * n, "src_kind": ["pinned"] * n,
              "dst_kind": ["device"] * n, "pageable": [False] * n}
    s_s, s_d = _span(starts, wall, _SYNC)
    sync = {"start_ns": s_s, "dur_ns": s_d, "device": [rank] * n, "stream": [COMPUTE_STREAM] * n,
            "sync_kind": ["stream"] * n, "tid": [1] * n}
    fwd = _span(starts, wall, (0.12, 0.40))
    bwd = _span(starts, wall, (0.40, 0.70))
    evil = _span(starts, wall, (0.70, 0.72))
    markers = {
        "start_ns": np.concatenate([fwd[0], bwd[0], evil[0]]), "dur_ns": np.concatenate([fwd[1], bwd[1], evil[1]]),
        "pid": [100 + rank] * (3 * n), "tid": [1] * (3 * n),
        "name": ["forward"] * n + ["backward"] * n + [EVIL_MARKER] * n,
        "domain": ["default"] * (3 * n), "source": ["nvtx"] * (3 * n),
    }
    d_s, d_d = _span(starts, wall, _DATA)
    p_s, p_d = _span(starts, wall, _OPT)
    host = {"start_ns": np.concatenate([d_s, p_s]), "dur_ns": np.concatenate([d_d, p_d]), "tid": [1] * (2 * n),
            "kind": ["dataloader_wait"] * n + ["optimizer_step"] * n,
            "name": ["DataLoader.__next__"] * n + ["AdamW.step"] * n}
    coll = {"start_ns": nstart, "dur_ns": ndur, "enqueue_ns": nstart - 1000, "comm_id": ["pg0"] * (2 * n),
            "seq": np.concatenate([2 * np.arange(n), 2 * np.arange(n) + 1]), "func": ["AllReduce"] * (2 * n),
            "count": [1 << 20] * (2 * n), "datatype": ["ncclFloat32"] * (2 * n), "bytes": [4 << 20] * (2 * n),
            "nranks": [ranks] * (2 * n), "algorithm": ["RING"] * (2 * n), "protocol": ["LL"] * (2 * n),
            "nchannels": [2] * (2 * n), "device": [rank] * (2 * n), "stream": [NCCL_STREAM] * (2 * n),
            "kernel_name": [NCCL_KERNEL] * (2 * n), "source": ["nccl_plugin"] * (2 * n)}
    steps = {"step": first_step + np.arange(n), "start_ns": starts, "dur_ns": np.full(n, wall, "int64"),
             "name": [f"ProfilerStep#{first_step + i}" for i in range(n)], "source": ["profiler_step"] * n}
    tables = {"kernels": kernels, "memcpy": memcpy, "sync": sync, "markers": markers, "host": host,
              "collectives": coll, "steps": steps}
    kframe = pd.DataFrame({"name": kernels["name"], "dur_ns": kernels["dur_ns"]})
    return tables, kframe


def _step_rows(rank: int, starts: np.ndarray, wall: int, kframe: pd.DataFrame, first_step: int) -> pd.DataFrame:
    n = len(starts)
    compute_per_step = int(kframe.loc[kframe["name"] != NCCL_KERNEL, "dur_ns"].sum()) // n
    parts = {
        "compute_ns": compute_per_step,
        "network_ns": int((_EXPOSED_NCCL[1] - _EXPOSED_NCCL[0]) * wall),
        "sync_ns": int((_SYNC[1] - _SYNC[0]) * wall),
        "pcie_ns": int((_COPY[1] - _COPY[0]) * wall),
        "data_loading_ns": int((_DATA[1] - _DATA[0]) * wall),
    }
    parts["host_ns"] = wall - sum(parts.values())
    df = pd.DataFrame({"rank": rank, "step": first_step + np.arange(n), "start_ns": starts,
                       "end_ns": starts + wall, "wall_ns": wall, **parts,
                       "hidden_network_ns": int((_OVERLAP_NCCL[1] - _OVERLAP_NCCL[0]) * wall), "hidden_pcie_ns": 0})
    return df.astype({c: "int64" for c in df.columns})


def _collective_rows(rank: int, starts: np.ndarray, wall: int, first_step: int, ranks: int, extra: int) -> pd.DataFrame:
    o_s, o_d = _span(starts, wall, _OVERLAP_NCCL)
    e_s, e_d = _span(starts, wall, _EXPOSED_NCCL)
    n = len(starts)
    dur = np.concatenate([o_d, e_d])
    nbytes = 4 << 20
    algbw = nbytes / dur  # bytes per ns == GB/s
    last = rank == ranks - 1
    return pd.DataFrame({
        "rank": rank, "comm_id": "pg0", "seq": np.concatenate([2 * np.arange(n), 2 * np.arange(n) + 1]),
        "func": "AllReduce", "bytes": nbytes, "start_ns": np.concatenate([o_s, e_s]), "dur_ns": dur,
        "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (ranks - 1) / max(ranks, 1),
        "arrival_skew_ns": extra if ranks > 1 else 0, "wait_ns": 0 if last or ranks == 1 else extra,
    })


def _analysis(run: Run, steps: pd.DataFrame, kernels: pd.DataFrame, colls: pd.DataFrame, ranks: int, n_steps: int,
              extra: int) -> Analysis:
    g = kernels.groupby(["rank", "name"], sort=False)["dur_ns"]
    kt = g.agg(count="size", total_ns="sum", mean_ns="mean", median_ns="median", max_ns="max").reset_index()
    kt["kind"] = np.where(kt["name"].str.startswith("nccl"), "communication", "compute")
    kt["share"] = kt["total_ns"] / kt.groupby("rank")["total_ns"].transform("sum")
    kt = kt.sort_values(["rank", "total_ns"], ascending=[True, False]).reset_index(drop=True)
    gpu = steps.groupby("rank").agg(span_ns=("wall_ns", "sum"), compute_ns=("compute_ns", "sum")).reset_index()
    gpu["idle_ns"] = gpu["span_ns"] - gpu["compute_ns"] - steps.groupby("rank")["network_ns"].sum().to_numpy()
    gpu["non_compute_ns"] = gpu["span_ns"] - gpu["compute_ns"] - gpu["idle_ns"]
    last = np.zeros(ranks, "int64")
    if ranks > 1:
        last[-1] = 2 * n_steps
    stragglers = pd.DataFrame({
        "rank": np.arange(ranks), "last_count": last, "last_share": last / max(2 * n_steps, 1),
        "mean_lateness_ns": np.where(last > 0, extra, 0),
        "cost_to_others_ns": np.where(last > 0, extra * 2 * n_steps * (ranks - 1), 0),
    })
    wall = float(steps["wall_ns"].median())
    data_ns = int(steps["data_loading_ns"].median())
    recs = [
        Recommendation(
            id="dataloader.num_workers", bucket="data_loading", title="The GPU waits for data every step",
            message="Each step starts with 10% of its time waiting on the DataLoader; raise num_workers.",
            evidence={"data_loading_share": 0.1, "num_workers": 0}, saving_ns=data_ns,
            saving_share=data_ns / wall, change="DataLoader(..., num_workers=8, pin_memory=True)"),
        Recommendation(
            id="kernels.hot", bucket="compute", title=f"Kernel {EVIL_KERNEL} dominates compute",
            message=f"{EVIL_KERNEL} takes a third of kernel time.", evidence={"kernel": EVIL_KERNEL, "share": 0.33},
            saving_ns=int(0.05 * wall), saving_share=0.05, change="torch.compile(model)"),
        Recommendation(
            id="env.nccl_debug", bucket="environment", title="NCCL_DEBUG is set",
            message="NCCL_DEBUG=WARN is set; fine, but INFO would slow every collective.",
            evidence={"NCCL_DEBUG": "WARN"}, saving_ns=0, saving_share=0.0, change="unset NCCL_DEBUG"),
    ]
    recs.sort(key=lambda r: r.saving_ns, reverse=True)
    return Analysis(steps=steps, gpu_summary=gpu, kernels=kt, collectives=colls, stragglers=stragglers,
                    recommendations=recs, warnings=["synthetic run: analysis computed by the test fixture"],
                    meta=dict(run.meta))


def fake_analyze(run: Run, config: object = None) -> Analysis:
    """The analysis :func:`make_run` recorded for ``run`` (KeyError for other runs)."""
    return _REGISTRY[str(Path(run.path).resolve())]


def real_analyze_run() -> Any | None:
    """``perfscope.analyzers.analyze_run`` when the analyzers are installed, else None."""
    try:
        from perfscope.analyzers import analyze_run  # type: ignore[attr-defined]
    except ImportError:
        return None
    return analyze_run


def analysis_for(run: Run) -> Analysis:
    """The real analysis of ``run`` when the analyzers exist, else the fixture's own."""
    analyze = real_analyze_run()
    if analyze is not None:
        return analyze(run)
    return fake_analyze(run)


def bucket_sum_ok(steps: pd.DataFrame) -> bool:
    """True when the bucket columns sum to ``wall_ns`` on every row (contract check)."""
    return bool((steps[[f"{b}_ns" for b in BUCKETS]].sum(axis=1) == steps["wall_ns"]).all())
