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

from perfscope.analyzers.intervals import I64, as_i64, length_before, merge, union_cumsum
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


def _state_tables() -> dict[str, np.ndarray]:
    """Per activity state (a 6-bit mask, bit i = layer ``LAYERS[i]`` active): the bucket code
    and the extra columns' membership, from :func:`label_segments` itself."""
    states = np.arange(1 << len(LAYERS))
    active = {name: (states >> i) & 1 == 1 for i, name in enumerate(LAYERS)}
    code = label_segments(active)
    gpu_busy = active["compute"] | active["comm"] | active["pcie"]
    tables = {col: code == b for b, col in enumerate(BUCKET_COLUMNS)}
    tables["hidden_network_ns"] = active["comm"] & active["compute"]
    tables["hidden_pcie_ns"] = active["pcie"] & (code != _P)
    tables["collective_wait_ns"] = active["comm_wait"] & ~active["compute"]
    tables["gpu_idle_ns"] = ~gpu_busy
    return tables


_STATE_TABLES = _state_tables()
# Column j of the matrix is the membership of each state in column j of bucket_columns().
_STATE_MATRIX = np.stack([_STATE_TABLES[c] for c in (*BUCKET_COLUMNS, *EXTRA_COLUMNS)], axis=1).astype(I64)
# Event tags of the sweep: 0 a window bound, 1 + 2i layer i starts, 2 + 2i layer i ends.
_TAG_BITS = 4
_TAG_DELTA = np.zeros(1 << _TAG_BITS, dtype=I64)
for _i in range(len(LAYERS)):
    _TAG_DELTA[1 + 2 * _i], _TAG_DELTA[2 + 2 * _i] = 1 << _i, -(1 << _i)


def _state_lengths(ws: np.ndarray, we: np.ndarray, layers: Mapping[str, Intervals]) -> tuple[np.ndarray, np.ndarray]:
    """Sweep one rank's layers over its windows.

    Each layer is first merged into disjoint intervals (only its union matters), so at any
    instant a layer is on or off and the activity is a 6-bit *state*; a layer's start adds
    its bit and its end removes it.  The time between consecutive event times is summed per
    (piece, state), where the pieces are cut at every window bound.

    The layer with the most intervals (the kernels' compute layer, typically: millions of
    intervals against a few thousand in the others) adds no events: the sweep runs over the
    others, and each of its segments is split into the time that layer covers in it and the
    rest, from that layer's running union length (:func:`~.intervals.length_before`; one
    cumulative sum and a binary search per segment instead of sorting its intervals).

    Returns:
        (bounds, lengths): the sorted distinct window bounds and an int64 array of shape
        (len(bounds) - 1, 64): ns spent in each state between consecutive bounds.
    """
    lo, hi = int(ws.min()), int(we.max())
    wb = np.unique(np.concatenate([ws, we]))
    n_pieces, n_states = max(wb.size - 1, 0), 1 << len(LAYERS)
    present = [(i, layers[name]) for i, name in enumerate(LAYERS) if len(layers.get(name, EMPTY)[0])]
    big = max(range(len(present)), key=lambda j: len(present[j][1][0]), default=None)
    times, tags = [ws, we], [np.zeros(ws.size + we.size, np.int8)]
    for j, (i, (s, e)) in enumerate(present):
        if j == big:
            continue
        s, e = as_i64(s), as_i64(e)
        keep = (e > s) & (e > lo) & (s < hi)
        ms, me = merge(np.clip(s[keep], lo, hi), np.clip(e[keep], lo, hi))
        times += [ms, me]
        tags += [np.full(ms.size, 1 + 2 * i, np.int8), np.full(me.size, 2 + 2 * i, np.int8)]
    t, tag, shift = _sorted_events(times, tags, lo, hi)
    # The state after each event (each prefix is a valid 6-bit mask: int8 is enough).
    state = np.cumsum(_TAG_DELTA[tag].astype(np.int8), dtype=np.int8)[:-1]
    del tag
    seg = np.diff(t)
    key = np.searchsorted(wb - shift, t[:-1], side="right")
    key -= 1
    np.minimum(key, max(n_pieces - 1, 0), out=key)  # a segment starting at the last bound is empty
    key *= n_states
    key += state
    del state
    i, (bs, be) = present[big] if big is not None else (0, EMPTY)
    bs, be = merge(bs, be)
    if bs.size:
        at = length_before(bs, be, union_cumsum(bs, be), t + shift)
        covered = np.diff(at)  # of each segment, the ns the big layer covers
        key = np.concatenate([key, key + (1 << i)])
        seg = np.concatenate([seg - covered, covered])
    del t
    if hi - lo < (1 << 53):
        # float64 sums of int64 lengths are exact while every total stays below 2**53 ns.
        lengths = np.rint(np.bincount(key, weights=seg, minlength=n_pieces * n_states)[: n_pieces * n_states]).astype(I64)
    else:
        lengths = np.zeros(n_pieces * n_states, I64)
        np.add.at(lengths, key, seg)
    return wb, lengths.reshape(n_pieces, n_states)


