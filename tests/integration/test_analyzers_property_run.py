"""Property test end to end: random synthetic runs through the store and analyze_run."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfscope.analyzers import analyze_run
from perfscope.analyzers.result import BUCKET_COLUMNS
from perfscope.store import create_run, open_run, update_run, write_rank_tables

T0 = 1_700_000_000_000_000_000


def _events(draw, n_max: int, span: int) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(0, n_max))
    starts = np.array(draw(st.lists(st.integers(0, span), min_size=n, max_size=n)), dtype=np.int64)
    durs = np.array(draw(st.lists(st.integers(0, span // 4), min_size=n, max_size=n)), dtype=np.int64)
    return T0 + starts, durs


@st.composite
def runs(draw):
    span = 100_000
    ranks = draw(st.integers(1, 3))
    out = []
    for _ in range(ranks):
        ks, kd = _events(draw, 25, span)
        names = [draw(st.sampled_from(["sgemm", "ncclDevKernel_AllReduce_Sum_f32", "ncclKernel_AllGather_RING", "elementwise"])) for _ in ks]
        cs, cd = _events(draw, 6, span)
        kinds = [draw(st.sampled_from(["H2D", "D2H", "D2D", "P2P"])) for _ in cs]
        ss, sd = _events(draw, 4, span)
        hs, hd = _events(draw, 4, span)
        hk = [draw(st.sampled_from(["dataloader_wait", "barrier", "other"])) for _ in hs]
        n_steps = draw(st.integers(0, 4))
        cuts = sorted(draw(st.lists(st.integers(0, span), min_size=n_steps + 1, max_size=n_steps + 1, unique=True))) if n_steps else []
        out.append((ks, kd, names, cs, cd, kinds, ss, sd, hs, hd, hk, cuts))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=runs())
def test_buckets_sum_to_wall_for_random_runs(spec) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run"
        create_run(path, world_size=len(spec))
        for rank, (ks, kd, names, cs, cd, kinds, ss, sd, hs, hd, hk, cuts) in enumerate(spec):
            n = len(ks)
            tables = {
                "kernels": {"start_ns": ks, "dur_ns": kd, "name": names, "correlation": np.arange(n), "stream": [7] * n},
                "api": {"start_ns": ks - 500, "dur_ns": [100] * n, "correlation": np.arange(n), "name": ["cudaLaunchKernel"] * n},
                "memcpy": {"start_ns": cs, "dur_ns": cd, "copy_kind": kinds, "bytes": [1 << 20] * len(cs), "pageable": [True] * len(cs)},
                "sync": {"start_ns": ss, "dur_ns": sd},
                "host": {"start_ns": hs, "dur_ns": hd, "kind": hk, "name": ["x"] * len(hs)},
            }
            if cuts:
                c = np.array(cuts, dtype=np.int64)
                tables["steps"] = {"step": np.arange(len(c) - 1), "start_ns": T0 + c[:-1], "dur_ns": np.diff(c),
                                   "name": [f"ProfilerStep#{i}" for i in range(len(c) - 1)], "source": ["profiler_step"] * (len(c) - 1)}
            write_rank_tables(path, rank, {k: v for k, v in tables.items() if len(next(iter(v.values())))})
        update_run(path, status="complete")
        a = analyze_run(open_run(path))
        s = a.steps
        if len(s):
            assert (s[list(BUCKET_COLUMNS)].sum(axis=1) == s["wall_ns"]).all()
            assert (s[list(BUCKET_COLUMNS)] >= 0).all().all()
            assert (s["hidden_network_ns"] <= s["wall_ns"]).all()
            # Windows of one rank never overlap.
            for _, g in s.groupby("rank"):
                g = g.sort_values("start_ns")
                assert (g["start_ns"].to_numpy()[1:] >= g["end_ns"].to_numpy()[:-1]).all()
        g = a.gpu_summary
        if len(g):
            assert (g["idle_ns"] + g["compute_ns"] + g["non_compute_ns"] == g["span_ns"]).all()
