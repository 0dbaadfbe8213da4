"""Distributed views of an analysis: warm-up steps, who made whom wait, communication overlap
per rank, collectives by operation and size.

Pure functions over the tables of :class:`~perfscope.analyzers.result.Analysis`; the
dashboard draws what they return (like TensorBoard's profiler plugin's Distributed view and
HTA's communication analysis, from perfscope's own buckets and matched collectives).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# A leading step is warm-up when it lasts this many times the run's median step or more
# (first-iteration costs: cuDNN autotuning, allocator growth, lazy module init, NCCL set-up).
WARMUP_FACTOR = 1.5
# At most this share of a run's steps is ever called warm-up: a run whose steps keep
# shrinking is not "all warm-up".
WARMUP_MAX_SHARE = 0.25


def warmup_steps(steps: pd.DataFrame, factor: float = WARMUP_FACTOR) -> list[int]:
    """The leading steps of the run that are warm-up.

    A step's length is its longest rank's ``wall_ns`` (ranks wait for each other).  Walking
    from the first step, each step that lasts at least ``factor`` times the median step is
    warm-up; the first one that does not ends the warm-up.  At most a quarter of the steps
    (rounded down) are warm-up, so runs of fewer than 4 steps have none.

    Args:
        steps: ``Analysis.steps`` (``step``, ``wall_ns``; one row per rank and step).

    Returns:
        the warm-up step numbers, ascending (empty when none).
    """
    if steps is None or steps.empty:
        return []
    per_step = steps.groupby("step", sort=True)["wall_ns"].max()
    limit = int(len(per_step) * WARMUP_MAX_SHARE)
    median = float(per_step.median())
    out: list[int] = []
    for step, wall in per_step.iloc[:limit].items():
        if median <= 0 or float(wall) < factor * median:
            break
        out.append(int(step))
    return out


def without_steps(steps: pd.DataFrame, excluded: list[int] | tuple[int, ...]) -> pd.DataFrame:
    """``steps`` without the rows of the ``excluded`` step numbers (the frame itself when none)."""
    if not len(excluded) or steps.empty:
        return steps
    return steps[~steps["step"].isin(list(excluded))]


def comm_overlap(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank, where the mean step goes from communication's point of view (TensorBoard's
    computation / overlapping / communication / other).

    Computation hides communication when they overlap, so ``compute_ns`` already holds the
    hidden part (``hidden_network_ns``); it is split out here.

    Args:
        steps: ``Analysis.steps``.

    Returns:
        one row per rank (ascending): ``rank``, ``steps``, and per-step means in ns:
        ``compute_ns`` (computation not overlapping communication), ``hidden_comm_ns``
        (communication overlapped by computation), ``exposed_comm_ns`` (communication
        alone: the network bucket), ``wait_ns`` (the sync bucket: waiting for other ranks
        or the host), ``other_ns`` (copies, data loading, host), ``wall_ns``.
    """
    cols = ["rank", "steps", "compute_ns", "hidden_comm_ns", "exposed_comm_ns", "wait_ns", "other_ns", "wall_ns"]
    if steps is None or steps.empty:
        return pd.DataFrame({c: np.zeros(0, np.float64) for c in cols})
    s = steps
    hidden = s["hidden_network_ns"] if "hidden_network_ns" in s.columns else pd.Series(0, index=s.index)
    hidden = np.minimum(hidden.astype("float64"), s["compute_ns"].astype("float64"))
    frame = pd.DataFrame({
        "rank": s["rank"],
        "compute_ns": s["compute_ns"] - hidden,
        "hidden_comm_ns": hidden,
        "exposed_comm_ns": s["network_ns"],
        "wait_ns": s["sync_ns"],
        "other_ns": s["pcie_ns"] + s["data_loading_ns"] + s["host_ns"],
        "wall_ns": s["wall_ns"],
    }).astype({"compute_ns": "float64"})
    g = frame.groupby("rank", sort=True)
    out = g.mean()
    out.insert(0, "steps", g.size())
    return out.reset_index()[cols]


