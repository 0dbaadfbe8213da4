"""Export a run as Chrome trace JSON (opens in Perfetto UI and chrome://tracing).

The file follows Kineto's layout closely enough that perfscope's own Kineto importer,
Perfetto and HTA read it:

* top level: ``schemaVersion``, ``deviceProperties``, ``distributedInfo`` (``rank``,
  ``world_size``), ``baseTimeNanoseconds``, ``displayTimeUnit`` and ``traceEvents``;
  ``ts``/``dur`` are microseconds relative to ``baseTimeNanoseconds`` (the first second of
  the run), so a double holds them to the nanosecond;
* per rank, one **GPU process** per device (``rank R GPU D``) with one lane per stream for
  kernels, memcpy and memset (``tid`` = stream id, as Kineto), plus lanes for
  synchronisation, GPU annotations and NCCL collectives;
* per rank, one **host process** per host pid (``rank R host``) with lanes for steps
  (``ProfilerStep#N``), markers, CUDA API calls (on the calling thread's id) and host spans;
* every event carries the Kineto ``args`` keys (``device``, ``stream``, ``correlation``,
  ``grid``, ``bytes`` ...).  Values Kineto has no key for (memory kinds, marker sources,
  the original thread of a lane, collective details, NVML metrics as counters) go under
  ``args.ps``, and a top-level ``perfscope`` block maps exported pids back to ranks and
  host pids.  With those, import -> export -> import gives the same tables.

JSON is written in chunks as it is produced (one rank and table at a time, encoded with
msgspec), never as one giant list of dicts; ``.json.gz`` outputs are gzip-compressed.
"""
from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np
import pandas as pd

from perfscope.errors import PerfscopeError, RunExistsError, UsageError
from perfscope.store.reader import Run, open_run

_CHUNK = 20_000  # events encoded per write


@dataclass
class ExportResult:
    """What :func:`export_chrome` wrote: the file, its event count and the ranks in it."""

    path: Path
    events: int
    ranks: list[int]


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


def _stream_lane(lanes: _Lanes, pid: int, stream: Any) -> int:
    """The lane (tid) of a GPU stream, sorted by stream id."""
    return lanes.real(pid, stream if stream is not None else 0, f"stream {stream}", 0 if stream is None else int(stream))


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class _Pids:
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


class _Lanes:
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


