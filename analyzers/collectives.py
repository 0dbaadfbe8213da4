"""Collectives: bandwidth per operation, cross-rank matching and arrival skew.

Bandwidth follows nccl-tests (``doc/PERFORMANCE.md``): ``algbw = S / t`` and
``busbw = algbw * factor`` with factor ``2(n-1)/n`` for AllReduce, ``(n-1)/n`` for
AllGather, ReduceScatter and AllToAll, and 1 for Broadcast, Reduce, Send and Recv.  ``S`` is
the size nccl-tests uses: the ``bytes`` column (per-rank message) for most functions, and
``bytes * n`` for AllGather and ReduceScatter, whose ``bytes`` is the per-rank share.  ``t`` is
the transfer time: the GPU duration minus the time spent waiting for the last rank (so an
early rank's wait does not look like a slow link).  1 byte/ns = 1 GB/s.

Matching: one operation across ranks is identified by ``(comm_id, func, seq)`` (NCCL numbers
each function separately); where ``seq`` is missing, by its order among the rank's
operations with the same ``comm_id`` and ``func``.
A rank *arrives* when its operation starts on the GPU (the NCCL kernel cannot start before
the stream has finished the rank's earlier work); ``enqueue_ns`` is used where the GPU start
is unknown.  The last rank to arrive makes the others wait: each earlier rank's
``wait_ns = min(last_arrival - arrival, dur_ns)`` is the exposed wait that the breakdown puts
into ``sync``.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd

from perfscope.analyzers.classify import codes_and_names, normalize_func
from perfscope.analyzers.intervals import stable_argsort

BUS_FACTORS = {
    "AllReduce": lambda n: 2.0 * (n - 1) / n,
    "AllGather": lambda n: (n - 1) / n,
    "ReduceScatter": lambda n: (n - 1) / n,
    "AllToAll": lambda n: (n - 1) / n,
    "Broadcast": lambda n: 1.0,
    "Reduce": lambda n: 1.0,
    "Send": lambda n: 1.0,
    "Recv": lambda n: 1.0,
    "SendRecv": lambda n: 1.0,
}
SIZE_TIMES_N = frozenset({"AllGather", "ReduceScatter"})

COLUMNS: tuple[str, ...] = (
    "rank", "comm_id", "seq", "func", "bytes", "nranks", "start_ns", "dur_ns", "transfer_ns",
    "algbw_gbps", "busbw_gbps", "arrival_ns", "arrival_skew_ns", "wait_ns", "matched_ranks", "last_rank", "match_key",
    "peer",
)


@functools.cache
def _empty() -> pd.DataFrame:
    """The result without rows, built once (never handed out itself: callers get copies)."""
    return pd.DataFrame({c: np.zeros(0, np.float64 if c.endswith("gbps") else np.int64) for c in COLUMNS})


def bus_factor(func: pd.Series, nranks: pd.Series) -> np.ndarray:
    """Return the nccl-tests bus-bandwidth factor per row (NaN for unknown functions)."""
    n = pd.to_numeric(nranks, errors="coerce").to_numpy(float)
    f = np.full(len(n), np.nan)
    # Compare the few distinct names, not every row.
    codes, uniques = pd.factorize(pd.Series(np.asarray(func) if not isinstance(func, pd.Series) else func))
    uniques = np.asarray(uniques, dtype=object)
    for name, fac in BUS_FACTORS.items():
        hit = np.flatnonzero(uniques == name)
        m = np.isin(codes, hit) if hit.size else None
        if m is not None and m.any():
            f[m] = fac(n[m]) if name in ("AllReduce", "AllGather", "ReduceScatter", "AllToAll") else 1.0
    return f


def _size(codes: np.ndarray) -> int:
    """How many codes ``codes`` (0, 1, ...) can hold: one more than the largest (1 if empty)."""
    return int(codes.max()) + 1 if codes.size else 1


def analyze_collectives(coll: pd.DataFrame, world_size: int | None = None, clock: str = "shared") -> pd.DataFrame:
    """Per-operation bandwidth and cross-rank arrival skew.

    Args:
        coll: the collectives table (``rank``, ``start_ns``, ``dur_ns``, ``enqueue_ns``,
            ``comm_id``, ``seq``, ``func``, ``bytes``, ``nranks``); missing columns are nulls.
        world_size: used as the communicator size where ``nranks`` is missing.
        clock: ``shared`` when all ranks' timestamps are on one clock (one host): skew comes
            from GPU start times.  ``end_aligned`` for ranks on several hosts, whose clocks
            may be milliseconds apart: a blocking collective ends at about the same moment
            on every rank, so the rank with the shortest duration arrived last and every
            other rank waited ``dur - min(dur)`` (tb_plugin's data-transfer/synchronising
            split), whatever the clock offsets.

    Returns:
        one row per operation on a rank with the columns of :data:`COLUMNS`: sizes in bytes,
        times in ns, bandwidths in GB/s (NaN where unknown); ``arrival_skew_ns`` is the
        arrival minus the earliest arrival of the same operation, ``wait_ns`` the exposed
        wait for the last rank, ``matched_ranks`` how many ranks' records were matched and
        ``last_rank`` which rank arrived last.
    """
    if coll is None or len(coll) == 0:
        return _empty().copy()  # a copy costs a tenth of building the frame (most runs have no collectives)
    df = _normalized(coll)
    if clock not in ("shared", "end_aligned"):
        raise ValueError(f"clock must be 'shared' or 'end_aligned', not {clock!r}")
    df, rank, key = _matched(df)
    _add_arrivals(df, rank, key, clock)
    _add_bandwidth(df, world_size)
    return df[list(COLUMNS)].reset_index(drop=True)  # already in (rank, start_ns) order: see _matched


def _normalized(coll: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``coll`` with every column :func:`analyze_collectives` reads (missing ones
    null), ``func`` normalised, ``comm_id`` ``default`` where empty, and ``arrival_ns``
    (the GPU start, else the enqueue time; rows with neither dropped), ``start_ns`` and
    ``dur_ns`` as int64 ns."""
    df = coll.copy().reset_index(drop=True)
    for c in ("enqueue_ns", "comm_id", "seq", "func", "bytes", "nranks", "peer"):
        if c not in df.columns:
            df[c] = pd.NA
    df["func"] = normalize_func(df["func"]).to_numpy()
    cid_codes, cid = codes_and_names(df["comm_id"])
    cid = np.where(cid == "", "default", cid)
    df["comm_id"] = pd.Categorical.from_codes(cid_codes, categories=pd.unique(cid)) if len(set(cid)) == len(cid) else cid[cid_codes]
    start = pd.to_numeric(df["start_ns"], errors="coerce")
    enq = pd.to_numeric(df["enqueue_ns"], errors="coerce")
    df["arrival_ns"] = start.fillna(enq)
    df = df[df["arrival_ns"].notna()].reset_index(drop=True)
    df["start_ns"] = pd.to_numeric(df["start_ns"], errors="coerce").fillna(df["arrival_ns"]).astype("int64")
    df["dur_ns"] = pd.to_numeric(df["dur_ns"], errors="coerce").fillna(0).astype("int64")
    df["arrival_ns"] = df["arrival_ns"].astype("int64")
    return df


