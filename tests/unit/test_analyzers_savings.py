"""The saving models (analyzers/savings.py) on hand-made steps and intervals."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfscope.analyzers.intervals import covered_ns, merge
from perfscope.analyzers.savings import (
    comm_compressed,
    comm_overlapped,
    host_idle_removed,
    pageable_copy_columns,
    pinned_bandwidth,
    pinned_copies,
    sync_removed,
)

MS = 1_000_000


def iv(*pairs: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Intervals from (start, end) pairs in ms."""
    return (np.array([int(a * MS) for a, _ in pairs], np.int64), np.array([int(b * MS) for _, b in pairs], np.int64))


def one(ws: float, we: float) -> tuple[np.ndarray, np.ndarray]:
    return np.array([int(ws * MS)], np.int64), np.array([int(we * MS)], np.int64)


def test_sync_removed_lets_the_host_work_after_a_sync_overlap_the_gpu_work_it_waited_for() -> None:
    # mixed_matmul_host's step: 5.5 ms of matrix products, the host blocks in
    # torch.cuda.synchronize() until they end, 15 ms of Python, then the model's kernels.
    ws, we = one(0, 23)
    saved = sync_removed(ws, we, iv((0, 5.5), (20.6, 23)), iv((0.1, 5.5)))
    assert saved.tolist() == [int(5.4 * MS)]  # the wait, not the 15 ms of Python after it


def test_sync_removed_saves_nothing_when_nothing_in_the_step_could_overlap_the_wait() -> None:
    ws, we = one(0, 10)
    assert sync_removed(ws, we, iv((0, 10)), iv((0.1, 10))).tolist() == [0]
    # Without a blocking call, or without windows: nothing.
    assert sync_removed(ws, we, iv((0, 10)), iv()).tolist() == [0]
    assert sync_removed(np.zeros(0, np.int64), np.zeros(0, np.int64), iv((0, 1)), iv((0, 1))).size == 0


def _reference(ws: np.ndarray, we: np.ndarray, busy: tuple, blocking: tuple) -> list[int]:
    """sync_removed step by step: per window, each GPU piece in turn."""
    bs, be = merge(*blocking)
    gs, ge = merge(*busy)
    out = []
    for a, b in zip(ws.tolist(), we.tolist()):
        blocked = int(covered_ns(np.array([a]), np.array([b]), bs, be)[0])
        end = a
        for s, e in zip(np.maximum(gs, a).tolist(), np.minimum(ge, b).tolist()):
            if e <= s:
                continue
            shift = int(covered_ns(np.array([a]), np.array([s]), bs, be)[0])
            end = max(s - shift, end) + (e - s)
        out.append(int(min(max(b - max(b - blocked, end), 0), blocked)))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_sync_removed_matches_a_step_by_step_replay(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(0, 1000 * MS, 1000), size=12, replace=False)).astype(np.int64)
    ws, we = cuts[0::2], cuts[1::2] - rng.integers(0, 2, 6) * 1000  # some windows do not touch
    def rand_iv(n: int) -> tuple[np.ndarray, np.ndarray]:
        s = rng.integers(0, 1000 * MS, n).astype(np.int64)
        return s, s + rng.integers(1, 30 * MS, n).astype(np.int64)
    busy, blocking = rand_iv(60), rand_iv(15)
    assert sync_removed(ws, we, busy, blocking).tolist() == _reference(ws, we, busy, blocking)


def steps(**ns: float) -> pd.DataFrame:
    cols = ["wall", "compute", "network", "sync", "pcie", "data_loading", "host", "hidden_network", "hidden_pcie",
            "collective_wait", "gpu_idle", "post_sync_idle"]
    return pd.DataFrame({f"{c}_ns": [int(ns.get(c, 0) * MS)] for c in cols})