def export_chrome(
    run: str | os.PathLike[str] | Run,
    out: str | os.PathLike[str],
    *,
    ranks: Sequence[int] | None = None,
    force: bool = False,
) -> ExportResult:
    """Write ``run`` (all ranks, or ``ranks``) as Chrome trace JSON at ``out``.

    Returns:
        an :class:`ExportResult` (path, number of trace events, ranks exported).

    Raises:
        RunExistsError: ``out`` exists and ``force`` is false.
        UsageError: a requested rank is not in the run.
        NotARunError / InputError / SchemaVersionError / CorruptRunError: from opening the run.
    """
    r = run if isinstance(run, Run) else open_run(run)
    out = Path(out)
    if out.exists() and not force:
        raise RunExistsError(f"{out} already exists; choose another output or pass --force to replace it")
    if out.is_dir():
        raise UsageError(f"{out} is a directory; give a file name such as trace.json")
    available = r.ranks
    wanted = available if ranks is None else sorted({int(x) for x in ranks})
    missing = [x for x in wanted if x not in available]
    if missing:
        raise UsageError(f"rank(s) {missing} not in {r.path}; it has ranks {available}")

    base = _base_ns(r, wanted)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        opener = gzip.open if out.name.endswith(".gz") else open
        with opener(tmp, "wb") as f:  # type: ignore[operator]
            n = _write(r, wanted, base, f)
        os.replace(tmp, out)
    except OSError as e:
        _remove_quietly(tmp)
        raise PerfscopeError(f"cannot write {out}: {e.strerror or e}; choose a writable path") from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    return ExportResult(out, n, wanted)


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _base_ns(run: Run, ranks: list[int]) -> int:
    """The first whole second (epoch ns) at or before the run's earliest event."""
    lo: int | None = None
    for name in ("kernels", "memcpy", "memset", "sync", "api", "markers", "steps", "host", "collectives"):
        df = run.table(name, ranks=ranks, columns=["start_ns"])
        if len(df):
            m = int(df["start_ns"].min())
            lo = m if lo is None else min(lo, m)
    df = run.table("metrics", ranks=ranks, columns=["ts_ns"])
    if len(df):
        m = int(df["ts_ns"].min())
        lo = m if lo is None else min(lo, m)
    return 0 if lo is None else (lo // 1_000_000_000) * 1_000_000_000


def _write(run: Run, ranks: list[int], base: int, f: IO[bytes]) -> int:
    enc = msgspec.json.Encoder()
    meta = run.meta
    world = meta.get("world_size") or len(ranks)
    pids = _Pids()
    lanes = _Lanes()
    rank_blocks: list[dict[str, Any]] = []
    first_meta = run.rank_meta(ranks[0]) if ranks else {}
    dist = dict(first_meta.get("distributed_info") or {})
    dist.update({"rank": ranks[0] if ranks else 0, "world_size": world})
    header = {
        "schemaVersion": 1,
        "deviceProperties": first_meta.get("devices") or _props_from_gpu(first_meta.get("gpu")),
        "distributedInfo": dist,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
        "traceName": str(run.path),
    }
    # Kineto's keys go first (some readers, HTA among them, look for distributedInfo before
    # traceEvents); the perfscope block goes last so that its per-rank pid tables can be
    # filled in while the events are written.
    # json's default ", "/": " separators, as Kineto writes them: HTA finds a trace's rank
    # with the regex '"rank":\s+(\d+)'.
    f.write(json.dumps(header).encode()[:-1] + b', "traceEvents": [')
    count = 0
    first = True
    for rank in ranks:
        block: dict[str, Any] = {"rank": rank, "pids": []}
        rmeta = run.rank_meta(rank)
        block["deviceProperties"] = rmeta.get("devices") or _props_from_gpu(rmeta.get("gpu"))
        rdist = dict(rmeta.get("distributed_info") or {})
        rdist.update({"rank": rank, "world_size": world})
        block["distributedInfo"] = rdist
        rank_blocks.append(block)
        for chunk in _chunks(_rank_events(run, rank, base, rmeta, pids, lanes, block, single=len(ranks) == 1)):
            body = enc.encode(chunk)[1:-1]
            if not body:
                continue
            f.write(body if first else b"," + body)
            first = False
            count += len(chunk)
    meta_events = _metadata_events(lanes, rank_blocks)
    if meta_events:
        body = enc.encode(meta_events)[1:-1]
        f.write(body if first else b"," + body)
        count += len(meta_events)
    f.write(b'],"perfscope":')
    f.write(enc.encode({"format": 1, "run_id": meta.get("run_id"), "source": meta.get("source"), "ranks": rank_blocks}))
    f.write(b"}")
    return count


def _props_from_gpu(gpu: Any) -> list[dict[str, Any]]:
    if not isinstance(gpu, dict) or not gpu:
        return []
    cc = str(gpu.get("compute_capability") or "")
    major, _, minor = cc.partition(".")
    return [_drop_none({
        "id": gpu.get("index", 0), "name": gpu.get("name"), "totalGlobalMem": gpu.get("memory_bytes"),
        "computeMajor": int(major) if major.isdigit() else None, "computeMinor": int(minor) if minor.isdigit() else None,
        "numSms": gpu.get("num_sms"), "uuid": gpu.get("uuid"),
    })]


def _chunks(events: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    buf: list[dict[str, Any]] = []
    for e in events:
        buf.append(e)
        if len(buf) >= _CHUNK:
            yield buf
            buf = []
    if buf:
        yield buf


def _metadata_events(lanes: _Lanes, rank_blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    evs: list[dict[str, Any]] = []
    for block in rank_blocks:
        for p in block["pids"]:
            evs.append({"name": "process_name", "ph": "M", "pid": p["pid"], "tid": 0, "args": {"name": p["label"]}})
            evs.append({"name": "process_sort_index", "ph": "M", "pid": p["pid"], "tid": 0, "args": {"sort_index": p["sort"]}})
            evs.append({"name": "process_labels", "ph": "M", "pid": p["pid"], "tid": 0, "args": {"labels": f"rank {block['rank']}"}})
    for (pid, tid), (name, sort) in lanes.names.items():
        evs.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        evs.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort}})
    return evs


