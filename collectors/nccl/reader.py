"""Read the NCCL profiler plugin's files and turn them into store tables.

The plugin writes one file per process (``*.psnccl``; layout in ``perfscope_nccl_format.h``):
a 128-byte header, then 128-byte records in flush order.  This module decodes them in bulk
with a NumPy structured dtype (no per-record Python work) and builds:

* ``collectives``: one row per Coll or P2p event (see :func:`collectives_frame`);
* ``nccl_channels``: one row per KernelCh event (per-channel GPU start/stop);
* ``proxy``: one row per ProxyOp and ProxyStep event (levels 2 and 3).

GPU timestamps (``%globaltimer``) are put on the host clock with one offset per file,
``min(host callback time - GPU time)`` over every KernelCh start and stop: the proxy thread
can only notice a channel's start or stop after it happened, so that minimum is the clock
offset plus the smallest polling delay (see :func:`gpu_clock_offset`).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfscope.errors import InputError
from perfscope.store.names import dtype_size

MAGIC = b"PSNCCL1\x00"
REC_SIZE = 128
FILE_SUFFIX = ".psnccl"

# ncclProfile* event bits and our own record types (perfscope_nccl_format.h).
GROUP, COLL, P2P, PROXY_OP, PROXY_STEP = 1, 2, 4, 8, 16
KERNEL_CH = 64
GROUP_API, COLL_API, P2P_API, KERNEL_LAUNCH = 256, 512, 1024, 2048
REC_COMM, REC_COMM_END, REC_STATS = 1 << 24, 1 << 25, 1 << 26
EVENT_NAMES = {
    GROUP: "Group", COLL: "Coll", P2P: "P2p", PROXY_OP: "ProxyOp", PROXY_STEP: "ProxyStep",
    KERNEL_CH: "KernelCh", GROUP_API: "GroupApi", COLL_API: "CollApi", P2P_API: "P2pApi",
    KERNEL_LAUNCH: "KernelLaunch",
}
STATS_FIELDS = ("ring_drops", "slot_drops", "events_started", "records_queued", "write_errors", "foreign_proxy_ops", "bad_handles")
FLAG_GRAPH_CAPTURED, FLAG_IS_SEND, FLAG_FOREIGN_PID = 1, 2, 4
ROOTED = frozenset({"Broadcast", "Reduce"})

HEADER_DTYPE = np.dtype([
    ("magic", "S8"), ("version", "<u4"), ("rec_size", "<u4"), ("pid", "<i8"), ("created_ns", "<i8"),
    ("env_rank", "<i4"), ("level", "<i4"), ("mask", "<u4"), ("nslots", "<u4"), ("nring", "<u4"),
    ("reserved", "<u4"), ("flush_ms", "<i8"), ("host", "S64"),
])
RECORD_DTYPE = np.dtype([
    ("id", "<u8"), ("parent", "<u8"), ("start_ns", "<i8"), ("stop_ns", "<i8"), ("type", "<u4"), ("tid", "<u4"),
    ("comm", "<u2"), ("abi", "u1"), ("flags", "u1"), ("i0", "<i4"), ("u0", "<u8"), ("u1", "<u8"),
    ("x", "V64"),
])
# Views of the 64-byte per-type area.
_NAMES_DTYPE = {
    2: np.dtype([("func", "S14"), ("nch", "u1"), ("nwarps", "u1"), ("dtype", "S16"), ("algo", "S16"), ("proto", "S8"), ("aux", "<u8")]),
    # Version 1 cut protocol names to 5 characters ("SIMPL"); events() restores them.
    1: np.dtype([("func", "S16"), ("dtype", "S16"), ("algo", "S16"), ("proto", "S6"), ("nch", "u1"), ("nwarps", "u1"), ("aux", "<u8")]),
}
FORMAT_VERSIONS = tuple(_NAMES_DTYPE)
assert HEADER_DTYPE.itemsize == REC_SIZE and RECORD_DTYPE.itemsize == REC_SIZE
assert all(d.itemsize == 64 for d in _NAMES_DTYPE.values())

@dataclass
class PluginFile:
    """One decoded plugin file (one process).

    Attributes:
        path: the file.
        header: header fields (pid, created_ns, env_rank, level, mask, host, ...).
        records: every whole record as a NumPy structured array (:data:`RECORD_DTYPE`).
        comms: one row per communicator: ``comm`` (index in this process), ``comm_id``
            (commHash as ``0x``-hex), ``comm_name``, ``rank``, ``nranks``, ``nnodes``, ``abi``,
            ``init_ns``, ``end_ns``.
        stats: the last counters the plugin wrote (:data:`STATS_FIELDS`), zeros if none.
        truncated_bytes: bytes of a partial record at the end (a killed process).
    """

    path: Path
    header: dict[str, Any]
    records: np.ndarray
    comms: pd.DataFrame
    stats: dict[str, int] = field(default_factory=dict)
    truncated_bytes: int = 0

    @property
    def rank(self) -> int:
        """The process's global rank: the rank it was started with (``PERFSCOPE_RANK``/``RANK``)
        when known, else its rank in its largest communicator, else -1."""
        if int(self.header.get("env_rank", -1)) >= 0:
            return int(self.header["env_rank"])
        if len(self.comms):
            best = self.comms.sort_values(["nranks", "comm"], ascending=[False, True]).iloc[0]
            return int(best["rank"])
        return -1


_V1_PROTO = {"SIMPL": "SIMPLE"}


def _xview(r: np.ndarray, dt: str | np.dtype, width: int) -> np.ndarray:
    """View the 64-byte per-type area of records ``r`` as ``width`` values of ``dt`` per row."""
    return np.ascontiguousarray(r["x"]).view(dt).reshape(len(r), width)


def _cstr(a: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Decode a fixed-width NUL-padded bytes column to str (object array), vectorised.

    Rows where ``keep`` is false (record types without names) become ``""``.
    """
    out = np.full(len(a), "", dtype=object)
    sel = np.ones(len(a), bool) if keep is None else keep
    if sel.any():
        # The plugin zeroes the whole area before copying, so there is nothing after the NUL.
        out[sel] = np.char.decode(a[sel], "utf-8", errors="replace").astype(object)
    return out


