"""Saving models: how long a step would take with one change applied, from the trace itself.

Each advice rule (:mod:`.rules`) names one model here in its evidence (``saving_model``) and
claims what that model gives for the median step.  A model changes the step's activity
the way the advised fix would and measures the step again: removing time the GPU spends idle
for one reason compresses the step by exactly the time the sweep (:mod:`.breakdown`) put in
that reason's bucket, so those models read the step's bucket columns; a model that moves
work (a host that no longer blocks, copies at another bandwidth) re-times the step's
intervals.  Every function is pure and returns ns per step (int64 arrays aligned with its
input), never negative and never more than the step.

Where the trace cannot tell what a fix would give (the gain of kernel fusion, of sending
fewer bytes, a copy's pinned bandwidth when the run has no pinned copy and does not state its
PCIe link), no model applies: the rule claims no saving and says why (:data:`NO_ESTIMATE`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.classify import name_values
from perfscope.analyzers.columns import Columns, bools, n_rows
from perfscope.analyzers.intervals import I64, KeyIndex, as_i64, as_key, covered_ns, intersect, length_before, merge, union_cumsum

Intervals = tuple[np.ndarray, np.ndarray]
NO_ESTIMATE = "none"  # the saving_model of a finding that claims no saving
# Every model a rule can name: the functions below, and two savings the trace measures
# directly (launch.bound's launch gaps, comm.straggler's waits of the other ranks).
MODELS: tuple[str, ...] = ("loader_wait_removed", "host_idle_removed", "comm_overlapped", "comm_compressed",
                           "copies_overlapped", "pinned_copies", "bandwidth_restored", "fp32_on_tensor_cores",
                           "sync_removed", "launch_gaps_removed", "straggler_wait_removed", "uvm_prefetched")

# PCIe payload rate per lane and direction, GB/s, by generation (after 8b/10b or 128b/130b
# encoding); a DMA copy from pinned memory reaches about 80 % of the link (measured with
# cuda-samples' bandwidthTest: ~25 of 31.5 GB/s on Gen4 x16, ~50 of 63 GB/s on Gen5 x16).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
PCIE_EFFICIENCY = 0.8
# Pinned copies this large measure bandwidth; smaller ones mostly measure their latency.
BANDWIDTH_COPY_BYTES = 1 << 20
# Pageable copies at least this large are the copies.pageable rule's (pinning a 4-byte
# .item() read gains nothing); the copies table's `large` flag uses the same bound.
LARGE_COPY_BYTES = 64 << 10


def _col(steps: Mapping[str, Any], name: str) -> np.ndarray:
    return as_i64(np.asarray(steps[name]))


def loader_wait_removed(steps: Mapping[str, Any]) -> np.ndarray:
    """Model ``loader_wait_removed``: input loading overlaps compute (more DataLoader workers,
    prefetching), so the time the GPU sat idle waiting for the next batch goes: the step
    shortens by its ``data_loading_ns``."""
    return _col(steps, "data_loading_ns")


def host_idle_removed(steps: Mapping[str, Any], launch_floor_ns: int, sync_removed_ns: np.ndarray | None = None) -> np.ndarray:
    """Model ``host_idle_removed``: the host work that keeps the GPU idle (its ``host_ns``)
    leaves the training thread, but the step cannot become shorter than the GPU's busy time
    nor than the host needs to launch the step's kernels (``launch_floor_ns``):
    ``min(host_ns, wall_ns - max(wall_ns - gpu_idle_ns, launch_floor_ns))``.

    Host work right after a sync is hidden as well by removing the sync (it then overlaps
    the GPU work the sync waited for): the part of that idle (``post_sync_idle_ns``) that
    :func:`sync_removed` already recovers (``sync_removed_ns``, per step) is the sync's, and
    is not claimed twice."""
    wall, host = _col(steps, "wall_ns"), _col(steps, "host_ns")
    busy = wall - _col(steps, "gpu_idle_ns")
    saving = np.minimum(host, wall - np.maximum(busy, int(launch_floor_ns)))
    if sync_removed_ns is not None:
        saving = saving - np.minimum(as_i64(sync_removed_ns), _col(steps, "post_sync_idle_ns"))
    return np.clip(saving, 0, None)


def comm_overlapped(steps: Mapping[str, Any]) -> np.ndarray:
    """Model ``comm_overlapped``: exposed communication (``network_ns``) runs under the
    step's compute time that has no communication under it yet (``compute_ns -
    hidden_network_ns``); the step shortens by the smaller of the two.  Compression or fewer
    collectives could save more; the trace cannot say how much."""
    free = np.clip(_col(steps, "compute_ns") - _col(steps, "hidden_network_ns"), 0, None)
    return np.minimum(_col(steps, "network_ns"), free)


def comm_compressed(steps: Mapping[str, Any], fp32_share: float) -> np.ndarray:
    """Model ``comm_compressed``: the collectives that move 32-bit floats (``fp32_share`` of
    communication time, from the NCCL kernels' names) send bfloat16 instead (a compression
    hook): half the bytes, and large messages are bandwidth-bound, so half their exposed time
    (``network_ns``)."""
    return np.rint(_col(steps, "network_ns") * fp32_share / 2).astype(I64)


def copies_overlapped(steps: Mapping[str, Any]) -> np.ndarray:
    """Model ``copies_overlapped``: exposed host-device copies (``pcie_ns``) are prefetched
    on a side stream under the GPU time that has no copy under it yet (``compute_ns +
    network_ns - hidden_pcie_ns``); the step shortens by the smaller of the two."""
    free = np.clip(_col(steps, "compute_ns") + _col(steps, "network_ns") - _col(steps, "hidden_pcie_ns"), 0, None)
    return np.minimum(_col(steps, "pcie_ns"), free)


def pinned_copies(what_if: Mapping[str, Any], steps: Mapping[str, Any], pinned_gbps: float) -> np.ndarray:
    """Model ``pinned_copies``: the step's large pageable copies (``pageable_copy_ns``,
    ``pageable_copy_bytes`` of :func:`pageable_copy_columns`) run at the pinned bandwidth
    ``pinned_gbps`` (GB/s, :func:`pinned_bandwidth`) instead; the saving is the time that
    frees, at most the copies' exposed time (``pcie_ns`` plus the host's blocked time
    ``sync_ns - collective_wait_ns``: a copy hidden under compute gains nothing)."""
    pageable = _col(what_if, "pageable_copy_ns")
    at_pinned = np.asarray(what_if["pageable_copy_bytes"], dtype=float) / float(pinned_gbps)  # bytes / (GB/s) = ns
    exposed = _col(steps, "pcie_ns") + np.clip(_col(steps, "sync_ns") - _col(steps, "collective_wait_ns"), 0, None)
    return np.clip(np.minimum(pageable - np.rint(at_pinned).astype(I64), exposed), 0, None)


def bandwidth_restored(steps: Mapping[str, Any], busbw_gbps: float, expected_gbps: float) -> np.ndarray:
    """Model ``bandwidth_restored``: collectives reach the link's expected bus bandwidth
    instead of the measured ``busbw_gbps``, so exposed communication (``network_ns``) takes
    ``busbw / expected`` of its time."""
    return np.rint(_col(steps, "network_ns") * max(0.0, 1 - busbw_gbps / expected_gbps)).astype(I64)


def fp32_on_tensor_cores(compute_ns: np.ndarray, fp32_share: float) -> np.ndarray:
    """Model ``fp32_on_tensor_cores``: FP32 matrix kernels (``fp32_share`` of the step's
    compute) run on tensor cores at a lower precision, at least twice as fast on every GPU
    with tensor cores (TF32/bfloat16 from compute capability 8.0, float16 on 7.x): half their
    time."""
    return np.rint(as_i64(compute_ns) * fp32_share / 2).astype(I64)


def sync_removed(ws: np.ndarray, we: np.ndarray, gpu_busy: Intervals, blocking: Intervals) -> np.ndarray:
    """Model ``sync_removed``: the host never blocks on the GPU; the step re-timed.

    In each window ``[ws, we)`` the host's work after a blocking call starts earlier by the
    time the host spent blocked before it (``blocking``: merged, sorted intervals).  GPU work
    (``gpu_busy``: the union of compute, communication and copies, taken as one queue in
    start order) keeps its duration and starts at the later of its shifted launch and the end
    of the GPU work before it; the step ends when both the host (``we`` minus all the blocked
    time) and the GPU are done.  Work of the next window is not moved, so a sync whose wait
    nothing in its own window could overlap saves nothing.

    Returns:
        ns saved per window (int64, ``0 <= saving <= blocked time``).
    """
    ws, we = as_i64(ws), np.maximum(as_i64(we), as_i64(ws))
    out = np.zeros(ws.size, I64)
    bs, be = merge(*blocking)
    if ws.size == 0 or bs.size == 0:
        return out
    order = np.argsort(ws, kind="stable")
    w0, w1 = ws[order], we[order]
    b_cum = union_cumsum(bs, be)
    b_w0 = length_before(bs, be, b_cum, w0)
    blocked = np.maximum(length_before(bs, be, b_cum, w1) - b_w0, 0)
    new_end = np.maximum(w1 - blocked, _gpu_end(w0, intersect(merge(*gpu_busy), (w0, w1)), bs, be, b_cum, b_w0))
    out[order] = np.clip(w1 - new_end, 0, blocked)
    return out


def _gpu_end(w0: np.ndarray, gpu: Intervals, bs: np.ndarray, be: np.ndarray, b_cum: np.ndarray, b_w0: np.ndarray) -> np.ndarray:
    """For :func:`sync_removed`: the re-timed end of the GPU work ``gpu`` (disjoint, sorted,
    each inside a window) of each window starting at ``w0`` (sorted); its start when it has none.

    Piece j of a window keeps its duration and starts at max(its start minus the blocked
    time before it in the window, the re-timed end of piece j - 1), so the last piece ends at
    ``C_last + max_j f_j + B(w0)``, with C the running sum of durations (over all pieces), B
    the running blocked time (:func:`~.intervals.length_before`) and ``f_j = start_j - B(start_j)
    - C_(j-1)``.  Between the blocking intervals' bounds f is non-decreasing (B is constant and
    the pieces do not overlap), inside a blocking interval non-increasing (B grows as fast as
    time): so the maximum is at the first or the last piece of such a stretch, and f is
    evaluated only there (a few points per blocking interval, not one per piece).
    """
    gs, ge = gpu
    end = w0.copy()
    if gs.size == 0:
        return end
    c = np.cumsum(ge - gs)
    # The first and last piece of every stretch between bounds (blocking bounds, window starts).
    cuts = np.searchsorted(gs, np.concatenate([bs, be, w0]), side="left")
    cand = np.unique(np.clip(np.concatenate([cuts, cuts - 1, [0, gs.size - 1]]), 0, gs.size - 1))
    cs = gs[cand]
    f = cs - length_before(bs, be, b_cum, cs) - (c[cand] - (ge[cand] - cs))
    win = np.searchsorted(w0, cs, side="right") - 1  # as the pieces' windows are found
    best = np.full(w0.size, np.iinfo(I64).min, I64)
    np.maximum.at(best, win, f)
    first = np.searchsorted(gs, w0, side="left")  # each window's first piece (gs.size: none)
    last = np.append(first[1:], gs.size) - 1
    has = last >= first
    end[has] = c[last[has]] + best[has] + b_w0[has]
    return end


def pageable_copy_columns(ws: np.ndarray, we: np.ndarray, copies: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per window ``[ws, we)``: the large pageable host-device copies the ``pinned_copies``
    model re-times, from ``copies`` (``start_ns``, ``dur_ns``, ``bytes`` of just those copies).

    Returns:
        ``pageable_copy_ns`` (time under such copies inside the window), ``pageable_copy_bytes``
        and ``pageable_copies`` (bytes and count of the copies that start in it); int64.
    """
    ws, we = as_i64(ws), as_i64(we)
    s, d = as_i64(copies["start_ns"]), as_i64(copies["dur_ns"])
    nb = as_i64(copies["bytes"])
    out = {"pageable_copy_ns": covered_ns(ws, we, s, s + d) if s.size else np.zeros(ws.size, I64),
           "pageable_copy_bytes": np.zeros(ws.size, I64), "pageable_copies": np.zeros(ws.size, I64)}
    if s.size == 0 or ws.size == 0:
        return out
    order = np.argsort(ws, kind="stable")
    w = np.searchsorted(ws[order], s, side="right") - 1
    inside = (w >= 0) & (s < we[order][np.clip(w, 0, None)])
    idx = order[w[inside]]
    out["pageable_copy_bytes"] = np.bincount(idx, weights=nb[inside].astype(float), minlength=ws.size).astype(I64)
    out["pageable_copies"] = np.bincount(idx, minlength=ws.size).astype(I64)
    return out


