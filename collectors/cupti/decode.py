"""Bulk decoding of raw CUPTI activity records into the store's tables.

Pure functions: raw record bytes (as the native sink copied them out of CUPTI's buffers)
plus the sink's string table in, ``pyarrow.Table`` batches with the columns of
:mod:`perfscope.store.schema` out.  No CUPTI, no GPU: CI tests run these on committed
samples (tests/data/cupti/).  Everything is vectorised with NumPy; nothing loops in Python
per record.

Times: CUPTI timestamps plus ``offset_ns`` (0 when CUPTI's clock is already Unix-epoch
nanoseconds, see :func:`perfscope.collectors.cupti.clock.check_clock`).  Records CUPTI
could not time (``start == 0``) are dropped and counted by the caller; a record whose end
is missing or before its start (a forced flush caught it running) gets a null ``dur_ns``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from perfscope.collectors.cupti import cbids, layouts
from perfscope.store.schema import table as table_decl

I32_MAX = 2**31 - 1


def records(raw: bytes | bytearray | memoryview | np.ndarray, layout: layouts.RecordLayout | np.dtype) -> np.ndarray:
    """View raw record bytes as an array of the layout's dtype (no copy).

    Raises:
        ValueError: the byte count is not a whole number of records.
    """
    dtype = layout.dtype if isinstance(layout, layouts.RecordLayout) else np.dtype(layout)
    buf = raw if not isinstance(raw, np.ndarray) else raw.view(np.uint8).reshape(-1)
    n = len(buf) if not isinstance(buf, np.ndarray) else buf.nbytes
    if n % dtype.itemsize:
        raise ValueError(f"{n} bytes is not a whole number of records of {dtype.itemsize} bytes")
    return np.frombuffer(buf, dtype=dtype)


class Columns:
    """Equal-length column arrays of one record kind, indexable like a structured array.

    ``cols["start"]`` is a column; ``cols[mask]`` (bool or integer index) is a new
    Columns of the selected rows; ``len(cols)`` is the row count.  The native sink hands
    records over in this form (contiguous columns, transposed in C); raw record bytes
    (samples) are converted with :func:`as_columns`.
    """

    __slots__ = ("data", "n")

    def __init__(self, data: Mapping[str, np.ndarray], n: int | None = None) -> None:
        self.data = dict(data)
        self.n = n if n is not None else (len(next(iter(self.data.values()))) if self.data else 0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: str | np.ndarray | slice) -> Any:
        if isinstance(key, str):
            return self.data[key]
        sel = {k: v[key] for k, v in self.data.items()}
        n = len(next(iter(sel.values()))) if sel else int(np.zeros(self.n)[key].size)
        return Columns(sel, n)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.data)

    @staticmethod
    def concat(parts: Sequence[Columns]) -> Columns:
        parts = [p for p in parts if len(p)] or list(parts[:1])
        if len(parts) == 1:
            return parts[0]
        return Columns({k: np.concatenate([p.data[k] for p in parts]) for k in parts[0].data})

    @staticmethod
    def empty(dtype: np.dtype) -> Columns:
        return Columns({f: np.zeros(0, dtype[f]) for f in dtype.names or ()}, 0)


Records = Any  # np.ndarray (structured, a layouts dtype) or Columns


def as_columns(rec: np.ndarray | Columns) -> Columns:
    """A structured record array (or Columns) as Columns with contiguous columns."""
    if isinstance(rec, Columns):
        return rec
    return Columns({f: np.ascontiguousarray(rec[f]) for f in rec.dtype.names or ()}, len(rec))


# ---------------------------------------------------------------- string helpers ----
@lru_cache(maxsize=1)
def _cxa_demangle() -> object | None:
    """libstdc++'s ``__cxa_demangle`` through ctypes, or None where it cannot be loaded."""
    for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        return fn
    return None


_libc_free = None


def demangle(name: str) -> str:
    """Return the demangled C++ name of ``name`` (unchanged when it is not mangled)."""
    global _libc_free
    if not name.startswith("_Z"):
        return name
    fn = _cxa_demangle()
    if fn is None:
        return name
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))  # type: ignore[operator]
    if status.value != 0 or not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        if _libc_free is None:
            _libc_free = ctypes.CDLL(None).free
            _libc_free.argtypes = [ctypes.c_void_p]
        _libc_free(ptr)