def read_file(path: str | os.PathLike[str]) -> PluginFile:
    """Decode one plugin file.

    Raises:
        InputError: the file is not a perfscope NCCL plugin file or has another record size.
    """
    p = Path(path)
    raw = p.read_bytes()
    if len(raw) < REC_SIZE or raw[:8] != MAGIC:
        raise InputError(f"{p} is not a perfscope NCCL plugin file (bad magic); was it written by another tool?")
    hdr = np.frombuffer(raw[:REC_SIZE], dtype=HEADER_DTYPE)[0]
    if int(hdr["rec_size"]) != REC_SIZE:
        raise InputError(f"{p} uses {int(hdr['rec_size'])}-byte records; this perfscope reads {REC_SIZE}-byte records (upgrade perfscope)")
    if int(hdr["version"]) not in FORMAT_VERSIONS:
        raise InputError(f"{p} has plugin file format {int(hdr['version'])}; this perfscope reads {list(FORMAT_VERSIONS)} (upgrade perfscope)")
    header = {n: (hdr[n].item() if n not in ("magic", "host") else bytes(hdr[n]).split(b"\x00")[0].decode()) for n in HEADER_DTYPE.names or ()}
    body = len(raw) - REC_SIZE
    whole = body // REC_SIZE
    recs = np.frombuffer(raw, dtype=RECORD_DTYPE, count=whole, offset=REC_SIZE).copy()
    comm_rows = recs[recs["type"] == REC_COMM]
    ends = recs[recs["type"] == REC_COMM_END]
    end_by_comm = {int(c): int(t) for c, t in zip(ends["comm"], ends["stop_ns"])}
    xi = _xview(comm_rows, "<i4", 16)
    names = np.ascontiguousarray(comm_rows["x"]).view("S64").reshape(len(comm_rows))
    comms = pd.DataFrame({
        "comm": comm_rows["comm"].astype("int64"),
        "comm_id": [f"0x{int(h):016x}" for h in comm_rows["u0"]],
        "comm_name": [bytes(n)[16:].split(b"\x00")[0].decode("utf-8", "replace") for n in names],
        "rank": comm_rows["i0"].astype("int64"),
        "nranks": xi[:, 0].astype("int64"),
        "nnodes": xi[:, 1].astype("int64"),
        "abi": xi[:, 2].astype("int64"),
        "init_ns": comm_rows["start_ns"].astype("int64"),
        "end_ns": [end_by_comm.get(int(c)) for c in comm_rows["comm"]],
    })
    stats_rows = recs[recs["type"] == REC_STATS]
    stats = dict.fromkeys(STATS_FIELDS, 0)
    if len(stats_rows):
        last = _xview(stats_rows[-1:], "<i8", 8)[0]
        stats = {name: int(last[i]) for i, name in enumerate(STATS_FIELDS)}
    return PluginFile(p, header, recs, comms, stats, body - whole * REC_SIZE)


