"""The step-time breakdown: every nanosecond of every step in exactly one bucket.

For one rank the activity is given as six *layers*, each a set of intervals (int64 ns):

==============  ==========================================================================
layer           what it holds
==============  ==========================================================================
``compute``     non-communication kernels, memsets, device-to-device copies
``comm``        communication kernels (NCCL and friends)
``comm_wait``   the part of each collective spent waiting for the last rank to arrive
                (from :mod:`perfscope.analyzers.collectives`; empty for one rank)
``pcie``        host<->device and peer copies (H2D, D2H, P2P, ...)
``host_sync``   the host blocked in a CUDA synchronisation, a barrier or a collective wait
``dataloader``  the host waiting for the next batch
==============  ==========================================================================

The sweep cuts the window into elementary segments at every interval boundary, counts
each layer's coverage per segment with ``searchsorted`` + ``cumsum``, and labels each segment
with the first rule that holds:

1. ``compute``       a compute layer interval covers it;
2. ``sync``          a collective is waiting for a late rank (``comm_wait``) and no compute;
3. ``network``       a communication kernel runs and no compute (exposed communication);
4. ``pcie``          a copy runs and nothing above (exposed PCIe);
5. ``sync``          the GPU is idle while the host blocks in a sync/barrier;
6. ``data_loading``  the GPU is idle while the host waits for data;
7. ``host``          anything else (launch overhead, Python, CPU work).

So the buckets keep the priority compute > network > sync > pcie > data_loading > host of
ARCHITECTURE.md, with two documented refinements: the waiting part of an exposed
collective is ``sync`` (it waits on another rank, not on the network), and a host that
blocks while a copy is still running is ``pcie`` (the GPU is not idle; the copy is what it
waits for).  Bucket sums are exact int64 differences of per-bucket cumulative sums, so the
six columns add up to ``wall_ns`` to the nanosecond.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from perfscope.analyzers.intervals import I64, as_i64, coverage
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS

LAYERS: tuple[str, ...] = ("compute", "comm", "comm_wait", "pcie", "host_sync", "dataloader")
Intervals = tuple[np.ndarray, np.ndarray]
EMPTY: Intervals = (np.zeros(0, I64), np.zeros(0, I64))

# Bucket codes (index into BUCKETS).
_C, _N, _S, _P, _D, _H = range(6)

EXTRA_COLUMNS: tuple[str, ...] = ("hidden_network_ns", "hidden_pcie_ns", "collective_wait_ns", "gpu_idle_ns")


def label_segments(active: Mapping[str, np.ndarray]) -> np.ndarray:
    """Return the bucket code (0..5, order of BUCKETS) of each segment from per-layer
    boolean activity arrays (missing layers count as inactive)."""
    n = len(next(iter(active.values())))
    get = lambda k: active.get(k, np.zeros(n, bool))  # noqa: E731
    comp, comm, wait, pcie, hsync, dl = (get(k) for k in LAYERS)
    return np.select(
        [comp, wait, comm, pcie, hsync, dl],
        [_C, _S, _N, _P, _S, _D],
        _H,
    ).astype(np.int8)


def breakdown_rank(windows: pd.DataFrame, layers: Mapping[str, Intervals]) -> pd.DataFrame:
    """Break each window of one rank into the six buckets.

    Args:
        windows: one row per step with ``start_ns`` and ``end_ns`` (int64 ns); other columns
            are carried through.
        layers: layer name (see :data:`LAYERS`) -> (starts, ends) int64 ns arrays.

    Returns:
        ``windows`` plus ``wall_ns``, ``compute_ns`` ... ``host_ns`` (sum exactly to
        ``wall_ns``), ``hidden_network_ns`` (communication overlapped by compute),
        ``hidden_pcie_ns`` (copies overlapped by compute or communication),
        ``collective_wait_ns`` (the part of ``sync_ns`` spent waiting for a late rank) and
        ``gpu_idle_ns`` (no GPU layer active). All int64 ns.
    """
    out = windows.copy().reset_index(drop=True)
    ws = as_i64(out["start_ns"])
    we = np.maximum(as_i64(out["end_ns"]), ws)
    out["wall_ns"] = we - ws
    cols = [*BUCKET_COLUMNS, *EXTRA_COLUMNS]
    if len(out) == 0:
        for c in cols:
            out[c] = np.zeros(0, I64)
        return out
    lo, hi = int(ws.min()), int(we.max())
    pieces = [ws, we]
    for name in LAYERS:
        s, e = layers.get(name, EMPTY)
        s, e = as_i64(s), as_i64(e)
        keep = (e > s) & (e > lo) & (s < hi)
        pieces.append(np.clip(s[keep], lo, hi))
        pieces.append(np.clip(e[keep], lo, hi))
    # Sort + drop repeats (np.unique's hash path is far slower on millions of int64).
    bounds = np.sort(np.concatenate(pieces))
    if bounds.size > 1:
        bounds = bounds[np.concatenate(([True], bounds[1:] != bounds[:-1]))]
    seg_len = np.diff(bounds)
    active = {name: coverage(bounds, *layers.get(name, EMPTY)) > 0 for name in LAYERS}
    code = label_segments(active)

    i0 = np.searchsorted(bounds, ws)
    i1 = np.searchsorted(bounds, we)

    def window_sums(mask: np.ndarray) -> np.ndarray:
        cs = np.concatenate(([0], np.cumsum(np.where(mask, seg_len, 0), dtype=I64)))
        return cs[i1] - cs[i0]

    for b, col in enumerate(BUCKET_COLUMNS):
        out[col] = window_sums(code == b)
    gpu_busy = active["compute"] | active["comm"] | active["pcie"]
    out["hidden_network_ns"] = window_sums(active["comm"] & active["compute"])
    out["hidden_pcie_ns"] = window_sums(active["pcie"] & (code != _P))
    out["collective_wait_ns"] = window_sums(active["comm_wait"] & ~active["compute"])
    out["gpu_idle_ns"] = window_sums(~gpu_busy)
    for c in cols:
        out[c] = out[c].astype(I64)
    return out


def breakdown(windows: pd.DataFrame, layers_by_rank: Mapping[int, Mapping[str, Intervals]]) -> pd.DataFrame:
    """Run :func:`breakdown_rank` for every rank in ``windows`` (which has a ``rank`` column).

    Returns:
        one row per (rank, step) as :func:`breakdown_rank` describes, ordered by rank, start.
    """
    parts = []
    for rank, w in windows.groupby("rank", sort=True):
        parts.append(breakdown_rank(w.sort_values("start_ns"), layers_by_rank.get(int(rank), {})))
    if not parts:
        cols = [*windows.columns, "wall_ns", *BUCKET_COLUMNS, *EXTRA_COLUMNS]
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    return pd.concat(parts, ignore_index=True)


__all__ = ["LAYERS", "EXTRA_COLUMNS", "BUCKETS", "label_segments", "breakdown_rank", "breakdown"]


def post_sync_idle(
    windows: pd.DataFrame,
    gpu_busy: Intervals,
    host_sync: Intervals,
) -> pd.DataFrame:
    """What host synchronisations cost after they return, per window of one rank.

    A sync drains the GPU's queue; when it returns, the GPU stays idle until the host has
    launched new work.  That idle time lands in the ``host`` bucket, so it is measured here
    as evidence for the host-sync rule (TraceLens calls such gaps ``sync_drain``).

    Returns:
        ``windows``' index with ``sync_calls`` (syncs that ended in the window) and
        ``post_sync_idle_ns`` (GPU idle from a sync's return to the next GPU work, counted
        once per idle gap), int64.
    """
    from perfscope.analyzers.intervals import merge

    n = len(windows)
    res = pd.DataFrame({"sync_calls": np.zeros(n, I64), "post_sync_idle_ns": np.zeros(n, I64)}, index=windows.index)
    se = as_i64(host_sync[1])
    if n == 0 or se.size == 0:
        return res
    ws, we = as_i64(windows["start_ns"]), as_i64(windows["end_ns"])
    order = np.argsort(ws, kind="stable")
    ws_sorted, we_sorted = ws[order], we[order]
    t = np.sort(se)
    wi = np.searchsorted(ws_sorted, t, side="right") - 1
    inside = (wi >= 0) & (t < we_sorted[np.clip(wi, 0, None)])
    calls = np.bincount(wi[inside], minlength=n)[:n]
    ms, me = merge(*gpu_busy)
    gaps = np.zeros(t.size, dtype=I64)
    if ms.size:
        k = np.searchsorted(me, t, side="right")  # first busy interval ending after t
        has_next = k < ms.size
        kk = np.clip(k, 0, ms.size - 1)
        idle_at_t = has_next & (ms[kk] > t)
        gaps = np.where(idle_at_t, ms[kk] - t, 0)
        # Count each idle gap once: only the earliest sync return inside it.
        first = np.ones(t.size, dtype=bool)
        first[1:] = kk[1:] != kk[:-1]
        gaps = np.where(first, gaps, 0)
        # A gap is charged to the window the sync returned in, clipped to that window.
        gaps = np.minimum(gaps, np.where(inside, we_sorted[np.clip(wi, 0, None)] - t, 0))
    idle = np.bincount(wi[inside], weights=gaps[inside].astype("float64"), minlength=n)[:n]
    out_calls = np.zeros(n, I64)
    out_idle = np.zeros(n, I64)
    out_calls[order] = calls
    out_idle[order] = np.round(idle).astype(I64)
    res["sync_calls"] = out_calls
    res["post_sync_idle_ns"] = out_idle
    return res