@dataclass
class StringTable:
    """The sink's interned strings, by id (record fields hold id + 1; 0 = NULL).

    Dictionary arrays over the whole table (plain and demangled) are cached and rebuilt
    only when strings were added, so turning string references into a column is O(rows)
    in C++ with no Python per row; each name is demangled once.
    """

    strings: list[str] = field(default_factory=list)
    _plain: pa.Array | None = field(default=None, repr=False)
    _demangled: list[str] = field(default_factory=list, repr=False)
    _demangled_arr: pa.Array | None = field(default=None, repr=False)

    def extend(self, blob: bytes, first_id: int) -> None:
        """Add NUL-separated strings starting at id ``first_id`` (as ``ps_take_strings`` gives)."""
        if not blob:
            return
        if first_id != len(self.strings):
            raise ValueError(f"string table out of step: have {len(self.strings)}, got ids from {first_id}")
        parts = blob.split(b"\0")
        if parts and parts[-1] == b"":
            parts.pop()
        self.strings.extend(p.decode("utf-8", "replace") for p in parts)

    def _dictionary(self, demangled: bool) -> pa.Array:
        if not demangled:
            if self._plain is None or len(self._plain) != len(self.strings):
                self._plain = pa.array(self.strings, pa.string())
            return self._plain
        if len(self._demangled) != len(self.strings):
            self._demangled.extend(demangle(s) for s in self.strings[len(self._demangled):])
            self._demangled_arr = None
        if self._demangled_arr is None:
            self._demangled_arr = pa.array(self._demangled, pa.string())
        return self._demangled_arr

    def dictionary(self, refs: np.ndarray, *, demangled: bool = False) -> pa.Array:
        """Return a dictionary-encoded string array for string references ``refs`` (id + 1)."""
        idx = refs.astype(np.int64) - 1
        null = (idx < 0) | (idx >= len(self.strings))
        if null.any():
            idx = np.where(null, 0, idx)
        indices = pa.array(idx.astype(np.int32), pa.int32(), mask=null if null.any() else None)
        dictionary = self._dictionary(demangled)
        if len(dictionary) == 0:
            dictionary = pa.array([""], pa.string())
        return pa.DictionaryArray.from_arrays(indices, dictionary)


def _vocab(codes: np.ndarray, mapping: Mapping[int, str], default: str) -> pa.Array:
    """Dictionary-encode integer ``codes`` through ``mapping`` (others -> ``default``)."""
    size = max(mapping) + 1
    vocab = [mapping.get(i, default) for i in range(size)] + [default]
    idx = np.where((codes >= 0) & (codes < size), codes, size).astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(vocab, pa.string()))