def _rank_events(
    run: Run, rank: int, base: int, rmeta: dict[str, Any], pids: _Pids, lanes: _Lanes,
    block: dict[str, Any], *, single: bool,
) -> Iterator[dict[str, Any]]:
    """Every trace event of one rank, table by table: GPU activity on stream lanes, GPU
    annotations and host markers, host steps, API calls and spans, NVML counters."""
    export = _RankExport(rank, base, rmeta, pids, lanes, block, single=single)
    for table in ("kernels", "memcpy", "memset", "sync", "collectives", "markers", "steps", "api", "host", "metrics"):
        df = run.table(table, ranks=[rank])
        if len(df):
            yield from getattr(export, table)(df)


class _RankExport:
    """The trace events of one rank's tables: a method per table, taking its frame.

    Processes are made as events first need them, so that pids and their sort order
    follow the tables' order: a host process per host pid (:meth:`host_pid`), a GPU
    process per device (:meth:`gpu_pid`), each recorded in the rank's ``block``.
    """

    def __init__(self, rank: int, base: int, rmeta: dict[str, Any], pids: _Pids, lanes: _Lanes,
                 block: dict[str, Any], *, single: bool) -> None:
        self.rank, self.base, self.pids, self.lanes, self.block, self.single = rank, base, pids, lanes, block, single
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
        """NCCL collectives on the GPU's collectives lane, every column under ``args.ps``."""
        cols = {c: _pylist(df[c]) for c in df.columns if c not in ("start_ns", "dur_ns", "rank", "enqueue_ns")}
        ts, dur = _us(df["start_ns"], self.base), _us(df["dur_ns"], 0)
        enq = _pylist(df["enqueue_ns"])
        for i in range(len(df)):
            dev = cols["device"][i]
            pid = self.gpu_pid(dev)
            extra = {k: v[i] for k, v in cols.items()}
            extra["enqueue_us"] = None if enq[i] is None else (int(enq[i]) - self.base) / 1000.0
            yield {"ph": "X", "cat": "perfscope_collective",
                   "name": f"{cols['func'][i] or 'collective'}" + (f" {cols['comm_id'][i]}" if cols["comm_id"][i] else ""),
                   "pid": pid, "tid": self.lanes.synthetic(pid, "collectives", "collectives", 200_000),
                   "ts": ts[i], "dur": dur[i], "args": {"ps": extra}}

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
        pid = self.host_pid(self.main_pid)
        lane = self.lanes.synthetic(pid, "steps", "steps", 0)
        for i in range(len(df)):
            yield {"ph": "X", "cat": "user_annotation", "name": name[i] or f"ProfilerStep#{step[i]}", "pid": pid, "tid": lane,
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
            yield {"ph": "X", "cat": "cuda_driver" if kind == "driver" else "cuda_runtime", "name": cols["name"][i],
                   "pid": pid, "tid": lane, "ts": ts[i], "dur": dur[i], "args": args}

    def host(self, df: pd.DataFrame) -> Iterator[dict[str, Any]]:
        """Host spans (data loading, barriers...) on their thread's host lane."""
        cols, ts, dur = _columns(df, self.base)
        pid = self.host_pid(self.main_pid)
        for i in range(len(df)):
            tid = cols["tid"][i]
            yield {"ph": "X", "cat": "perfscope_host", "name": cols["name"][i] or cols["kind"][i], "pid": pid,
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


def _memcpy_name(copy_kind: Any, src: Any, dst: Any) -> str:
    """Kineto's memcpy name, e.g. ``Memcpy HtoD (Pageable -> Device)``."""
    kind = _COPY_NAMES.get(copy_kind or "", copy_kind or "other")
    return f"Memcpy {kind} ({(src or 'unknown').capitalize()} -> {(dst or 'unknown').capitalize()})"


__all__ = ["ExportResult", "export_chrome"]