def pinned_bandwidth(copies: Any, pcie_gen: int | None, pcie_width: int | None, assumed: bool = False) -> tuple[float, str] | None:
    """The bandwidth (GB/s) a pinned host-device copy reaches on this run, and where it comes
    from: the run's own pinned H2D/D2H copies of at least 1 MiB on average (``copies``: the
    copy summary, ``copy_kind``, ``pageable``, ``count``, ``bytes``, ``total_ns``), else the
    GPU's PCIe link (generation x lanes x :data:`PCIE_EFFICIENCY`; ``assumed``: the link is
    the usual one of the GPU's architecture, not recorded); None when neither is known."""
    if copies is not None and len(copies):
        kind = copies["copy_kind"].to_numpy(object)
        nb, n, ns = (copies[c].to_numpy(float) for c in ("bytes", "count", "total_ns"))
        pinned = ~copies["pageable"].to_numpy(bool) & ((kind == "H2D") | (kind == "D2H")) & (nb >= BANDWIDTH_COPY_BYTES * n)
        if pinned.any() and ns[pinned].sum() > 0:
            return float(nb[pinned].sum() / ns[pinned].sum()), "pinned copies of this run"
    if pcie_gen in PCIE_LANE_GBPS and pcie_width:
        how = " (the GPU model's usual link; the run does not record it)" if assumed else ""
        return PCIE_LANE_GBPS[pcie_gen] * pcie_width * PCIE_EFFICIENCY, f"PCIe Gen{pcie_gen} x{pcie_width} link{how}"
    return None