def find_files(nccl_dir: str | os.PathLike[str]) -> list[Path]:
    """Return the plugin files (``*.psnccl``) directly in ``nccl_dir``, sorted by name."""
    d = Path(nccl_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.suffix == FILE_SUFFIX and p.is_file())


def read_dir(nccl_dir: str | os.PathLike[str]) -> list[PluginFile]:
    """Decode every plugin file in ``nccl_dir`` (see :func:`read_file`)."""
    return [read_file(p) for p in find_files(nccl_dir)]


# ------------------------------------------------------------------------------ events


def events(f: PluginFile) -> pd.DataFrame:
    """Every NCCL event record of a file as a flat DataFrame, strings decoded.

    Returns:
        one row per event record with the raw record fields (``id``, ``parent``, ``type``,
        ``start_ns``, ``stop_ns`` (host, ns), ``tid``, ``comm``, ``abi``, ``flags``, ``i0``,
        ``u0``, ``u1``), the decoded name fields (``func``, ``dtype``, ``algo``, ``proto``,
        ``nch``, ``nwarps``, ``aux``) and the per-type area as ``t0``..``t7`` (int64) and
        ``i1x``..``i5x`` (its first five int32); perfscope_nccl_format.h says what each
        holds per type.
    """
    r = f.records[(f.records["type"] < REC_COMM) & (f.records["type"] > 0)]
    version = int(f.header.get("version", 2))
    names = np.ascontiguousarray(r["x"]).view(_NAMES_DTYPE[version]).reshape(len(r))
    xi = _xview(r, "<i4", 16)
    xt = _xview(r, "<i8", 8)
    # The name fields mean something only for these types (the area holds numbers otherwise).
    named = np.isin(r["type"], [COLL, P2P, COLL_API, P2P_API])
    ops = np.isin(r["type"], [COLL, P2P])
    coll = r["type"] == COLL
    proto = _cstr(names["proto"], coll)
    if version < 2:
        proto = np.array([_V1_PROTO.get(p, p) for p in proto], dtype=object)
    df = pd.DataFrame({
        "id": r["id"].astype("int64"), "parent": r["parent"].astype("int64"), "type": r["type"].astype("int64"),
        "start_ns": r["start_ns"].astype("int64"), "stop_ns": r["stop_ns"].astype("int64"),
        "tid": r["tid"].astype("int64"), "comm": r["comm"].astype("int64"), "abi": r["abi"].astype("int64"),
        "flags": r["flags"].astype("int64"), "i0": r["i0"].astype("int64"),
        "u0": r["u0"].astype("uint64"), "u1": r["u1"].astype("uint64"),
        "func": _cstr(names["func"], named), "dtype": _cstr(names["dtype"], named),
        "algo": _cstr(names["algo"], coll), "proto": proto,
        "nch": np.where(ops, names["nch"], 0).astype("int64"), "nwarps": np.where(coll, names["nwarps"], 0).astype("int64"),
        "aux": np.where(ops, names["aux"], 0).astype("int64"),
    })
    for k in range(8):
        df[f"t{k}"] = xt[:, k]
    for k in range(5):
        df[f"i{k + 1}x"] = xi[:, k]
    return df


def gpu_clock_offset(kch: pd.DataFrame) -> int | None:
    """Return ns to add to GPU ``%globaltimer`` values to put them on the host clock.

    Args:
        kch: KernelCh events with ``start_ns``/``u0`` (callback time / GPU start) and
            ``t0``/``u1`` (stop-state time / GPU stop).

    Returns:
        ``min(host - gpu)`` over every start and stop with a GPU value, or None when there is
        none.  The host sees a channel's start or stop only after it happened, so this is the
        offset plus the smallest observation delay (a few microseconds of proxy polling).
    """
    deltas = []
    g0 = kch["u0"].astype("int64")
    ok = g0 > 0
    deltas.append((kch["start_ns"] - g0)[ok])
    g1 = kch["u1"].astype("int64")
    ok = (g1 > 0) & (kch["t0"] > 0)
    deltas.append((kch["t0"] - g1)[ok])
    d = pd.concat(deltas)
    return int(d.min()) if len(d) else None