def _i64(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    return pa.array(values.astype(np.int64), pa.int64(), mask=null)


def _i32(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    v = values.astype(np.int64)
    bad = v > I32_MAX
    mask = bad if null is None else (null | bad)
    return pa.array(np.where(bad, 0, v).astype(np.int32), pa.int32(), mask=mask if mask.any() else None)


def _times(rec: Columns, offset_ns: int) -> tuple[pa.Array, pa.Array]:
    start = rec["start"].astype(np.int64)
    end = rec["end"].astype(np.int64)
    bad_end = (end == 0) | (end < start)
    return _i64(start + offset_ns), _i64(np.where(bad_end, 0, end - start), bad_end if bad_end.any() else None)


def _timed(rec: Records) -> Columns:
    """Records CUPTI could time (start != 0), as Columns."""
    rec = as_columns(rec)
    bad = rec["start"] == 0
    return rec[~bad] if bad.any() else rec


def _table(name: str, cols: dict[str, pa.Array]) -> pa.Table:
    """Build a table with exactly the declared schema (missing columns are nulls)."""
    decl = table_decl(name)
    n = len(next(iter(cols.values()))) if cols else 0
    arrays = []
    for col in decl.columns:
        arr = cols.get(col.name)
        if arr is None:
            arr = pa.nulls(n, col.type)
        elif arr.type != col.type:
            arr = arr.cast(col.type)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=decl.arrow_schema)


# ------------------------------------------------------------------ per table ----
def decode_kernels(rec: Records, strings: StringTable, offset_ns: int = 0) -> pa.Table:
    """Kernel records (``layouts.KERNEL``) -> rows of the ``kernels`` table.

    Returns:
        columns of ``kernels``: times in Unix-epoch ns, names demangled, shared memory as
        static + dynamic bytes per block, ``graph_id`` null outside CUDA graphs.
    """
    rec = _timed(rec)
    start, dur = _times(rec, offset_ns)
    graph = rec["graph_id"]
    return _table("kernels", {
        "start_ns": start, "dur_ns": dur,
        "device": _i32(rec["device_id"]), "stream": _i64(rec["stream_id"]),
        "correlation": _i64(rec["correlation_id"]),
        "name": strings.dictionary(rec["name"], demangled=True),
        "grid_x": _i32(rec["grid_x"]), "grid_y": _i32(rec["grid_y"]), "grid_z": _i32(rec["grid_z"]),
        "block_x": _i32(rec["block_x"]), "block_y": _i32(rec["block_y"]), "block_z": _i32(rec["block_z"]),
        "registers_per_thread": _i32(rec["registers_per_thread"]),
        "shared_mem_bytes": _i64(rec["static_shared_memory"].astype(np.int64) + rec["dynamic_shared_memory"]),
        "graph_id": _i64(graph, graph == 0),
    })


def decode_memcpy(rec: Records, offset_ns: int = 0) -> pa.Table:
    """Memcpy records (``layouts.MEMCPY`` or ``MEMCPY2``) -> rows of the ``memcpy`` table.

    Returns:
        columns of ``memcpy``; ``copy_kind`` H2D/D2H/D2D/P2P/H2H/other, ``src_kind`` and
        ``dst_kind`` from CUPTI's memory kinds, ``pageable`` true when either side is
        pageable host memory.
    """
    rec = _timed(rec)
    start, dur = _times(rec, offset_ns)
    src, dst = rec["src_kind"].astype(np.int64), rec["dst_kind"].astype(np.int64)
    pageable = (src == layouts.MEMORY_KIND_PAGEABLE) | (dst == layouts.MEMORY_KIND_PAGEABLE)
    return _table("memcpy", {
        "start_ns": start, "dur_ns": dur,
        "device": _i32(rec["device_id"]), "stream": _i64(rec["stream_id"]),
        "correlation": _i64(rec["correlation_id"]),
        "copy_kind": _vocab(rec["copy_kind"].astype(np.int64), layouts.COPY_KINDS, "other"),
        "bytes": _i64(rec["bytes"]),
        "src_kind": _vocab(src, layouts.MEMORY_KINDS, "unknown"),
        "dst_kind": _vocab(dst, layouts.MEMORY_KINDS, "unknown"),
        "pageable": pa.array(pageable, pa.bool_()),
    })


def decode_memset(rec: Records, offset_ns: int = 0) -> pa.Table:
    """Memset records (``layouts.MEMSET``) -> rows of the ``memset`` table."""
    rec = _timed(rec)
    start, dur = _times(rec, offset_ns)
    return _table("memset", {
        "start_ns": start, "dur_ns": dur,
        "device": _i32(rec["device_id"]), "stream": _i64(rec["stream_id"]),
        "correlation": _i64(rec["correlation_id"]),
        "bytes": _i64(rec["bytes"]), "value": _i64(rec["value"]),
        "mem_kind": _vocab(rec["memory_kind"].astype(np.int64), layouts.MEMORY_KINDS, "unknown"),
    })


def _lookup(keys: np.ndarray, table_keys: np.ndarray, table_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised dict lookup: (values, missing mask) for ``keys`` in (table_keys -> table_values)."""
    if len(table_keys) == 0:
        return np.zeros(len(keys), np.int64), np.ones(len(keys), bool)
    order = np.argsort(table_keys, kind="stable")
    sk, sv = table_keys[order], table_values[order]
    pos = np.clip(np.searchsorted(sk, keys), 0, len(sk) - 1)
    hit = sk[pos] == keys
    return np.where(hit, sv[pos], 0).astype(np.int64), ~hit


def decode_sync(
    rec: Records,
    offset_ns: int = 0,
    *,
    context_device: Mapping[int, int] | None = None,
    api: Records | None = None,
) -> pa.Table:
    """Synchronisation records (``layouts.SYNC``) -> rows of the ``sync`` table.

    Args:
        context_device: CUDA context id -> device ordinal (sync records carry only the
            context); contexts not in it leave ``device`` null.
        api: API records of the same flush; the host thread id comes from the API call
            with the same correlation id (null when it is not among them).
    """
    rec = _timed(rec)
    start, dur = _times(rec, offset_ns)
    ctx = rec["context_id"].astype(np.int64)
    cmap = dict(context_device or {})
    dev, dev_null = _lookup(ctx, np.array(list(cmap), np.int64), np.array(list(cmap.values()), np.int64))
    stream = rec["stream_id"].astype(np.int64)
    corr = rec["correlation_id"].astype(np.int64)
    if api is not None and len(api):
        tid, tid_null = _lookup(corr, api["correlation_id"].astype(np.int64), api["thread_id"].astype(np.int64))
    else:
        tid, tid_null = np.zeros(len(rec), np.int64), np.ones(len(rec), bool)
    return _table("sync", {
        "start_ns": start, "dur_ns": dur,
        "device": _i32(dev, dev_null), "stream": _i64(stream, stream == layouts.SYNC_INVALID),
        "correlation": _i64(corr, corr == layouts.SYNC_INVALID),
        "sync_kind": _vocab(rec["type"].astype(np.int64), layouts.SYNC_KINDS, "unknown"),
        "tid": _i64(tid, tid_null),
    })


@lru_cache(maxsize=1)
def _api_dictionary() -> pa.Array:
    """Names of every runtime cbid, then every driver cbid (``cbid:<n>`` outside the tables)."""
    rt = [cbids.RUNTIME.get(i, f"cbid:{i}") for i in range(cbids.RUNTIME_CBID_SIZE)]
    dr = [cbids.DRIVER.get(i, f"cbid:{i}") for i in range(cbids.DRIVER_CBID_SIZE)]
    return pa.array(rt + dr, pa.string())


def api_names(kind: np.ndarray, cbid: np.ndarray) -> pa.Array:
    """Function names for API records, dictionary-encoded (``cbid:<n>`` for unknown ids)."""
    cb = cbid.astype(np.int64)
    runtime = kind == layouts.KIND_RUNTIME
    idx = np.where(runtime, cb, cbids.RUNTIME_CBID_SIZE + cb)
    limit = np.where(runtime, cbids.RUNTIME_CBID_SIZE, cbids.RUNTIME_CBID_SIZE + cbids.DRIVER_CBID_SIZE)
    out_of_range = (cb < 0) | (idx >= limit)
    if out_of_range.any():  # ids newer than the tables: plain strings
        names = [cbids.RUNTIME.get(int(c), f"cbid:{c}") if r else cbids.DRIVER.get(int(c), f"cbid:{c}")
                 for c, r in zip(cb.tolist(), runtime.tolist())]
        return pa.array(names, pa.string()).dictionary_encode()
    return pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)), _api_dictionary())


def decode_api(rec: Records, offset_ns: int = 0) -> pa.Table:
    """API records (``layouts.API``, kinds RUNTIME and DRIVER) -> rows of the ``api`` table."""
    rec = _timed(rec)
    start, dur = _times(rec, offset_ns)
    kinds = rec["kind"].astype(np.int64)
    return _table("api", {
        "start_ns": start, "dur_ns": dur,
        "pid": _i64(rec["process_id"]), "tid": _i64(rec["thread_id"]),
        "correlation": _i64(rec["correlation_id"]),
        "name": api_names(kinds, rec["cbid"]),
        "kind": _vocab(kinds, {layouts.KIND_DRIVER: "driver", layouts.KIND_RUNTIME: "runtime"}, "runtime"),
        "cbid": _i32(rec["cbid"]),
    })


@dataclass
class MarkerState:
    """NVTX range starts not yet matched by their end (carried from one flush to the next)."""

    pending: Columns = field(default_factory=lambda: Columns.empty(layouts.MARKER))


def decode_markers(rec: Records, strings: StringTable, offset_ns: int = 0, state: MarkerState | None = None) -> pa.Table:
    """Marker records (``layouts.MARKER``) -> NVTX ranges and marks in the ``markers`` table.

    A range is a START record joined with the END record of the same id (the name and
    domain come from the START); an instantaneous marker becomes a zero-length row.
    Starts whose end has not arrived stay in ``state.pending`` for the next call.

    Returns:
        columns of ``markers`` with ``source`` = ``nvtx``; ``domain`` null for NVTX's
        default domain; ``pid``/``tid`` from the marker's thread.
    """
    state = state if state is not None else MarkerState()
    rec = as_columns(rec) if len(rec) else Columns.empty(layouts.MARKER)
    flags = rec["flags"]
    starts = Columns.concat([state.pending, rec[(flags & layouts.MARKER_START) != 0]])
    ends = rec[(flags & layouts.MARKER_END) != 0]
    marks = rec[(flags & layouts.MARKER_INSTANTANEOUS) != 0]
    # Join ends to starts by id.
    sid_all = starts["id"]
    order = np.argsort(sid_all, kind="stable")
    sid = sid_all[order]
    if len(sid):
        pos = np.clip(np.searchsorted(sid, ends["id"]), 0, len(sid) - 1)
        matched = sid[pos] == ends["id"]
    else:
        pos, matched = np.zeros(len(ends), np.int64), np.zeros(len(ends), bool)
    s_idx = order[pos[matched]]
    ranges, range_end = starts[s_idx], ends["timestamp"][matched].astype(np.int64)
    keep = np.ones(len(starts), bool)
    keep[s_idx] = False
    state.pending = starts[keep]
    rows = Columns.concat([ranges, marks]) if len(marks) else ranges
    t0 = rows["timestamp"].astype(np.int64)
    t1 = np.concatenate([range_end, marks["timestamp"].astype(np.int64)]) if len(marks) else range_end
    order = np.argsort(t0, kind="stable")
    rows, t0, t1 = rows[order], t0[order], t1[order]
    is_thread = rows["object_kind"] == layouts.OBJECT_THREAD
    return _table("markers", {
        "start_ns": _i64(t0 + offset_ns), "dur_ns": _i64(np.maximum(t1 - t0, 0)),
        "pid": _i64(rows["process_id"], ~is_thread), "tid": _i64(rows["thread_id"], ~is_thread),
        "name": strings.dictionary(rows["name"]), "domain": strings.dictionary(rows["domain"]),
        "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(rows), np.int32)), pa.array(["nvtx"])),
    })


def decode_uvm(rec: Records, offset_ns: int = 0) -> pa.Table:
    """Unified-memory counter records (``layouts.UVM``) -> rows of the ``uvm`` table.

    Returns:
        columns of ``uvm``: ``bytes`` for migrations (htod, dtoh, dtod), ``faults`` for page
        faults (1 per CPU fault, an instant with ``dur_ns`` 0; the group's count for GPU
        faults), ``cause`` from the record's flags (migration cause, or fault access type).
    """
    rec = _timed(rec)
    ck = rec["counter_kind"].astype(np.int64)
    start = rec["start"].astype(np.int64)
    end = rec["end"].astype(np.int64)
    instant = end == 0  # CPU page faults carry one timestamp
    bad = ~instant & (end < start)
    dur = np.where(instant | bad, 0, end - start)
    transfer = np.isin(ck, layouts.UVM_TRANSFER_KINDS)
    cpu_fault, gpu_fault = ck == layouts.UVM_CPU_PAGE_FAULT, ck == layouts.UVM_GPU_PAGE_FAULT
    faults = np.where(cpu_fault, 1, rec["value"].astype(np.int64))
    flags = rec["flags"].astype(np.int64)
    # One vocabulary for both meanings of the flags: causes at their value, accesses after them.
    n_causes = max(layouts.UVM_MIGRATION_CAUSES) + 1
    vocab = {**layouts.UVM_MIGRATION_CAUSES, **{n_causes + k: v for k, v in layouts.UVM_ACCESS_TYPES.items()}}
    fault = cpu_fault | gpu_fault
    cause = _vocab(np.where(fault, n_causes + flags, flags), vocab, "unknown")
    none = ~(transfer | fault)  # thrashing, throttling, remote maps: no cause
    if none.any():
        cause = pa.DictionaryArray.from_arrays(pa.array(cause.indices.to_numpy(zero_copy_only=False), mask=none), cause.dictionary)
    return _table("uvm", {
        "start_ns": _i64(start + offset_ns), "dur_ns": _i64(dur, bad if bad.any() else None),
        "kind": _vocab(ck, layouts.UVM_COUNTER_KINDS, "unknown"),
        "bytes": _i64(rec["value"], ~transfer), "faults": _i64(faults, ~fault),
        "address": _i64(rec["address"].astype(np.uint64).view(np.int64)),
        "src_id": _i32(rec["src_id"]), "dst_id": _i32(rec["dst_id"]),
        "stream": _i64(rec["stream_id"]),
        "cause": cause,
    })


def summarize_overhead(rec: Records) -> dict[str, dict[str, int]]:
    """CUPTI OVERHEAD records -> ``{overhead kind: {"count": n, "ns": total duration}}``."""
    out: dict[str, dict[str, int]] = {}
    if len(rec) == 0:
        return out
    rec = as_columns(rec)
    start, end = rec["start"].astype(np.int64), rec["end"].astype(np.int64)
    dur = np.where(end > start, end - start, 0)
    kinds = rec["overhead_kind"].astype(np.int64)
    for k in np.unique(kinds).tolist():
        sel = kinds == k
        name = layouts.OVERHEAD_KINDS.get(int(k), f"kind_{k}")
        out[name] = {"count": int(sel.sum()), "ns": int(dur[sel].sum())}
    return out


def context_devices(*recs: Records) -> dict[int, int]:
    """Context id -> device ordinal, from records that carry both (kernel, memcpy, memset)."""
    out: dict[int, int] = {}
    for r in recs:
        if len(r):
            key = (r["context_id"].astype(np.int64) << 32) | r["device_id"].astype(np.int64)
            for k in np.unique(key).tolist():
                out[k >> 32] = k & 0xFFFFFFFF
    return out


def decode_all(
    raw: Mapping[str, Any],
    strings: StringTable,
    offset_ns: int = 0,
    *,
    context_device: dict[int, int] | None = None,
    marker_state: MarkerState | None = None,
) -> dict[str, pa.Table]:
    """Decode one drain of the sink: records per layout name -> store batches by table.

    Args:
        raw: ``{"kernel": ..., "memcpy", "memcpy2", "memset", "sync", "runtime", "driver",
            "marker", "uvm"}``, each raw record bytes, a structured array or Columns; missing
            names are treated as empty.
        context_device: updated in place with the contexts seen here (for ``sync``).
        marker_state: carries unmatched NVTX range starts across drains.

    Returns:
        ``{table name: pyarrow.Table}`` for ``kernels``, ``memcpy``, ``memset``, ``sync``,
        ``api``, ``uvm`` and ``markers`` (empty tables are left out).
    """
    def get(name: str) -> Columns:
        lay = layouts.BY_NAME[name]
        data = raw.get(name)
        if data is None:
            return Columns.empty(lay.dtype)
        if isinstance(data, Columns):
            return data
        if isinstance(data, np.ndarray) and data.dtype.names:
            return as_columns(data)
        return as_columns(records(data, lay))

    kern, mc, mc2, ms = get("kernel"), get("memcpy"), get("memcpy2"), get("memset")
    cmap = context_device if context_device is not None else {}
    cmap.update(context_devices(kern, mc, ms))
    api = Columns.concat([get("runtime"), get("driver")])
    out: dict[str, pa.Table] = {}
    if len(kern):
        out["kernels"] = decode_kernels(kern, strings, offset_ns)
    if len(mc) or len(mc2):
        out["memcpy"] = pa.concat_tables([decode_memcpy(mc, offset_ns), decode_memcpy(mc2, offset_ns)])
    if len(ms):
        out["memset"] = decode_memset(ms, offset_ns)
    sync = get("sync")
    if len(sync):
        out["sync"] = decode_sync(sync, offset_ns, context_device=cmap, api=api)
    if len(api):
        out["api"] = decode_api(api, offset_ns)
    uvm = get("uvm")
    if len(uvm):
        out["uvm"] = decode_uvm(uvm, offset_ns)
    markers = get("marker")
    if len(markers) or (marker_state is not None and len(marker_state.pending)):
        out["markers"] = decode_markers(markers, strings, offset_ns, marker_state)
    return {k: v for k, v in out.items() if v.num_rows}


def counts(raw: Mapping[str, Any]) -> dict[str, int]:
    """Records per layout name in one drain (raw bytes, structured arrays or Columns)."""
    out = {}
    for name, data in raw.items():
        if isinstance(data, Columns) or (isinstance(data, np.ndarray) and data.dtype.names):
            out[name] = len(data)
        else:
            out[name] = (len(data) if not isinstance(data, np.ndarray) else data.nbytes) // layouts.BY_NAME[name].dtype.itemsize
    return out


__all__: Sequence[str] = [
    "records", "Columns", "as_columns", "demangle", "StringTable", "MarkerState", "decode_kernels", "decode_memcpy",
    "decode_memset", "decode_sync", "decode_api", "decode_markers", "decode_uvm", "summarize_overhead", "context_devices",
    "decode_all", "counts",
]
