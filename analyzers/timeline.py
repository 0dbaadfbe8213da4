"""Timeline lanes: the events of one rank in a time window, one row per event, by lane.

What a timeline view draws (the dashboard's Timeline tab), computed from the store
through ``run.window`` so that an event overlapping the window is found at any zoom
level, also one that started long before the window and covers all of it.  Pure: no
plotting, no printing; names stay untrusted text, to be escaped by whoever draws them.

Lanes are named by what they hold, so that a lane keeps its name and place at every
zoom level and step (:func:`rank_lanes` lists a rank's lanes from the whole run, once):

* ``NVTX DOMAIN`` (annotations of other sources: ``SOURCE DOMAIN``), and for ranges
  nested inside others ``NVTX DOMAIN, level 2``, ``level 3``...;
* ``host: KIND`` (data-loader waits, barriers, optimizer steps ... on the host);
* ``API thread TID`` (``API main thread`` when the thread is the process's first): the
  CUDA runtime/driver calls, each linked to the GPU work it launched by correlation id;
* ``stream N`` (kernels of one CUDA stream, NCCL kernels included; ``stream ?``);
* ``copies`` (memcpy and memset), ``NCCL`` (collective operations), ``sync`` (host-side
  synchronisation).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from perfscope.analyzers.classify import copy_is_pcie, is_comm_name
from perfscope.analyzers.sources import RunLike, WindowSource

# (table, columns read) for each kind of lane, in lane order.
LANE_SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("markers", ("start_ns", "dur_ns", "name", "domain", "source")),
    ("host", ("start_ns", "dur_ns", "kind", "name")),
    ("api", ("start_ns", "dur_ns", "pid", "tid", "name", "correlation")),
    ("kernels", ("start_ns", "dur_ns", "stream", "name", "correlation")),
    ("memcpy", ("start_ns", "dur_ns", "copy_kind", "bytes", "correlation")),
    ("memset", ("start_ns", "dur_ns", "bytes", "correlation")),
    ("collectives", ("start_ns", "dur_ns", "func", "bytes", "comm_id")),
    ("sync", ("start_ns", "dur_ns", "sync_kind")),
)
# The lanes drawn after the streams, in order (see lane_order).
_LAST_LANES = {"copies": 4, "NCCL": 5, "sync": 6}

# Beyond this many markers in a window, nesting is not computed (one lane): the sweep is
# a Python loop.
MAX_NESTED_MARKERS = 50_000
# Host span kinds that are waits on other ranks or the GPU (drawn in the sync colour).
_SYNC_HOST_KINDS = frozenset({"barrier", "collective_wait", "sync_wait"})

EVENT_COLUMNS = ("lane", "start_ns", "dur_ns", "name", "kind", "link_lane", "link_start_ns", "link_name")


def timeline_events(run: WindowSource, rank: int, t0_ns: int, t1_ns: int,
                    launches: pd.DataFrame | None = None) -> pd.DataFrame:
    """The events of one rank that overlap ``[t0_ns, t1_ns)``, one row per event, by lane.

    Args:
        launches: the rank's :func:`launch_index`, to link GPU work to the API call that
            launched it wherever that call lies (a launch often precedes its kernel by
            milliseconds, on a GPU that runs behind the host by much more); without it
            only calls inside the window are linked.

    Returns:
        DataFrame with ``lane`` (str, see the module doc), ``start_ns`` (int64, Unix-epoch
        ns; may lie before ``t0_ns``), ``dur_ns`` (int64 ns, 0 when unknown), ``name``
        (str, untrusted: the event's name, or for copies ``KIND X.XX MB``, for collectives
        ``FUNC X.XX MB on COMM``, for syncs ``synchronize KIND``), ``kind`` (the colour
        class: a bucket ``compute``/``network``/``pcie``/``sync``/``data_loading``/
        ``host``, or ``marker``/``api``), and the launch link by correlation id:
        ``link_lane``, ``link_start_ns``, ``link_name`` (for GPU work, the API call that
        launched it; for an API call, the GPU work it launched in the window; ``""``/-1
        when there is none), ordered by :func:`lane_order`, within a lane by ``start_ns``.
    """
    frames = []
    for table, cols in LANE_SOURCES:
        rows = run.window(table, rank, cols, t0_ns, t1_ns)
        if len(rows):
            frames.append(_lane_frame(table, rows))
    if not frames:
        return pd.DataFrame({c: pd.Series([], dtype="int64" if c.endswith("_ns") else object)
                             for c in EVENT_COLUMNS})
    events = pd.concat(frames, ignore_index=True)
    if launches is None:
        api = events[_is_api(events["lane"])]
        launches = api[api["corr"] >= 0].drop_duplicates("corr").sort_values("corr")
    _link_launches(events, launches)
    events = events[list(EVENT_COLUMNS)]
    order = {lane: lane_order(lane) for lane in events["lane"].unique()}
    events["_o"] = events["lane"].map(order)
    return events.sort_values(["_o", "start_ns"], kind="stable").drop(columns="_o").reset_index(drop=True)


def launch_index(run: RunLike, rank: int) -> pd.DataFrame:
    """The API calls of rank ``rank`` that carry a correlation id, by correlation id: what
    :func:`timeline_events` links GPU work to.

    Returns:
        DataFrame with ``corr`` (int64, sorted, unique), ``start_ns`` (int64), ``name`` and
        ``lane`` (str: the call and its ``API ...`` lane).
    """
    api = run.table("api", [rank], ["start_ns", "dur_ns", "pid", "tid", "name", "correlation"])
    calls = _lane_frame("api", api) if len(api) else pd.DataFrame({"corr": np.zeros(0, "int64")})
    calls = calls[calls["corr"] >= 0].drop_duplicates("corr").sort_values("corr", kind="stable")
    return calls.reindex(columns=["corr", "start_ns", "name", "lane"]).reset_index(drop=True)


def _lane_frame(table: str, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` of ``table`` (the columns :data:`LANE_SOURCES` reads) as events: ``lane``,
    ``start_ns``, ``dur_ns``, ``name``, ``kind`` and ``corr`` (correlation id, -1 none)."""
    start = rows["start_ns"].to_numpy("int64")
    dur = _ints(rows["dur_ns"], 0)
    n = len(start)
    corr = _ints(rows["correlation"], -1) if "correlation" in rows else np.full(n, -1, "int64")
    if table == "markers":
        lane = marker_lanes(_strings(rows["source"], "nvtx"), _strings(rows["domain"]), nesting_depth(start, dur))
        name, kind = _strings(rows["name"]), np.full(n, "marker", object)
    elif table == "host":
        kinds = _strings(rows["kind"], "other")
        lane = np.char.add("host: ", kinds.astype(str)).astype(object)
        name, kind = _strings(rows["name"]), np.array([host_kind_class(k) for k in kinds], dtype=object)
    elif table == "api":
        lane = api_lanes(_ints(rows["pid"], -1), _ints(rows["tid"], -1))
        name = _strings(rows["name"])
        kind = np.where(np.char.find(name.astype(str), "ynchronize") >= 0, "sync", "api").astype(object)
    elif table == "kernels":
        lane = stream_lanes(_ints(rows["stream"], -1))
        name = _strings(rows["name"])
        kind = np.where(is_comm_name(name), "network", "compute").astype(object)
    elif table in ("memcpy", "memset"):
        ck = _strings(rows["copy_kind"], "copy") if table == "memcpy" else np.full(n, "memset", object)
        lane = np.full(n, "copies", object)
        name = np.array([f"{k} {b / 1e6:.2f} MB" for k, b in zip(ck, _ints(rows["bytes"], 0))], dtype=object)
        pcie = copy_is_pcie(ck) if table == "memcpy" else np.zeros(n, bool)
        kind = np.where(pcie, "pcie", "compute").astype(object)
    elif table == "collectives":
        lane, kind = np.full(n, "NCCL", object), np.full(n, "network", object)
        func, comm = _strings(rows["func"], "collective"), _strings(rows["comm_id"])
        name = np.array([f"{f} {b / 1e6:.2f} MB on {c}" for f, b, c in zip(func, _ints(rows["bytes"], 0), comm)],
                        dtype=object)
    else:  # sync
        lane, kind = np.full(n, "sync", object), np.full(n, "sync", object)
        name = np.char.add("synchronize ", _strings(rows["sync_kind"], "unknown").astype(str)).astype(object)
    return pd.DataFrame({"lane": _objects(lane), "start_ns": start, "dur_ns": dur, "name": _objects(name),
                         "kind": _objects(kind), "corr": corr})