@dataclass
class RankTables:
    """The tables built from the files of one rank, plus what the recorder should report.

    Attributes:
        rank: the global rank.
        tables: ``{"collectives": df, "nccl_channels": df, "proxy": df}`` (empty tables left out).
        dropped_events: events the plugin could not keep (``ring_drops + slot_drops``).
        info: per-file details for rank metadata: files, pids, comms, stats, clock offset.
    """

    rank: int
    tables: dict[str, pd.DataFrame]
    dropped_events: int
    info: dict[str, Any]


def build_rank_tables(files: Iterable[PluginFile]) -> RankTables:
    """Build the store tables of one rank from its plugin files (usually one)."""
    files = list(files)
    pieces: dict[str, list[pd.DataFrame]] = {"collectives": [], "nccl_channels": [], "proxy": []}
    info: dict[str, Any] = {"files": [], "gpu_clock_offset_ns": {}}
    dropped = 0
    for f in files:
        ev = events(f)
        comms = f.comms.set_index("comm") if len(f.comms) else pd.DataFrame(columns=["comm_id", "nranks"])
        kch = ev[ev["type"] == KERNEL_CH]
        offset = gpu_clock_offset(kch) if len(kch) else None
        coll = _collectives(ev, kch, comms, offset)
        pieces["collectives"].append(coll)
        pieces["nccl_channels"].append(_channels(kch, ev, comms, offset))
        pieces["proxy"].append(_proxy(ev, comms))
        dropped += f.stats.get("ring_drops", 0) + f.stats.get("slot_drops", 0)
        info["files"].append({
            "path": str(f.path), "pid": f.header["pid"], "host": f.header["host"], "level": f.header["level"],
            "mask": f.header["mask"], "stats": f.stats, "truncated_bytes": f.truncated_bytes,
            "comms": f.comms.to_dict("records"),
        })
        info["gpu_clock_offset_ns"][str(f.path.name)] = offset
    tables = {}
    for name, parts in pieces.items():
        parts = [p for p in parts if len(p)]
        if parts:
            df = pd.concat(parts, ignore_index=True)
            tables[name] = df.sort_values("start_ns", kind="stable").reset_index(drop=True)
    rank = files[0].rank if files else -1
    return RankTables(rank, tables, dropped, info)


def _nint(values: Any, missing: Any = None, dtype: str = "Int64") -> pd.api.extensions.ExtensionArray:
    """A nullable integer array, vectorised.

    ``values`` may hold NaN/None (missing); ``missing`` (bool array) marks more.  Integer
    input stays integer (no float64 round trip), so epoch nanoseconds keep every digit.
    """
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        miss = np.zeros(len(arr), bool)
        vals = arr.astype("int64")
    else:
        num = pd.to_numeric(pd.Series(arr, dtype=object), errors="coerce")
        miss = num.isna().to_numpy()
        vals = num.fillna(0).to_numpy().astype("int64")
    if missing is not None:
        miss = miss | np.asarray(missing, bool)
    np_dtype = "int32" if dtype == "Int32" else "int64"
    return pd.arrays.IntegerArray(vals.astype(np_dtype), miss)


def _comm_col(comms: pd.DataFrame, comm: pd.Series, col: str) -> pd.Series:
    if col not in comms.columns or len(comms) == 0:
        return pd.Series([None] * len(comm), index=comm.index, dtype=object)
    return comm.map(comms[col])


