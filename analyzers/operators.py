"""The operator view of host time: which operators, Python call sites and launches take
the host time of the analysed steps.

The ``operators`` table (imported traces: ``cpu_op`` operators and ``python_function``
frames, nested per thread; see :mod:`perfscope.store.schema`) holds each row's
``parent``, so a row's **self time** is its duration less its children's, and its **total
time** its duration (``torch.profiler``'s "self CPU" and "CPU total": an operator that
calls itself counts twice in its total).  Rows count when they *start* inside one of the
rank's analysed step windows; step markers (``ProfilerStep#N``, which the 1.8-1.9
profiler wrote as operators) are the windows themselves and are left out.

**Launch time** is the time of runtime/driver calls that launch GPU work (every API call
the ``api`` table holds but blocking and start-up calls), attributed to the innermost
*operator* enclosing each call on its thread (:func:`enclosing_operators`): the operators
whose time contains the launches.

All functions are pure and return DataFrames; times are int64 nanoseconds.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfscope.analyzers.classify import codes_and_names, name_matches
from perfscope.analyzers.columns import Columns, is_null, n_rows
from perfscope.analyzers.intervals import as_i64, filled_i64

OPERATOR_COLUMNS: tuple[str, ...] = ("rank", "name", "kind", "calls", "self_ns", "total_ns", "self_share")
SITE_COLUMNS: tuple[str, ...] = ("rank", "call_site", "calls", "self_ns", "top_operator")
LAUNCH_COLUMNS: tuple[str, ...] = ("rank", "name", "call_site", "launches", "launch_ns")
#: What :func:`rank_operators` and friends read of the operators table.
READ_COLUMNS: tuple[str, ...] = ("rank", "start_ns", "dur_ns", "tid", "name", "kind", "parent", "call_site")
STEP_MARK_RE = re.compile(r"^ProfilerStep#")
_INT_COLUMNS = frozenset({"rank", "calls", "self_ns", "total_ns", "launches", "launch_ns"})


def _empty(cols: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: np.zeros(0, np.int64 if c in _INT_COLUMNS else np.float64 if c.endswith("share") else object)
                         for c in cols})


def _groups(*codes: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The distinct combinations of ``codes`` (non-negative int arrays of one length: name
    codes and the like, so small that a table of every combination is cheap; no sort):
    (each group's codes, one array per argument, in key order; each row's group)."""
    sizes = tuple(int(c.max()) + 1 if c.size else 1 for c in codes)
    key = np.ravel_multi_index(codes, sizes) if len(codes) > 1 else codes[0].astype(np.int64)
    present = np.flatnonzero(np.bincount(key, minlength=int(np.prod(sizes))))
    group = np.empty(int(np.prod(sizes)), np.int64)
    group[present] = np.arange(present.size)
    return np.unravel_index(present, sizes), group[key]


def _sums(inverse: np.ndarray, n: int, values: np.ndarray | None = None) -> np.ndarray:
    """Per group: the count of rows (``values`` None) or the int64 sum of ``values``."""
    if values is None:
        return np.bincount(inverse, minlength=n).astype(np.int64)
    # (float64 sums are exact up to 2**53 ns: 104 days)
    return np.rint(np.bincount(inverse, weights=values, minlength=n)).astype(np.int64)


def _ranks(texts: np.ndarray) -> np.ndarray:
    """Each text's position in sorted order (to sort rows by a text column with lexsort)."""
    out = np.empty(texts.size, np.int64)
    out[np.argsort(texts.astype(str), kind="stable")] = np.arange(texts.size)
    return out


def _frame(cols: tuple[str, ...], values: dict[str, np.ndarray], order: np.ndarray) -> pd.DataFrame:
    """A frame of ``cols`` from ``values`` with its rows in ``order`` (one construction)."""
    return pd.DataFrame({c: values[c][order] for c in cols})


