"""Timeline lanes: the events of one rank in a time window, one row per event, by lane.

What a timeline view draws (the dashboard's Timeline tab), computed from the store
through ``run.window`` so that an event overlapping the window is found at any zoom
level, also one that started long before the window and covers all of it.  Pure: no
plotting, no printing; names stay untrusted text, to be escaped by whoever draws them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfscope.analyzers.sources import WindowSource

# (table, columns read) for each kind of lane, in lane order.
LANE_SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("host", ("start_ns", "dur_ns", "kind", "name")),
    ("markers", ("start_ns", "dur_ns", "name")),
    ("kernels", ("start_ns", "dur_ns", "stream", "name")),
    ("memcpy", ("start_ns", "dur_ns", "copy_kind", "bytes")),
    ("memset", ("start_ns", "dur_ns", "bytes")),
    ("collectives", ("start_ns", "dur_ns", "func", "bytes", "comm_id")),
    ("sync", ("start_ns", "dur_ns", "sync_kind")),
)

# Beyond this many markers in a window, nesting is not computed (one lane): the sweep is
# a Python loop.
MAX_NESTED_MARKERS = 50_000


def timeline_events(run: WindowSource, rank: int, t0_ns: int, t1_ns: int) -> pd.DataFrame:
    """The events of one rank that overlap ``[t0_ns, t1_ns)``, one row per event, by lane.

    Lanes: ``host: KIND`` (host spans), ``markers`` (then ``markers 2``, ``markers 3``
    for ranges nested inside others), ``stream N`` (kernels per CUDA stream, NCCL kernels
    included; ``stream ?`` when unknown), ``copies`` (memcpy and memset), ``collectives``,
    ``sync`` (host-side synchronisation).

    Returns:
        DataFrame with ``lane`` (str), ``start_ns`` (int64, Unix-epoch ns; may lie before
        ``t0_ns``), ``dur_ns`` (int64 ns, 0 when unknown) and ``name`` (str, untrusted: the
        event's name, or for copies ``KIND X.XX MB``, for collectives ``FUNC X.XX MB on
        COMM``, for syncs ``synchronize KIND``), ordered host lanes, markers (by depth),
        streams (by number), copies, collectives, sync; within a lane by ``start_ns``.
    """
    frames = []
    for table, cols in LANE_SOURCES:
        rows = run.window(table, rank, cols, t0_ns, t1_ns)
        if len(rows):
            frames.append(_lane_frame(table, rows))
    if not frames:
        return pd.DataFrame({"lane": pd.Series([], dtype=object), "start_ns": pd.Series([], dtype="int64"),
                             "dur_ns": pd.Series([], dtype="int64"), "name": pd.Series([], dtype=object)})
    events = pd.concat(frames, ignore_index=True)
    order = {lane: lane_order(lane) for lane in events["lane"].unique()}
    events["_o"] = events["lane"].map(order)
    return events.sort_values(["_o", "lane", "start_ns"], kind="stable").drop(columns="_o").reset_index(drop=True)


def _lane_frame(table: str, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` of ``table`` (the columns :data:`LANE_SOURCES` reads) as events: ``lane``,
    ``start_ns``, ``dur_ns``, ``name`` (see :func:`timeline_events`)."""
    start = rows["start_ns"].to_numpy("int64")
    dur = _ints(rows["dur_ns"], 0)
    n = len(start)
    if table == "host":
        lane = np.char.add("host: ", _strings(rows["kind"], "other").astype(str)).astype(object)
        name = _strings(rows["name"])
    elif table == "markers":
        depth = nesting_depth(start, dur)
        lane = np.where(depth == 0, "markers", np.char.add("markers ", (depth + 1).astype(str))).astype(object)
        name = _strings(rows["name"])
    elif table == "kernels":
        uniq, inverse = np.unique(_ints(rows["stream"], -1), return_inverse=True)
        lane = np.array([f"stream {s}" if s >= 0 else "stream ?" for s in uniq], dtype=object)[inverse]
        name = _strings(rows["name"])
    elif table in ("memcpy", "memset"):
        kind = _strings(rows["copy_kind"], "copy") if table == "memcpy" else np.full(n, "memset", object)
        lane = np.full(n, "copies", object)
        name = np.array([f"{k} {b / 1e6:.2f} MB" for k, b in zip(kind, _ints(rows["bytes"], 0))], dtype=object)
    elif table == "collectives":
        lane = np.full(n, "collectives", object)
        func, comm = _strings(rows["func"], "collective"), _strings(rows["comm_id"])
        name = np.array([f"{f} {b / 1e6:.2f} MB on {c}" for f, b, c in zip(func, _ints(rows["bytes"], 0), comm)],
                        dtype=object)
    else:  # sync
        lane = np.full(n, "sync", object)
        name = np.char.add("synchronize ", _strings(rows["sync_kind"], "unknown").astype(str)).astype(object)
    return pd.DataFrame({"lane": lane, "start_ns": start, "dur_ns": dur, "name": name})


def _strings(col: pd.Series, default: str = "") -> np.ndarray:
    """``col`` (a categorical of str, as the store reads strings) as an object array of
    str, nulls replaced by ``default``."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        # From the categories and codes: no Python object per row (a window holds millions).
        names = np.append(col.cat.categories.astype(str).to_numpy(dtype=object), default)
        return names[col.cat.codes.to_numpy()]  # code -1 (null) picks the default at the end
    return col.astype(object).where(col.notna(), default).to_numpy(dtype=object)


def _ints(col: pd.Series, default: int) -> np.ndarray:
    """``col`` (int64 or nullable Int64) as int64, nulls replaced by ``default``."""
    return col.fillna(default).to_numpy("int64")


def nesting_depth(start_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """Nesting level of each range (0: not inside another), so nested markers get own lanes.

    A range is inside another when it starts at or after it and ends at or before its end.
    Partially overlapping ranges (not nested) go one level deeper than the one they overlap.
    Beyond :data:`MAX_NESTED_MARKERS` ranges everything is level 0 (one lane).

    Returns:
        int64 array, one level per range, in the input order.
    """
    n = len(start_ns)
    depth = np.zeros(n, "int64")
    if n == 0 or n > MAX_NESTED_MARKERS:
        return depth
    end = np.asarray(start_ns, "int64") + np.asarray(dur_ns, "int64")
    order = np.lexsort((-end, np.asarray(start_ns, "int64")))  # by start, longest first
    stack: list[int] = []  # ends of the open ranges
    for i in order:
        s = start_ns[i]
        while stack and stack[-1] <= s:
            stack.pop()
        depth[i] = len(stack)
        stack.append(int(end[i]))
    return depth


def lane_order(lane: str) -> tuple[int, int]:
    """Sort key of a lane: host, markers (by depth), streams (by number), copies,
    collectives, sync, then anything else."""
    if lane.startswith("host"):
        return (0, 0)
    if lane.startswith("markers"):
        tail = lane[len("markers"):].strip()
        return (1, int(tail) if tail.isdigit() else 0)
    if lane.startswith("stream"):
        tail = lane.split(" ", 1)[1]
        return (2, int(tail) if tail.lstrip("-").isdigit() else 1 << 62)
    return ({"copies": 3, "collectives": 4, "sync": 5}.get(lane, 6), 0)


__all__ = ["LANE_SOURCES", "MAX_NESTED_MARKERS", "lane_order", "nesting_depth", "timeline_events"]
