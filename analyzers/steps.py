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
from perfscope.analyzers.intervals import I64, as_i64, launch_of, split_by_rank

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


def _objects(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """``col``'s values at positions ``rows`` as an object array (nulls as NaN), as
    ``col.iloc[rows].astype(object)`` gives them."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()[rows]
        cats = np.append(np.asarray(col.cat.categories, dtype=object), np.nan)  # code -1: the last entry
        return cats[codes]
    return np.asarray(col.to_numpy(dtype=object)[rows], dtype=object)


def _sorted_rows(start: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``rows`` ordered by ``start[rows]`` exactly as ``DataFrame.sort_values`` orders them
    (numpy's default quicksort, so ties come out as pandas leaves them)."""
    return rows[start[rows].argsort(kind="quicksort")]


def _ranges(step: np.ndarray, name: Any, source: str, hs: np.ndarray, he: np.ndarray) -> dict[str, Any]:
    n = len(hs)
    return {"step": step, "name": name, "source": np.full(n, source, dtype=object), "host_start_ns": hs, "host_end_ns": he}


def _host_ranges(
    rank: int,
    steps: pd.DataFrame,
    markers: pd.DataFrame,
    host: pd.DataFrame,
    step_pattern: str | None,
    warnings: list[str],
) -> dict[str, Any] | None:
    """Return this rank's host step ranges: arrays ``step``, ``name``, ``source``,
    ``host_start_ns`` and ``host_end_ns`` (int64 ns); None when the rank has none."""
    if step_pattern:
        rows = np.zeros(0, dtype=I64)
        if len(markers):
            keep = name_matches(markers["name"], step_pattern)
            if "device" in markers.columns:
                keep &= markers["device"].isna().to_numpy(bool)
            rows = np.flatnonzero(keep)
        if rows.size:
            ms = as_i64(markers["start_ns"])
            rows = _sorted_rows(ms, rows)
            names = _objects(markers["name"], rows)
            hs = ms[rows]
            return _ranges(_step_numbers(names), names, "pattern", hs, hs + as_i64(markers["dur_ns"])[rows])
        warnings.append(f"rank {rank}: no marker matches the step pattern {step_pattern!r}; using the recorded step marks instead")
    if len(steps):
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
                return _ranges(step, names, pref, hs, hs + as_i64(steps["dur_ns"].fillna(0))[rows])
    if len(host):
        rows = np.flatnonzero(name_values(host["kind"]) == "optimizer_step")
        if rows.size >= 2:
            hs = as_i64(host["start_ns"])
            rows = _sorted_rows(hs, rows)
            ends = hs[rows] + as_i64(host["dur_ns"])[rows]
            names = np.array([f"optimizer step {i}" for i in range(1, len(ends))], dtype=object)
            return _ranges(np.arange(1, len(ends), dtype=I64), names, "optimizer_span", ends[:-1], ends[1:])
    return None


def _step_column(col: pd.Series, rows: np.ndarray, names: np.ndarray) -> np.ndarray:
    """The ``step`` values at ``rows``; a missing one is the number in the step's name, else
    its position among the rows."""
    if col.dtype == np.dtype(I64):
        return col.to_numpy()[rows]
    step = col.iloc[rows].astype("Int64")
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
    by = lambda df, r: split[id(df)].get(r, df.iloc[0:0])  # noqa: E731
    for rank in ranks:
        g = by(gpu, rank)
        hr = _host_ranges(rank, by(steps, rank), by(markers, rank), by(host, rank), step_pattern, warnings)
        if hr is None or len(hr["host_start_ns"]) == 0:
            lo_hi = _whole_run(rank, g, by(host, rank), by(api, rank))
            if lo_hi is None:
                continue
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
        if extend_to_gpu and len(g) and len(api) and not whole:
            end = np.maximum(end, _launched_gpu_end(hs, he, by(api, rank), g))
        if whole and len(g):
            end = np.maximum(end, int(g["end_ns"].max()))
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
        out.append(hr)
    if not out:
        return StepResult(windows=_empty()[list(WINDOW_COLUMNS)], warnings=warnings)
    cols = {c: np.concatenate([hr[c] for hr in out]) if len(out) > 1 else out[0][c] for c in WINDOW_COLUMNS}
    return StepResult(windows=pd.DataFrame(cols), warnings=warnings)


def _launched_gpu_end(hs: np.ndarray, he: np.ndarray, api: pd.DataFrame, gpu: pd.DataFrame) -> np.ndarray:
    """For each host range, the latest end of GPU work whose launch call started inside it
    (``hs`` where none)."""
    res = hs.copy()
    if len(api) == 0 or len(gpu) == 0:
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


def _whole_run(rank: int, gpu: pd.DataFrame, host: pd.DataFrame, api: pd.DataFrame) -> tuple[int, int] | None:
    los, his = [], []
    if len(gpu):
        los.append(int(gpu["start_ns"].min()))
        his.append(int(gpu["end_ns"].max()))
    for df in (host, api):
        if len(df):
            los.append(int(df["start_ns"].min()))
            his.append(int((as_i64(df["start_ns"]) + as_i64(df["dur_ns"].fillna(0))).max()))
    if not los:
        return None
    return min(los), max(his)


__all__ = ["StepResult", "step_windows", "STEP_SOURCE_PREFERENCE", "WINDOW_COLUMNS"]