def self_times(dur: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each row's self time: ``dur`` less the durations of the rows whose ``parent`` it is
    (int64 ns, never below 0; ``parent`` -1 for none)."""
    has = parent >= 0
    children = np.bincount(parent[has], weights=dur[has], minlength=dur.size) if dur.size else np.zeros(0)
    return np.maximum(dur - np.rint(children).astype(np.int64), 0)


def in_windows(start: np.ndarray, windows: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Bool per row: ``start`` lies in one of ``windows`` (starts, ends; sorted, disjoint,
    end excluded); all False without windows."""
    if windows is None or not windows[0].size:
        return np.zeros(start.size, dtype=bool)
    ws, we = windows
    i = np.searchsorted(ws, start, side="right") - 1
    return (i >= 0) & (start < we[np.clip(i, 0, None)])


def parents(ops: Columns) -> np.ndarray:
    """The ``parent`` column as int64 row positions, -1 where null (the column itself when
    it is that already: pass ``{**ops, "parent": parents(ops)}`` to several functions)."""
    p = ops["parent"]
    if isinstance(p, np.ndarray) and p.dtype == np.int64:
        return p
    return np.where(is_null(p), -1, filled_i64(p))


def _is_operator(ops: Columns) -> np.ndarray:
    """Bool per row: a ``cpu_op`` (not a Python frame)."""
    codes, kinds = codes_and_names(ops["kind"])
    return (kinds == "cpu_op")[codes] if codes.size else np.zeros(0, bool)


def rank_operators(rank: int, ops: Columns, windows: tuple[np.ndarray, np.ndarray] | None) -> pd.DataFrame:
    """One rank's operators and Python frames in its analysed steps, by name.

    Args:
        rank: the rank.
        ops: the rank's operators table (columns of :data:`READ_COLUMNS`, in stored order).
        windows: the rank's step windows (starts, ends), sorted and disjoint.

    Returns:
        columns of :data:`OPERATOR_COLUMNS`, one row per (name, kind): ``calls``,
        ``self_ns`` and ``total_ns`` (int64 ns, summed), ``self_share`` (of the rank's self
        time of that kind in the steps); sorted by self time, largest first, then name.
    """
    if not n_rows(ops):
        return _empty(OPERATOR_COLUMNS)
    dur = as_i64(ops["dur_ns"])
    own = self_times(dur, parents(ops))
    keep = in_windows(as_i64(ops["start_ns"]), windows) & ~name_matches(ops["name"], STEP_MARK_RE)
    if not keep.any():
        return _empty(OPERATOR_COLUMNS)
    codes, names = codes_and_names(ops["name"])
    kcodes, kinds = codes_and_names(ops["kind"])
    (name_code, kind), inverse = _groups(codes[keep], kcodes[keep])
    n = kind.size
    self_ns = _sums(inverse, n, own[keep])
    per_kind = _sums(kind, int(kind.max()) + 1, self_ns)[kind]
    name = names[name_code]
    values = {"rank": np.full(n, rank, np.int64), "name": name, "kind": kinds[kind], "calls": _sums(inverse, n),
              "self_ns": self_ns, "total_ns": _sums(inverse, n, dur[keep]),
              "self_share": np.divide(self_ns, per_kind, out=np.zeros(n), where=per_kind > 0)}
    return _frame(OPERATOR_COLUMNS, values, np.lexsort((_ranks(values["kind"]), _ranks(name), -self_ns)))


def rank_call_sites(rank: int, ops: Columns, windows: tuple[np.ndarray, np.ndarray] | None) -> pd.DataFrame:
    """The user call sites behind one rank's operator time in its analysed steps.

    Returns:
        columns of :data:`SITE_COLUMNS`, one row per call site (``call_site``, the
        innermost enclosing user Python frame): ``calls`` and ``self_ns`` (int64 ns) of the
        operators (``cpu_op`` rows, not frames) under it, ``top_operator`` (the one with the
        most self time there, the first by name on ties); largest self time first.  Empty
        when the trace has no Python frames.
    """
    if not n_rows(ops):
        return _empty(SITE_COLUMNS)
    scodes, sites = codes_and_names(ops["call_site"])  # (a null site is "")
    keep = (sites != "")[scodes] & _is_operator(ops) & in_windows(as_i64(ops["start_ns"]), windows)
    if not keep.any():
        return _empty(SITE_COLUMNS)
    own = self_times(as_i64(ops["dur_ns"]), parents(ops))[keep]
    ncodes, names = codes_and_names(ops["name"])
    scodes, ncodes = scodes[keep], ncodes[keep]
    (site_code,), inverse = _groups(scodes)
    n = site_code.size
    self_ns = _sums(inverse, n, own)
    # The top operator of each site: its (site, operator) pair with the most self time
    # (pairs come in site order, as the sites do).
    (pair_site, pair_name), pair_inverse = _groups(scodes, ncodes)
    pair_self = _sums(pair_inverse, pair_site.size, own)
    best = np.lexsort((_ranks(names[pair_name]), -pair_self, pair_site))
    top = best[np.r_[True, pair_site[best][1:] != pair_site[best][:-1]]]  # first of each site
    site = sites[site_code]
    values = {"rank": np.full(n, rank, np.int64), "call_site": site, "calls": _sums(inverse, n), "self_ns": self_ns,
              "top_operator": names[pair_name[top]]}
    return _frame(SITE_COLUMNS, values, np.lexsort((_ranks(site), -self_ns)))


def enclosing_operators(ops: Columns, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each query interval (``tid``, ``start``, ``end``; e.g. API calls), the row of
    ``ops`` (the operators table, stored order) of the innermost ``cpu_op`` on the same
    thread that contains it; -1 where none does."""
    out = np.full(start.size, -1, dtype=np.int64)
    if not n_rows(ops) or not start.size:
        return out
    o_start, o_end = as_i64(ops["start_ns"]), as_i64(ops["start_ns"]) + as_i64(ops["dur_ns"])
    o_tid, parent = filled_i64(ops["tid"]), parents(ops)
    is_op = _is_operator(ops)
    for t in np.intersect1d(np.unique(o_tid), np.unique(tid)):
        rows = np.flatnonzero(o_tid == t)
        rows = rows[np.argsort(o_start[rows], kind="stable")]
        q = np.flatnonzero(tid == t)
        k = np.searchsorted(o_start[rows], start[q], side="right") - 1
        j = np.where(k >= 0, rows[np.clip(k, 0, None)], -1)
        # Up the parents from the latest row starting before the call to the first operator
        # that contains it (a few levels: the nesting is shallow).
        for _ in range(int(rows.size)):
            jj = np.clip(j, 0, None)
            bad = (j >= 0) & ~((o_end[jj] >= end[q]) & is_op[jj])
            if not bad.any():
                break
            j = np.where(bad, parent[jj], j)
        out[q] = j
    return out


def launch_operators(rank: int, ops: Columns, api: Columns, launch: np.ndarray,
                     windows: tuple[np.ndarray, np.ndarray] | None) -> pd.DataFrame:
    """The operators behind one rank's launch time: the launch calls (``launch``, a bool
    per row of ``api``; columns ``start_ns``, ``dur_ns``, ``tid``) inside its analysed
    steps, by the innermost operator containing each (:func:`enclosing_operators`).

    Returns:
        columns of :data:`LAUNCH_COLUMNS`, one row per (operator name, call site; ``""``
        when none): ``launches`` and ``launch_ns`` (int64 ns of the calls); calls that no
        operator contains are left out; most launch time first.
    """
    if not n_rows(ops) or not n_rows(api) or "tid" not in api:
        return _empty(LAUNCH_COLUMNS)
    a_start, a_dur = as_i64(api["start_ns"]), as_i64(api["dur_ns"])
    rows = np.flatnonzero(launch & in_windows(a_start, windows))
    if not rows.size:
        return _empty(LAUNCH_COLUMNS)
    a_tid = np.where(is_null(api["tid"]), np.iinfo(np.int64).min, filled_i64(api["tid"]))[rows]
    owner = enclosing_operators(ops, a_tid, a_start[rows], a_start[rows] + a_dur[rows])
    found = owner >= 0
    if not found.any():
        return _empty(LAUNCH_COLUMNS)
    ncodes, names = codes_and_names(ops["name"])
    scodes, sites = codes_and_names(ops["call_site"])
    owner = owner[found]
    (name_code, site_code), inverse = _groups(ncodes[owner], scodes[owner])
    n = name_code.size
    launch_ns = _sums(inverse, n, a_dur[rows][found])
    name, site = names[name_code], sites[site_code]
    values = {"rank": np.full(n, rank, np.int64), "name": name, "call_site": site, "launches": _sums(inverse, n),
              "launch_ns": launch_ns}
    return _frame(LAUNCH_COLUMNS, values, np.lexsort((_ranks(site), _ranks(name), -launch_ns)))


def overall_operators(per_rank: pd.DataFrame) -> pd.DataFrame:
    """:func:`rank_operators` rows of every rank summed by (name, kind).

    Returns:
        columns ``name``, ``kind``, ``ranks`` (ranks it ran on), ``calls``, ``self_ns``,
        ``total_ns`` (int64 ns, summed over ranks), ``self_share`` (of all ranks' self
        time of that kind); largest self time first, then name.
    """
    cols = ("name", "kind", "ranks", "calls", "self_ns", "total_ns", "self_share")
    if per_rank is None or not len(per_rank):
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("ranks", "calls", "self_ns", "total_ns") else
                                          "float64" if c == "self_share" else object) for c in cols})
    ncodes, names = codes_and_names(per_rank["name"])
    kcodes, kinds = codes_and_names(per_rank["kind"])
    (name_code, kind), inverse = _groups(ncodes, kcodes)
    n = kind.size
    self_ns = _sums(inverse, n, per_rank["self_ns"].to_numpy(np.int64))
    per_kind = _sums(kind, int(kind.max()) + 1, self_ns)[kind]
    name = names[name_code]
    values = {"name": name, "kind": kinds[kind], "ranks": _sums(inverse, n),  # (a rank has one row per name and kind)
              "calls": _sums(inverse, n, per_rank["calls"].to_numpy(np.int64)), "self_ns": self_ns,
              "total_ns": _sums(inverse, n, per_rank["total_ns"].to_numpy(np.int64)),
              "self_share": np.divide(self_ns, per_kind, out=np.zeros(n), where=per_kind > 0)}
    return _frame(cols, values, np.lexsort((_ranks(values["kind"]), _ranks(name), -self_ns)))


def top_host_operators(overall: pd.DataFrame, n: int) -> pd.DataFrame:
    """The ``n`` operators (``cpu_op`` rows, not Python frames) of :func:`overall_operators`'s
    table with the most self time: its columns, in its order."""
    if overall is None or not len(overall):
        return overall_operators(pd.DataFrame())
    return overall[overall["kind"] == "cpu_op"].head(n).reset_index(drop=True)


def top_call_sites(sites: pd.DataFrame, n: int) -> pd.DataFrame:
    """The ``n`` call sites of :func:`rank_call_sites` rows (any ranks) with the most
    operator self time over all ranks.

    Returns:
        columns ``call_site``, ``calls``, ``self_ns`` (int64 ns, summed) and
        ``top_operator`` (of the rank where the site has the most self time).
    """
    if sites is None or not len(sites):
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("calls", "self_ns") else object)
                             for c in ("call_site", "calls", "self_ns", "top_operator")})
    top = sites.sort_values("self_ns", ascending=False, kind="stable").drop_duplicates("call_site")[["call_site", "top_operator"]]
    g = sites.groupby("call_site", sort=True)[["calls", "self_ns"]].sum().reset_index().merge(top, on="call_site")
    return g.sort_values(["self_ns", "call_site"], ascending=[False, True], kind="stable").head(n).reset_index(drop=True)


def top_per_rank(df: pd.DataFrame, n: int) -> pd.DataFrame:
    """The first ``n`` rows of each rank of ``df`` (ranks one after another, each sorted)."""
    if df is None or not len(df):
        return df
    rank = df["rank"].to_numpy()
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    within = np.arange(rank.size) - np.repeat(starts, np.diff(np.r_[starts, rank.size]))
    keep = within < n
    return df if keep.all() else df[keep].reset_index(drop=True)


__all__ = ["LAUNCH_COLUMNS", "OPERATOR_COLUMNS", "READ_COLUMNS", "SITE_COLUMNS", "enclosing_operators", "in_windows",
           "launch_operators", "overall_operators", "parents", "rank_call_sites", "rank_operators", "self_times",
           "top_call_sites", "top_host_operators", "top_per_rank"]
