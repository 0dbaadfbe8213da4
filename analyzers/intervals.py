"""Vectorised interval arithmetic on int64 nanosecond arrays (no per-event Python loops).

Intervals are half-open ``[start, end)``; empty or negative ones are ignored.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # pandas is imported by callers; this module stays import-light
    import pandas as pd

I64 = np.int64


def as_i64(values: npt.ArrayLike) -> np.ndarray:
    """Return ``values`` as a contiguous int64 array (nullable columns must be filled first)."""
    return np.ascontiguousarray(np.asarray(values, dtype=I64))


def filled_i64(col: pd.Series | np.ndarray) -> np.ndarray:
    """A column (Series, numpy or pandas array) as int64 with nulls as 0
    (``as_i64(col.fillna(0))``, without the pandas call when the column is plain int64, as
    the store's non-null columns are)."""
    if isinstance(col, np.ndarray) and col.dtype == np.dtype(I64):
        return np.ascontiguousarray(col)
    if not isinstance(col, np.ndarray) and col.dtype == np.dtype(I64):
        return np.ascontiguousarray(col.to_numpy())
    import pandas as pd

    s = col if isinstance(col, pd.Series) else pd.Series(col, copy=False)
    return np.ascontiguousarray(np.asarray(s.fillna(0), dtype=I64))


def stable_argsort(values: np.ndarray) -> np.ndarray:
    """Return the permutation ``np.argsort(values, kind="stable")`` gives, for int64 values.

    When the value range and the row count fit in 63 bits together, each value's offset from
    the minimum and its row number are packed into one int64 and sorted with a plain
    (unstable, vectorised) sort: equal values then come out in row order, exactly as a stable
    sort leaves them.  Several times faster on values in no particular order (group codes);
    numpy's own stable sort (a timsort) is faster on nearly sorted input such as timestamps.
    """
    v = as_i64(values)
    n = v.size
    if n < 2:
        return np.arange(n, dtype=I64)
    lo, hi = int(v.min()), int(v.max())
    row_bits = max(int(n - 1).bit_length(), 1)
    if (hi - lo).bit_length() + row_bits > 62:
        return np.argsort(v, kind="stable")
    packed = v - lo
    packed <<= row_bits
    packed |= np.arange(n, dtype=I64)
    packed.sort()
    packed &= (1 << row_bits) - 1
    return packed


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping or touching intervals.

    Returns:
        (starts, ends) of the disjoint union, sorted, int64 ns; the arrays given (as int64)
        when they are merged already, so callers never modify the result in place.
    """
    s, e = as_i64(starts), as_i64(ends)
    keep = e > s
    if keep.all():
        if bool((s[1:] > e[:-1]).all()):
            # Merged already (a layer merged once is merged again by each sweep that takes
            # it): two comparisons instead of the sort check, running maximum and gathers.
            return s, e
    else:
        s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    if s.size > 1 and (s[1:] < s[:-1]).any():  # GPU events arrive sorted: skip the sort then
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # A new group starts where an interval begins after everything before it has ended.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    # A group's end is the running end at its last interval: everything before the group
    # ended before it began, so the running maximum there is the group's own (a gather is
    # several times cheaper than np.maximum.reduceat).
    last = np.empty_like(idx)
    last[:-1] = idx[1:] - 1
    last[-1] = s.size - 1
    return s[idx], run_end[last]


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Return the total length (ns) of the union of the intervals."""
    ms, me = merge(starts, ends)
    return int((me - ms).sum())


def coverage(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Count how many intervals cover each elementary segment ``[bounds[i], bounds[i+1])``.

    ``bounds`` must be sorted and unique and contain every start and end that falls inside
    ``[bounds[0], bounds[-1]]``; intervals reaching outside are clipped.

    Returns:
        an int64 array of length ``len(bounds) - 1``.
    """
    n = bounds.size - 1
    if n <= 0:
        return np.zeros(max(n, 0), dtype=I64)
    s, e = as_i64(starts), as_i64(ends)
    keep = e > s
    s, e = s[keep], e[keep]
    i0 = np.searchsorted(bounds, s, side="left")
    i1 = np.searchsorted(bounds, e, side="left")
    i0 = np.clip(i0, 0, n)
    i1 = np.clip(i1, 0, n)
    diff = np.bincount(i0, minlength=n + 1)[: n + 1].astype(I64)
    diff -= np.bincount(i1, minlength=n + 1)[: n + 1].astype(I64)
    return np.cumsum(diff[:n])


def covered_ns(ws: np.ndarray, we: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per window ``[ws[i], we[i])``: the ns the union of the intervals covers inside it.

    Returns:
        an int64 array aligned with the windows.
    """
    ms, me = merge(as_i64(starts), as_i64(ends))
    ws, we = as_i64(ws), as_i64(we)
    if ms.size == 0:
        return np.zeros(ws.size, I64)
    cum = union_cumsum(ms, me)
    return np.maximum(length_before(ms, me, cum, np.maximum(we, ws)) - length_before(ms, me, cum, ws), 0)


def union_cumsum(ms: np.ndarray, me: np.ndarray) -> np.ndarray:
    """The lengths of merged intervals (as :func:`merge` returns) summed before each one:
    int64, one longer than ``ms`` (``[0, len 0, len 0 + len 1, ...]``), for :func:`length_before`."""
    cum = np.zeros(ms.size + 1, I64)
    np.cumsum(me - ms, out=cum[1:])
    return cum


def length_before(ms: np.ndarray, me: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time in ``t``: how many ns of the merged intervals ``(ms, me)`` lie before it
    (``cum`` is their :func:`union_cumsum`).  A difference of two such values is the length
    the intervals cover between two times, exactly (int64), in a binary search per time.

    Returns:
        an int64 array aligned with ``t``.
    """
    k = np.searchsorted(ms, t, side="right")
    over = np.where(k > 0, np.maximum(me[np.maximum(k - 1, 0)] - t, 0), 0)
    return cum[k] - over


def intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The intersection of two sets of disjoint sorted intervals (as :func:`merge`
    returns), disjoint and sorted."""
    (a_s, a_e), (b_s, b_e) = a, b
    if a_s.size == 0 or b_s.size == 0:
        return np.zeros(0, I64), np.zeros(0, I64)
    if b_s.size > a_s.size:  # the pieces are the same either way: search for the fewer intervals
        (a_s, a_e), (b_s, b_e) = (b_s, b_e), (a_s, a_e)
    # For each interval of b, the intervals of a that overlap it, a contiguous run: from the
    # first ending after its start to the last starting before its end.  Only the run's first
    # and last interval can reach outside b's: the others are taken as they are.
    lo = np.searchsorted(a_e, b_s, side="right")
    n = np.maximum(np.searchsorted(a_s, b_e, side="left") - lo, 0)
    first = np.cumsum(n) - n  # where each run begins in the result
    ia = np.arange(int(n.sum()), dtype=I64)
    ia += np.repeat(lo - first, n)
    s, e = a_s[ia], a_e[ia]
    has = n > 0
    head, tail = first[has], (first + n - 1)[has]
    s[head] = np.maximum(s[head], b_s[has])
    e[tail] = np.minimum(e[tail], b_e[has])
    keep = e > s
    return (s, e) if keep.all() else (s[keep], e[keep])


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Clip intervals to ``[lo, hi)`` and drop those left empty."""
    s = np.maximum(as_i64(starts), lo)
    e = np.minimum(as_i64(ends), hi)
    keep = e > s
    return s[keep], e[keep]


__all__ = ["as_i64", "filled_i64", "stable_argsort", "merge", "union_length", "coverage", "covered_ns", "union_cumsum", "length_before", "intersect", "clip", "split_by_rank", "as_key", "lookup", "KeyIndex", "launch_of"]


def split_by_rank(df: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Split a DataFrame with a ``rank`` column into ``{rank: frame}`` without copying when
    it is already ordered by rank (the store's reader returns it so); otherwise one stable
    sort first.

    Returns:
        dict rank -> DataFrame slice (positional, ``iloc``; ``df`` itself when it holds one rank).
    """
    if df is None or len(df) == 0:
        return {}
    r = df["rank"].to_numpy()
    if r[0] == r[-1] and (r.size < 3 or bool((r == r[0]).all())):
        return {int(r[0]): df}  # one rank (analyze_run reads one at a time): no slicing
    if r.size > 1 and (r[1:] < r[:-1]).any():
        order = np.argsort(r, kind="stable")
        df = df.take(order)
        r = r[order]
    cuts = np.flatnonzero(r[1:] != r[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [r.size]))
    return {int(r[s]): df.iloc[s:e] for s, e in zip(starts, ends)}


def as_key(values: Any) -> np.ndarray:
    """A join key as float64 (nulls -> NaN, which never matches); exact for ids < 2**53."""
    if isinstance(values, np.ndarray):
        return values.astype("float64", copy=False)
    import pandas as pd

    if isinstance(values, pd.Series) and isinstance(values.dtype, np.dtype) and values.dtype.kind in "iuf":  # no nulls but NaN
        return values.to_numpy().astype("float64", copy=False)
    if isinstance(values, pd.arrays.IntegerArray):  # the store's integer columns with nulls
        return values.to_numpy(dtype="float64", na_value=np.nan)
    return pd.Series(values).to_numpy(dtype="float64", na_value=np.nan)


class KeyIndex:
    """Join keys sorted once, then probed many times (first occurrence wins), as :func:`lookup`
    does: one rank's API calls are looked up by correlation for kernels, copies and memsets."""

    def __init__(self, keys: np.ndarray) -> None:
        k = np.asarray(keys, dtype="float64")
        self.order = np.argsort(k, kind="stable")
        self.sorted = k[self.order]

    def find(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (found: bool array, position of the matching key in ``keys``: int64,
        arbitrary where not found)."""
        q = np.asarray(query, dtype="float64")
        if self.sorted.size == 0:
            return np.zeros(q.size, dtype=bool), np.zeros(q.size, dtype=I64)
        pos = np.clip(np.searchsorted(self.sorted, q, side="left"), 0, self.sorted.size - 1)
        return self.sorted[pos] == q, self.order[pos]


def lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Look ``query`` up in ``keys`` (first occurrence wins) by sorting once and binary search.

    Returns:
        (found: bool array, value: the matching ``values`` entry, arbitrary where not found).
    """
    k = np.asarray(keys, dtype="float64")
    v = np.asarray(values)
    q = np.asarray(query, dtype="float64")
    if k.size == 0:
        return np.zeros(q.size, dtype=bool), np.zeros(q.size, dtype=v.dtype)
    order = np.argsort(k, kind="stable")
    ks, vs = k[order], v[order]
    pos = np.clip(np.searchsorted(ks, q, side="left"), 0, ks.size - 1)
    return ks[pos] == q, vs[pos]


def launch_of(gpu: Any, api: Any) -> tuple[np.ndarray, np.ndarray]:
    """For each GPU event of one rank, whether its launching API call is known and that call's
    start (int64 ns; arbitrary where unknown): the ``launched``/``launch_ns`` columns when
    ``gpu`` carries them (``analyze_run`` looks each rank's calls up once), else a lookup of
    ``gpu.correlation`` in ``api.correlation`` (first occurrence wins).  ``gpu`` and ``api``
    are DataFrames or columns (:mod:`perfscope.analyzers.columns`).

    Returns:
        (found: bool array, launch start: int64 array), aligned with ``gpu``'s rows.
    """
    if "launched" in gpu and "launch_ns" in gpu:  # a DataFrame's columns or a mapping's keys
        return np.asarray(gpu["launched"], dtype=bool), as_i64(gpu["launch_ns"])
    return lookup(as_key(api["correlation"]), as_i64(api["start_ns"]), as_key(gpu["correlation"]))
