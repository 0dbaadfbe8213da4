"""The tables built from one rank's events, and the column helpers they share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfscope.store.arrays import (
    bool_array,
    float_array,
    from_numpy,
    int_array,
    str_array,
    to_int,
)
from perfscope.store.kineto.classify import Classified
from perfscope.store.kineto.decode import decode_args_batch
from perfscope.store.kineto.events import Event, EventArgs
from perfscope.store.kineto.parse import parse_memcpy_name, parse_memset_kind
from perfscope.store.kineto.timestamps import event_times, ts_ns


@dataclass
class RankTables:
    """The tables built from one rank's events (pyarrow Tables keyed by table name) and
    facts for the rank's metadata."""

    tables: dict[str, dict[str, Any]]
    warnings: list[str]
    host_pid: int | None
    devices: list[int]
    started_ns: int | None
    stopped_ns: int | None


def int_col(values: list[Any], type_: pa.DataType = pa.int64()) -> pa.Array:
    """Integer column with nulls; tolerates floats-as-text and numeric strings."""
    return int_array(values, type_)


def arg_of(e: Event, name: str) -> Any:
    a = e.args
    return None if a is None else getattr(a, name)


def _xyz(v: Any, i: int) -> int | None:
    if isinstance(v, (list, tuple)) and len(v) > i:
        return to_int(v[i])
    return None


def device_of(e: Event) -> Any:
    d = arg_of(e, "device")
    return d if d is not None else (e.pid if isinstance(e.pid, int) else None)


def stream_of(e: Event) -> Any:
    s = arg_of(e, "stream")
    return s if s is not None else (e.tid if isinstance(e.tid, int) else None)


def ints_or(values: list[Any], fallback: list[Any] | None = None, type_: pa.DataType = pa.int64()) -> pa.Array:
    """Integer column from ``values``, taking ``fallback[i]`` where ``values[i]`` is None."""
    if fallback is not None:
        values = [v if v is not None else f for v, f in zip(values, fallback)]
    return int_col(values, type_)


def _triples(values: list[Any]) -> tuple[pa.Array, pa.Array, pa.Array]:
    """x, y, z int32 columns from ``[x, y, z]`` lists (Kineto's grid/block)."""
    n = len(values)
    try:
        arr = np.array(values, dtype=np.int64)
        if arr.shape == (n, 3):
            return tuple(from_numpy(np.ascontiguousarray(arr[:, i]), pa.int32()) for i in range(3))
    except (ValueError, TypeError, OverflowError):
        pass
    return tuple(int_col([_xyz(v, i) for v in values], pa.int32()) for i in range(3))


def extras(args: list[EventArgs]) -> list[dict[str, Any]] | None:
    """The per-event ``args.ps`` dicts of perfscope's own exports, or None when no event has one."""
    ps = [a.ps for a in args]
    if ps.count(None) == len(ps):
        return None
    return [p if isinstance(p, dict) else {} for p in ps]


def with_extra(values: list[Any], extras: list[dict[str, Any]] | None, key: str) -> list[Any]:
    """``values`` with ``extras[i][key]`` where that key is present (even when null)."""
    if extras is None:
        return values
    return [x.get(key, v) for v, x in zip(values, extras)]


def mapped_pids(events: list[Event], pid_map: dict[Any, Any] | None) -> list[Any]:
    """The events' pids, through ``pid_map`` (see :func:`mapped`)."""
    return mapped([e.pid for e in events], pid_map)


def mapped(pids: list[Any], pid_map: dict[Any, Any] | None) -> list[Any]:
    """``pids`` with those ``pid_map`` has replaced (a new list then; ``pids`` itself
    when there is no map)."""
    return [pid_map.get(p, p) for p in pids] if pid_map else pids


def concat_columns(pieces: list[dict[str, Any]]) -> dict[str, Any]:
    """Join per-chunk column pieces (numpy arrays, Arrow arrays or lists) column by column."""
    if len(pieces) == 1:
        return pieces[0]
    out: dict[str, Any] = {}
    for col in pieces[0]:
        parts = [p[col] for p in pieces]
        first = parts[0]
        if isinstance(first, np.ndarray):
            out[col] = np.concatenate(parts)
        elif isinstance(first, (pa.Array, pa.ChunkedArray)):
            out[col] = pa.chunked_array(list(parts), type=first.type)
        else:
            out[col] = [v for x in parts for v in x]
    return out


