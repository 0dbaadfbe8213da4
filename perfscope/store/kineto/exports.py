"""Traces perfscope exported itself (:mod:`perfscope.store.chrome`): ranks, pid maps, collectives."""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from perfscope.store.arrays import int_array, str_or_none, to_int
from perfscope.store.kineto.events import Event, Trace
from perfscope.store.kineto.tables import int_col
from perfscope.store.kineto.timestamps import event_times, us_to_ns


def export_ranks(trace: Trace) -> list[dict[str, Any]] | None:
    """The per-rank blocks of one of perfscope's own exports, or None for other traces."""
    ps = trace.perfscope
    if not isinstance(ps, dict) or not isinstance(ps.get("ranks"), list):
        return None
    ranks = [r for r in ps["ranks"] if isinstance(r, dict) and to_int(r.get("rank")) is not None]
    return ranks or None


def pid_owner(trace: Trace) -> dict[Any, int] | None:
    """Exported pid -> rank for a multi-rank perfscope export (None otherwise)."""
    ranks = export_ranks(trace)
    if ranks is None or len(ranks) < 2:
        return None
    return {entry["pid"]: int(r["rank"]) for r in ranks for entry in r.get("pids", [])
            if isinstance(entry, dict) and "pid" in entry}


def split_perfscope_export(trace: Trace) -> list[tuple[int, Any, Any, Any, Any]] | None:
    """The ranks of one of perfscope's own exports (the first is where unclaimed pids go).

    Returns None for ordinary Kineto traces.  Otherwise a list of (rank, exported host pid
    -> original host pid, deviceProperties, distributedInfo, exported GPU pid -> device).
    """
    ranks = export_ranks(trace)
    if ranks is None:
        return None
    out = []
    for r in ranks:
        pid_map = {entry["pid"]: entry.get("host_pid") for entry in r.get("pids", [])
                   if isinstance(entry, dict) and "pid" in entry and entry.get("kind") == "host"}
        device_map = {entry["pid"]: entry.get("device") for entry in r.get("pids", [])
                      if isinstance(entry, dict) and "pid" in entry and entry.get("kind") == "gpu"}
        out.append((int(r["rank"]), pid_map, r.get("deviceProperties"), r.get("distributedInfo"), device_map))
    return out


def collectives_from_export(colls: list[Event], base_ns: int) -> dict[str, Any]:
    start, dur = event_times(colls, base_ns)
    p = [e.args.ps if e.args is not None and isinstance(e.args.ps, dict) else {} for e in colls]
    enq = [x.get("enqueue_us") for x in p]
    enq_ns = [None if v is None else int(n) + base_ns for v, n in zip(enq, us_to_ns([0 if v is None else v for v in enq]))]
    cols: dict[str, Any] = {"start_ns": start, "dur_ns": dur, "enqueue_ns": int_array(enq_ns)}
    ints = {"seq": pa.int64(), "count": pa.int64(), "bytes": pa.int64(), "root": pa.int32(), "peer": pa.int32(),
            "nranks": pa.int32(), "nchannels": pa.int32(), "nwarps": pa.int32(), "device": pa.int32(),
            "stream": pa.int64(), "correlation": pa.int64()}
    for name, t in ints.items():
        cols[name] = int_col([x.get(name) for x in p], t)
    for name in ("comm_id", "func", "datatype", "algorithm", "protocol", "kernel_name", "source"):
        cols[name] = [str_or_none(x.get(name)) for x in p]
    return cols

