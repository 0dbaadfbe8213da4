"""Export a run as Chrome trace JSON (opens in Perfetto UI and chrome://tracing).

The file follows Kineto's layout closely enough that perfscope's own Kineto importer,
Perfetto and HTA read it:

* top level: ``schemaVersion``, ``deviceProperties``, ``distributedInfo`` (``rank``,
  ``world_size``), ``baseTimeNanoseconds``, ``displayTimeUnit`` and ``traceEvents``;
  ``ts``/``dur`` are microseconds relative to ``baseTimeNanoseconds`` (the first second of
  the run), so a double holds them to the nanosecond;
* per rank, one **GPU process** per device (``rank R GPU D``) with one lane per stream for
  kernels, memcpy and memset (``tid`` = stream id, as Kineto), plus lanes for
  synchronisation, GPU annotations, NCCL collectives and one lane per NCCL channel (the
  profiler plugin's per-channel kernel timing, ``nccl_channels``);
* per rank, one **host process** per host pid (``rank R host``) with lanes for steps
  (``ProfilerStep#N``), markers, CUDA API calls (on the calling thread's id), host spans
  and NCCL proxy work (``proxy``: one lane per channel and direction, steps nested in
  their proxy operation);
* every event carries the Kineto ``args`` keys (``device``, ``stream``, ``correlation``,
  ``grid``, ``bytes`` ...).  Values Kineto has no key for (memory kinds, marker sources,
  the original thread of a lane, collective details, NVML metrics as counters) go under
  ``args.ps``, and a top-level ``perfscope`` block maps exported pids back to ranks and
  host pids.  With those, import -> export -> import gives the same tables (every table
  the Kineto importer reads; the NCCL channel and proxy lanes are for viewing).

The events come from :mod:`perfscope.store.trace_events`; this module writes them.  The
TensorBoard exporter (:mod:`perfscope.store.tensorboard`) writes the same events
through :func:`write_trace` with the :data:`TENSORBOARD` dialect: the few category and
naming choices where the PyTorch profiler plugin reads an older Kineto spelling.

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
from typing import IO, Any, cast

import msgspec

from perfscope.errors import PerfscopeError, RunExistsError, UsageError
from perfscope.store.reader import Run, open_run
from perfscope.store.trace_events import (
    CHROME,
    TENSORBOARD,
    Dialect,
    Lanes,
    Pids,
    rank_events,
)

_CHUNK = 20_000  # events encoded per write


@dataclass
class ExportResult:
    """What :func:`export_chrome` wrote: the file, its event count and the ranks in it."""

    path: Path
    events: int
    ranks: list[int]


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

    n = write_trace(r, wanted, out, base=trace_base_ns(r, wanted))
    return ExportResult(out, n, wanted)


def write_trace(
    run: Run, ranks: list[int], out: Path, *, base: int, dialect: Dialect = CHROME,
    device_props: list[dict[str, Any]] | None = None,
) -> int:
    """Write ``ranks`` of ``run`` to ``out`` (gzip when it ends in ``.gz``) atomically.

    ``base`` is the epoch ns that ``ts`` counts from; ``device_props`` replaces the
    ``deviceProperties`` taken from the first rank's metadata.

    Returns:
        the number of trace events written.

    Raises:
        PerfscopeError: ``out`` cannot be written (nothing is left behind).
    """
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        opener = gzip.open if out.name.endswith(".gz") else open
        with opener(tmp, "wb") as f:  # type: ignore[operator]
            n = _write(run, ranks, base, cast(IO[bytes], f), dialect, device_props)
        os.replace(tmp, out)
    except OSError as e:
        _remove_quietly(tmp)
        raise PerfscopeError(f"cannot write {out}: {e.strerror or e}; choose a writable path") from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    return n


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def trace_base_ns(run: Run, ranks: list[int]) -> int:
    """The first whole second (epoch ns) at or before the earliest event of ``ranks``."""
    lo: int | None = None
    for name in ("kernels", "memcpy", "memset", "sync", "api", "markers", "steps", "host", "collectives",
                 "nccl_channels", "proxy"):
        df = run.table(name, ranks=ranks, columns=["start_ns"])
        if len(df):
            m = int(df["start_ns"].min())
            lo = m if lo is None else min(lo, m)
    df = run.table("metrics", ranks=ranks, columns=["ts_ns"])
    if len(df):
        m = int(df["ts_ns"].min())
        lo = m if lo is None else min(lo, m)
    return 0 if lo is None else (lo // 1_000_000_000) * 1_000_000_000


def _write(run: Run, ranks: list[int], base: int, f: IO[bytes], dialect: Dialect,
           device_props: list[dict[str, Any]] | None) -> int:
    enc = msgspec.json.Encoder()
    meta = run.meta
    world = meta.get("world_size") or len(ranks)
    pids = Pids()
    lanes = Lanes()
    rank_blocks: list[dict[str, Any]] = []
    first_meta = run.rank_meta(ranks[0]) if ranks else {}
    dist = dict(first_meta.get("distributed_info") or {})
    dist.update({"rank": ranks[0] if ranks else 0, "world_size": world})
    header = {
        "schemaVersion": 1,
        "deviceProperties": device_props if device_props is not None else
        (first_meta.get("devices") or props_from_gpu(first_meta.get("gpu"))),
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
        block["deviceProperties"] = rmeta.get("devices") or props_from_gpu(rmeta.get("gpu"))
        rdist = dict(rmeta.get("distributed_info") or {})
        rdist.update({"rank": rank, "world_size": world})
        block["distributedInfo"] = rdist
        rank_blocks.append(block)
        for chunk in _chunks(rank_events(run, rank, base, rmeta, pids, lanes, block, dialect, single=len(ranks) == 1)):
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


def props_from_gpu(gpu: Any) -> list[dict[str, Any]]:
    """Kineto's ``deviceProperties`` (one entry) from a rank's ``gpu`` metadata, [] without it.

    The recorder writes ``total_memory_bytes``/``capability``, the Kineto importer
    ``memory_bytes``/``compute_capability``: both are read."""
    if not isinstance(gpu, dict) or not gpu:
        return []
    cc = str(gpu.get("compute_capability") or gpu.get("capability") or "")
    major, _, minor = cc.partition(".")
    props = {
        "id": gpu.get("index", 0), "name": gpu.get("name"),
        "totalGlobalMem": gpu.get("memory_bytes", gpu.get("total_memory_bytes")),
        "computeMajor": int(major) if major.isdigit() else None, "computeMinor": int(minor) if minor.isdigit() else None,
        "numSms": gpu.get("num_sms"), "uuid": gpu.get("uuid"),
    }
    return [{k: v for k, v in props.items() if v is not None}]


def _chunks(events: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    buf: list[dict[str, Any]] = []
    for e in events:
        buf.append(e)
        if len(buf) >= _CHUNK:
            yield buf
            buf = []
    if buf:
        yield buf


def _metadata_events(lanes: Lanes, rank_blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


__all__ = ["CHROME", "TENSORBOARD", "Dialect", "ExportResult", "export_chrome", "props_from_gpu", "trace_base_ns", "write_trace"]