def basic_tables(c: Classified, base_ns: int, pid_map: dict[Any, Any] | None,
                 device_map: dict[Any, Any] | None = None, *,
                 api_parts: list[tuple[list[Any], list[Any], list[Any], np.ndarray]] | None = None,
                 ) -> dict[str, dict[str, Any]]:
    """The tables whose rows need nothing from other chunks: api, kernels, memcpy, memset,
    markers, steps, host and metrics (each {column: values}, in that order).

    Args:
        c: one chunk's events, by kind.
        base_ns: ``baseTimeNanoseconds``, added to every start.
        pid_map: exported pid -> original host pid (perfscope's own exports), or None.
        device_map: exported GPU pid -> device (perfscope's own exports), or None.
        api_parts: when given, gets the API calls' (args, pids, tids, start_ns) appended
            (pids and tids as in the events, start with the base), for the launch index.
    """
    out: dict[str, dict[str, Any]] = {}
    if c.api:
        out["api"] = _api_table(c.api, base_ns, pid_map, api_parts)
    if c.kernels:
        out["kernels"] = _kernels_table(c.kernels, base_ns)
    if c.memcpy:
        out["memcpy"] = _memcpy_table(c.memcpy, base_ns)
    if c.memset:
        out["memset"] = _memset_table(c.memset, base_ns)
    if c.markers or c.gpu_markers:
        out["markers"] = _markers_table(c.markers, c.gpu_markers, base_ns, pid_map)
    if c.steps:
        out["steps"] = _steps_table(c.steps, base_ns)
    if c.host:
        out["host"] = _host_table(c.host, base_ns)
    if c.metrics:
        out["metrics"] = _metrics_table(c.metrics, base_ns, device_map)
    return out


def _api_table(api: list[Event], base_ns: int, pid_map: dict[Any, Any] | None,
               api_parts: list[tuple[list[Any], list[Any], list[Any], np.ndarray]] | None) -> dict[str, Any]:
    """The ``api`` table (CUDA runtime and driver calls); see :func:`basic_tables`."""
    api_args = decode_args_batch(api)
    x = extras(api_args)
    start, dur = event_times(api, base_ns)
    pids = [e.pid for e in api]
    tids = [e.tid for e in api]
    table = {
        "start_ns": start, "dur_ns": dur,
        "pid": int_col(with_extra(mapped(pids, pid_map), x, "pid")),
        "tid": int_col(with_extra(tids, x, "tid")),
        "correlation": int_col([a.correlation for a in api_args]),
        "name": str_array([e.name for e in api]),
        "kind": with_extra(["driver" if e.cat == "cuda_driver" else "runtime" for e in api], x, "kind"),
        "cbid": int_col([a.cbid for a in api_args], pa.int32()),
    }
    if api_parts is not None:
        api_parts.append((api_args, pids, tids, start))
    return table


def _kernels_table(kernels: list[Event], base_ns: int) -> dict[str, Any]:
    """The ``kernels`` table."""
    args = decode_args_batch(kernels)
    start, dur = event_times(kernels, base_ns)
    gx, gy, gz = _triples([a.grid for a in args])
    bx, by, bz = _triples([a.block for a in args])
    return {
        "start_ns": start, "dur_ns": dur,
        "device": ints_or([a.device for a in args], [e.pid for e in kernels], pa.int32()),
        "stream": ints_or([a.stream for a in args], [e.tid for e in kernels]),
        "correlation": int_col([a.correlation for a in args]),
        "name": str_array([e.name for e in kernels]),
        "grid_x": gx, "grid_y": gy, "grid_z": gz, "block_x": bx, "block_y": by, "block_z": bz,
        "registers_per_thread": int_col([a.registers for a in args], pa.int32()),
        "shared_mem_bytes": int_col([a.shared_memory for a in args]),
        "graph_id": int_col([a.graph_id for a in args]),
    }


def _memcpy_table(memcpy: list[Event], base_ns: int) -> dict[str, Any]:
    """The ``memcpy`` table (copy and memory kinds from the names, parsed once per name)."""
    args = decode_args_batch(memcpy)
    x = extras(args)
    start, dur = event_times(memcpy, base_ns)
    cache: dict[Any, tuple[str, str, str, bool]] = {}
    parsed = [cache.get(e.name) or cache.setdefault(e.name, parse_memcpy_name(e.name if isinstance(e.name, str) else ""))
              for e in memcpy]
    return {
        "start_ns": start, "dur_ns": dur,
        "device": ints_or([a.device for a in args], [e.pid for e in memcpy], pa.int32()),
        "stream": ints_or([a.stream for a in args], [e.tid for e in memcpy]),
        "correlation": int_col([a.correlation for a in args]),
        "copy_kind": with_extra([p[0] for p in parsed], x, "copy_kind"),
        "bytes": int_col([a.bytes for a in args]),
        "src_kind": with_extra([p[1] for p in parsed], x, "src_kind"),
        "dst_kind": with_extra([p[2] for p in parsed], x, "dst_kind"),
        "pageable": bool_array(with_extra([p[3] for p in parsed], x, "pageable")),
    }


def _memset_table(memset: list[Event], base_ns: int) -> dict[str, Any]:
    """The ``memset`` table."""
    args = decode_args_batch(memset)
    x = extras(args)
    start, dur = event_times(memset, base_ns)
    return {
        "start_ns": start, "dur_ns": dur,
        "device": ints_or([a.device for a in args], [e.pid for e in memset], pa.int32()),
        "stream": ints_or([a.stream for a in args], [e.tid for e in memset]),
        "correlation": int_col([a.correlation for a in args]),
        "bytes": int_col([a.bytes for a in args]),
        "value": int_col(with_extra([None] * len(memset), x, "value")),
        "mem_kind": with_extra([parse_memset_kind(e.name if isinstance(e.name, str) else "") for e in memset], x, "mem_kind"),
    }


