"""Rows for the dashboard's tables, shaped from analyzer outputs (pure functions).

Values stay plain Python scalars and strings; ``dash_table.DataTable`` shows every cell as
text, so untrusted names (kernels, communicators) need no escaping here.  Tables are capped
so that a run with millions of events never ships millions of rows to the browser.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from dash.dash_table.Format import Format, Group, Scheme


def fixed(decimals: int, unknown: str = "") -> dict[str, Any]:
    """A DataTable number format: ``decimals`` fixed decimals, thousands grouped, ``unknown``
    shown for a missing value (numbers stay numbers, so sorting and filtering still work)."""
    return Format(precision=decimals, scheme=Scheme.fixed, group=Group.yes, nully=unknown).to_plotly_json()


_MS, _US, _PCT, _GBPS, _MB = fixed(2), fixed(1), fixed(1), fixed(2), fixed(2)

KERNEL_COLUMNS: list[dict[str, Any]] = [
    {"name": "rank", "id": "rank", "type": "numeric"},
    {"name": "kernel", "id": "name", "type": "text"},
    {"name": "kind", "id": "kind", "type": "text"},
    {"name": "count", "id": "count", "type": "numeric"},
    {"name": "total ms", "id": "total_ms", "type": "numeric", "format": _MS},
    {"name": "mean µs", "id": "mean_us", "type": "numeric", "format": _US},
    {"name": "median µs", "id": "median_us", "type": "numeric", "format": _US},
    {"name": "max µs", "id": "max_us", "type": "numeric", "format": _US},
    {"name": "share %", "id": "share_pct", "type": "numeric", "format": _PCT},
]
COLLECTIVE_COLUMNS: list[dict[str, Any]] = [
    {"name": "rank", "id": "rank", "type": "numeric"},
    {"name": "communicator", "id": "comm_id", "type": "text"},
    {"name": "seq", "id": "seq", "type": "numeric"},
    {"name": "op", "id": "func", "type": "text"},
    {"name": "MB", "id": "mb", "type": "numeric", "format": _MB},
    {"name": "duration µs", "id": "dur_us", "type": "numeric", "format": _US},
    {"name": "algbw GB/s", "id": "algbw_gbps", "type": "numeric", "format": fixed(2, "unknown")},
    {"name": "busbw GB/s", "id": "busbw_gbps", "type": "numeric", "format": fixed(2, "unknown")},
    # Skew and wait exist only for an operation matched across ranks: otherwise "unknown", not 0.
    {"name": "arrival skew µs", "id": "skew_us", "type": "numeric", "format": fixed(1, "unknown")},
    {"name": "wait µs", "id": "wait_us", "type": "numeric", "format": fixed(1, "unknown")},
]
SIZE_COLUMNS: list[dict[str, Any]] = [
    {"name": "op", "id": "func", "type": "text"},
    {"name": "MB", "id": "mb", "type": "numeric", "format": fixed(2, "unknown")},
    {"name": "calls", "id": "calls", "type": "numeric"},
    {"name": "ranks", "id": "ranks", "type": "numeric"},
    {"name": "total ms", "id": "total_ms", "type": "numeric", "format": _MS},
    {"name": "mean µs", "id": "mean_us", "type": "numeric", "format": _US},
    {"name": "median busbw GB/s", "id": "busbw_gbps", "type": "numeric", "format": fixed(2, "unknown")},
    {"name": "median algbw GB/s", "id": "algbw_gbps", "type": "numeric", "format": fixed(2, "unknown")},
]
KERNEL_CHANGE_COLUMNS: list[dict[str, Any]] = [
    {"name": "kernel", "id": "name", "type": "text"},
    {"name": "status", "id": "status", "type": "text"},
    {"name": "base ms/step", "id": "base_ms", "type": "numeric", "format": fixed(3)},
    {"name": "new ms/step", "id": "new_ms", "type": "numeric", "format": fixed(3)},
    {"name": "change ms/step", "id": "delta_ms", "type": "numeric", "format": fixed(3)},
    {"name": "change %", "id": "delta_pct", "type": "numeric", "format": _PCT},
]
COLLECTIVE_CHANGE_COLUMNS: list[dict[str, Any]] = [
    {"name": "op", "id": "func", "type": "text"},
    {"name": "MB", "id": "mb", "type": "numeric"},
    {"name": "status", "id": "status", "type": "text"},
    {"name": "base ms/step", "id": "base_ms", "type": "numeric", "format": fixed(3)},
    {"name": "new ms/step", "id": "new_ms", "type": "numeric", "format": fixed(3)},
    {"name": "change ms/step", "id": "delta_ms", "type": "numeric", "format": fixed(3)},
    {"name": "change %", "id": "delta_pct", "type": "numeric", "format": _PCT},
]
MAX_ROWS = 5000


def _col(df: pd.DataFrame, name: str, default: float = np.nan) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index, dtype="float64")


def _num(s: pd.Series) -> pd.Series:
    """Numbers as float64 (nullable ints, objects with pd.NA and all -> NaN where missing)."""
    return pd.to_numeric(s.astype(object).where(s.notna(), np.nan), errors="coerce").astype("float64")


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame -> JSON-safe records (NaN/NA -> None, numpy scalars -> Python)."""
    out = df.astype(object).where(df.notna(), None)
    return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
            for row in out.to_dict("records")]