def _collectives(ev: pd.DataFrame, kch: pd.DataFrame, comms: pd.DataFrame, offset: int | None) -> pd.DataFrame:
    """One row per Coll/P2p event in the ``collectives`` schema.

    ``start_ns``/``dur_ns``: the GPU execution from the earliest KernelCh start to the latest
    KernelCh stop of the operation (GPU timer on the host clock) when its channels were
    recorded, else the Coll/P2p event's host start/stop (enqueue to launch, not execution).
    ``enqueue_ns``: the start of the parent CollApi/P2pApi event (the NCCL API call) when
    recorded, else the Coll/P2p start.  ``seq``: NCCL's sequence number for Coll (counted per
    communicator *and* function); for P2p, which has none, the operation's index among this
    rank's P2p events of the same communicator, function and peer.
    """
    ops = ev[(ev["type"] == COLL) | (ev["type"] == P2P)].copy()
    if ops.empty:
        return pd.DataFrame()
    is_coll = ops["type"] == COLL
    by_id = ev.set_index("id")  # ids are unique within a file
    parent_type = ops["parent"].map(by_id["type"])
    parent_start = ops["parent"].map(by_id["start_ns"])
    api_parent = parent_type.isin([COLL_API, P2P_API]) & (parent_start <= ops["start_ns"])
    enqueue = np.where(api_parent, parent_start, ops["start_ns"]).astype("int64")

    start = ops["start_ns"].to_numpy(np.int64).copy()
    stop = ops["stop_ns"].to_numpy(np.int64).copy()
    if offset is not None and len(kch):
        k = kch[(kch["u0"] > 0) & (kch["u1"] > 0)]
        g = k.groupby("parent").agg(gs=("u0", "min"), ge=("u1", "max"))
        gs = ops["id"].map(g["gs"])
        ge = ops["id"].map(g["ge"])
        has = gs.notna().to_numpy() & ge.notna().to_numpy()
        start[has] = gs[has].astype("int64").to_numpy() + offset
        stop[has] = ge[has].astype("int64").to_numpy() + offset
    dur = np.maximum(stop - start, 0)

    func = ops["func"].astype(object)
    seq = ops["u0"].astype("int64")
    if (~is_coll).any():
        p2p = ops[~is_coll]
        ordinal = p2p.sort_values("start_ns", kind="stable").groupby(["comm", "func", "i0"]).cumcount()
        seq.loc[ordinal.index] = ordinal.astype("int64")
    sizes = ops["dtype"].map(dtype_size)
    count = ops["u1"].astype("int64")
    nbytes = (count * sizes.astype("float64")).round()
    return pd.DataFrame({
        "start_ns": start, "dur_ns": dur, "enqueue_ns": enqueue,
        "comm_id": _comm_col(comms, ops["comm"], "comm_id").to_numpy(object),
        "seq": _nint(seq.to_numpy()),
        "func": func.to_numpy(object),
        "count": count.to_numpy(np.int64),
        "datatype": ops["dtype"].to_numpy(object),
        "bytes": _nint(nbytes.to_numpy()),
        "root": _nint(ops["i0"].to_numpy(), ~(is_coll & func.isin(ROOTED)).to_numpy(), "Int32"),
        "peer": _nint(ops["i0"].to_numpy(), is_coll.to_numpy(), "Int32"),
        "nranks": _nint(_comm_col(comms, ops["comm"], "nranks").to_numpy(), dtype="Int32"),
        # numpy's stubs take a None branch for the one-argument where()
        "algorithm": np.where(is_coll, ops["algo"], None).astype(object),  # type: ignore[attr-defined]
        "protocol": np.where(is_coll, ops["proto"], None).astype(object),  # type: ignore[attr-defined]
        "nchannels": _nint(ops["nch"].to_numpy(), dtype="Int32"),
        "nwarps": _nint(ops["nwarps"].to_numpy(), ~is_coll.to_numpy(), "Int32"),
        "source": "nccl_plugin",
    })


def _op_keys(ev: pd.DataFrame, comms: pd.DataFrame) -> pd.DataFrame:
    """``comm_id``, ``seq`` and ``func`` of every Coll/P2p event, indexed by event id (for joins)."""
    ops = ev[(ev["type"] == COLL) | (ev["type"] == P2P)]
    seq = ops["u0"].astype("int64").where(ops["type"] == COLL)
    p2p = ops[ops["type"] == P2P]
    if len(p2p):
        seq.loc[p2p.index] = p2p.sort_values("start_ns", kind="stable").groupby(["comm", "func", "i0"]).cumcount()
    return pd.DataFrame({
        "comm_id": _comm_col(comms, ops["comm"], "comm_id").to_numpy(object),
        "seq": seq.to_numpy(), "func": ops["func"].to_numpy(object),
    }, index=ops["id"].to_numpy())