def _sorted_events(times: list[np.ndarray], tags: list[np.ndarray], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The sweep's events ordered by time: (times minus ``shift``, their tags, ``shift``);
    the order of events at one instant does not matter (the segments between them are
    empty)."""
    if hi - lo < (1 << (62 - _TAG_BITS)):
        # One plain sort of (time - lo, tag) packed into an int64 (much faster than argsort).
        t = np.concatenate(times)
        t -= lo
        t <<= _TAG_BITS
        t |= np.concatenate(tags)
        t.sort()
        tag = (t & ((1 << _TAG_BITS) - 1)).astype(np.int8)
        t >>= _TAG_BITS
        return t, tag, lo
    t, tag = np.concatenate(times), np.concatenate(tags)
    order = np.argsort(t, kind="stable")
    return t[order], tag[order], 0


def bucket_columns(ws: np.ndarray, we: np.ndarray, layers: Mapping[str, Intervals]) -> dict[str, np.ndarray]:
    """The columns :func:`breakdown_rank` adds, for windows ``[ws, we)`` of one rank (int64
    ns; an end before its start counts as the start).

    Returns:
        ``wall_ns``, the six bucket columns, then :data:`EXTRA_COLUMNS`; int64 ns arrays.
    """
    ws = as_i64(ws)
    we = np.maximum(as_i64(we), ws)
    out = {"wall_ns": we - ws}
    cols = [*BUCKET_COLUMNS, *EXTRA_COLUMNS]
    if ws.size == 0:
        out.update({c: np.zeros(0, I64) for c in cols})
        return out
    wb, lengths = _state_lengths(ws, we, layers)
    # ns per state from the first bound to each bound; a window is a difference of two rows.
    cum = np.zeros((wb.size, lengths.shape[1]), I64)
    np.cumsum(lengths, axis=0, out=cum[1:])
    per_state = cum[np.searchsorted(wb, we)] - cum[np.searchsorted(wb, ws)]
    # Every column at once: the ns of the states each counts (an exact integer product).
    sums = np.ascontiguousarray((per_state @ _STATE_MATRIX).T)  # one contiguous row per column
    for j, c in enumerate(cols):
        out[c] = sums[j]
    return out


def with_columns(df: pd.DataFrame, cols: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """``df`` (RangeIndex) with ``cols`` set, built at once (one frame, not one insert per
    column); a column ``df`` has already is replaced in place, as ``df[c] = v`` would."""
    return pd.DataFrame({**{c: df[c] for c in df.columns}, **cols}, index=df.index)


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
    out = windows.reset_index(drop=True)
    return with_columns(out, bucket_columns(out["start_ns"].to_numpy(), out["end_ns"].to_numpy(), layers))


def by_rank_sorted(windows: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """``windows`` split by rank (ranks ascending), each part ordered by ``start_ns`` as
    ``groupby("rank")`` then ``sort_values("start_ns")`` order them (numpy's default sort,
    so ties come out alike), with a fresh RangeIndex."""
    r = windows["rank"].to_numpy()
    if r.size == 0:
        return []
    if r[0] == r[-1] and bool((r == r[0]).all()):
        groups = [(int(r[0]), windows)]
    else:
        groups = [(int(k), windows.iloc[np.flatnonzero(r == k)]) for k in np.unique(r)]
    out = []
    for k, w in groups:
        order = as_i64(w["start_ns"].to_numpy()).argsort(kind="quicksort")
        if (order != np.arange(order.size)).any():
            w = w.take(order)
        out.append((k, w.reset_index(drop=True)))
    return out


def breakdown(windows: pd.DataFrame, layers_by_rank: Mapping[int, Mapping[str, Intervals]]) -> pd.DataFrame:
    """Run :func:`breakdown_rank` for every rank in ``windows`` (which has a ``rank`` column).

    Returns:
        one row per (rank, step) as :func:`breakdown_rank` describes, ordered by rank, start.
    """
    parts = [breakdown_rank(w, layers_by_rank.get(rank, {})) for rank, w in by_rank_sorted(windows)]
    if not parts:
        cols = [*windows.columns, "wall_ns", *BUCKET_COLUMNS, *EXTRA_COLUMNS]
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def median_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The median step of each rank with its own breakdown, so a row adds up: taking each
    column's own median instead gives rows that sum to more (or less) than their wall time.

    The median step is the one of median wall time (the lower of the two middle ones for an
    even count; the earlier step on ties).

    Returns:
        one row per rank (ascending): ``rank``, ``steps`` (the rank's step count), ``step``
        (the median step's number), ``wall_ns`` and the six bucket columns (int64 ns, summing
        to ``wall_ns``), then ``*_share`` of ``wall_ns`` per bucket (0 for an empty step).
    """
    cols = ["wall_ns", *BUCKET_COLUMNS]
    if steps is None or len(steps) == 0:
        return pd.DataFrame(columns=["rank", "steps", "step", *cols])
    rows = []
    for rank, w in steps.groupby("rank", sort=True):
        tie = w["start_ns"].to_numpy() if "start_ns" in w.columns else np.arange(len(w))
        order = np.lexsort((tie, w["wall_ns"].to_numpy()))
        m = w.iloc[int(order[(len(order) - 1) // 2])]
        rows.append({"rank": rank, "steps": len(w), "step": int(m["step"]), **{c: int(m[c]) for c in cols}})
    out = pd.DataFrame(rows).astype("int64")
    for c in BUCKET_COLUMNS:
        out[c.replace("_ns", "_share")] = (out[c] / out["wall_ns"].where(out["wall_ns"] > 0)).fillna(0.0)
    return out


__all__ = ["LAYERS", "EXTRA_COLUMNS", "BUCKETS", "label_segments", "bucket_columns", "breakdown_rank", "breakdown",
           "by_rank_sorted", "median_steps", "post_sync_idle", "post_sync_idle_columns", "with_columns"]


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
    calls, idle = post_sync_idle_columns(windows["start_ns"].to_numpy(), windows["end_ns"].to_numpy(), gpu_busy, host_sync)
    return pd.DataFrame({"sync_calls": calls, "post_sync_idle_ns": idle}, index=windows.index)


def post_sync_idle_columns(ws: np.ndarray, we: np.ndarray, gpu_busy: Intervals, host_sync: Intervals) -> tuple[np.ndarray, np.ndarray]:
    """:func:`post_sync_idle` for windows ``[ws, we)`` (int64 ns).

    Returns:
        (sync_calls, post_sync_idle_ns): int64 arrays aligned with the windows.
    """
    n = len(ws)
    out_calls = np.zeros(n, I64)
    out_idle = np.zeros(n, I64)
    se = as_i64(host_sync[1])
    if n == 0 or se.size == 0:
        return out_calls, out_idle
    ws, we = as_i64(ws), as_i64(we)
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
    out_calls[order] = calls
    out_idle[order] = np.round(idle).astype(I64)
    return out_calls, out_idle