def large_pageable_copies(memcpy: Columns) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
    """The host-device copies of at least 64 KiB from or to pageable memory (the
    ``copies.pageable`` rule's; pinning a 4-byte ``.item()`` read gains nothing): a bool array
    over ``memcpy``'s rows, and their ``start_ns``, ``dur_ns``, ``bytes`` (int64; None when
    there are none)."""
    none = np.zeros(n_rows(memcpy), dtype=bool)
    if n_rows(memcpy) == 0 or "pageable" not in memcpy:
        return none, None
    kind = name_values(memcpy["copy_kind"])
    nbytes = pd.to_numeric(pd.Series(memcpy["bytes"], copy=False), errors="coerce").fillna(0).to_numpy(np.int64)
    mask = bools(memcpy["pageable"]) & np.isin(kind, ("H2D", "D2H")) & (nbytes >= LARGE_COPY_BYTES)
    if not mask.any():
        return mask, None
    return mask, {"start_ns": as_i64(memcpy["start_ns"])[mask], "dur_ns": as_i64(memcpy["dur_ns"])[mask], "bytes": nbytes[mask]}


def copy_calls(api: Columns, memcpy: Columns, mask: np.ndarray) -> np.ndarray:
    """A bool array over ``api``'s rows: the calls that launched the copies ``mask`` selects."""
    if n_rows(api) == 0 or not mask.any():
        return np.zeros(n_rows(api), dtype=bool)
    found, _ = KeyIndex(as_key(memcpy["correlation"])[mask]).find(as_key(api["correlation"]))
    return found


__all__ = ["LARGE_COPY_BYTES", "MODELS", "copy_calls", "large_pageable_copies", "NO_ESTIMATE", "PCIE_LANE_GBPS", "bandwidth_restored", "comm_compressed", "comm_overlapped", "copies_overlapped",
           "fp32_on_tensor_cores", "host_idle_removed", "loader_wait_removed", "pageable_copy_columns", "pinned_bandwidth",
           "pinned_copies", "sync_removed"]
