"""Top kernels and launch statistics."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfscope.analyzers.kernels import LaunchThresholds, launch_stats, top_kernels


def test_top_kernels_exact() -> None:
    k = pd.DataFrame({"rank": [0, 0, 0], "name": ["a", "b", "a"], "dur_ns": [10, 45, 30]})
    t = top_kernels(k, np.array(["compute"] * 3))
    assert t["name"].tolist() == ["b", "a"]
    assert t["total_ns"].tolist() == [45, 40]
    assert t.loc[t["name"] == "a", "count"].item() == 2
    assert t.loc[t["name"] == "a", "mean_ns"].item() == 20
    assert t["share"].sum() == 1.0


def test_launch_stats_and_launch_bound() -> None:
    n = 200
    la = np.arange(n) * 10_000
    k = pd.DataFrame({"rank": 0, "start_ns": la + 12_000, "dur_ns": 2_000, "correlation": np.arange(n)})
    api = pd.DataFrame({"rank": 0, "start_ns": la, "dur_ns": 8_000, "correlation": np.arange(n)})
    gpu = pd.DataFrame({"rank": 0, "start_ns": k["start_ns"], "end_ns": k["start_ns"] + 2_000, "correlation": k["correlation"]})
    s = launch_stats(k, api, gpu).iloc[0]
    assert s["short_share"] == 1.0 and s["median_launch_cpu_ns"] == 8_000 and s["median_launch_latency_ns"] == 4_000
    assert s["idle_ns"] == (n - 1) * 8_000 and s["kernel_wait_idle_ns"] == (n - 1) * 8_000
    assert bool(s["launch_bound"])
    # Long kernels are never launch-bound.
    k2 = k.assign(dur_ns=9_000)
    gpu2 = gpu.assign(end_ns=gpu["start_ns"] + 9_000)
    assert not bool(launch_stats(k2, api, gpu2, LaunchThresholds()).iloc[0]["launch_bound"])


def test_top_kernels_one_rank_fast_path_equals_the_lexsort() -> None:
    # GIVEN one rank's kernels with ties in duration and a name whose launches differ in kind
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        names = pd.Categorical(rng.choice(["gemm", "relu", "nccl", "copy"], n), categories=["gemm", "relu", "nccl", "copy"])
        kinds = rng.choice(["compute", "communication"], n).astype(object)
        one = pd.DataFrame({"rank": np.full(n, 3), "name": names, "dur_ns": rng.integers(0, 4, n)})
        # WHEN it is aggregated alone (packed sort) and beside another rank (lexsort)
        fast = top_kernels(one, kinds, top_n=None)
        other = pd.DataFrame({"rank": [9], "name": pd.Categorical(["gemm"], categories=names.categories), "dur_ns": [1]})
        both = top_kernels(pd.concat([one, other], ignore_index=True), np.append(kinds, "compute"), top_n=None)
        # THEN the rank's rows are identical, kinds included
        pd.testing.assert_frame_equal(fast, both[both["rank"] == 3].reset_index(drop=True), check_exact=True)
