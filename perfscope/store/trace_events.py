"""The trace events of a run's tables, one rank at a time, in Kineto's vocabulary.

:func:`rank_events` yields Chrome trace events (dicts) for one rank's tables: GPU activity
on stream lanes, GPU annotations, collectives and NCCL channel lanes in a GPU process per
device; steps, markers, API calls, host spans and NCCL proxy lanes in a host process per
host pid.  :class:`Pids` and :class:`Lanes` hand out the process and lane ids of a file.
A :class:`Dialect` holds the few spellings two readers of Kineto traces disagree on:
:data:`CHROME` for Perfetto, HTA and perfscope's importer, :data:`TENSORBOARD` for
TensorBoard's PyTorch profiler plugin.  :mod:`perfscope.store.chrome` writes the events.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfscope.store.reader import Run


@dataclass(frozen=True)
class Dialect:
    """Where two readers of one Kineto-style trace want different spellings.

    ``runtime_cat``/``driver_cat``: the categories of CUDA runtime and driver calls;
    ``host_cat``: of host spans; ``dataloader_prefix``: put before the name of data-loader
    waits; ``profiler_step_names``: name every step ``ProfilerStep#N`` (else the stored
    name); ``comm_ops``: write collectives as ``nccl:<func>`` GPU annotations with an
    ``External id`` and their size as ``Input Dims`` (what a distributed view matches
    across ranks) instead of ``perfscope_collective`` events; ``nest_exactly``: shorten a
    step's or host span's duration by at most a float's last bit so that ``ts + dur`` never
    passes the exact end (back-to-back steps would otherwise seem to overlap by 1e-9 us);
    ``zero_external_ids``: give GPU activity and API calls ``External id`` 0 (Kineto's "no
    operator"): the plugin hands every call without an id to the first operator without one.
    """

    runtime_cat: str = "cuda_runtime"
    driver_cat: str = "cuda_driver"
    host_cat: str = "perfscope_host"
    dataloader_prefix: str = ""
    profiler_step_names: bool = False
    comm_ops: bool = False
    nest_exactly: bool = False
    zero_external_ids: bool = False


#: Chrome/Perfetto, HTA and perfscope's own importer (import -> export -> import round trip).
CHROME = Dialect()
#: torch-tb-profiler 0.4.3 maps only ``Runtime`` (not ``cuda_runtime``) to runtime calls, keeps
#: host ranges only as ``cpu_op``, counts data loading from ``enumerate(DataLoader)#...__next__``
#: ops, finds steps by the ``ProfilerStep#`` prefix and communication by ``nccl:all_reduce``-style
#: names (trace.py, event_parser.py of the plugin).
TENSORBOARD = Dialect(runtime_cat="Runtime", driver_cat="Runtime", host_cat="cpu_op",
                      dataloader_prefix="enumerate(DataLoader)#", profiler_step_names=True, comm_ops=True,
                      nest_exactly=True, zero_external_ids=True)


def _pylist(s: pd.Series) -> list[Any]:
    """Column values as Python objects with None for nulls (no pandas NA/NaN leaks)."""
    if s.dtype == object:
        return [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v for v in s.tolist()]
    if isinstance(s.dtype, pd.CategoricalDtype) or str(s.dtype) in ("Int64", "Int32", "boolean", "string"):
        return s.astype(object).where(s.notna(), None).tolist()
    return s.tolist()


def _us(ns: np.ndarray | pd.Series, base: int) -> list[float]:
    """ns since epoch -> µs since ``base`` as floats (exact to the ns below ~100 days)."""
    return ((np.asarray(ns, dtype=np.int64) - base) / 1000.0).tolist()


def _columns(df: pd.DataFrame, base: int) -> tuple[dict[str, list[Any]], list[float], list[float]]:
    """Return (other columns as Python lists, start in us after ``base``, duration in us)."""
    cols = {c: _pylist(df[c]) for c in df.columns if c not in ("start_ns", "dur_ns", "rank")}
    return cols, _us(df["start_ns"], base), _us(df["dur_ns"], 0)


def _fit_durations(ts: list[float], df: pd.DataFrame, base: int) -> list[float]:
    """Durations in us such that ``ts + dur`` in floats is at most the exact end in us."""
    start = np.asarray(ts)
    end = (df["start_ns"].to_numpy(np.int64) + df["dur_ns"].to_numpy(np.int64) - base) / 1000.0
    dur = end - start
    for _ in range(4):  # one step down is nearly always enough
        over = start + dur > end
        if not over.any():
            break
        dur[over] = np.nextafter(dur[over], 0.0)
    return np.maximum(dur, 0.0).tolist()


def _stream_lane(lanes: Lanes, pid: int, stream: Any) -> int:
    """The lane (tid) of a GPU stream, sorted by stream id."""
    return lanes.real(pid, stream if stream is not None else 0, f"stream {stream}", 0 if stream is None else int(stream))


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class Pids:
    """Hands out unique Chrome pids, preferring the natural ones (host pid, device id)."""

    def __init__(self) -> None:
        self.used: set[int] = set()
        self.next_synthetic = 1 << 30

    def take(self, preferred: int | None) -> int:
        if preferred is not None and preferred not in self.used and preferred >= 0:
            self.used.add(preferred)
            return preferred
        while self.next_synthetic in self.used:
            self.next_synthetic += 1
        self.used.add(self.next_synthetic)
        return self.next_synthetic


class Lanes:
    """Synthetic thread ids (lanes) inside one process, named through metadata events."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[int, Any], int] = {}
        self.names: dict[tuple[int, int], tuple[str, int]] = {}
        self.next = 1_000_000_000

    def real(self, pid: int, tid: int, name: str, sort: int) -> int:
        self.names.setdefault((pid, tid), (name, sort))
        return tid

    def synthetic(self, pid: int, key: Any, name: str, sort: int) -> int:
        k = (pid, key)
        if k not in self.by_key:
            self.by_key[k] = self.next
            self.next += 1
            self.names[(pid, self.by_key[k])] = (name, sort)
        return self.by_key[k]


def rank_events(
    run: Run, rank: int, base: int, rmeta: dict[str, Any], pids: Pids, lanes: Lanes,
    block: dict[str, Any], dialect: Dialect, *, single: bool,
) -> Iterator[dict[str, Any]]:
    """Every trace event of one rank, table by table: GPU activity on stream lanes, GPU
    annotations and host markers, host steps, API calls and spans, NVML counters, NCCL
    channels and proxy work."""
    export = _RankExport(rank, base, rmeta, pids, lanes, block, dialect, single=single)
    for table in ("kernels", "memcpy", "memset", "sync", "collectives", "markers", "steps", "api", "host", "metrics",
                  "nccl_channels", "proxy"):
        df = run.table(table, ranks=[rank])
        if not len(df):
            continue
        events = getattr(export, table)(df)
        if dialect.zero_external_ids and table in ("kernels", "memcpy", "memset", "api"):
            events = _with_external_id(events, 0)
        yield from events


def _with_external_id(events: Iterator[dict[str, Any]], ext: int) -> Iterator[dict[str, Any]]:
    """``events`` with ``args["External id"] = ext``."""
    for e in events:
        e["args"]["External id"] = ext
        yield e


class _RankExport:
    """The trace events of one rank's tables: a method per table, taking its frame.

    Processes are made as events first need them, so that pids and their sort order
    follow the tables' order: a host process per host pid (:meth:`host_pid`), a GPU
    process per device (:meth:`gpu_pid`), each recorded in the rank's ``block``.
    """

    def __init__(self, rank: int, base: int, rmeta: dict[str, Any], pids: Pids, lanes: Lanes,
                 block: dict[str, Any], dialect: Dialect, *, single: bool) -> None:
        self.rank, self.base, self.pids, self.lanes, self.block, self.single = rank, base, pids, lanes, block, single
        self.dialect = dialect
        meta_gpu = rmeta.get("gpu")
        gpu: dict[str, Any] = meta_gpu if isinstance(meta_gpu, dict) else {}
        # The NCCL plugin's tables have no device column: they ran on the rank's own GPU.
        self.device = gpu.get("index") if isinstance(gpu.get("index"), int) else None
        self.host_pids: dict[Any, int] = {}
        self.gpu_pids: dict[Any, int] = {}
        self.sort_base = rank * 1000
        self.main_pid = rmeta.get("pid") if isinstance(rmeta.get("pid"), int) else None

    def host_pid(self, orig: Any) -> int:
        """The exported pid of host process ``orig`` (None: unknown)."""
        if orig not in self.host_pids:
            pid = self.pids.take(int(orig) if orig is not None else None)
            self.host_pids[orig] = pid
            self.block["pids"].append({"pid": pid, "kind": "host", "host_pid": orig,
                                       "label": f"rank {self.rank} host" + (f" (pid {orig})" if orig is not None else ""),
                                       "sort": self.sort_base + len(self.block["pids"])})
        return self.host_pids[orig]

    def gpu_pid(self, device: Any) -> int:
        """The exported pid of GPU ``device`` (its own id when a single rank is exported)."""
        if device not in self.gpu_pids:
            preferred = int(device) if (self.single and device is not None) else None
            pid = self.pids.take(preferred)
            self.gpu_pids[device] = pid
            self.block["pids"].append({"pid": pid, "kind": "gpu", "device": device,
                                       "label": f"rank {self.rank} GPU {device if device is not None else '?'}",
                                       "sort": self.sort_base + 500 + len(self.block["pids"])})
        return self.gpu_pids[device]

    def kernels(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """Kernels on their stream's lane, with Kineto's args."""
        cols, ts, dur = _columns(df, self.base)
        for i in range(len(df)):
            dev, stream = cols["device"][i], cols["stream"][i]
            pid = self.gpu_pid(dev)
            grid = [cols["grid_x"][i], cols["grid_y"][i], cols["grid_z"][i]]
            block_ = [cols["block_x"][i], cols["block_y"][i], cols["block_z"][i]]
            yield {"ph": "X", "cat": "kernel", "name": cols["name"][i], "pid": pid,
                   "tid": _stream_lane(self.lanes, pid, stream),
                   "ts": ts[i], "dur": dur[i], "args": _drop_none({
                       "device": dev, "stream": stream, "correlation": cols["correlation"][i],
                       "registers per thread": cols["registers_per_thread"][i],
                       "shared memory": cols["shared_mem_bytes"][i],
                       "grid": grid if any(v is not None for v in grid) else None,
                       "block": block_ if any(v is not None for v in block_) else None,
                       "graph id": cols["graph_id"][i]})}

    def memcpy(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """Copies on their stream's lane, named as Kineto names them."""
        cols, ts, dur = _columns(df, self.base)
        for i in range(len(df)):
            dev, stream = cols["device"][i], cols["stream"][i]
            pid = self.gpu_pid(dev)
            yield {"ph": "X", "cat": "gpu_memcpy", "name": _memcpy_name(cols["copy_kind"][i], cols["src_kind"][i], cols["dst_kind"][i]),
                   "pid": pid, "tid": _stream_lane(self.lanes, pid, stream),
                   "ts": ts[i], "dur": dur[i], "args": _drop_none({
                       "device": dev, "stream": stream, "correlation": cols["correlation"][i], "bytes": cols["bytes"][i],
                       "ps": {"copy_kind": cols["copy_kind"][i], "src_kind": cols["src_kind"][i],
                              "dst_kind": cols["dst_kind"][i], "pageable": cols["pageable"][i]}})}

    def memset(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """Memsets on their stream's lane."""
        cols, ts, dur = _columns(df, self.base)
        for i in range(len(df)):
            dev, stream = cols["device"][i], cols["stream"][i]
            pid = self.gpu_pid(dev)
            kind = cols["mem_kind"][i]
            yield {"ph": "X", "cat": "gpu_memset", "name": f"Memset ({(kind or 'unknown').capitalize()})",
                   "pid": pid, "tid": _stream_lane(self.lanes, pid, stream),
                   "ts": ts[i], "dur": dur[i], "args": _drop_none({
                       "device": dev, "stream": stream, "correlation": cols["correlation"][i], "bytes": cols["bytes"][i],
                       "ps": {"value": cols["value"][i], "mem_kind": kind}})}

    def sync(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """Synchronisations on a lane beside their stream's."""
        cols, ts, dur = _columns(df, self.base)
        for i in range(len(df)):
            dev, stream = cols["device"][i], cols["stream"][i]
            pid = self.gpu_pid(dev)
            kind = cols["sync_kind"][i]
            label = _SYNC_NAMES.get(kind or "", "Sync")
            yield {"ph": "X", "cat": "cuda_sync", "name": label, "pid": pid,
                   "tid": self.lanes.synthetic(pid, ("sync", stream), f"stream {stream} (sync)", 100_000 + (stream or 0)),
                   "ts": ts[i], "dur": dur[i], "args": _drop_none({
                       "device": dev, "stream": stream, "correlation": cols["correlation"][i], "cuda_sync_kind": label,
                       "ps": {"sync_kind": kind, "tid": cols["tid"][i]}})}

    def collectives(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """NCCL collectives on the GPU's collectives lane, every column under ``args.ps``
        (with the :class:`Dialect`'s ``comm_ops``: as ``nccl:<func>`` annotations)."""
        cols = {c: _pylist(df[c]) for c in df.columns if c not in ("start_ns", "dur_ns", "rank", "enqueue_ns")}
        ts, dur = _us(df["start_ns"], self.base), _us(df["dur_ns"], 0)
        enq = _pylist(df["enqueue_ns"])
        for i in range(len(df)):
            dev = cols["device"][i] if cols["device"][i] is not None else self.device
            pid = self.gpu_pid(dev)
            extra = {k: v[i] for k, v in cols.items()}
            extra["enqueue_us"] = None if enq[i] is None else (int(enq[i]) - self.base) / 1000.0
            event: dict[str, Any] = {"ph": "X", "cat": "perfscope_collective",
                     "name": f"{cols['func'][i] or 'collective'}" + (f" {cols['comm_id'][i]}" if cols["comm_id"][i] else ""),
                     "pid": pid, "tid": self.lanes.synthetic(pid, "collectives", "collectives", 200_000),
                     "ts": ts[i], "dur": dur[i], "args": {"ps": extra}}
            if self.dialect.comm_ops:
                event.update(cat="gpu_user_annotation", name=_comm_op_name(cols["func"][i]))
                # One id per operation: the plugin keys operations by External id, and pairs
                # them across ranks by order.  The size goes in as bytes ("unsigned char").
                event["args"].update(_drop_none({"External id": 1 + i, "Input Dims": None if cols["bytes"][i] is None
                                                 else [[cols["bytes"][i]]]}))
                if cols["bytes"][i] is not None:
                    event["args"]["Input type"] = ["unsigned char"]
            yield event

    def nccl_channels(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """The NCCL plugin's per-channel kernel timing: one lane per channel on the rank's GPU."""
        cols, ts, dur = _columns(df, self.base)
        pid = self.gpu_pid(self.device)
        for i in range(len(df)):
            ch = cols["channel"][i]
            extra = {k: v[i] for k, v in cols.items() if k not in ("host_start_ns", "host_stop_ns")}
            for k in ("host_start", "host_stop"):
                v = cols[f"{k}_ns"][i]
                extra[f"{k}_us"] = None if v is None else (int(v) - self.base) / 1000.0
            yield {"ph": "X", "cat": "perfscope_nccl_channel", "name": f"{cols['func'][i] or 'NCCL'} ch{ch}",
                   "pid": pid, "tid": self.lanes.synthetic(pid, ("channel", ch), f"NCCL channel {ch}", 210_000 + (ch or 0)),
                   "ts": ts[i], "dur": dur[i], "args": {"ps": extra}}

    def proxy(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """NCCL proxy operations and network steps on the host, one lane per channel and
        direction (a step lies inside its operation, so the two nest)."""
        cols, ts, dur = _columns(df, self.base)
        pid = self.host_pid(self.main_pid)
        for i in range(len(df)):
            ch, send, peer = cols["channel"][i], cols["is_send"][i], cols["peer"][i]
            way = "send" if send else "recv" if send is not None else "proxy"
            what = f"step {cols['step'][i]}" if cols["kind"][i] == "step" else "op"
            lane = self.lanes.synthetic(pid, ("proxy", ch, way), f"NCCL proxy ch{ch} {way}",
                                        40_000 + 3 * (ch or 0) + ("send", "recv", "proxy").index(way))
            yield {"ph": "X", "cat": "perfscope_proxy",
                   "name": f"{cols['func'][i] or 'NCCL'} {way}" + (f" peer {peer}" if peer is not None else "") + f" {what}",
                   "pid": pid, "tid": lane, "ts": ts[i], "dur": dur[i], "args": {"ps": {k: v[i] for k, v in cols.items()}}}

    def markers(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """GPU annotations beside their stream, host markers on their thread's lane."""
        cols, ts, dur = _columns(df, self.base)
        for i in range(len(df)):
            dev, stream, tid = cols["device"][i], cols["stream"][i], cols["tid"][i]
            extra = {"source": cols["source"][i], "domain": cols["domain"][i]}
            if dev is not None:
                pid = self.gpu_pid(dev)
                # Device and stream only under ps: Kineto gives GPU annotations no "stream"
                # arg, and HTA would count a range that has one as a kernel.
                extra.update(pid=cols["pid"][i], tid=tid, device=dev, stream=stream)
                yield {"ph": "X", "cat": "gpu_user_annotation", "name": cols["name"][i], "pid": pid,
                       "tid": self.lanes.synthetic(pid, ("annotations", stream), f"stream {stream} annotations", 150_000 + (stream or 0)),
                       "ts": ts[i], "dur": dur[i], "args": {"ps": extra}}
            else:
                orig = cols["pid"][i]
                pid = self.host_pid(orig if orig is not None else self.main_pid)
                extra["tid"] = tid
                if orig is None:
                    extra["pid"] = None
                yield {"ph": "X", "cat": "user_annotation", "name": cols["name"][i], "pid": pid,
                       "tid": self.lanes.synthetic(pid, ("markers", tid), f"thread {tid} markers", 20_000 + (tid or 0) % 10_000),
                       "ts": ts[i], "dur": dur[i], "args": {"ps": extra}}

    def steps(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """Steps as ``ProfilerStep#N`` annotations on the main host process's steps lane."""
        step, name, source = _pylist(df["step"]), _pylist(df["name"]), _pylist(df["source"])
        ts, dur = _us(df["start_ns"], self.base), _us(df["dur_ns"], 0)
        if self.dialect.nest_exactly:
            dur = _fit_durations(ts, df, self.base)
        pid = self.host_pid(self.main_pid)
        lane = self.lanes.synthetic(pid, "steps", "steps", 0)
        for i in range(len(df)):
            label = f"ProfilerStep#{step[i]}" if self.dialect.profiler_step_names or not name[i] else name[i]
            yield {"ph": "X", "cat": "user_annotation", "name": label, "pid": pid, "tid": lane,
                   "ts": ts[i], "dur": dur[i], "args": {"ps": {"step": step[i], "source": source[i]}}}

    def api(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """CUDA runtime and driver calls on the calling thread's lane."""
        cols, ts, dur = _columns(df, self.base)
        for i in range(len(df)):
            orig, tid, kind = cols["pid"][i], cols["tid"][i], cols["kind"][i]
            pid = self.host_pid(orig if orig is not None else self.main_pid)
            extra: dict[str, Any] = {}
            if orig is None:
                extra["pid"] = None
            if kind not in ("runtime", "driver"):
                extra["kind"] = kind
            lane = self.lanes.real(pid, tid, f"thread {tid}", 10_000 + tid % 10_000) if tid is not None else \
                self.lanes.synthetic(pid, ("api", None), "API calls", 10_000)
            if tid is None:
                extra["tid"] = None
            args = _drop_none({"correlation": cols["correlation"][i], "cbid": cols["cbid"][i]})
            if extra:
                args["ps"] = extra
            yield {"ph": "X", "cat": self.dialect.driver_cat if kind == "driver" else self.dialect.runtime_cat,
                   "name": cols["name"][i],
                   "pid": pid, "tid": lane, "ts": ts[i], "dur": dur[i], "args": args}

    def host(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """Host spans (data loading, barriers...) on their thread's host lane."""
        cols, ts, dur = _columns(df, self.base)
        if self.dialect.nest_exactly:
            dur = _fit_durations(ts, df, self.base)
        pid = self.host_pid(self.main_pid)
        for i in range(len(df)):
            tid, name = cols["tid"][i], cols["name"][i] or cols["kind"][i]
            if cols["kind"][i] == "dataloader_wait":
                name = self.dialect.dataloader_prefix + name
            yield {"ph": "X", "cat": self.dialect.host_cat, "name": name, "pid": pid,
                   "tid": self.lanes.synthetic(pid, ("host", tid), f"thread {tid} host", 30_000 + (tid or 0) % 10_000),
                   "ts": ts[i], "dur": dur[i], "args": {"ps": {"kind": cols["kind"][i], "tid": tid}}}

    def metrics(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """NVML samples as counter tracks of the GPU's process."""
        dev, metric, value = _pylist(df["device"]), _pylist(df["metric"]), _pylist(df["value"])
        ts = _us(df["ts_ns"], self.base)
        for i in range(len(df)):
            pid = self.gpu_pid(dev[i])
            # Counter args must all be numbers (one series each): the device is the process.
            yield {"ph": "C", "cat": "perfscope_metric", "name": metric[i], "pid": pid, "tid": 0, "ts": ts[i],
                   "args": {"value": value[i]}}


_COPY_NAMES = {"H2D": "HtoD", "D2H": "DtoH", "D2D": "DtoD", "P2P": "PtoP", "H2H": "HtoH"}
_SYNC_NAMES = {"stream": "Stream Sync", "event": "Event Sync", "context": "Context Sync",
               "stream_wait_event": "Stream Wait Event"}


def _comm_op_name(func: Any) -> str:
    """Kineto's name of a collective's host op: ``AllReduce`` -> ``nccl:all_reduce``."""
    return "nccl:" + re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", str(func or "collective")).lower()


def _memcpy_name(copy_kind: Any, src: Any, dst: Any) -> str:
    """Kineto's memcpy name, e.g. ``Memcpy HtoD (Pageable -> Device)``."""
    kind = _COPY_NAMES.get(copy_kind or "", copy_kind or "other")
    return f"Memcpy {kind} ({(src or 'unknown').capitalize()} -> {(dst or 'unknown').capitalize()})"


__all__ = ["CHROME", "TENSORBOARD", "Dialect", "Lanes", "Pids", "rank_events"]