def _filter_rank(df: pd.DataFrame, rank: Any) -> pd.DataFrame:
    if rank in (None, "", "all") or "rank" not in df.columns:
        return df
    return df[df["rank"] == int(rank)]


def kernel_rows(kernels: pd.DataFrame, rank: Any = None, limit: int = MAX_ROWS) -> tuple[list[dict[str, Any]], int]:
    """Rows of the Kernels table from ``Analysis.kernels``, longest total time first.

    Args:
        kernels: ``Analysis.kernels`` (``rank``, ``name``, ``kind``, ``count``, ``total_ns``,
            ``mean_ns``, ``median_ns``, ``max_ns``, ``share``).
        rank: keep only this rank (None or ``"all"``: every rank).
        limit: at most this many rows.

    Returns:
        (records with the ids of :data:`KERNEL_COLUMNS`, total matching rows before the limit).
    """
    df = _filter_rank(kernels, rank)
    if df.empty:
        return [], 0
    df = df.sort_values("total_ns", ascending=False)
    n = len(df)
    df = df.head(limit)
    out = pd.DataFrame({
        "rank": df["rank"].astype("int64"), "name": df["name"].astype(str),
        "kind": _col(df, "kind", np.nan).astype(object),
        "count": df["count"].astype("int64"),
        "total_ms": (_num(df["total_ns"]) / 1e6).round(3),
        "mean_us": (_num(_col(df, "mean_ns")) / 1e3).round(2),
        "median_us": (_num(_col(df, "median_ns")) / 1e3).round(2),
        "max_us": (_num(_col(df, "max_ns")) / 1e3).round(2),
        "share_pct": (100.0 * _num(_col(df, "share"))).round(2),
    })
    return records(out), n


def collective_rows(colls: pd.DataFrame, rank: Any = None, limit: int = MAX_ROWS) -> tuple[list[dict[str, Any]], int]:
    """Rows of the Collectives table from ``Analysis.collectives``, longest first.

    Returns:
        (records with the ids of :data:`COLLECTIVE_COLUMNS`, total matching rows before the
        limit); durations in µs, sizes in MB (10^6 bytes), bandwidths in GB/s.
    """
    df = _filter_rank(colls, rank)
    if df.empty:
        return [], 0
    df = df.sort_values("dur_ns", ascending=False)
    n = len(df)
    df = df.head(limit)
    out = pd.DataFrame({
        "rank": df["rank"].astype("int64"), "comm_id": _col(df, "comm_id").astype(object).astype(str),
        "seq": _col(df, "seq").astype(object), "func": _col(df, "func").astype(object).astype(str),
        "mb": (_num(_col(df, "bytes")) / 1e6).round(3),
        "dur_us": (_num(df["dur_ns"]) / 1e3).round(1),
        "algbw_gbps": _num(_col(df, "algbw_gbps")).round(2),
        "busbw_gbps": _num(_col(df, "busbw_gbps")).round(2),
        "skew_us": (_num(_col(df, "arrival_skew_ns")) / 1e3).round(1).where(_matched(df)),
        "wait_us": (_num(_col(df, "wait_ns")) / 1e3).round(1).where(_matched(df)),
    })
    return records(out), n


