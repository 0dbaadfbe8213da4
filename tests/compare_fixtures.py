"""Factories for `perfscope compare` tests: realistic step times, synthetic Analysis
objects, and small real runs written through the store (for analyze_run)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfscope.analyzers.result import BUCKET_COLUMNS, Analysis, Recommendation
from perfscope.store import create_run, update_run, write_rank_meta, write_rank_tables

EPOCH = 1_764_000_000_000_000_000
STEP_NS = 100_000_000  # 100 ms


def draw_steps(rng: np.random.Generator, n: int, *, sigma: float = 0.08, slowdown: float = 0.0,
               outliers: float = 0.03, median_ns: float = STEP_NS) -> np.ndarray:
    """Step times like a real job's: lognormal spread ``sigma`` plus rare 1.3-3x outliers."""
    x = median_ns * (1 + slowdown) * rng.lognormal(0.0, sigma, n)
    hit = rng.random(n) < outliers
    x[hit] *= rng.uniform(1.3, 3.0, int(hit.sum()))
    return x


def make_analysis(wall: np.ndarray | list[float], *, ranks: int = 1, shares: tuple[float, ...] = (0.6, 0.2, 0.05, 0.05, 0.05, 0.05),
                  kernels: pd.DataFrame | None = None, collectives: pd.DataFrame | None = None,
                  recommendations: list[Recommendation] | None = None, meta: dict | None = None,
                  rank_jitter: float = 0.0, seed: int = 0) -> Analysis:
    """An Analysis whose steps have wall times ``wall`` (per step, same on every rank up to
    ``rank_jitter``) split into the six buckets by ``shares`` (integer ns summing exactly)."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(ranks):
        for i, w in enumerate(np.asarray(wall, dtype=float)):
            w_r = int(round(w * (1 + rank_jitter * rng.standard_normal())))
            parts = [int(w_r * s) for s in shares[:-1]]
            parts.append(w_r - sum(parts))
            rows.append({"rank": r, "step": i, "start_ns": i * 10**9, "end_ns": i * 10**9 + w_r, "wall_ns": w_r,
                         **dict(zip(BUCKET_COLUMNS, parts)), "hidden_network_ns": 0, "hidden_pcie_ns": 0})
    steps = pd.DataFrame(rows)
    empty = pd.DataFrame()
    return Analysis(steps=steps, gpu_summary=empty, kernels=kernels if kernels is not None else empty,
                    collectives=collectives if collectives is not None else empty, stragglers=empty,
                    recommendations=recommendations or [], warnings=[], meta=meta or {"world_size": ranks})


def write_run(path: Path, walls_ns: np.ndarray, ranks: int = 2) -> Path:
    """A run where each step is: launch (1 %), one GEMM (90 % of the step), host tail."""
    create_run(path, command=["train.py"], source="test", world_size=ranks)
    for r in range(ranks):
        t = EPOCH
        steps, kernels, api = [], [], []
        for i, w in enumerate(np.asarray(walls_ns).astype("int64")):
            steps.append({"step": i, "start_ns": t, "dur_ns": int(w), "name": f"ProfilerStep#{i}", "source": "profiler_step"})
            api.append({"start_ns": t + int(0.01 * w), "dur_ns": 5_000, "correlation": i + 1, "name": "cudaLaunchKernel", "kind": "runtime"})
            kernels.append({"start_ns": t + int(0.05 * w), "dur_ns": int(0.9 * w), "correlation": i + 1, "device": r, "stream": 7,
                            "name": "ampere_sgemm_128x64_nn"})
            t += int(w) + 1_000
        write_rank_tables(path, r, {"steps": _columns(steps), "kernels": _columns(kernels), "api": _columns(api)})
        write_rank_meta(path, r, {"status": "complete", "gpu": {"name": "Test GPU"}})
    update_run(path, status="complete")
    return path


def _columns(rows: list[dict]) -> dict[str, list]:
    return {k: [row[k] for row in rows] for k in rows[0]}
