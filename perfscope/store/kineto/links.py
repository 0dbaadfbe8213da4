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


class _CommsOps:
    """The ``record_param_comms`` ops of a rank, to find the one that launched a kernel:
    by the ``External id`` the kernel carries, or else the innermost op around the
    launching API call on its thread."""

    def __init__(self, rpc: list[Event]) -> None:
        self.by_ext = {e.args.external_id: e for e in rpc if e.args is not None and isinstance(e.args.external_id, int)}
        # Per thread: rpc ops sorted by start, to find the innermost one around a launch.
        rpc_ts = ts_ns(rpc) if rpc else np.zeros(0, np.int64)
        rpc_dur = dur_ns(rpc) if rpc else np.zeros(0, np.int64)
        self.by_thread: dict[tuple[Any, Any], list[tuple[int, int, Event]]] = {}
        for e, t0, d in zip(rpc, rpc_ts.tolist(), rpc_dur.tolist()):
            self.by_thread.setdefault((e.pid, e.tid), []).append((t0, t0 + d, e))
        for lst in self.by_thread.values():
            lst.sort(key=lambda x: x[0])
        self.starts = {k: [x[0] for x in v] for k, v in self.by_thread.items()}

    def of(self, kernel: Event, launch: Launch | None) -> Event | None:
        """The op that launched ``kernel`` (whose launching API call is ``launch``), or None."""
        op = self.by_ext.get(kernel.args.external_id) if kernel.args is not None else None
        if op is None and launch is not None:
            thread = (launch.pid, launch.tid)
            op = _enclosing(self.by_thread.get(thread), self.starts.get(thread), launch.ts_ns)
        return op


_KERNEL_COLUMNS = ("enqueue_ns", "comm_id", "seq", "func", "count", "datatype", "bytes", "nranks",
                   "algorithm", "protocol", "kernel_name", "device", "stream", "correlation")


def collectives_from_kernels(
    nccl: list[Event], rpc: list[Event], api_by_corr: LaunchIndex, base_ns: int, warnings: list[str]
) -> dict[str, Any]:
    """The ``collectives`` table: one row per NCCL kernel, with the arguments of its
    ``record_param_comms`` op where it can be linked (a warning says how many could not)."""
    ops = _CommsOps(rpc)
    rows: dict[str, list[Any]] = {k: [] for k in _KERNEL_COLUMNS}
    unlinked = 0
    for k in nccl:
        launch = api_by_corr.get(arg_of(k, "correlation"))
        # Newer Kineto copies the collective's arguments onto the kernel; older traces only
        # have them on the launching record_param_comms op.  Use the kernel's, fill the
        # rest (e.g. seq) from the op.
        op = ops.of(k, launch)
        row = _kernel_row(k, [x for x in (k.args, op.args if op is not None else None) if x is not None])
        row["enqueue_ns"] = launch.ts_ns + base_ns if launch is not None else None
        if not row.pop("linked"):
            unlinked += 1
        for name in _KERNEL_COLUMNS:
            rows[name].append(row[name])
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


def _kernel_row(k: Event, sources: list[Any]) -> dict[str, Any]:
    """One NCCL kernel's collectives row (but ``enqueue_ns``) from its name and the first of
    ``sources`` (its args, then its op's) that has each argument; ``linked`` says whether
    one of them named the collective."""

    def pick(attr: str) -> Any:
        for x in sources:
            v = getattr(x, attr)
            if v is not None:
                return v
        return None

    func_k, algo, proto = parse_nccl_kernel(k.name)
    collective = pick("collective")
    nin, nout = to_int(pick("in_nelems")), to_int(pick("out_nelems"))
    both = [n for n in (nin, nout) if n is not None]
    count = min(both) if both else None
    dtype = str_or_none(pick("dtype"))
    size = dtype_size(dtype)
    comm = pick("pg_name")
    return {
        "linked": collective is not None,
        "comm_id": str_or_none(comm if comm is not None else pick("pg_id")),
        "seq": to_int(pick("seq")),
        "func": normalize_collective(collective) or func_k,
        "count": count,
        "datatype": dtype,
        "bytes": count * size if count is not None and size is not None else None,
        "nranks": to_int(pick("group_size")),
        "algorithm": algo,
        "protocol": proto,
        "kernel_name": str_or_none(k.name),
        "device": device_of(k),
        "stream": stream_of(k),
        "correlation": arg_of(k, "correlation"),
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