def _objects(values: np.ndarray) -> pd.Series:
    """``values`` as an object column: names stay Python strings (pandas would convert
    each column of str to its string dtype, and the drawing code back, per window)."""
    return pd.Series(values, dtype=object, copy=False)


def _link_launches(events: pd.DataFrame, calls: pd.DataFrame) -> None:
    """Add ``link_lane``, ``link_start_ns``, ``link_name`` to ``events`` (in place): GPU
    work <-> the API call with its correlation id (``calls``: ``corr`` sorted and unique,
    ``start_ns``, ``name``, ``lane``)."""
    n = len(events)
    link_lane, link_name = np.full(n, "", object), np.full(n, "", object)
    link_start = np.full(n, -1, "int64")
    corr = events["corr"].to_numpy("int64")
    is_api = _is_api(events["lane"])
    gpu = ~is_api & (corr >= 0)
    if len(calls) and gpu.any():
        keys = calls["corr"].to_numpy("int64")
        # GPU work -> the call that launched it (a sorted search: the index may hold millions).
        pos = np.minimum(np.searchsorted(keys, corr[gpu]), len(keys) - 1)
        found = keys[pos] == corr[gpu]
        hit, pos = np.flatnonzero(gpu)[found], pos[found]
        link_lane[hit], link_name[hit] = calls["lane"].to_numpy(object)[pos], calls["name"].to_numpy(object)[pos]
        link_start[hit] = calls["start_ns"].to_numpy("int64")[pos]
        # An API call -> the first GPU work it launched that is in the window.
        work = events[gpu].drop_duplicates("corr")
        at = pd.Index(work["corr"]).get_indexer(corr[is_api])
        hit = np.flatnonzero(is_api)[at >= 0]
        dst = work.iloc[at[at >= 0]]
        link_lane[hit], link_name[hit] = dst["lane"].to_numpy(object), dst["name"].to_numpy(object)
        link_start[hit] = dst["start_ns"].to_numpy("int64")
    events["link_lane"], events["link_name"] = _objects(link_lane), _objects(link_name)
    events["link_start_ns"] = link_start


