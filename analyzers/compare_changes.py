"""Kernels and collectives whose time per step changed most between two analysed runs.

Pure: the ``kernels`` and ``collectives`` tables of two analyses in, one ranked table out
(what :class:`perfscope.analyzers.compare.Comparison` lists beside its verdict).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def kernel_changes(base: pd.DataFrame, new: pd.DataFrame, base_rank_steps: int, new_rank_steps: int, *, top: int = 10) -> pd.DataFrame:
    """Return the kernels whose time per step changed most.

    Args:
        base, new: ``Analysis.kernels`` (``rank``, ``name``, ``kind``, ``count``, ``total_ns``).
        base_rank_steps, new_rank_steps: (rank, step) rows of each run: a kernel's total
            over all ranks divided by this is its time per step per rank, which stays
            comparable when the runs recorded different numbers of steps or ranks.
        top: rows to return.

    Returns:
        columns ``name``, ``kind``, ``base_ns_per_step``, ``new_ns_per_step``,
        ``delta_ns_per_step``, ``rel_change``, ``base_count_per_step``,
        ``new_count_per_step``, ``status``; largest absolute delta first.
    """
    return _top_changes(base, new, ["name"], "total_ns", base_rank_steps, new_rank_steps, top, extra="kind")


def collective_changes(base: pd.DataFrame, new: pd.DataFrame, base_rank_steps: int, new_rank_steps: int, *, top: int = 10) -> pd.DataFrame:
    """Return the collectives, keyed by (``func``, ``bytes``), whose time per step changed most.

    Communicator ids differ from run to run, so an operation is identified by what it does
    and how much it moves.  Columns: ``func``, ``bytes``, then as :func:`kernel_changes`
    (without ``kind``).
    """
    return _top_changes(base, new, ["func", "bytes"], "dur_ns", base_rank_steps, new_rank_steps, top)


def _top_changes(
    base: pd.DataFrame,
    new: pd.DataFrame,
    keys: list[str],
    value: str,
    base_rank_steps: int,
    new_rank_steps: int,
    top: int,
    extra: str | None = None,
) -> pd.DataFrame:
    out_cols = [*keys, *([extra] if extra else []), "base_ns_per_step", "new_ns_per_step", "delta_ns_per_step",
                "rel_change", "base_count_per_step", "new_count_per_step", "status"]

    def per_step(df: pd.DataFrame, rank_steps: int) -> pd.DataFrame:
        if df is None or df.empty or any(k not in df.columns for k in [*keys, value]) or rank_steps <= 0:
            return pd.DataFrame(columns=[*keys, "ns", "count", *([extra] if extra else [])]).set_index(keys)
        d = df.copy()
        for k in keys:
            d[k] = d[k].astype(str) if k != "bytes" else pd.to_numeric(d[k], errors="coerce").fillna(-1).astype("int64")
        d["_count"] = pd.to_numeric(d["count"], errors="coerce").fillna(0) if "count" in d.columns else 1
        d["_v"] = pd.to_numeric(d[value], errors="coerce").fillna(0).astype("float64")
        agg: dict[str, Any] = {"ns": ("_v", "sum"), "count": ("_count", "sum")}
        if extra and extra in d.columns:
            d[extra] = d[extra].astype(str)
            agg[extra] = (extra, "first")
        g = d.groupby(keys, sort=False, observed=True).agg(**agg)
        g["ns"] /= rank_steps
        g["count"] /= rank_steps
        return g

    b, n = per_step(base, base_rank_steps), per_step(new, new_rank_steps)
    if b.empty and n.empty:
        return pd.DataFrame(columns=out_cols)
    j = pd.merge(b, n, how="outer", left_index=True, right_index=True, suffixes=("_b", "_n"))
    res = pd.DataFrame(index=j.index)
    if extra:
        eb = j.get(f"{extra}_b", pd.Series(index=j.index, dtype=object))
        en = j.get(f"{extra}_n", pd.Series(index=j.index, dtype=object))
        res[extra] = en.where(en.notna(), eb)
    in_b = j["ns_b"].notna()
    in_n = j["ns_n"].notna()
    res["base_ns_per_step"] = j["ns_b"].fillna(0.0).astype(float)
    res["new_ns_per_step"] = j["ns_n"].fillna(0.0).astype(float)
    res["delta_ns_per_step"] = res["new_ns_per_step"] - res["base_ns_per_step"]
    with np.errstate(divide="ignore", invalid="ignore"):
        res["rel_change"] = np.where(res["base_ns_per_step"] > 0, res["delta_ns_per_step"] / res["base_ns_per_step"], np.nan)
    res["base_count_per_step"] = j["count_b"].fillna(0.0).astype(float)
    res["new_count_per_step"] = j["count_n"].fillna(0.0).astype(float)
    res["status"] = np.where(in_b & in_n, "changed", np.where(in_n, "new", "gone"))
    res = res.reset_index()
    # Stable order: largest |delta| first, ties by name so reports do not shuffle.
    res["_abs"] = res["delta_ns_per_step"].abs()
    res = res.sort_values(["_abs", *keys], ascending=[False, *([True] * len(keys))], kind="mergesort")
    return res.drop(columns="_abs").head(top).reset_index(drop=True)[out_cols]


__all__ = ["collective_changes", "kernel_changes"]