def _matched(df: pd.DataFrame) -> pd.Series:
    """True where a collective was matched across ranks (its skew and wait are known); all
    True when the table does not say (``matched_ranks`` missing)."""
    if "matched_ranks" not in df.columns:
        return pd.Series(True, index=df.index)
    return (_num(df["matched_ranks"]) > 1).fillna(False)


def size_rows(sizes: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of the by-operation-and-size table from
    :func:`perfscope.analyzers.distributed.collective_sizes` (MB = 10^6 bytes, ms, µs, GB/s)."""
    if sizes is None or sizes.empty:
        return []
    out = pd.DataFrame({
        "func": sizes["func"].astype(str), "mb": (_num(sizes["bytes"]) / 1e6).round(3),
        "calls": sizes["calls"].astype("int64"), "ranks": sizes["ranks"].astype("int64"),
        "total_ms": (_num(sizes["total_ns"]) / 1e6).round(3), "mean_us": (_num(sizes["mean_ns"]) / 1e3).round(1),
        "busbw_gbps": _num(sizes["busbw_gbps"]).round(3), "algbw_gbps": _num(sizes["algbw_gbps"]).round(3),
    })
    return records(out)


def name_tooltips(rows: list[dict[str, Any]], column: str = "name") -> list[dict[str, Any]]:
    """DataTable ``tooltip_data`` showing each row's full ``column`` (long kernel names are
    cut off in the cell).  Type ``text``, never Markdown: the names are untrusted."""
    return [{column: {"value": str(r.get(column, "")), "type": "text"}} for r in rows]


def change_rows(changes: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of a change table from ``Comparison.kernels`` or ``Comparison.collectives``.

    Args:
        changes: ``name`` (or ``func`` and ``bytes``), ``status``, ``base_ns_per_step``,
            ``new_ns_per_step``, ``delta_ns_per_step``, ``rel_change``.

    Returns:
        records with the ids of :data:`KERNEL_CHANGE_COLUMNS` or
        :data:`COLLECTIVE_CHANGE_COLUMNS` (ms per step, percent), in the given order.
    """
    if changes is None or changes.empty:
        return []
    out = pd.DataFrame(index=changes.index)
    if "name" in changes.columns:
        out["name"] = changes["name"].astype(str)
    if "func" in changes.columns:
        out["func"] = changes["func"].astype(str)
        out["mb"] = (pd.to_numeric(changes["bytes"], errors="coerce") / 1e6).round(3)
    out["status"] = _col(changes, "status").astype(object)
    out["base_ms"] = (_num(changes["base_ns_per_step"]) / 1e6).round(4)
    out["new_ms"] = (_num(changes["new_ns_per_step"]) / 1e6).round(4)
    out["delta_ms"] = (_num(changes["delta_ns_per_step"]) / 1e6).round(4)
    out["delta_pct"] = (100.0 * _num(_col(changes, "rel_change"))).round(1)
    return records(out.reset_index(drop=True))


__all__ = ["COLLECTIVE_CHANGE_COLUMNS", "change_rows", "name_tooltips", "KERNEL_COLUMNS", "COLLECTIVE_COLUMNS",
           "KERNEL_CHANGE_COLUMNS", "SIZE_COLUMNS", "fixed", "records", "kernel_rows", "collective_rows", "size_rows", "MAX_ROWS"]
