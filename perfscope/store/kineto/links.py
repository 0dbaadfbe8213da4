"""Tables whose rows link events across a rank's trace: ``sync`` and ``collectives``."""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from perfscope.store.arrays import int_array, str_or_none, to_int
from perfscope.store.kineto.decode import decode_args_batch
from perfscope.store.kineto.events import Event
from perfscope.store.kineto.parse import parse_nccl_kernel, parse_sync_kind
from perfscope.store.kineto.tables import (
    arg_of,
    device_of,
    extras,
    int_col,
    ints_or,
    stream_of,
    with_extra,
)
from perfscope.store.kineto.timestamps import dur_ns, event_times, ts_ns
from perfscope.store.names import dtype_size, normalize_collective


class Launch(NamedTuple):
    """What later lookups need of a CUDA API call (kept per correlation id, not the event)."""

    pid: Any
    tid: Any
    ts_ns: int  # start, ns without the trace's base
    ps: Any


class LaunchIndex:
    """``get(correlation)`` -> :class:`Launch` or None, over the API calls' columns.

    Built from the builder's per-chunk (args, pids, tids, starts) of the API calls: a dict
    from correlation id to row (later chunks, and later rows, win on a repeated one) and
    the columns themselves, so that a :class:`Launch` is made only for the rows looked up
    (a few NCCL kernels and syncs), not for every call.
    """

    def __init__(self, parts: Sequence[tuple[list[Any], list[Any], list[Any], np.ndarray]] = (), base_ns: int = 0) -> None:
        self.rows: dict[Any, int] = {}
        self.args: list[Any] = []
        self.pids: list[Any] = []
        self.tids: list[Any] = []
        starts: list[np.ndarray] = []
        for args, pids, tids, start_ns in parts:
            first = len(self.args)
            self.rows.update(zip([a.correlation for a in args], range(first, first + len(args))))
            self.args += args
            self.pids += pids
            self.tids += tids
            starts.append(start_ns)
        # Starts without the trace's base, as the launch's ts_ns.
        self.starts = np.concatenate(starts) - base_ns if starts else np.zeros(0, np.int64)

    def get(self, correlation: Any) -> Launch | None:
        i = self.rows.get(correlation) if isinstance(correlation, int) else None
        if i is None:
            return None
        return Launch(self.pids[i], self.tids[i], int(self.starts[i]), self.args[i].ps)



def sync_table(sync: list[Event], launches: LaunchIndex, base_ns: int) -> dict[str, Any]:
    """The ``sync`` table; the waiting thread is the one that made the correlated API call."""
    args = decode_args_batch(sync)
    x = extras(args)
    start, dur = event_times(sync, base_ns)
    tids: list[Any] = []
    for a in args:
        if isinstance(a.ps, dict) and "tid" in a.ps:
            tids.append(a.ps["tid"])
            continue
        launch = launches.get(a.correlation) if isinstance(a.correlation, int) else None
        if launch is None:
            tids.append(None)
        elif isinstance(launch.ps, dict) and "tid" in launch.ps:
            tids.append(launch.ps["tid"])
        else:
            tids.append(launch.tid)
    return {
        "start_ns": start, "dur_ns": dur,
        "device": ints_or([a.device for a in args], [e.pid for e in sync], pa.int32()),
        "stream": ints_or([a.stream for a in args], [e.tid for e in sync]),
        "correlation": int_col([a.correlation for a in args]),
        "sync_kind": with_extra([parse_sync_kind(a.cuda_sync_kind, e.name) for a, e in zip(args, sync)], x, "sync_kind"),
        "tid": int_col(tids),
    }



