"""Kernel tables and launch statistics.

Launch statistics follow HTA's ``get_cuda_kernel_launch_stats`` definitions:
``launch_latency = kernel start - (launch call start + launch call duration)`` clipped at 0;
a *short* kernel runs for less time than its launch call took on the CPU
(``cpu_dur <= runtime_cutoff`` and ``gpu_dur < cpu_dur``); runtime outliers take longer than
50 us on the CPU and launch-delay outliers wait longer than 100 us.  The usual CPU cost of a
launch is 5-20 us (HTA docs).

GPU idle gaps (between merged GPU activity, across streams) are split like HTA's idle-time
breakdown: ``host_wait`` when the call that launched the work ending the gap started after
the gap began (the CPU had not enqueued it yet), ``kernel_wait`` when shorter than
``consecutive_kernel_delay`` (30 us), ``other`` for the rest.

A rank is *launch-bound* when it runs many kernels (``min_kernels``), most are short
(``short_share >= 0.5``) and at least ``idle_share`` (20 %) of its GPU span is *launch idle*:
host_wait and kernel_wait gaps (the two HTA attributes to launching; HTA recommends CUDA
graphs for kernel_wait) shorter than ``launch_gap_ns`` (HTA's 100 us launch-delay cut-off):
the GPU finishes each kernel before the CPU can launch the next.  Longer gaps are other host
work (data loading, Python, sleeps), not launch overhead.

When the rank has step windows, only kernels and GPU events that start inside a step count,
gaps are only those between events of the same (merged) window, and the span is the windows'
total length: a recorded run also holds start-up and shutdown (model build, warm-up, data
set load), whose seconds of idle GPU would otherwise hide a launch-bound step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfscope.analyzers.classify import codes_and_names
from perfscope.analyzers.config import LaunchThresholds
from perfscope.analyzers.columns import Columns, columns, n_rows, ordered, take
from perfscope.analyzers.intervals import I64, as_i64, as_key, filled_i64, launch_of, lookup, merge, split_by_rank

from perfscope.store.columns import Coded

KERNEL_COLUMNS: tuple[str, ...] = ("rank", "name", "kind", "count", "total_ns", "mean_ns", "median_ns", "max_ns", "share")
LAUNCH_COLUMNS: tuple[str, ...] = (
    "rank", "kernels", "correlated", "short_kernels", "short_share", "median_kernel_ns",
    "median_launch_cpu_ns", "median_launch_latency_ns", "p95_launch_latency_ns",
    "runtime_outliers", "launch_delay_outliers", "span_ns", "idle_ns", "host_wait_idle_ns",
    "kernel_wait_idle_ns", "other_idle_ns", "launch_idle_ns", "launch_bound",
)


def top_kernels(kernels: pd.DataFrame | Columns, kinds: np.ndarray | Coded, top_n: int | None = 50) -> pd.DataFrame:
    """Aggregate kernels per (rank, name).

    Args:
        kernels: ``rank``, ``name``, ``dur_ns`` (a DataFrame or columns, see
            :mod:`perfscope.analyzers.columns`).
        kinds: kernel kind per row (from :func:`~perfscope.analyzers.classify.kernel_kind`, or
            as codes from :func:`~perfscope.analyzers.classify.kernel_kinds`).
        top_n: keep the top ``top_n`` names per rank by total time (None: all).

    Returns:
        columns of :data:`KERNEL_COLUMNS`; ns, ``share`` of the rank's total kernel time;
        sorted by rank then total time descending.
    """
    if n_rows(kernels) == 0:
        return pd.DataFrame({c: np.zeros(0, dtype=np.int64) for c in KERNEL_COLUMNS})
    kernels = columns(kernels)
    codes, names = codes_and_names(kernels["name"])
    rank = np.asarray(kernels["rank"], dtype=np.int64)
    dur = filled_i64(kernels["dur_ns"])
    kinds = kinds if isinstance(kinds, Coded) else np.asarray(kinds)
    one_rank = rank.size > 0 and rank[0] == rank[-1] and bool((rank == rank[0]).all())
    if one_rank and int(codes.max()) < (1 << 16) and int(dur.min()) >= 0 and int(dur.max()) < (1 << 47):
        # One rank (analyze_run's case): sort (name code, duration) packed into one int64,
        # a plain sort, far faster than a lexsort on millions of rows; same groups and values.
        packed = np.sort((codes << 47) | dur)
        c, d = packed >> 47, packed & ((1 << 47) - 1)
        r, first_row = None, None  # one rank: no rank column to compare
    else:
        # Sort by (rank, name, duration) once; every statistic is then a slice per group.
        order = np.lexsort((dur, codes, rank))
        r, c, d = rank[order], codes[order], dur[order]
        first_row = order
    new = np.ones(c.size, dtype=bool)
    new[1:] = c[1:] != c[:-1]
    if r is not None:
        new[1:] |= r[1:] != r[:-1]
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, c.size))
    sums = np.add.reduceat(d, starts)
    lo, hi = starts + (counts - 1) // 2, starts + counts // 2
    g_kind = _group_kinds(kinds, codes, dur, c[starts], d[starts], first_row[starts] if first_row is not None else None)
    g_rank = np.full(starts.size, rank[0], dtype=np.int64) if r is None else r[starts]
    total = sums.astype(np.int64)
    # Each rank's total kernel time (groups are ordered by rank).
    r_first = np.flatnonzero(np.concatenate(([True], g_rank[1:] != g_rank[:-1])))
    tot = np.repeat(np.add.reduceat(total, r_first), np.diff(np.append(r_first, g_rank.size)))
    share = np.zeros(total.size, dtype=np.float64)
    np.divide(total, tot, out=share, where=tot > 0)
    # Rank ascending, total time descending; ties keep the name order (a stable sort).
    order = np.lexsort((-total, g_rank))
    if top_n is not None:
        # Position of each row among its rank's rows, in that order.
        sr = g_rank[order]
        new_rank = np.concatenate(([True], sr[1:] != sr[:-1])) if sr.size else np.zeros(0, bool)
        firsts = np.flatnonzero(new_rank)
        sizes = np.diff(np.append(firsts, sr.size))
        pos = np.arange(sr.size) - np.repeat(firsts, sizes)
        # As DataFrame.groupby(...).head(top_n): a negative top_n drops that many from the end.
        keep = order[pos < top_n] if top_n >= 0 else order[pos < np.repeat(sizes, sizes) + top_n]
        # Nothing kept: filter a frame of every row, so the name columns keep the str dtype.
        order = keep if keep.size else order
    cols = {
        "rank": g_rank[order], "name": names[c[starts][order]],
        "kind": g_kind[order],
        "count": counts[order].astype(np.int64), "total_ns": total[order],
        "mean_ns": np.round(sums[order] / counts[order]).astype(np.int64),
        "median_ns": np.round((d[lo] + d[hi])[order] / 2).astype(np.int64),
        "max_ns": d[starts + counts - 1][order].astype(np.int64), "share": share[order],
    }
    out = pd.DataFrame(cols)
    return out if top_n is None or keep.size else out.iloc[:0]


def _group_kinds(kinds: np.ndarray | Coded, codes: np.ndarray, dur: np.ndarray, g_code: np.ndarray, g_shortest: np.ndarray,
                 g_first_row: np.ndarray | None) -> np.ndarray:
    """For :func:`top_kernels`: the kind (object array of strings) of each group, the kind
    of its first row in (duration, position) order.  A name has one kind except when
    correlation made one launch of it communication.

    ``kinds`` are the rows' kinds (strings, or codes), ``codes`` and ``dur`` the rows' name
    codes and durations; per group (one rank's groups when ``g_first_row`` is None): its name
    code, shortest duration and, for several ranks, the row the sort put first."""
    if g_first_row is not None:
        rows = g_first_row
    else:
        if isinstance(kinds, Coded):
            per_name = np.zeros(int(codes.max()) + 1, dtype=kinds.codes.dtype)
            per_name[codes] = kinds.codes
            if bool((per_name[codes] == kinds.codes).all()):  # one kind per name: any row says it
                return kinds.names[per_name[g_code]]
        rows = _first_shortest(codes, dur, g_code, g_shortest)
    return np.asarray(kinds.names[kinds.codes[rows]] if isinstance(kinds, Coded) else kinds[rows], dtype=object)


def _first_shortest(codes: np.ndarray, dur: np.ndarray, g_code: np.ndarray, g_shortest: np.ndarray) -> np.ndarray:
    """Per group (name code ``g_code``, shortest duration ``g_shortest``) of one rank: the
    earliest row with that name and duration (what a lexsort by (name, duration) puts first)."""
    shortest = np.zeros(int(codes.max()) + 1, dtype=np.int64)
    shortest[g_code] = g_shortest
    rows = np.flatnonzero(dur == shortest[codes])
    first = np.full(shortest.size, codes.size, dtype=np.int64)
    np.minimum.at(first, codes[rows], rows)
    return first[g_code]


def launch_stats(
    kernels: pd.DataFrame,
    api: pd.DataFrame,
    gpu: pd.DataFrame,
    thresholds: LaunchThresholds | None = None,
) -> pd.DataFrame:
    """Launch statistics and launch-bound detection per rank.

    Args:
        kernels: ``rank``, ``start_ns``, ``dur_ns``, ``correlation``.
        api: ``rank``, ``start_ns``, ``dur_ns``, ``correlation``.
        gpu: all GPU activity (``rank``, ``start_ns``, ``end_ns``, ``correlation``) for idle gaps.
        thresholds: see :class:`LaunchThresholds`.

    Returns:
        one row per rank with the columns of :data:`LAUNCH_COLUMNS` (ns; ``launch_bound`` bool).
    """
    th = thresholds or LaunchThresholds()
    api_by = split_by_rank(api) if len(api) else {}
    gpu_by = split_by_rank(gpu) if len(gpu) else {}
    rows = [launch_row(rank, k, api_by.get(rank), gpu_by.get(rank), th) for rank, k in split_by_rank(kernels).items()]
    return pd.DataFrame(rows, columns=list(LAUNCH_COLUMNS))


def launch_row(
    rank: int,
    k: pd.DataFrame | Columns,
    a: pd.DataFrame | Columns | None,
    g: pd.DataFrame | Columns | None,
    th: LaunchThresholds,
    launch: tuple[np.ndarray, np.ndarray] | None = None,
    windows: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict:
    """The :data:`LAUNCH_COLUMNS` row of one rank: its kernels ``k``, API calls ``a`` and GPU
    events ``g`` (DataFrames or columns, see :mod:`perfscope.analyzers.columns`); ``launch``
    is (found, position in ``a``) of each kernel's launching call when the caller has looked
    them up already; ``windows`` (starts, ends; int64 ns) are the rank's step windows: only
    what starts inside them counts (see the module docstring)."""
    k, a, g = columns(k), columns(a) if a is not None else None, columns(g) if g is not None else None
    win = merge(*windows) if windows is not None and len(windows[0]) else None
    if win is not None:
        inside = _window_of(as_i64(k["start_ns"]), win) >= 0
        if not inside.all():
            k = take(k, inside, ("start_ns", "dur_ns", "correlation"))  # the columns used below
            if launch is not None:
                launch = (launch[0][inside], launch[1][inside])
        if g is not None and n_rows(g):
            g_in = _window_of(as_i64(g["start_ns"]), win) >= 0
            g = g if g_in.all() else take(g, g_in, ("start_ns", "end_ns", "correlation", "launched", "launch_ns"))
    kd = filled_i64(k["dur_ns"])
    n_k = n_rows(k)
    row: dict = {"rank": rank, "kernels": n_k, "median_kernel_ns": int(np.median(kd)) if len(kd) else 0}
    found = np.zeros(n_k, dtype=bool)
    if a is not None and n_rows(a) and n_k:
        if launch is not None:
            found, a_pos = launch
        else:
            found, a_pos = lookup(as_key(a["correlation"]), np.arange(n_rows(a)), as_key(k["correlation"]))
    if found.any():
        assert a is not None  # found is all False without API calls
        a_start = as_i64(a["start_ns"])[a_pos[found]]
        cpu = filled_i64(a["dur_ns"])[a_pos[found]]
        gdur = kd[found]
        lat = np.maximum(as_i64(k["start_ns"])[found] - (a_start + cpu), 0)
        short = (cpu <= th.runtime_cutoff_ns) & (gdur < cpu)
        row.update(
            correlated=int(found.sum()), short_kernels=int(short.sum()), short_share=float(short.mean()),
            median_launch_cpu_ns=int(np.median(cpu)), median_launch_latency_ns=int(np.median(lat)),
            p95_launch_latency_ns=int(np.percentile(lat, 95)),
            runtime_outliers=int((cpu > th.runtime_cutoff_ns).sum()),
            launch_delay_outliers=int((lat > th.launch_delay_cutoff_ns).sum()),
        )
    else:
        row.update(correlated=0, short_kernels=0, short_share=0.0, median_launch_cpu_ns=0,
                   median_launch_latency_ns=0, p95_launch_latency_ns=0, runtime_outliers=0, launch_delay_outliers=0)
    row.update(_idle_gaps(g, a, th, win))
    row["launch_bound"] = bool(
        row["kernels"] >= th.min_kernels
        and row["short_share"] >= th.short_share
        and row["span_ns"] > 0
        and row["launch_idle_ns"] >= th.idle_share * row["span_ns"]
    )
    return row


def _window_of(t: np.ndarray, win: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Index of the disjoint window (sorted starts, ends) holding each time, -1 for none."""
    if not len(win[0]):  # zero-length step windows merge to none: nothing is inside
        return np.full(len(t), -1, np.int64)
    if t.size > 1 and ordered(t):
        # Times in order (GPU events, kernels as recorded): each window holds a run of them,
        # found by two binary searches per window instead of one per time.
        lo, hi = np.searchsorted(t, win[0], side="left"), np.searchsorted(t, win[1], side="left")
        mark = np.zeros(t.size + 1, np.int64)
        w = np.arange(1, lo.size + 1, dtype=np.int64)
        np.add.at(mark, lo, w)  # a window may start where the one before ends: add, not set
        np.add.at(mark, hi, -w)
        out = np.cumsum(mark[:-1])
        out -= 1
        return out
    i = np.searchsorted(win[0], t, side="right") - 1
    ok = (i >= 0) & (t < win[1][np.maximum(i, 0)])
    return np.where(ok, i, -1)


def _idle_gaps(g: Columns | None, api: Columns | None, th: LaunchThresholds,
               win: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Split the GPU idle gaps of one rank (its columns) into host_wait / kernel_wait /
    other; with ``win`` (disjoint step windows, every event of ``g`` starting inside one),
    only gaps inside a window, over a span of the windows' total length."""
    zero = {"span_ns": 0, "idle_ns": 0, "host_wait_idle_ns": 0, "kernel_wait_idle_ns": 0, "other_idle_ns": 0, "launch_idle_ns": 0}
    if g is None or n_rows(g) == 0:
        return zero
    s, e = as_i64(g["start_ns"]), as_i64(g["end_ns"])
    # GPU events come ordered by start (analyze_run's): the stable sort would leave them as they are.
    order = None if ordered(s) else np.argsort(s, kind="stable")
    if order is not None:
        s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # Gap before event i (i >= 1) when it starts after everything before it has ended.
    gap = np.zeros(s.size, dtype=I64)
    gap[1:] = s[1:] - run_end[:-1]
    if win is not None:
        w = _window_of(s, win)
        gap[1:][w[1:] != w[:-1]] = 0  # the time between two steps is no gap of either
        span = int((win[1] - win[0]).sum())
    else:
        span = int(run_end[-1] - s[0])
    is_gap = gap > 0
    idle = int(gap[is_gap].sum())
    host_wait = np.zeros(s.size, dtype=bool)
    if api is not None and n_rows(api):
        found, ls = launch_of(g, api)
        if order is not None:
            found, ls = found[order], ls[order]
        prev_end = np.zeros(s.size, dtype=I64)
        prev_end[1:] = run_end[:-1]
        host_wait = is_gap & found & (ls > prev_end)
    kernel_wait = is_gap & ~host_wait & (gap < th.consecutive_kernel_delay_ns)
    other = is_gap & ~host_wait & ~kernel_wait
    return {
        "span_ns": span, "idle_ns": idle, "host_wait_idle_ns": int(gap[host_wait].sum()),
        "kernel_wait_idle_ns": int(gap[kernel_wait].sum()), "other_idle_ns": int(gap[other].sum()),
        "launch_idle_ns": int(gap[(host_wait | kernel_wait) & (gap < th.launch_gap_ns)].sum()),
    }


__all__ = ["KERNEL_COLUMNS", "LAUNCH_COLUMNS", "LaunchThresholds", "top_kernels", "launch_stats", "launch_row"]