def _markers_table(markers: list[Event], gpu_markers: list[Event], base_ns: int,
                   pid_map: dict[Any, Any] | None) -> dict[str, Any]:
    """The ``markers`` table: host annotations (pid, tid), then GPU ones (device, stream)."""
    gpu_args = decode_args_batch(gpu_markers)
    all_markers = markers + gpu_markers
    args = [e.args for e in markers] + gpu_args
    x = extras(args)
    n_host = len(markers)
    start, dur = event_times(all_markers, base_ns)
    cats = [e.cat for e in all_markers]
    return {
        "start_ns": start, "dur_ns": dur,
        "pid": int_col(with_extra(mapped_pids(markers, pid_map) + [None] * len(gpu_markers), x, "pid")),
        "tid": int_col(with_extra([e.tid for e in markers] + [None] * len(gpu_markers), x, "tid")),
        "name": str_array([e.name for e in all_markers]),
        "domain": with_extra(cats, x, "domain"),
        "source": with_extra(cats, x, "source"),
        "device": int_col(with_extra([None] * n_host + [a.device if a.device is not None else e.pid
                                                           for a, e in zip(gpu_args, gpu_markers)], x, "device"), pa.int32()),
        "stream": int_col(with_extra([None] * n_host + [a.stream if a.stream is not None else e.tid
                                                           for a, e in zip(gpu_args, gpu_markers)], x, "stream")),
    }


def _steps_table(steps: list[tuple[int, Event]], base_ns: int) -> dict[str, Any]:
    """The ``steps`` table from (step number, event) pairs."""
    evs = [e for _, e in steps]
    start, dur = event_times(evs, base_ns)
    x = extras([e.args for e in evs])
    return {
        "step": np.array([n for n, _ in steps], np.int64),
        "start_ns": start, "dur_ns": dur,
        "name": str_array([e.name for e in evs]),
        "source": with_extra(["profiler_step"] * len(evs), x, "source"),
    }


def _host_table(host: list[Event], base_ns: int) -> dict[str, Any]:
    """The ``host`` table (perfscope's own exports only)."""
    args = decode_args_batch(host)
    x = extras(args) or [{}] * len(host)
    start, dur = event_times(host, base_ns)
    return {
        "start_ns": start, "dur_ns": dur,
        "tid": int_col(with_extra([e.tid for e in host], x, "tid")),
        "kind": [p.get("kind", "other") for p in x],
        "name": str_array([e.name for e in host]),
    }


def _metrics_table(metrics: list[Event], base_ns: int, device_map: dict[Any, Any] | None) -> dict[str, Any]:
    """The ``metrics`` table (counters of perfscope's own exports only)."""
    args = decode_args_batch(metrics)
    # A counter's device is the GPU process it sits in (the export's pid map says which).
    devices = device_map or {}
    return {
        "ts_ns": ts_ns(metrics) + base_ns,
        "device": int_col([devices.get(e.pid, e.pid) for e in metrics], pa.int32()),
        "metric": str_array([e.name for e in metrics]),
        "value": float_array([to_float(a.value) for a in args]),
    }


def operator_columns(ops: list[Event], base_ns: int, pid_map: dict[Any, Any] | None) -> dict[str, Any]:
    """One chunk's columns for :func:`~.operators.operators_table` (its arguments by
    name), from its operator and frame events (args decoded)."""
    start, dur = event_times(ops, base_ns)
    return {
        "start": start, "dur": dur,
        "pid": int_col(mapped_pids(ops, pid_map)), "tid": int_col([e.tid for e in ops]),
        "names": str_array([e.name for e in ops]),
        "is_frame": np.array([e.cat == "python_function" for e in ops], dtype=bool),
        "external_id": int_col([arg_of(e, "external_id") for e in ops]),
    }


def rank_tables(out: dict[str, dict[str, Any]], warnings: list[str]) -> RankTables:
    """Wrap built tables with the facts the rank's metadata needs."""
    host_pids = out["api"]["pid"] if "api" in out else (out["markers"]["pid"] if "markers" in out else None)
    host_pid = None
    if host_pids is not None and len(host_pids.drop_null()):
        vc = host_pids.drop_null().value_counts()
        counts = vc.field("counts").to_pylist()  # few; to_numpy() would import pandas
        host_pid = int(vc.field("values")[counts.index(max(counts))].as_py())
    # (operators left out: a run's span is that of its GPU and API activity, as before the
    # table existed)
    spans = [(t["start_ns"], t["dur_ns"]) for name, t in out.items() if name not in ("metrics", "operators")]
    started = min((int(s.min()) for s, _ in spans if len(s)), default=None)
    stopped = max((int((s + d).max()) for s, d in spans if len(s)), default=None)
    # Distinct values first: a Python int per kernel costs ~0.2 ms on 4k kernels.
    devices = sorted(pc.unique(out["kernels"]["device"].drop_null()).to_pylist()) if "kernels" in out else []
    return RankTables(out, warnings, host_pid, devices, started, stopped)


def to_float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None

