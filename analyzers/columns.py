"""Tables as columns: ``{name: array}`` mappings, what the per-rank analysis works on.

``analyze_run`` reads each rank's tables with ``Run.arrays`` (numpy arrays, pandas
``Categorical`` for dictionary-encoded names, ``IntegerArray`` for integer columns with
nulls) and builds no DataFrame for them: on a trace of a few thousand events, building a
frame and indexing its columns costs more than all the numpy work done on them.  The
public analyzers still take DataFrames; :func:`columns` turns one into this form, so both
run the same code.

Every array of one table has the same length and is indexed by position (a numpy boolean
mask or integer array), never by label.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

Columns = Mapping[str, Any]
"""A table as columns: column name -> array (numpy or pandas extension array), all of one length."""


def columns(table: pd.DataFrame | Columns | None) -> Columns:
    """``table`` as columns: a DataFrame's columns as arrays (numpy for numpy dtypes, else the
    pandas extension array, e.g. a ``Categorical``; no copy), a mapping as it is, None as no
    column."""
    if table is None:
        return {}
    if isinstance(table, pd.DataFrame):
        return {c: _array(table[c]) for c in table.columns}
    return table


def _array(s: pd.Series) -> Any:
    return s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array


def n_rows(table: pd.DataFrame | Columns | None) -> int:
    """Rows of ``table`` (a DataFrame or columns; 0 for None or no column)."""
    if table is None:
        return 0
    if isinstance(table, pd.DataFrame):
        return len(table)
    for v in table.values():
        return len(v)
    return 0


def take(table: Columns, rows: np.ndarray, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The rows ``rows`` (a boolean mask or positions) of ``table``'s columns ``names`` (all
    when None; a name ``table`` lacks is left out)."""
    if names is None:
        return {c: v[rows] for c, v in table.items()}
    return {c: table[c][rows] for c in names if c in table}


def bools(col: Any) -> np.ndarray:
    """``col`` (a column) as a numpy bool array, nulls as False."""
    if isinstance(col, np.ndarray) and col.dtype == np.bool_:
        return col
    return pd.Series(col, copy=False).to_numpy(dtype=bool, na_value=False)


def is_null(col: Any) -> np.ndarray:
    """A bool array: True where ``col`` (a column) is null (NaN, None or NA)."""
    if isinstance(col, np.ndarray) and col.dtype.kind in "iub":
        return np.zeros(col.size, dtype=bool)
    return np.asarray(pd.isna(col), dtype=bool)


def ordered(v: np.ndarray) -> bool:
    """True when ``v`` is non-decreasing."""
    return v.size < 2 or not bool((v[1:] < v[:-1]).any())


def interleave(parts: list[dict[str, np.ndarray]], key: str) -> dict[str, np.ndarray]:
    """The columns of ``parts`` (each ordered by ``key``) as one table ordered by ``key``,
    rows of equal keys in part order: what a stable sort of the parts one after the other
    gives, without the sort.  Each row's place is the number of rows of the other parts
    before it (a binary search per row of every part but the largest, whose rows fill the
    places left, in order), so a column costs one copy, not a concatenation and a gather."""
    big = max(range(len(parts)), key=lambda i: parts[i][key].size)
    n = sum(p[key].size for p in parts)
    dest: dict[int, np.ndarray] = {}
    for i, p in enumerate(parts):
        if i != big:
            # Rows of earlier parts with an equal key come first: search them on their right.
            dest[i] = np.arange(p[key].size, dtype=np.int64) + sum(
                np.searchsorted(q[key], p[key], side="right" if j < i else "left") for j, q in enumerate(parts) if j != i)
    rest = np.ones(n, dtype=bool)
    for d in dest.values():
        rest[d] = False
    out = {}
    for c in parts[0]:
        col = np.empty(n, dtype=np.result_type(*(p[c].dtype for p in parts)))
        col[rest] = parts[big][c]
        for i, d in dest.items():
            col[d] = parts[i][c]
        out[c] = col
    return out


__all__ = ["Columns", "columns", "n_rows", "take", "bools", "is_null", "ordered", "interleave"]