def collectives_from_kernels(
    nccl: list[Event], rpc: list[Event], api_by_corr: LaunchIndex, base_ns: int, warnings: list[str]
) -> dict[str, Any]:
    """One row per NCCL kernel, with record_param_comms arguments where they can be linked."""
    by_ext = {e.args.external_id: e for e in rpc if e.args is not None and isinstance(e.args.external_id, int)}
    # Per thread: rpc ops sorted by start, to find the innermost one around a launch.
    rpc_ts = ts_ns(rpc) if rpc else np.zeros(0, np.int64)
    rpc_dur = dur_ns(rpc) if rpc else np.zeros(0, np.int64)
    by_thread: dict[tuple[Any, Any], list[tuple[int, int, Event]]] = {}
    for e, t0, d in zip(rpc, rpc_ts.tolist(), rpc_dur.tolist()):
        by_thread.setdefault((e.pid, e.tid), []).append((t0, t0 + d, e))
    for lst in by_thread.values():
        lst.sort(key=lambda x: x[0])
    starts_by_thread = {k: [x[0] for x in v] for k, v in by_thread.items()}

    launches = [api_by_corr.get(arg_of(k, "correlation")) for k in nccl]
    launch_ts = np.array([a.ts_ns if a is not None else 0 for a in launches], dtype=np.int64)

    rows: dict[str, list[Any]] = {k: [] for k in (
        "enqueue_ns", "comm_id", "seq", "func", "count", "datatype", "bytes", "nranks",
        "algorithm", "protocol", "kernel_name", "device", "stream", "correlation")}
    unlinked = 0
    for k, launch, lts in zip(nccl, launches, launch_ts.tolist()):
        a = k.args
        # Newer Kineto copies the collective's arguments onto the kernel; older traces only
        # have them on the launching record_param_comms op.  Use the kernel's, fill the
        # rest (e.g. seq) from the op.
        op = None
        if a is not None:
            op = by_ext.get(a.external_id)
        if op is None and launch is not None:
            op = _enclosing(by_thread.get((launch.pid, launch.tid)), starts_by_thread.get((launch.pid, launch.tid)), lts)
        sources = [x for x in (a, op.args if op is not None else None) if x is not None]

        def pick(attr: str) -> Any:
            for x in sources:
                v = getattr(x, attr)
                if v is not None:
                    return v
            return None

        func_k, algo, proto = parse_nccl_kernel(k.name)
        collective = pick("collective")
        if collective is None:
            unlinked += 1
        nin, nout = to_int(pick("in_nelems")), to_int(pick("out_nelems"))
        both = [n for n in (nin, nout) if n is not None]
        count = min(both) if both else None
        dtype = str_or_none(pick("dtype"))
        size = dtype_size(dtype)
        comm = pick("pg_name")
        rows["enqueue_ns"].append(int(lts) + base_ns if launch is not None else None)
        rows["comm_id"].append(str_or_none(comm if comm is not None else pick("pg_id")))
        rows["seq"].append(to_int(pick("seq")))
        rows["func"].append(normalize_collective(collective) or func_k)
        rows["count"].append(count)
        rows["datatype"].append(dtype)
        rows["bytes"].append(count * size if count is not None and size is not None else None)
        rows["nranks"].append(to_int(pick("group_size")))
        rows["algorithm"].append(algo)
        rows["protocol"].append(proto)
        rows["kernel_name"].append(str_or_none(k.name))
        rows["device"].append(device_of(k))
        rows["stream"].append(stream_of(k))
        rows["correlation"].append(arg_of(k, "correlation"))
    if unlinked:
        warnings.append(
            f"{unlinked} of {len(nccl)} NCCL kernels have no collective arguments (no linked record_param_comms "
            "with 'Collective name'); their size and communicator are unknown")
    start, dur = event_times(nccl, base_ns)
    return {
        "start_ns": start, "dur_ns": dur,
        "enqueue_ns": int_array(rows["enqueue_ns"]),
        "comm_id": rows["comm_id"], "seq": int_col(rows["seq"]), "func": rows["func"],
        "count": int_col(rows["count"]), "datatype": rows["datatype"], "bytes": int_col(rows["bytes"]),
        "nranks": int_col(rows["nranks"], pa.int32()), "algorithm": rows["algorithm"],
        "protocol": rows["protocol"], "kernel_name": rows["kernel_name"],
        "device": int_col(rows["device"], pa.int32()), "stream": int_col(rows["stream"]),
        "correlation": int_col(rows["correlation"]), "source": ["kineto"] * len(nccl),
    }


def _enclosing(ops: list[tuple[int, int, Event]] | None, starts: list[int] | None, t: int) -> Event | None:
    """The latest-starting op in ``ops`` (sorted by start) whose range holds ``t``."""
    if not ops or starts is None:
        return None
    i = bisect_right(starts, t) - 1
    while i >= 0:
        s, end, e = ops[i]
        if s <= t <= end:
            return e
        i -= 1
    return None