def _matched(df: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """(``df`` in (rank, start) order with ``match_key`` added, its ranks, its keys).

    The key (int64, 0, 1, ... by first appearance) names one operation across ranks:
    (comm_id, func, seq) where every row of the communicator has seq, else (comm_id, func,
    position among the rank's operations with the same comm_id and func).
    """
    # Strings become integer codes (numbered by first appearance), and every per-operation
    # statistic is a numpy reduction over those codes: no groupby on hundreds of thousands
    # of rows.
    seq = pd.to_numeric(df["seq"], errors="coerce")
    c_code = pd.factorize(df["comm_id"])[0]
    lacks_seq = np.zeros(_size(c_code), dtype=bool)
    lacks_seq[c_code[seq.isna().to_numpy(bool)]] = True
    rank = df["rank"].to_numpy(dtype=np.int64)
    # The rows in (rank, start) order (a stable sort, as DataFrame.sort_values gives).
    perm = np.lexsort((df["start_ns"].to_numpy(dtype=np.int64), rank))
    df = df.take(perm)
    rank, c_code = rank[perm], c_code[perm]
    use_seq = ~lacks_seq[c_code]
    f_code = pd.factorize(df["func"])[0]
    r_code = pd.factorize(rank)[0]
    # Position of each operation among its rank's operations with the same comm_id and func.
    group = (r_code * _size(c_code) + c_code) * _size(f_code) + f_code
    by_group = stable_argsort(group)
    g_sorted = group[by_group]
    g_first = np.ones(g_sorted.size, dtype=bool)
    g_first[1:] = g_sorted[1:] != g_sorted[:-1]
    starts = np.flatnonzero(g_first)
    order = np.empty(group.size, dtype=np.int64)
    order[by_group] = np.arange(group.size) - np.repeat(starts, np.diff(np.append(starts, group.size)))
    # NCCL numbers each function separately, so func is part of the key either way.
    n_key = np.where(use_seq, seq.to_numpy(dtype="float64", na_value=np.nan)[perm], order.astype("float64"))
    n_key = np.where(np.isnan(n_key), -1.0, n_key).astype(np.int64)
    n_code = pd.factorize(n_key)[0]
    key = pd.factorize((c_code * _size(f_code) + f_code) * _size(n_code) + n_code)[0].astype(np.int64)
    df["match_key"] = key
    return df, rank, key


def _add_arrivals(df: pd.DataFrame, rank: np.ndarray, key: np.ndarray, clock: str) -> None:
    """Add ``matched_ranks``, ``arrival_skew_ns``, ``wait_ns`` and ``last_rank`` to ``df``
    (rows keyed by ``key``, on ranks ``rank``; see :func:`analyze_collectives`)."""
    r_code = pd.factorize(rank)[0]
    # The quantity whose spread is the skew: the arrival time, or (end-aligned) -duration.
    dur = df["dur_ns"].to_numpy(dtype=np.int64)
    t = df["arrival_ns"].to_numpy(dtype=np.int64) if clock == "shared" else -dur
    n_ops = _size(key)
    first = np.full(n_ops, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, key, t)
    last = np.full(n_ops, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, key, t)
    pairs = np.sort(key * _size(r_code) + r_code)  # distinct (operation, rank): sort, drop repeats
    pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))] if pairs.size else pairs
    matched = np.bincount(pairs // _size(r_code), minlength=n_ops).astype(np.int64)[key]
    df["matched_ranks"] = matched
    multi = matched > 1
    df["arrival_skew_ns"] = np.where(multi, t - first[key], 0).astype("int64")
    df["wait_ns"] = np.where(multi, np.minimum(last[key] - t, dur), 0).astype("int64")
    # The last rank: the first row (in this order) that holds the operation's latest arrival.
    at_last = np.flatnonzero(t == last[key])
    first_row = np.full(n_ops, key.size, dtype=np.int64)
    np.minimum.at(first_row, key[at_last], at_last)
    df["last_rank"] = pd.arrays.IntegerArray(rank[first_row][key] if key.size else np.zeros(0, np.int64), ~multi)


def _add_bandwidth(df: pd.DataFrame, world_size: int | None) -> None:
    """Add ``transfer_ns``, ``algbw_gbps`` and ``busbw_gbps`` to ``df``, and make its
    ``nranks`` (missing: ``world_size``, else the matched ranks), ``bytes`` and ``seq``
    nullable Int64."""
    n = pd.to_numeric(df["nranks"], errors="coerce")
    if world_size:
        n = n.fillna(world_size)
    n = n.fillna(df["matched_ranks"]).astype(float)
    df["nranks"] = n.astype("Int64")
    size = pd.to_numeric(df["bytes"], errors="coerce").astype(float)
    size = np.where(df["func"].isin(list(SIZE_TIMES_N)), size * n, size)
    df["transfer_ns"] = np.maximum(df["dur_ns"] - df["wait_ns"], 0).astype("int64")
    t = df["transfer_ns"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(t > 0, size / t, np.nan)
    df["algbw_gbps"] = algbw
    df["busbw_gbps"] = algbw * bus_factor(df["func"], n)
    df["bytes"] = pd.to_numeric(df["bytes"], errors="coerce").astype("Int64")
    df["seq"] = pd.to_numeric(df["seq"], errors="coerce").astype("Int64")
    df["peer"] = pd.to_numeric(df["peer"], errors="coerce").astype("Int64")  # point-to-point matches are checked on it


_KERNEL_FUNC = re.compile(r"(?i)(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll|SendRecv|Send|Recv)")


def collectives_from_kernels(kernels: pd.DataFrame, kinds: np.ndarray) -> pd.DataFrame:
    """Build a minimal collectives table from communication kernels, for runs recorded
    without the NCCL collector (imported Kineto traces): ``func`` from the kernel name
    (``ncclKernel_AllReduce_...`` -> AllReduce; ``Generic`` kernels -> ``unknown``), no bytes,
    ``comm_id`` ``kernels``, matched across ranks by order.

    Returns:
        a DataFrame with the collectives table's ``rank``, ``start_ns``, ``dur_ns``,
        ``comm_id``, ``seq`` (null), ``func``, ``bytes`` (null), ``nranks`` (null) and
        ``kernel_name``.
    """
    k = kernels[np.asarray(kinds) == "communication"]
    if len(k) == 0:
        return pd.DataFrame(columns=["rank", "start_ns", "dur_ns", "comm_id", "seq", "func", "bytes", "nranks", "kernel_name"])
    codes, u = codes_and_names(k["name"])
    ufunc = pd.Series(u, dtype=object).str.extract(_KERNEL_FUNC, expand=False).fillna("unknown").to_numpy(object)
    n = len(k)
    null = lambda: pd.arrays.IntegerArray(np.zeros(n, np.int64), np.ones(n, bool))  # noqa: E731
    return pd.DataFrame({
        "rank": k["rank"].to_numpy(), "start_ns": k["start_ns"].to_numpy(), "dur_ns": k["dur_ns"].to_numpy(),
        "comm_id": pd.Categorical.from_codes(np.zeros(n, np.int64), categories=["kernels"]), "seq": null(),
        "func": pd.Categorical.from_codes(codes, categories=pd.Index(ufunc).astype(object)) if len(set(ufunc)) == len(ufunc)
        else pd.Categorical(ufunc[codes]),
        "bytes": null(), "nranks": null(),
        "kernel_name": pd.Categorical.from_codes(codes, categories=u) if len(set(u)) == len(u) else pd.Categorical(u[codes]),
    })


__all__ = ["BUS_FACTORS", "COLUMNS", "bus_factor", "analyze_collectives", "collectives_from_kernels"]
