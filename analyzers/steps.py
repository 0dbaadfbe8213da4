"""Step windows: where each training step starts and ends on each rank.

Sources, per rank, first that exists:

1. markers (NVTX / annotation ranges) whose name matches ``step_pattern``, when one is given;
2. the ``steps`` table, preferring ``explicit`` marks, then ``profiler_step``
   (``ProfilerStep#N``), then ``nvtx``/``annotation``, then ``optimizer``;
3. the host table's ``optimizer_step`` spans: a step runs from the end of one optimizer step
   to the end of the next;
4. one window over the whole run (with a warning).

Like tb_plugin, a step ends when the GPU work it launched ends, not when the host range
closes: the window end is extended to the last kernel/copy/memset whose launching API call
(matched on ``correlation``) started inside the host range.  Windows never overlap: a step
starts at ``max(its host start, the previous window's end)`` (tb_plugin's rule).  Clipping
an extended end to the next host start instead would cut every step's GPU work off when the
GPU runs behind the host, as it does in compute- and communication-bound loops.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.classify import name_matches, name_values
from perfscope.analyzers.columns import Columns, columns, is_null, n_rows
from perfscope.analyzers.intervals import I64, as_i64, filled_i64, launch_of, split_by_rank
from perfscope.store.reader import Coded

STEP_SOURCE_PREFERENCE: tuple[str, ...] = ("explicit", "profiler_step", "nvtx", "annotation", "optimizer")
WINDOW_COLUMNS: tuple[str, ...] = ("rank", "step", "name", "source", "host_start_ns", "host_end_ns", "start_ns", "end_ns")


@dataclass
class StepResult:
    """Step windows and what the analysis should tell the user about them.

    Attributes:
        windows: one row per (rank, step): ``rank``, ``step``, ``name``, ``source``,
            ``host_start_ns``/``host_end_ns`` (the host range), ``start_ns``/``end_ns`` (the
            window after GPU extension and clipping). int64 ns.
        warnings: human-readable notes (no steps found, pattern matched nothing, ...).
    """

    windows: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({
        "rank": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64"), "name": pd.Series(dtype=object),
        "source": pd.Series(dtype=object), "host_start_ns": pd.Series(dtype="int64"),
        "host_end_ns": pd.Series(dtype="int64"), "start_ns": pd.Series(dtype="int64"), "end_ns": pd.Series(dtype="int64"),
    })


_NUM = re.compile(r"(\d+)(?!.*\d)")


def _step_numbers(names: np.ndarray) -> np.ndarray:
    """The last integer in each name (``ProfilerStep#12`` -> 12), else the row's position
    (a null name has no number)."""
    out = np.arange(len(names), dtype=I64)
    for i, n in enumerate(names):
        m = _NUM.search(n) if isinstance(n, str) else None
        if m is not None:
            out[i] = int(m.group(1))
    return out


def _objects(col: Any, rows: np.ndarray) -> np.ndarray:
    """``col``'s values (a column) at positions ``rows`` as an object array (nulls as NaN),
    as ``col.iloc[rows].astype(object)`` gives them."""
    if isinstance(col, pd.Series):
        col = col.array if isinstance(col.dtype, pd.CategoricalDtype) else col.to_numpy(dtype=object)
    if isinstance(col, (pd.Categorical, Coded)):
        codes, cats = (col.codes, col.names) if isinstance(col, Coded) else (col.codes, col.categories)
        cats = np.append(np.asarray(cats, dtype=object), np.nan)  # code -1: the last entry
        return cats[codes[rows]]
    if isinstance(col, np.ndarray):
        return np.asarray(col[rows], dtype=object)
    return np.asarray(col[rows].to_numpy(dtype=object), dtype=object)


def _sorted_rows(start: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``rows`` ordered by ``start[rows]`` exactly as ``DataFrame.sort_values`` orders them
    (numpy's default quicksort, so ties come out as pandas leaves them)."""
    return rows[start[rows].argsort(kind="quicksort")]


def _ranges(step: np.ndarray, name: Any, source: str, hs: np.ndarray, he: np.ndarray) -> dict[str, Any]:
    n = len(hs)
    return {"step": step, "name": name, "source": np.full(n, source, dtype=object), "host_start_ns": hs, "host_end_ns": he}


def _host_ranges(
    rank: int,
    steps: Columns,
    markers: Columns,
    host: Columns,
    step_pattern: str | None,
    warnings: list[str],
) -> dict[str, Any] | None:
    """Return this rank's host step ranges (its tables as columns): arrays ``step``,
    ``name``, ``source``, ``host_start_ns`` and ``host_end_ns`` (int64 ns); None when the
    rank has none."""
    if step_pattern:
        rows = np.zeros(0, dtype=I64)
        if n_rows(markers):
            keep = name_matches(markers["name"], step_pattern)
            if "device" in markers:
                keep &= is_null(markers["device"])
            rows = np.flatnonzero(keep)
        if rows.size:
            ms = as_i64(markers["start_ns"])
            rows = _sorted_rows(ms, rows)
            rows = _outermost(ms[rows], ms[rows] + as_i64(markers["dur_ns"])[rows], rows, rank, warnings)
            names = _objects(markers["name"], rows)
            hs = ms[rows]
            return _ranges(_step_numbers(names), names, "pattern", hs, hs + as_i64(markers["dur_ns"])[rows])
        warnings.append(f"rank {rank}: no marker matches the step pattern {step_pattern!r}; using the recorded step marks instead")
    if n_rows(steps):
        src = name_values(steps["source"])
        src = np.where(src == "", "explicit", src)
        present = set(src.tolist())
        for pref in (*STEP_SOURCE_PREFERENCE, *sorted(present)):
            if pref in present:
                ss = as_i64(steps["start_ns"])
                rows = _sorted_rows(ss, np.flatnonzero(src == pref))
                hs = ss[rows]
                first = np.ones(rows.size, dtype=bool)  # drop repeated start times (the first stays)
                first[1:] = hs[1:] != hs[:-1]
                rows, hs = rows[first], hs[first]
                names = _objects(steps["name"], rows)
                step = _step_column(steps["step"], rows, names)
                return _ranges(step, names, pref, hs, hs + filled_i64(steps["dur_ns"])[rows])
    if n_rows(host):
        rows = np.flatnonzero(name_values(host["kind"]) == "optimizer_step")
        if rows.size >= 2:
            hs = as_i64(host["start_ns"])
            rows = _sorted_rows(hs, rows)
            ends = hs[rows] + as_i64(host["dur_ns"])[rows]
            names = np.array([f"optimizer step {i}" for i in range(1, len(ends))], dtype=object)
            return _ranges(np.arange(1, len(ends), dtype=I64), names, "optimizer_span", ends[:-1], ends[1:])
    return None


def _outermost(hs: np.ndarray, he: np.ndarray, rows: np.ndarray, rank: int, warnings: list[str]) -> np.ndarray:
    """``rows`` (ordered by start ``hs``, ends ``he``) without the ranges that lie inside an
    earlier one: a pattern such as ``'measure|forward'`` matches a step and the ranges nested
    in it, and each nested range would become a zero-length step (windows never overlap)
    that halves the median step."""
    if rows.size < 2:
        return rows
    prev_end = np.maximum.accumulate(he)[:-1]
    inner = np.zeros(rows.size, dtype=bool)
    inner[1:] = he[1:] <= prev_end
    if inner.any():
        warnings.append(f"rank {rank}: {int(inner.sum())} range(s) matching the step pattern lie inside another "
                        "matching range; only the outermost ranges are steps")
    return rows[~inner]


def _step_column(col: Any, rows: np.ndarray, names: np.ndarray) -> np.ndarray:
    """The ``step`` values (a column) at ``rows``; a missing one is the number in the step's
    name, else its position among the rows."""
    if col.dtype == np.dtype(I64):
        return np.asarray(col)[rows]
    step = (col.iloc[rows] if isinstance(col, pd.Series) else pd.Series(col[rows], copy=False)).astype("Int64")
    missing = step.isna().to_numpy(bool)
    out = step.to_numpy(dtype=I64, na_value=0)
    if missing.any():
        out[missing] = _step_numbers(np.where(pd.isna(names), "", names).astype(object))[missing]
    return out


def step_windows(
    steps: pd.DataFrame,
    markers: pd.DataFrame,
    host: pd.DataFrame,
    api: pd.DataFrame,
    gpu: pd.DataFrame,
    ranks: list[int],
    step_pattern: str | None = None,
    extend_to_gpu: bool = True,
) -> StepResult:
    """Compute the step windows of every rank.

    Args:
        steps: steps table (``rank``, ``step``, ``start_ns``, ``dur_ns``, ``name``, ``source``).
        markers: markers table (``rank``, ``start_ns``, ``dur_ns``, ``name``, ``device``).
        host: host table (``rank``, ``start_ns``, ``dur_ns``, ``kind``).
        api: api table (``rank``, ``start_ns``, ``correlation``).
        gpu: all GPU activity (``rank``, ``start_ns``, ``end_ns``, ``correlation``), used to
            extend windows and to build the whole-run window.
        ranks: the ranks to produce windows for.
        step_pattern: a regex over marker names that marks steps (optional).
        extend_to_gpu: extend each window to the end of the GPU work it launched.

    Returns:
        a :class:`StepResult`.
    """
    warnings: list[str] = []
    out: list[dict[str, Any]] = []
    split = {id(df): split_by_rank(df) for df in (steps, markers, host, api, gpu)}
    by = lambda df, r: columns(split[id(df)].get(r, df.iloc[0:0]))  # noqa: E731
    for rank in ranks:
        w = rank_windows(rank, by(steps, rank), by(markers, rank), by(host, rank), by(api, rank), by(gpu, rank),
                         warnings, step_pattern=step_pattern, extend_to_gpu=extend_to_gpu)
        if w is not None:
            out.append(w)
    if not out:
        return StepResult(windows=_empty()[list(WINDOW_COLUMNS)], warnings=warnings)
    cols = {c: np.concatenate([hr[c] for hr in out]) if len(out) > 1 else out[0][c] for c in WINDOW_COLUMNS}
    return StepResult(windows=pd.DataFrame(cols), warnings=warnings)


def rank_windows(
    rank: int,
    steps: Columns,
    markers: Columns,
    host: Columns,
    api: Columns,
    gpu: Columns,
    warnings: list[str],
    step_pattern: str | None = None,
    extend_to_gpu: bool = True,
) -> dict[str, np.ndarray] | None:
    """The step windows of one rank, from its tables as columns (see :func:`step_windows`
    for each table's columns); what to tell the user is appended to ``warnings``.

    Returns:
        the :data:`WINDOW_COLUMNS` of :attr:`StepResult.windows` (in that order) as arrays
        (int64 ns, ``name`` and ``source`` object arrays), ordered by host start; None when
        the rank has no step marks and no activity.
    """
    hr = _host_ranges(rank, steps, markers, host, step_pattern, warnings)
    has_gpu = n_rows(gpu) > 0
    if hr is None or len(hr["host_start_ns"]) == 0:
        lo_hi = _whole_run(rank, gpu, host, api)
        if lo_hi is None:
            return None
        warnings.append(
            f"rank {rank}: no step marks found (ProfilerStep#N, perfscope.step(), NVTX ranges or optimizer steps); "
            "the whole run is analysed as one window. Mark steps or pass --step-pattern REGEX"
        )
        hr = _ranges(np.zeros(1, I64), np.array(["whole run"], dtype=object), "whole_run",
                     np.array([lo_hi[0]], I64), np.array([lo_hi[1]], I64))
    order = np.argsort(hr["host_start_ns"], kind="stable")
    if (order != np.arange(order.size)).any():
        hr = {c: v[order] for c, v in hr.items()}
    hs, he = as_i64(hr["host_start_ns"]), as_i64(hr["host_end_ns"])
    end = he.copy()
    whole = hr["source"][0] == "whole_run"
    if extend_to_gpu and has_gpu and n_rows(api) and not whole:
        end = np.maximum(end, _launched_gpu_end(hs, he, api, gpu))
    if whole and has_gpu:
        end = np.maximum(end, int(as_i64(gpu["end_ns"]).max()))
    # Never overlap: a step starts when the host starts it, or when the previous step's
    # (GPU-extended) window ends, whichever is later (tb_plugin's rule).  Clipping the
    # end to the next host start instead would cut every step's GPU work off when the
    # GPU runs behind the host (compute-bound or communication-bound loops).
    start = hs.copy()
    if len(start) > 1:
        # start_i = max(hs_i, end_{i-1}) with end_{i-1} >= start_{i-1}: a running max.
        prev_end = np.maximum.accumulate(np.maximum(end, hs))[:-1]
        start[1:] = np.maximum(hs[1:], prev_end)
    end = np.maximum(end, start)
    hr["start_ns"], hr["end_ns"] = start, end
    hr["rank"] = np.full(len(start), rank, dtype=I64)
    return {c: hr[c] for c in WINDOW_COLUMNS}


def _launched_gpu_end(hs: np.ndarray, he: np.ndarray, api: Columns, gpu: Columns) -> np.ndarray:
    """For each host range, the latest end of GPU work whose launch call started inside it
    (``hs`` where none); ``api`` and ``gpu`` are one rank's columns."""
    res = hs.copy()
    if n_rows(api) == 0 or n_rows(gpu) == 0:
        return res
    found, launch = launch_of(gpu, api)
    if not found.any():
        return res
    launch = launch[found]
    ends = as_i64(gpu["end_ns"])[found]
    idx = np.searchsorted(hs, launch, side="right") - 1
    ok = (idx >= 0) & (launch < he[np.clip(idx, 0, None)])
    if ok.any():
        np.maximum.at(res, idx[ok], ends[ok])
    return res


def _whole_run(rank: int, gpu: Columns, host: Columns, api: Columns) -> tuple[int, int] | None:
    """(first start, last end) of the rank's GPU events, host spans and API calls, int64 ns;
    None when it has none."""
    los, his = [], []
    if n_rows(gpu):
        los.append(int(as_i64(gpu["start_ns"]).min()))
        his.append(int(as_i64(gpu["end_ns"]).max()))
    for df in (host, api):
        if n_rows(df):
            los.append(int(as_i64(df["start_ns"]).min()))
            his.append(int((as_i64(df["start_ns"]) + filled_i64(df["dur_ns"])).max()))
    if not los:
        return None
    return min(los), max(his)


__all__ = ["StepResult", "step_windows", "rank_windows", "STEP_SOURCE_PREFERENCE", "WINDOW_COLUMNS"]