def _channels(kch: pd.DataFrame, ev: pd.DataFrame, comms: pd.DataFrame, offset: int | None) -> pd.DataFrame:
    """One row per KernelCh event in the ``nccl_channels`` schema."""
    if kch.empty:
        return pd.DataFrame()
    keys = _op_keys(ev, comms)
    gs = kch["u0"].astype("int64")
    ge = kch["u1"].astype("int64")
    ok = (gs > 0) & (ge > 0) & (offset is not None)
    off = offset or 0
    start = np.where(ok, gs + off, kch["start_ns"])
    stop = np.where(ok, ge + off, np.where(kch["t0"] > 0, kch["t0"], kch["stop_ns"]))
    k = keys.reindex(kch["parent"].to_numpy())
    return pd.DataFrame({
        "start_ns": start.astype("int64"), "dur_ns": np.maximum(stop - start, 0).astype("int64"),
        "comm_id": _comm_col(comms, kch["comm"], "comm_id").to_numpy(object),
        "seq": _nint(k["seq"].to_numpy()),
        "func": k["func"].to_numpy(object),
        "channel": kch["i0"].astype("int32").to_numpy(),
        "gpu_start_raw_ns": _nint(gs.to_numpy(), (gs <= 0).to_numpy()),
        "gpu_stop_raw_ns": _nint(ge.to_numpy(), (ge <= 0).to_numpy()),
        "host_start_ns": kch["start_ns"].to_numpy(np.int64),
        "host_stop_ns": np.where(kch["t0"] > 0, kch["t0"], kch["stop_ns"]).astype("int64"),
        "gpu_timed": ok.to_numpy(bool),
    })


_STEP_STATES = ("send_gpu_wait", "send_peer_wait", "send_wait", "recv_wait", "recv_flush_wait", "recv_gpu_wait")


def _proxy(ev: pd.DataFrame, comms: pd.DataFrame) -> pd.DataFrame:
    """One row per ProxyOp and ProxyStep event in the ``proxy`` schema."""
    px = ev[(ev["type"] == PROXY_OP) | (ev["type"] == PROXY_STEP)]
    if px.empty:
        return pd.DataFrame()
    keys = _op_keys(ev, comms)
    ops = ev[ev["type"] == PROXY_OP].set_index("id")
    is_step = (px["type"] == PROXY_STEP).to_numpy()
    # A step's operation is its parent ProxyOp; the op's parent is the Coll/P2p.
    op_id = np.where(is_step, px["parent"], px["id"])
    op = ops.reindex(op_id)
    k = keys.reindex(op["parent"].to_numpy())
    out = pd.DataFrame({
        "start_ns": px["start_ns"].to_numpy(np.int64),
        "dur_ns": np.maximum(px["stop_ns"] - px["start_ns"], 0).to_numpy(np.int64),
        # The communicator comes from the record itself: a PXN ProxyOp has no parent here.
        "comm_id": _comm_col(comms, px["comm"], "comm_id").to_numpy(object),
        "seq": _nint(k["seq"].to_numpy()),
        "func": k["func"].to_numpy(object),
        "kind": np.where(is_step, "step", "op").astype(object),
        "channel": _nint(op["i1x"].to_numpy(), dtype="Int32"),
        "peer": _nint(op["i0"].to_numpy(), dtype="Int32"),
        "is_send": pd.arrays.BooleanArray((op["flags"].fillna(0).to_numpy().astype("int64") & FLAG_IS_SEND) > 0,
                                          op["flags"].isna().to_numpy()),
        "step": _nint(px["i0"].to_numpy(), ~is_step, "Int32"),
        "nsteps": _nint(op["i2x"].to_numpy(), dtype="Int32"),
        "chunk_bytes": _nint(op["i3x"].to_numpy()),
        "trans_bytes": _nint(px["u1"].to_numpy().astype("int64"), ~is_step),
    })
    # Time in each state: from the state's first timestamp to the next state's (or the stop).
    t = px[[f"t{i}" for i in range(6)]].to_numpy(np.int64)
    stop = px["stop_ns"].to_numpy(np.int64)
    for j, name in enumerate(_STEP_STATES):
        begin = t[:, j]
        later = np.where(t > begin[:, None], t, np.iinfo(np.int64).max).min(axis=1)
        end = np.minimum(later, stop)
        vals = np.where(is_step & (begin > 0), np.maximum(end - begin, 0), -1)
        out[f"{name}_ns"] = _nint(vals, vals < 0)
    return out


__all__ = [
    "PluginFile", "RankTables", "read_file", "events", "read_dir", "find_files", "build_rank_tables", "gpu_clock_offset",
    "dtype_size", "RECORD_DTYPE", "HEADER_DTYPE", "EVENT_NAMES", "STATS_FIELDS",
]
