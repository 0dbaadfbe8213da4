"""Whole-span GPU summary per rank, defined exactly as Holistic Trace Analysis (HTA 0.5.0)
defines its temporal breakdown (``get_temporal_breakdown``), so HTA users can check us:

* GPU events are kernels, memcpy, memset and synchronisation records on a stream
  (everything HTA sees with a stream, Kineto's ``cuda_sync`` events included: a "Stream
  Wait Event" counts as compute, as HTA's regex leaves it, a "... Sync" as non-compute);
* ``span_ns`` = end of the last event - start of the first;
* ``idle_ns`` = span - length of the union of all events;
* ``compute_ns`` = length of the union of HTA's COMPUTATION kernels (:func:`hta_kernel_type`;
  communication or copies overlapped by compute therefore count as compute);
* ``non_compute_ns`` = span - compute - idle.

HTA-compatible details (``hta_compat=True``, the default):

* when a rank has two or more ``ProfilerStep#N`` marks, only GPU work launched by an API call
  that started before the *last* ProfilerStep started is kept (HTA's
  ``include_last_profiler_step=False``), and uncorrelated GPU work is dropped as HTA does;
* timestamps are rounded as HTA rounds nanosecond-resolution traces: start up to the next
  microsecond, end down (``round_down_time_stamps``).

With ``hta_compat=False`` every GPU event counts at full nanosecond resolution.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfscope.analyzers.classify import name_matches, name_values
from perfscope.analyzers.columns import Columns, columns, is_null, n_rows
from perfscope.analyzers.intervals import I64, as_i64, launch_of, merge, split_by_rank

PROFILER_STEP_RE = re.compile(r"^ProfilerStep")  # compiled with the module: every analysis uses it

COLUMNS: tuple[str, ...] = (
    "rank", "span_ns", "idle_ns", "compute_ns", "non_compute_ns",
    "idle_share", "compute_share", "non_compute_share", "events", "last_step_excluded",
)


def _last_profiler_step_start(steps: Columns | None) -> int | None:
    """The start of the last ProfilerStep in ``steps`` (one rank's columns; None unless there
    are two or more distinct starts)."""
    if steps is None or n_rows(steps) == 0:
        return None
    is_ps = (name_values(steps["source"]) == "profiler_step") | name_matches(steps["name"], PROFILER_STEP_RE)
    start = steps["start_ns"]
    if start.dtype == np.dtype(I64):
        ps = np.asarray(start)[is_ps]
    else:
        ps = start[is_ps]
        ps = np.asarray(ps[~is_null(ps)], dtype=I64)
    if np.unique(ps).size < 2:
        return None
    return int(ps.max())


def hta_round(start_ns: np.ndarray, end_ns: np.ndarray, base_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Round like HTA's ``round_down_time_stamps``: HTA parses the trace's ``ts``/``dur``
    (microseconds, relative to ``baseTimeNanoseconds`` = ``base_ns`` when the trace has one)
    as float64, so an epoch timestamp keeps only ~0.25 us of its fraction; it then takes
    ``ceil(ts)`` and ``floor(ts + dur)``.  Reproduce that float arithmetic; return int64 ns
    on the run's clock."""
    # The same float64 operations as HTA's, done in place (millions of events per rank).
    rel = start_ns - base_ns
    s_us = (rel // 1000).astype("float64")
    rel %= 1000
    frac = rel.astype("float64")
    del rel
    frac /= 1000.0
    s_us += frac
    e_us = end_ns - start_ns
    frac = e_us.astype("float64")
    del e_us
    frac /= 1000.0
    frac += s_us  # e_us = s_us + dur / 1000 (float addition commutes exactly)
    np.ceil(s_us, out=s_us)
    np.floor(frac, out=frac)
    s = s_us.astype(I64)
    del s_us
    s *= 1000
    s += base_ns
    e = frac.astype(I64)
    del frac
    e *= 1000
    e += base_ns
    return s, e


def gpu_summary(
    gpu: pd.DataFrame,
    api: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
    hta_compat: bool = True,
    time_base_ns: dict[int, int] | None = None,
) -> pd.DataFrame:
    """Compute the HTA temporal breakdown per rank.

    Args:
        gpu: all GPU events: ``rank``, ``start_ns``, ``end_ns``, ``correlation`` and either
            ``hta_compute`` (bool) or ``hta_type`` (``COMPUTATION``/``COMMUNICATION``/...).
        api: api table (``rank``, ``correlation``, ``start_ns``) for the last-step filter.
        steps: steps table (``rank``, ``source``, ``name``, ``start_ns``).
        hta_compat: emulate HTA's last-step filter and microsecond rounding.
        time_base_ns: per rank, the trace's ``baseTimeNanoseconds`` (imported Kineto traces
            with relative timestamps; rank metadata ``time_base_ns``), for exact rounding.

    Returns:
        one row per rank with the columns of :data:`COLUMNS` (ns; shares of ``span_ns``).
    """
    api_by = split_by_rank(api) if api is not None and len(api) else {}
    steps_by = split_by_rank(steps) if steps is not None and len(steps) else {}
    use_last = hta_compat and api is not None and steps is not None
    rows = []
    for rank, g in split_by_rank(gpu).items():
        row = summary_row(rank, g, api_by.get(rank), steps_by.get(rank), use_last, hta_compat, int((time_base_ns or {}).get(rank, 0) or 0))
        if row is not None:
            rows.append(row)
    return summary_frame(rows)


def summary_row(
    rank: int,
    g: pd.DataFrame | Columns,
    a: pd.DataFrame | Columns | None,
    steps: pd.DataFrame | Columns | None,
    last_step_filter: bool,
    hta_compat: bool,
    base_ns: int = 0,
    syncs: pd.DataFrame | Columns | None = None,
) -> dict | None:
    """One rank's row of :func:`gpu_summary` (None when it has no GPU events): ``g`` its GPU
    events, ``a`` its API calls, ``steps`` its steps, ``syncs`` its sync table (``start_ns``,
    ``dur_ns``, ``stream``, ``correlation``, ``sync_kind``; DataFrames or columns, see
    :mod:`perfscope.analyzers.columns`); ``last_step_filter`` applies HTA's exclusion of the
    last ProfilerStep."""
    g, a, steps = columns(g), columns(a) if a is not None else None, columns(steps) if steps is not None else None
    excluded = False
    s, e = as_i64(g["start_ns"]), as_i64(g["end_ns"])
    comp = np.asarray(g["hta_compute"], dtype=bool) if "hta_compute" in g else np.asarray(g["hta_type"], dtype=object) == "COMPUTATION"
    sy = _stream_syncs(columns(syncs)) if syncs is not None else None
    if sy is not None:
        s, e, comp = np.concatenate([s, sy["start_ns"]]), np.concatenate([e, sy["end_ns"]]), np.concatenate([comp, sy["hta_compute"]])
    if last_step_filter:
        last = _last_profiler_step_start(steps)
        if last is not None:
            keep = np.zeros(s.size, dtype=bool)
            if a is not None and n_rows(a):
                found, launch = launch_of(g, a)
                if sy is not None:
                    sf, sl = launch_of(sy, a)
                    found, launch = np.concatenate([found, sf]), np.concatenate([launch, sl])
                keep = found & (launch < last)
            s, e, comp = s[keep], e[keep], comp[keep]  # the three columns used, not the frame
            excluded = True
    if hta_compat:
        s, e = hta_round(s, e, base_ns)
    if s.size == 0:
        return None
    ms, me = merge(s, e)
    if ms.size == 0:
        return None
    span = int(me.max() - ms.min())
    busy = int((me - ms).sum())
    cs, ce = merge(s[comp], e[comp])
    compute = int((ce - cs).sum())
    idle = span - busy
    return {
        "rank": int(rank), "span_ns": span, "idle_ns": idle, "compute_ns": compute,
        "non_compute_ns": span - compute - idle, "events": int(s.size), "last_step_excluded": excluded,
    }


def _stream_syncs(t: Columns) -> Columns | None:
    """The synchronisation records HTA counts as GPU events (Kineto's ``cuda_sync``): those
    with a stream (any value but null and -1; HTA keeps a context sync's 4294967295), as
    ``start_ns``, ``end_ns``, ``correlation`` and ``hta_compute`` (True for a stream wait
    event, whose name "Stream Wait Event" HTA's not-compute regex misses; the "... Sync"
    names are not compute).  None when there are none."""
    if n_rows(t) == 0 or "stream" not in t:
        return None
    stream = t["stream"]
    on = ~is_null(stream)
    on[on] = np.asarray(pd.Series(stream, copy=False).to_numpy(dtype="float64", na_value=np.nan))[on] != -1
    if not on.any():
        return None
    st = as_i64(t["start_ns"])[on]
    return {"start_ns": st, "end_ns": st + as_i64(t["dur_ns"])[on],
            "correlation": pd.Series(t["correlation"], copy=False).to_numpy(dtype="float64", na_value=np.nan)[on],
            "hta_compute": name_values(t["sync_kind"])[on] == "stream_wait_event"}


def summary_frame(rows: list[dict]) -> pd.DataFrame:
    """The :func:`gpu_summary` table from :func:`summary_row` rows."""
    if not rows:  # the dtypes pandas gives an empty list of rows
        return pd.DataFrame({c: np.zeros(0, np.float64 if c.endswith("_share") else object if c == "last_step_excluded" else I64)
                             for c in COLUMNS})
    cols: dict[str, np.ndarray] = {c: np.array([r[c] for r in rows], dtype=I64)
                                   for c in ("rank", "span_ns", "idle_ns", "compute_ns", "non_compute_ns")}
    span = cols["span_ns"]
    for c in ("idle", "compute", "non_compute"):
        share = np.zeros(span.size, np.float64)
        np.divide(cols[f"{c}_ns"], span, out=share, where=span > 0)
        cols[f"{c}_share"] = share
    cols["events"] = np.array([r["events"] for r in rows], dtype=I64)
    cols["last_step_excluded"] = np.array([r["last_step_excluded"] for r in rows], dtype=bool)
    return pd.DataFrame(cols)


__all__ = ["COLUMNS", "gpu_summary", "hta_round", "summary_row", "summary_frame"]