def test_host_idle_removed_stops_at_the_gpu_busy_time_and_leaves_the_syncs_share() -> None:
    s = steps(wall=23, compute=5.4, host=17.6, gpu_idle=17.6, post_sync_idle=15)
    assert host_idle_removed(s, 0).tolist() == [int(17.6 * MS)]
    assert host_idle_removed(s, 20 * MS).tolist() == [3 * MS]  # launching the kernels alone takes 20 ms
    # Removing the sync already hides 5.4 ms of the Python after it: that is the sync's saving.
    assert host_idle_removed(s, 0, np.array([int(5.4 * MS)])).tolist() == [int(12.2 * MS)]


def test_communication_overlap_needs_compute_free_of_communication_and_compression_needs_f32() -> None:
    s = steps(wall=10, compute=4, network=5, hidden_network=1, host=1)
    assert comm_overlapped(s).tolist() == [3 * MS]
    assert comm_overlapped(steps(wall=10, network=9, host=1)).tolist() == [0]
    assert comm_compressed(s, 1.0).tolist() == [int(2.5 * MS)] and comm_compressed(s, 0.0).tolist() == [0]


def test_pinned_copies_re_times_the_steps_pageable_copies_at_pinned_bandwidth() -> None:
    # 128 MiB pageable in 12 ms; at 50 GB/s pinned it takes 2.68 ms.
    what_if = pd.DataFrame({"pageable_copy_ns": [12 * MS], "pageable_copy_bytes": [128 << 20]})
    exposed = steps(wall=20, pcie=11, sync=1, host=8)
    assert pinned_copies(what_if, exposed, 50.0).tolist() == [12 * MS - round((128 << 20) / 50)]
    hidden = steps(wall=20, compute=14, pcie=1, host=5)  # the copy ran under compute: 1 ms exposed
    assert pinned_copies(what_if, hidden, 50.0).tolist() == [1 * MS]


def test_pinned_bandwidth_from_the_runs_pinned_copies_else_the_pcie_link() -> None:
    copies = pd.DataFrame({"copy_kind": ["H2D", "H2D", "D2D"], "pageable": [True, False, False], "count": [2, 4, 1],
                           "bytes": [64 << 20, 64 << 20, 1 << 30], "total_ns": [10 * MS, 2 * MS, MS]})
    gbps, where = pinned_bandwidth(copies, 5, 16)
    assert gbps == pytest.approx((64 << 20) / (2 * MS)) and "pinned copies" in where
    small = copies.assign(bytes=[64 << 20, 4 * 65536, 1 << 30])  # 64 KiB copies measure latency, not bandwidth
    gbps, where = pinned_bandwidth(small, 5, 16)
    assert gbps == pytest.approx(3.938 * 16 * 0.8) and "Gen5 x16" in where
    assert "usual link" in pinned_bandwidth(None, 4, 16, assumed=True)[1]
    assert pinned_bandwidth(None, None, None) is None


def test_pageable_copy_columns_count_only_copies_inside_the_windows() -> None:
    ws, we = np.array([10 * MS, 20 * MS]), np.array([20 * MS, 30 * MS])
    copies = {"start_ns": np.array([0, 12 * MS, 19 * MS, 25 * MS]), "dur_ns": np.array([5 * MS, 2 * MS, 2 * MS, 1 * MS]),
              "bytes": np.array([100, 10, 20, 30])}
    got = pageable_copy_columns(ws, we, copies)  # the first copy (warm-up, before the steps) counts nowhere
    assert got["pageable_copy_ns"].tolist() == [3 * MS, 2 * MS]
    assert got["pageable_copy_bytes"].tolist() == [30, 30] and got["pageable_copies"].tolist() == [2, 1]


def test_fp32_share_of_communication_from_nccl_kernel_names() -> None:
    from perfscope.analyzers.comm_families import fp32_comm_share

    k = pd.DataFrame({"name": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "ncclKernel_AllReduce_RING_LL_Sum_float(w)",
                               "ncclKernel_AllReduce_RING_LL_Sum___nv_bfloat16(w)", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(c)",
                               "volta_sgemm_128x64_nn"],
                      "kind": ["communication"] * 4 + ["compute"], "total_ns": [1, 2, 3, 4, 100]})
    assert fp32_comm_share(k) == pytest.approx(0.3)
    assert fp32_comm_share(None) == 0.0