def _is_api(lane: pd.Series) -> np.ndarray:
    """True where the lane is an API thread's, decided once per distinct lane (a window
    holds millions of rows and a few dozen lanes)."""
    codes, uniq = pd.factorize(lane)
    return np.fromiter((str(u).startswith("API ") for u in uniq), bool, len(uniq))[codes]


def host_kind_class(kind: str) -> str:
    """The colour class of a host span kind: ``data_loading``, ``sync`` (waits on other
    ranks or the GPU) or ``host``."""
    if kind == "dataloader_wait":
        return "data_loading"
    return "sync" if kind in _SYNC_HOST_KINDS else "host"


def marker_lanes(source: np.ndarray, domain: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Lane names of annotated ranges: ``NVTX DOMAIN`` (``SOURCE DOMAIN`` for other
    sources; the domain alone when it names the source), ``..., level N`` when nested.

    Returns:
        object array of str, one per range."""
    out = np.empty(len(source), dtype=object)
    for i, (s, d, k) in enumerate(zip(source, domain, depth)):
        prefix = "NVTX" if s in ("nvtx", "") else str(s).replace("_", " ")
        base = f"{prefix} {d}" if d and d != s else prefix
        out[i] = base if k == 0 else f"{base}, level {k + 1}"
    return out


def api_lanes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Lane names of API calls: ``API main thread`` (thread id = process id) or
    ``API thread TID``; one name per distinct thread.  Returns an object array of str."""
    main = (tid == pid) & (tid >= 0)
    uniq, inverse = np.unique(np.where(main, -2, tid), return_inverse=True)
    names = np.array(["API main thread" if t == -2 else "API thread ?" if t < 0 else f"API thread {t}"
                      for t in uniq], dtype=object)
    return names[inverse]


def stream_lanes(stream: np.ndarray) -> np.ndarray:
    """Lane names of GPU work by stream id: ``stream N`` (``stream ?`` when unknown)."""
    uniq, inverse = np.unique(stream, return_inverse=True)
    return np.array([f"stream {s}" if s >= 0 else "stream ?" for s in uniq], dtype=object)[inverse]


def rank_lanes(run: RunLike, rank: int) -> list[str]:
    """Every lane rank ``rank`` has anywhere in the run, in drawing order: the steady
    layout a timeline keeps at every zoom level and step (a lane with no event in the
    window stays, empty, in its place).

    Reads only the columns that name lanes (stream ids, thread ids, marker domains and
    spans, host kinds); returns the lane names (see the module doc)."""
    lanes: set[str] = set()
    mk = run.table("markers", [rank], ["start_ns", "dur_ns", "domain", "source"])
    if len(mk):
        start, dur = mk["start_ns"].to_numpy("int64"), _ints(mk["dur_ns"], 0)
        lanes.update(marker_lanes(_strings(mk["source"], "nvtx"), _strings(mk["domain"]), nesting_depth(start, dur)))
    host = run.table("host", [rank], ["kind"])
    lanes.update(f"host: {k}" for k in set(_strings(host["kind"], "other")))
    api = run.table("api", [rank], ["pid", "tid"]).drop_duplicates()
    lanes.update(api_lanes(_ints(api["pid"], -1), _ints(api["tid"], -1)))
    streams = run.table("kernels", [rank], ["stream"])["stream"]
    lanes.update(stream_lanes(np.unique(_ints(streams, -1))))
    for table, lane in (("memcpy", "copies"), ("memset", "copies"), ("collectives", "NCCL"), ("sync", "sync")):
        if len(run.table(table, [rank], ["start_ns"])):
            lanes.add(lane)
    return sorted(lanes, key=lane_order)


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


def lane_order(lane: str) -> tuple[int, int, str]:
    """Sort key of a lane: annotations (by name, nested levels under their base), host
    spans, API threads, streams (by number, ``stream ?`` last), copies, NCCL, sync."""
    if lane.startswith("host:"):
        return (1, 0, lane)
    if lane.startswith("API "):
        return (2, 0, lane)
    if lane.startswith("stream "):
        tail = lane[len("stream "):]
        return (3, int(tail) if tail.lstrip("-").isdigit() else 1 << 62, "")
    if lane in _LAST_LANES:
        return (_LAST_LANES[lane], 0, "")
    base, _, level = lane.partition(", level ")
    return (0, 0, f"{base}\x00{int(level) if level.isdigit() else 1:06d}")


def lanes_of(ranks: Iterable[int], lanes: dict[int, list[str]]) -> list[tuple[int, str]]:
    """(rank, lane) pairs of ``ranks`` in drawing order: rank by rank, each rank's lanes in
    its :func:`rank_lanes` order."""
    return [(r, lane) for r in ranks for lane in lanes.get(r, [])]


__all__ = ["EVENT_COLUMNS", "LANE_SOURCES", "MAX_NESTED_MARKERS", "api_lanes",
           "host_kind_class", "lane_order", "lanes_of", "launch_index", "marker_lanes", "nesting_depth", "rank_lanes",
           "stream_lanes", "timeline_events"]