def _step_of(coll: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """The step each row of ``coll`` starts in, on its own rank (-1 outside every step)."""
    out = np.full(len(coll), -1, dtype=np.int64)
    if steps.empty:
        return out
    for rank, rows in coll.groupby("rank", sort=False).indices.items():
        mine = steps[steps["rank"] == rank].sort_values("start_ns")
        if mine.empty:
            continue
        starts = mine["start_ns"].to_numpy(np.int64)
        ends = mine["end_ns"].to_numpy(np.int64)
        t = coll["start_ns"].to_numpy(np.int64)[rows]
        i = np.searchsorted(starts, t, side="right") - 1
        ok = (i >= 0) & (t < ends[np.maximum(i, 0)])
        out[rows] = np.where(ok, mine["step"].to_numpy(np.int64)[np.maximum(i, 0)], -1)
    return out


def caused_wait(coll: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """How long the other ranks waited for each rank, per step: the straggler's cost to the
    others, step by step (a late rank itself waits least, so its own sync time hides it).

    Every matched collective whose arrivals spread out has a last rank; the other ranks'
    ``wait_ns`` in it is charged to that rank, in the step its own operation started in.

    Args:
        coll: ``Analysis.collectives`` (``rank``, ``start_ns``, ``wait_ns``,
            ``matched_ranks``, ``last_rank``, ``match_key``).
        steps: ``Analysis.steps`` (``rank``, ``step``, ``start_ns``, ``end_ns``).

    Returns:
        one row per (rank, step) of ``steps``: ``rank``, ``step``, ``caused_wait_ns``
        (int64 ns; 0 when it made nobody wait), ``ops_last`` (operations it arrived last
        at in that step).  Empty when the collectives were not matched across ranks.
    """
    base = steps[["rank", "step"]].drop_duplicates().sort_values(["rank", "step"]).reset_index(drop=True) \
        if steps is not None and not steps.empty else pd.DataFrame({"rank": [], "step": []}, dtype="int64")
    need = {"match_key", "last_rank", "matched_ranks", "wait_ns", "start_ns", "rank"}
    if coll is None or coll.empty or not need <= set(coll.columns) or not (coll["matched_ranks"] > 1).any():
        return base.iloc[0:0].assign(caused_wait_ns=np.zeros(0, np.int64), ops_last=np.zeros(0, np.int64))
    m = coll[(coll["matched_ranks"] > 1).to_numpy(bool)].reset_index(drop=True)
    cost = m.groupby("match_key", sort=False)["wait_ns"].sum()
    last = m["last_rank"].to_numpy(dtype="float64", na_value=np.nan)
    own = m[(m["rank"].to_numpy() == last)].drop_duplicates("match_key")
    own = own.assign(step=_step_of(own, steps), cost=cost.reindex(own["match_key"]).to_numpy())
    own = own[(own["step"] >= 0) & (own["cost"] > 0)]
    per = own.groupby(["rank", "step"]).agg(caused_wait_ns=("cost", "sum"), ops_last=("cost", "size")).reset_index()
    out = base.merge(per, on=["rank", "step"], how="left").fillna({"caused_wait_ns": 0, "ops_last": 0})
    return out.astype({"rank": "int64", "step": "int64", "caused_wait_ns": "int64", "ops_last": "int64"})


def collective_sizes(coll: pd.DataFrame) -> pd.DataFrame:
    """Collectives grouped by operation and message size (as nccl-tests reports them).

    Args:
        coll: ``Analysis.collectives`` (``func``, ``bytes``, ``dur_ns``, ``busbw_gbps``,
            ``algbw_gbps``, ``rank``).

    Returns:
        one row per (``func``, ``bytes``): ``calls`` (operations on all ranks), ``ranks``,
        ``total_ns``, ``mean_ns``, ``busbw_gbps`` and ``algbw_gbps`` (medians, GB/s; NaN
        where sizes are unknown), sorted by ``total_ns`` descending.  ``bytes`` is <NA>
        for operations of unknown size (collectives taken from kernel names).
    """
    cols = ["func", "bytes", "calls", "ranks", "total_ns", "mean_ns", "busbw_gbps", "algbw_gbps"]
    if coll is None or coll.empty:
        return pd.DataFrame({c: [] for c in cols})
    df = coll.assign(func=coll["func"].astype(str), bytes=pd.to_numeric(coll["bytes"], errors="coerce").astype("Int64"))
    for c in ("busbw_gbps", "algbw_gbps"):
        if c not in df.columns:
            df[c] = np.nan
    g = df.groupby(["func", "bytes"], sort=False, dropna=False)
    out = g.agg(calls=("dur_ns", "size"), ranks=("rank", "nunique"), total_ns=("dur_ns", "sum"),
                mean_ns=("dur_ns", "mean"), busbw_gbps=("busbw_gbps", "median"),
                algbw_gbps=("algbw_gbps", "median")).reset_index()
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)[cols]


__all__ = ["WARMUP_FACTOR", "caused_wait", "collective_sizes", "comm_overlap", "warmup_steps", "without_steps"]
