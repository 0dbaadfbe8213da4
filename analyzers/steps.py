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


def _step_numbers(names: pd.Series) -> np.ndarray:
    """The last integer in each name (``ProfilerStep#12`` -> 12), else the row's position."""
    num = names.astype("string").str.extract(_NUM, expand=False)
    pos = pd.Series(np.arange(len(names)), index=names.index)
    return pd.to_numeric(num, errors="coerce").fillna(pos).astype("int64").to_numpy()


def _host_ranges(
    rank: int,
    steps: pd.DataFrame,
    markers: pd.DataFrame,
    host: pd.DataFrame,
    step_pattern: str | None,
    warnings: list[str],
) -> pd.DataFrame | None:
    """Return this rank's host step ranges (step, name, source, host_start_ns, host_end_ns)."""
    if step_pattern:
        m = markers
        if len(m):
            if "device" in m.columns:
                m = m[m["device"].isna()]
            m = m[name_matches(m["name"], step_pattern)]
        if len(m):
            m = m.sort_values("start_ns")
            return pd.DataFrame({
                "step": _step_numbers(m["name"]), "name": m["name"].astype(object).to_numpy(),
                "source": "pattern", "host_start_ns": as_i64(m["start_ns"]),
                "host_end_ns": as_i64(m["start_ns"]) + as_i64(m["dur_ns"]),
            })
        warnings.append(f"rank {rank}: no marker matches the step pattern {step_pattern!r}; using the recorded step marks instead")
    if len(steps):
        src = pd.Series(name_values(steps["source"]), index=steps.index).replace("", "explicit")
        present = set(src.unique())
        for pref in (*STEP_SOURCE_PREFERENCE, *sorted(present)):
            if pref in present:
                s = steps[(src == pref).to_numpy(bool)].sort_values("start_ns")
                s = s.drop_duplicates(subset=["start_ns"])
                step = s["step"].astype("Int64")
                step = step.fillna(pd.Series(_step_numbers(s["name"].fillna("")), index=s.index))
                return pd.DataFrame({
                    "step": step.astype("int64").to_numpy(), "name": s["name"].astype(object).to_numpy(),
                    "source": pref, "host_start_ns": as_i64(s["start_ns"]),
                    "host_end_ns": as_i64(s["start_ns"]) + as_i64(s["dur_ns"].fillna(0)),
                })
    if len(host):
        opt = host[name_values(host["kind"]) == "optimizer_step"].sort_values("start_ns")
        if len(opt) >= 2:
            ends = as_i64(opt["start_ns"]) + as_i64(opt["dur_ns"])
            return pd.DataFrame({
                "step": np.arange(1, len(ends), dtype=I64), "name": [f"optimizer step {i}" for i in range(1, len(ends))],
                "source": "optimizer_span", "host_start_ns": ends[:-1], "host_end_ns": ends[1:],
            })
    return None


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
    out = []
    split = {id(df): split_by_rank(df) for df in (steps, markers, host, api, gpu)}
    by = lambda df, r: split[id(df)].get(r, df.iloc[0:0])  # noqa: E731
    for rank in ranks:
        g = by(gpu, rank)
        hr = _host_ranges(rank, by(steps, rank), by(markers, rank), by(host, rank), step_pattern, warnings)
        if hr is None or len(hr) == 0:
            lo_hi = _whole_run(rank, g, by(host, rank), by(api, rank))
            if lo_hi is None:
                continue
            warnings.append(
                f"rank {rank}: no step marks found (ProfilerStep#N, perfscope.step(), NVTX ranges or optimizer steps); "
                "the whole run is analysed as one window. Mark steps or pass --step-pattern REGEX"
            )
            hr = pd.DataFrame({"step": [0], "name": ["whole run"], "source": ["whole_run"],
                               "host_start_ns": [lo_hi[0]], "host_end_ns": [lo_hi[1]]})
        hr = hr.sort_values("host_start_ns", kind="stable").reset_index(drop=True)
        hs, he = as_i64(hr["host_start_ns"]), as_i64(hr["host_end_ns"])
        end = he.copy()
        if extend_to_gpu and len(g) and len(api) and hr["source"].iloc[0] != "whole_run":
            end = np.maximum(end, _launched_gpu_end(hs, he, by(api, rank), g))
        if hr["source"].iloc[0] == "whole_run" and len(g):
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
        hr.insert(0, "rank", np.int64(rank))
        out.append(hr)
    windows = pd.concat(out, ignore_index=True) if out else _empty()
    return StepResult(windows=windows[list(WINDOW_COLUMNS)], warnings=warnings)


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
