"""Native route of the Kineto import: table columns straight from the filtered text.

The pre-filter (:mod:`perfscope.store.kineto_filter`) leaves a trace's text with only the
events some table keeps.  Decoding those into msgspec structs and building the tables
from them in Python costs about twice as much as everything else in an import, so for
ordinary Kineto traces this module does it in two other steps:

1. ``kc_extract`` (``kineto_columns.c``, in the filter's library) reads the filtered text
   once and fills int64 columns, one row per event in text order: byte span, category,
   pid, tid, ``ts``/``dur`` as exact nanoseconds, the ``args`` the tables read, and the
   names, unescaped into one buffer that is an Arrow string array as it is.
2. :class:`RankBuilder` selects rows with numpy masks and makes the columns of
   :func:`perfscope.store.kineto.build_rank_tables` from them; per-name work (memcpy
   kinds, NCCL kernels, ``ProfilerStep#N``) is done once per distinct name.  The few
   events that link across tables (syncs, NCCL kernels, ``record_param_comms`` ops) are
   decoded from their byte spans by the importer's own decoders, and go through its own
   :func:`~perfscope.store.kineto._sync_table` and
   :func:`~perfscope.store.kineto._collectives_from_kernels`.

When the filter runs while a gzip trace is still being inflated (a
:class:`perfscope.store.kineto_filter.Stream`), step 1 happens there instead, on both of
its threads (:class:`Sink`), and this module only wraps the buffers.

The tables are those of the msgspec route, value for value and row for row (rows that the
chunked route joins per chunk from two categories, such as host then GPU markers, are
ordered by the same chunks).  Whatever the extractor cannot read exactly as the decoders
would (see ``ODD``), perfscope's own exports and traces without Kineto's header keys make
:func:`decode` return None, and the importer decodes the text the usual way.
``PERFSCOPE_KINETO_NATIVE=0`` (or :data:`ENABLED` set false) turns the route off; so does
a library built without the extractor.  :data:`outcomes` counts which way each text went.
"""
from __future__ import annotations

import ctypes
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfscope.store import kineto_filter
from perfscope.store.arrays import from_numpy, str_array
from perfscope.store.kineto import (
    _CAT_KIND, _CPU_OP_PREFIXES, _DECODER, _STEP_RE, _XRA, RankTables, _collectives_from_kernels,
    _decode_args_batch, _export_ranks, _Launch, _looks_kineto, _rank_tables, _sync_table, _Trace,
    parse_memcpy_name, parse_memset_kind,
)

#: Set false to decode every filtered text with msgspec (tests compare both routes).
ENABLED = True

#: kc_extract's columns, in its order (checked against ``kc_layout()`` when loading).
FIELDS = ("start", "end", "cat", "pid", "tid", "ts", "dur", "correlation", "device", "stream", "registers",
          "shared_memory", "graph_id", "bytes", "cbid", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
          "block_z", "present", "odd")
_FIELD = {name: i for i, name in enumerate(FIELDS)}

#: Bits of a row's odd mask (``KC_ODD_*``): what sends a text back to msgspec.
ODD = {
    1 << 0: "escaped key", 1 << 1: "cat not plain text", 1 << 2: "ph not X", 1 << 3: "name not text",
    1 << 4: "pid/tid not an int", 1 << 5: "ts/dur not exact", 1 << 6: "args not an object",
    1 << 7: "args value not an int", 1 << 8: "escaped args key", 1 << 9: "args.ps",
}
#: kc_extract's status codes, by value.
ERRORS = {1: "shape", 2: "rows", 3: "blob", 4: "arguments"}

#: How each filtered text went: ``native``, or ``refused: <why>``.
outcomes: Counter[str] = Counter()

#: The categories the tables read, by code (the extractor's cat column indexes this).
CATS = tuple(_CAT_KIND)
_CODE = {cat: i for i, cat in enumerate(CATS)}
_CATS_ARG = "\n".join(CATS).encode()
# perfscope's own categories come with args the native route does not read.
_PERFSCOPE_CODES = [code for cat, code in _CODE.items() if cat.startswith("perfscope_")]


class _Result(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_int64), ("open", ctypes.c_int64), ("close", ctypes.c_int64),
                ("odd_rows", ctypes.c_int64), ("first_odd", ctypes.c_int64), ("odd_bits", ctypes.c_int64),
                ("error_offset", ctypes.c_int64)]


_lib: ctypes.CDLL | None = None
_load_failed = False


def _load() -> ctypes.CDLL | None:
    """The filter's library with the extractor, loaded once, or None (not built, or built
    before the extractor existed, or with other columns)."""
    global _lib, _load_failed
    if _lib is not None or _load_failed:
        return _lib
    path = kineto_filter.library_path()
    try:
        lib = ctypes.CDLL(str(path)) if path is not None else None
        if lib is not None:
            lib.kc_layout.restype = ctypes.c_char_p
            lib.kc_layout.argtypes = []
            if tuple(lib.kc_layout().decode().split()) != FIELDS:
                lib = None
    except (OSError, AttributeError):
        lib = None
    if lib is None:
        _load_failed = True
        return None
    vp = ctypes.c_void_p
    lib.kc_extract.restype = ctypes.c_int
    lib.kc_extract.argtypes = [vp, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, vp, ctypes.c_int64, vp, vp,
                               ctypes.c_size_t, ctypes.POINTER(_Result)]
    _lib = lib
    return lib


def available() -> bool:
    """True when the native route is enabled and the extractor loads."""
    return ENABLED and os.environ.get("PERFSCOPE_KINETO_NATIVE", "1") != "0" and _load() is not None


class Rows:
    """A filtered text's events as columns (``kc_extract``'s), one row per event.

    Attributes:
        text: the filtered text (the rare events are decoded again from their spans).
        cols: int64 matrix, one row per name of :data:`FIELDS` (a view, strided when a
            :class:`Sink` holds it).
        names: every event's name, an Arrow string array over the extractor's buffer.
    """

    def __init__(self, text: memoryview | bytes, cols: np.ndarray, names: pa.Array) -> None:
        self.text = text
        self.cols = cols
        self.names = names

    def __len__(self) -> int:
        return int(self.cols.shape[1])

    def col(self, name: str) -> np.ndarray:
        """The column ``name`` of :data:`FIELDS` (a view)."""
        return self.cols[_FIELD[name]]


class Extracted(NamedTuple):
    """The outcome of :func:`extract`.

    Attributes:
        rows: the columns, or None when the text did not have the expected shape.
        events: the traceEvents array's span (offsets of its ``[`` and ``]``).
        odd_rows: rows with something the extractor cannot read exactly (see ``ODD``).
        first_odd: the first of them (-1 when none).
        odd: what was odd, over all rows (values of ``ODD``).
        error: None, or the name of the error (a value of :data:`ERRORS`).
    """

    rows: Rows | None
    events: tuple[int, int]
    odd_rows: int
    first_odd: int
    odd: list[str]
    error: str | None


def extract(text: memoryview | bytes, count: int, cats: Sequence[str] = CATS) -> Extracted:
    """Run the extractor over ``text``, a filtered trace of ``count`` events; the library
    must load.

    Args:
        text: the filtered text (``Filtered.text``; anything else must be JSON the filter
            accepts for the result to mean anything, but is read safely).
        count: the events in it (``Filtered.kept``); more or fewer is an error.
        cats: the category names whose indices make the cat column.

    Returns:
        an :class:`Extracted`.

    Raises:
        RuntimeError: the library is not built with the extractor.
    """
    lib = _load()
    if lib is None:
        raise RuntimeError("perfscope's Kineto column extractor is not built (python perfscope/store/kineto_filter_build.py)")
    # np.frombuffer takes read-only buffers too (the in-place filter's text is a bytes object).
    data = np.frombuffer(text, dtype=np.uint8) if len(text) else np.zeros(1, np.uint8)
    # Zeros where an event has no value (the extractor leaves those), at no cost: a big
    # zeroed allocation is fresh pages from the OS.
    cols = np.zeros((len(FIELDS), count), dtype=np.int64)
    offsets = np.empty(count + 1, dtype=np.int32)
    blob = np.empty(max(len(text), 1), dtype=np.uint8)
    res = _Result()
    cat_arg = _CATS_ARG if cats is CATS else "\n".join(cats).encode()
    code = lib.kc_extract(data.ctypes.data, len(text), cat_arg, len(cat_arg), cols.ctypes.data, count,
                          offsets.ctypes.data, blob.ctypes.data, len(blob), ctypes.byref(res))
    odd = [why for bit, why in ODD.items() if res.odd_bits & bit]
    if code != 0:
        return Extracted(None, (res.open, res.close), res.odd_rows, res.first_odd, odd, ERRORS.get(code, str(code)))
    used = int(offsets[count])
    names = pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(blob[:used])])
    return Extracted(Rows(text, cols, names), (res.open, res.close), res.odd_rows, res.first_odd, odd, None)


#: Rows a :class:`Sink` makes room for: one per this many bytes of text.  The events some
#: table keeps take ~300 bytes in Kineto's pretty-printed JSON (~150 written compactly);
#: a text with more kept events than that is extracted again once filtered.
SINK_BYTES_PER_ROW = 64


class Sink:
    """The buffers a :class:`perfscope.store.kineto_filter.Stream` has the extractor fill
    (``kc_sink_*``): a row of :data:`FIELDS` per kept event, the rows of :func:`extract`
    on the filtered text, read by the stream's two threads from the kept events it noted
    (instead of one thread's pass over the filtered text).

    How many events will be kept is not known in advance: there is room for one per
    :data:`SINK_BYTES_PER_ROW` bytes of text, in memory maps of which only the pages
    written become resident; the rows lie one after another (so those pages are the
    first ones) and :meth:`extracted` gives the columns as strided views.  When the rows
    or the names run out, the stream's ``code`` says so and :func:`decode` extracts the
    filtered text as usual.

    Args:
        size: the length of the text to be filtered.

    Attributes:
        code: set by the stream when it has finished: ``kc_extract``'s status (0: every
            kept event has its row), -1/-2 when the extractor was not run.
    """

    def __init__(self, size: int) -> None:
        self.capacity = size // SINK_BYTES_PER_ROW + 16
        width = len(FIELDS)
        self._cols_map = kineto_filter.anonymous_map(self.capacity * width * 8)
        self._cols = np.frombuffer(self._cols_map, dtype=np.int64, count=self.capacity * width).reshape(self.capacity, width)
        self._offsets = np.empty(self.capacity + 1, dtype=np.int32)
        # Names are unescaped from the text, so never longer than it.
        self._blob_map = kineto_filter.anonymous_map(size)
        self._blob = np.frombuffer(self._blob_map, dtype=np.uint8)
        self._res = _Result()
        self.code: int | None = None

    def c_args(self) -> tuple[Any, ...]:
        """``kc_sink_open``'s arguments (see ``kf_stream_start``)."""
        return (_CATS_ARG, len(_CATS_ARG), self._cols.ctypes.data, self.capacity, 1, len(FIELDS),
                self._offsets.ctypes.data, self._blob.ctypes.data, len(self._blob), ctypes.byref(self._res))

    def extracted(self, text: memoryview | bytes, count: int) -> Extracted | None:
        """:func:`extract`'s result on the filtered ``text`` of ``count`` events, from the
        rows the stream filled; None when they are not all there (the stream had no room
        for them, or stopped on an error)."""
        res = self._res
        if self.code != 0 or res.rows != count:
            return None
        odd = [why for bit, why in ODD.items() if res.odd_bits & bit]
        offsets = self._offsets[:count + 1]
        used = int(offsets[count])
        names = pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(self._blob[:used])])
        rows = Rows(text, self._cols[:count].T, names)
        return Extracted(rows, (res.open, res.close), res.odd_rows, res.first_odd, odd, None)


def decode(kept: kineto_filter.Filtered) -> _Trace | None:
    """The filtered trace with its events as :class:`Rows` (``traceEvents``), every other
    member decoded by the importer's decoder, or None when the native route cannot give
    the msgspec route's tables: the caller then decodes the text the usual way."""
    if kept.text is None:
        return None
    ext = kept.columns.extracted(kept.text, kept.kept) if isinstance(kept.columns, Sink) else None
    if ext is None:
        ext = extract(kept.text, kept.kept)
    if ext.rows is None or ext.odd_rows:
        outcomes["refused: " + (ext.error or ", ".join(ext.odd))] += 1
        return None
    rows = ext.rows
    if _PERFSCOPE_CODES and np.isin(rows.col("cat"), _PERFSCOPE_CODES).any():
        outcomes["refused: perfscope categories"] += 1
        return None
    # The root without its events: msgspec decodes the other members, none of the events.
    text, (first, last) = kept.text, ext.events
    try:
        trace = _DECODER.decode(b"".join((text[:first], b"[]", text[last + 1:])))
    except (msgspec.DecodeError, RecursionError):
        outcomes["refused: root"] += 1
        return None
    if _export_ranks(trace) is not None:
        outcomes["refused: perfscope export"] += 1
        return None
    if kept.events and not _looks_kineto(trace):
        # Only the dropped events can tell whether it is a Kineto trace (see _decode_kept).
        outcomes["refused: no Kineto header"] += 1
        return None
    trace.traceEvents = rows  # type: ignore[assignment]
    outcomes["native"] += 1
    return trace


# ---------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------
_SPAN_EVENTS = msgspec.json.Decoder(list[_XRA], float_hook=str)
#: The order of :func:`perfscope.store.kineto._basic_tables`'s tables within a chunk.
_BASIC_ORDER = ("api", "kernels", "memcpy", "memset", "markers", "steps")


def _ints_of(arr: pa.Array) -> np.ndarray:
    """The values of an Arrow integer array without nulls, as numpy (no copy)."""
    width = arr.type.bit_width // 8
    return np.frombuffer(arr.buffers()[1], dtype=f"<i{width}", count=len(arr), offset=arr.offset * width)


def _per_name(names: pa.Array, fn: Callable[[str], Any]) -> tuple[list[Any], np.ndarray]:
    """``fn`` of each distinct name of ``names``: (the values, each row's index into them)."""
    encoded = pc.dictionary_encode(names)
    return [fn(s) for s in encoded.dictionary.to_pylist()], _ints_of(encoded.indices)


def _labels(values: Sequence[str], index: np.ndarray) -> pa.Array:
    """A string column: ``values[index[i]]`` for each row."""
    return str_array(list(values)).take(from_numpy(index.astype(np.int64, copy=False)))


def _annotation_kind(name: str) -> tuple[str, int | None]:
    """What ``_Classified.add`` makes of a user annotation: (step, its number), (rpc,
    None) for record_param_comms, else (marker, None)."""
    if name.startswith("ProfilerStep#") and _STEP_RE.match(name):
        return "step", int(name[13:])
    return ("rpc", None) if name == "record_param_comms" else ("marker", None)


def _cpu_op_kind(name: str) -> tuple[str, int | None]:
    """What ``_Classified.add`` makes of a cpu_op: a step, an rpc, or nothing."""
    if not name.startswith(_CPU_OP_PREFIXES):
        return "", None
    if name == "record_param_comms":
        return "rpc", None
    return ("step", int(name[13:])) if _STEP_RE.match(name) else ("", None)


def _is_nccl(name: str) -> bool:
    """:func:`perfscope.store.kineto.is_nccl_kernel`, as ``_RankBuilder.add`` inlines it."""
    return bool(name) and "nccl" in name.lower()


class _ColumnLaunches:
    """The launch index of :class:`perfscope.store.kineto._LaunchIndex` over the api
    table's columns: ``get(correlation)`` -> :class:`~perfscope.store.kineto._Launch`
    of the last api row (in table order) with that correlation id, or None."""

    def __init__(self, rows: Rows, api: np.ndarray) -> None:
        has = (rows.col("present")[api] & (1 << _FIELD["correlation"])) != 0
        self.rows = api[has]
        keys = rows.col("correlation")[self.rows]
        # Stable: among equal ids, the last one in table order comes last.
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]
        self.source = rows

    def get(self, correlation: Any) -> _Launch | None:
        """The launch with this correlation id (an int), or None."""
        if not isinstance(correlation, int) or not -(1 << 63) <= correlation < (1 << 63):
            return None
        i = int(np.searchsorted(self.keys, correlation, side="right")) - 1
        if i < 0 or self.keys[i] != correlation:
            return None
        row = int(self.rows[self.order[i]])
        rows = self.source
        present = int(rows.col("present")[row])
        pid = int(rows.col("pid")[row]) if present >> _FIELD["pid"] & 1 else None
        tid = int(rows.col("tid")[row]) if present >> _FIELD["tid"] & 1 else None
        return _Launch(pid, tid, int(rows.col("ts")[row]), None)


class _Selection:
    """Some rows of :class:`Rows` (by index, in table order) and their column values."""

    def __init__(self, rows: Rows, idx: np.ndarray, base_ns: int) -> None:
        self.rows = rows
        self.idx = idx
        self.present = rows.col("present")[idx]
        self.base_ns = base_ns

    def has(self, field: str) -> np.ndarray:
        """Bool mask: the rows where ``field`` is present."""
        return (self.present & (1 << _FIELD[field])) != 0

    def values(self, field: str) -> np.ndarray:
        """The rows' values of ``field`` (a copy; meaningless where it is absent)."""
        return self.rows.col(field)[self.idx]

    def ints(self, field: str, type_: pa.DataType = pa.int64(), *, fallback: str | None = None,
             present: str | None = None, only: np.ndarray | None = None) -> pa.Array:
        """An integer column of ``field``: null where it is absent, or ``fallback``'s value
        there when given (device from pid, stream from tid); ``present`` names the field
        whose presence counts (grid_y: grid_x's); ``only`` nulls the rows outside a mask."""
        values = self.values(field)
        valid = self.has(present or field)
        if fallback is not None:
            values = np.where(valid, values, self.values(fallback))
            valid = valid | self.has(fallback)
        if only is not None:
            valid = valid & only
        if not valid.all():
            values = np.where(valid, values, 0)
        else:
            valid = None
        if type_ == pa.int32():
            # Narrowed in numpy when every value fits (an Arrow cast costs ~3x more); else
            # the cast raises for the value that does not, as the msgspec route's does.
            narrow = values.astype(np.int32)
            if np.array_equal(narrow, values):
                values, type_ = narrow, None
        return from_numpy(values, type_, valid)

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """(start with the trace's base, duration), int64 ns."""
        return self.values("ts") + self.base_ns, self.values("dur")

    def names(self) -> pa.Array:
        """The rows' names (a new string array)."""
        return self.rows.names.take(from_numpy(self.idx))

    def on_device(self) -> dict[str, Any]:
        """The columns every GPU activity table starts with: ``start_ns``, ``dur_ns`` (int64
        ns), ``device`` (args.device, else an int pid), ``stream`` (args.stream, else an int
        tid) and ``correlation``."""
        start, dur = self.times()
        return {"start_ns": start, "dur_ns": dur, "device": self.ints("device", pa.int32(), fallback="pid"),
                "stream": self.ints("stream", fallback="tid"), "correlation": self.ints("correlation")}


class RankBuilder:
    """Builds one rank's tables from :class:`Rows` (``finish()``, as
    :class:`perfscope.store.kineto._RankBuilder` does from events).

    Args:
        rows: the events.
        base_ns: ``baseTimeNanoseconds`` (0 when the trace has none).
        sizes: the chunks the msgspec route would hand the events out in (see
            :func:`perfscope.store.kineto._chunk_sizes`); None for plain chunks of ``chunk``.
        chunk: the chunk length when ``sizes`` is None.
    """

    def __init__(self, rows: Rows, base_ns: int, sizes: Sequence[int] | None, chunk: int) -> None:
        n = len(rows)
        if sizes is None:
            sizes = [chunk] * -(-n // chunk)
        self.rows = rows
        self.base_ns = base_ns
        # Row i is in chunk searchsorted(bounds, i, "right").
        self.bounds = np.cumsum(np.asarray(sizes, dtype=np.int64))
        self.chunked = len(self.bounds) > 1

    def _chunk_of(self, idx: np.ndarray) -> np.ndarray:
        """The chunk of each of rows ``idx``."""
        if not self.chunked:
            return np.zeros(len(idx), np.int64)
        return np.searchsorted(self.bounds, idx, side="right")

    def _joined(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """Rows of two categories in the chunked route's order: per chunk, the first's
        rows, then the second's (see ``_JOINED_PER_CHUNK``)."""
        idx = np.concatenate([first, second])
        if not self.chunked or not len(first) or not len(second):
            return idx
        key = self._chunk_of(idx) * 2
        key[len(first):] += 1
        return idx[np.argsort(key, kind="stable")]

    def _first_chunk(self, idx: np.ndarray) -> int:
        """The chunk of the first of rows ``idx`` (not empty)."""
        return int(self._chunk_of(idx.min(keepdims=True))[0])

    def _events(self, idx: np.ndarray) -> list[Any]:
        """The events at rows ``idx``, decoded by the importer's decoder from their spans,
        each with its :class:`~perfscope.store.kineto._Args` (empty when it has none)."""
        if not len(idx):
            return []
        text = self.rows.text
        starts, ends = self.rows.col("start")[idx].tolist(), self.rows.col("end")[idx].tolist()
        events = _SPAN_EVENTS.decode(b"[" + b",".join([text[s:e] for s, e in zip(starts, ends)]) + b"]")
        _decode_args_batch(events)
        return events

    def finish(self) -> RankTables:
        """The rank's tables (see :func:`perfscope.store.kineto.build_rank_tables`)."""
        rows, base = self.rows, self.base_ns
        cat = np.ascontiguousarray(rows.col("cat"))  # (a Sink's columns are strided; this one is read often)
        at = {name: np.flatnonzero(cat == code) for name, code in _CODE.items() if not name.startswith("perfscope_")}
        tables: list[tuple[int, int, str, dict[str, Any]]] = []

        def add(name: str, idx: np.ndarray, cols: dict[str, Any]) -> None:
            tables.append((self._first_chunk(idx), _BASIC_ORDER.index(name), name, cols))

        # -- api: per chunk, runtime calls then driver calls -----------------------------
        api = self._joined(at["cuda_runtime"], at["cuda_driver"])
        if len(api):
            s = _Selection(rows, api, base)
            start, dur = s.times()
            is_driver = cat[api] == _CODE["cuda_driver"]
            add("api", api, {
                "start_ns": start, "dur_ns": dur,
                "pid": s.ints("pid"), "tid": s.ints("tid"), "correlation": s.ints("correlation"),
                "name": s.names(),
                "kind": _labels(("runtime", "driver"), is_driver.astype(np.int64)),
                "cbid": s.ints("cbid", pa.int32()),
            })

        # -- kernels (and which are NCCL's) ------------------------------------------------
        kernels = at["kernel"]
        nccl = kernels[:0]
        if len(kernels):
            s = _Selection(rows, kernels, base)
            names = s.names()
            flags, index = _per_name(names, _is_nccl)
            if any(flags):
                nccl = kernels[np.asarray(flags, dtype=bool)[index]]
            add("kernels", kernels, {
                **s.on_device(),
                "name": names,
                "grid_x": s.ints("grid_x", pa.int32()), "grid_y": s.ints("grid_y", pa.int32(), present="grid_x"),
                "grid_z": s.ints("grid_z", pa.int32(), present="grid_x"),
                "block_x": s.ints("block_x", pa.int32()),
                "block_y": s.ints("block_y", pa.int32(), present="block_x"),
                "block_z": s.ints("block_z", pa.int32(), present="block_x"),
                "registers_per_thread": s.ints("registers", pa.int32()),
                "shared_mem_bytes": s.ints("shared_memory"),
                "graph_id": s.ints("graph_id"),
            })

        # -- memcpy / memset ---------------------------------------------------------------
        memcpy = at["gpu_memcpy"]
        if len(memcpy):
            s = _Selection(rows, memcpy, base)
            parsed, index = _per_name(s.names(), parse_memcpy_name)
            add("memcpy", memcpy, {
                **s.on_device(),
                "copy_kind": _labels([p[0] for p in parsed], index),
                "bytes": s.ints("bytes"),
                "src_kind": _labels([p[1] for p in parsed], index),
                "dst_kind": _labels([p[2] for p in parsed], index),
                "pageable": from_numpy(np.array([p[3] for p in parsed], dtype=bool)[index]),
            })
        memset = at["gpu_memset"]
        if len(memset):
            s = _Selection(rows, memset, base)
            kinds, index = _per_name(s.names(), parse_memset_kind)
            add("memset", memset, {
                **s.on_device(),
                "bytes": s.ints("bytes"),
                "value": pa.nulls(len(memset), pa.int64()),
                "mem_kind": _labels(kinds, index),
            })

        # -- user annotations: steps, record_param_comms, markers --------------------------
        empty = np.zeros(0, np.intp)
        ann_steps, ann_rpc, host_markers, ann_numbers = empty, empty, empty, []
        annotations = at["user_annotation"]
        if len(annotations):
            kinds_a, index = _per_name(rows.names.take(from_numpy(annotations)), _annotation_kind)
            what = np.array([k for k, _ in kinds_a])[index]
            ann_steps, ann_rpc = annotations[what == "step"], annotations[what == "rpc"]
            host_markers = annotations[what == "marker"]
            ann_numbers = [kinds_a[i][1] for i in index[what == "step"].tolist()]
        cpu_steps, cpu_rpc, cpu_numbers = empty, empty, []
        cpu_ops = at["cpu_op"]
        if len(cpu_ops):
            kinds_c, index = _per_name(rows.names.take(from_numpy(cpu_ops)), _cpu_op_kind)
            what = np.array([k for k, _ in kinds_c])[index]
            cpu_steps, cpu_rpc = cpu_ops[what == "step"], cpu_ops[what == "rpc"]
            cpu_numbers = [kinds_c[i][1] for i in index[what == "step"].tolist()]

        # -- markers: per chunk, host annotations then GPU annotations ---------------------
        markers = self._joined(host_markers, at["gpu_user_annotation"])
        if len(markers):
            s = _Selection(rows, markers, base)
            start, dur = s.times()
            is_gpu = cat[markers] == _CODE["gpu_user_annotation"]
            source = _labels(("user_annotation", "gpu_user_annotation"), is_gpu.astype(np.int64))
            add("markers", markers, {
                "start_ns": start, "dur_ns": dur,
                "pid": s.ints("pid", only=~is_gpu), "tid": s.ints("tid", only=~is_gpu),
                "name": s.names(),
                "domain": source, "source": source,
                "device": s.ints("device", pa.int32(), fallback="pid", only=is_gpu),
                "stream": s.ints("stream", fallback="tid", only=is_gpu),
            })

        # -- steps: per chunk, annotation steps then cpu_op steps --------------------------
        steps = self._joined(ann_steps, cpu_steps)
        if len(steps):
            number = dict(zip(ann_steps.tolist() + cpu_steps.tolist(), ann_numbers + cpu_numbers))
            s = _Selection(rows, steps, base)
            start, dur = s.times()
            add("steps", steps, {
                "step": np.array([number[i] for i in steps.tolist()], np.int64),
                "start_ns": start, "dur_ns": dur,
                "name": s.names(),
                "source": _labels(("profiler_step",), np.zeros(len(steps), np.int64)),
            })

        # Tables in the order the chunked route first makes them.
        tables.sort(key=lambda t: t[:2])
        out = {name: cols for _, _, name, cols in tables}

        # -- tables that link events: sync, collectives -------------------------------------
        warnings: list[str] = []
        sync = at["cuda_sync"]
        if len(sync) or len(nccl):
            launches = _ColumnLaunches(rows, api)
            if len(sync):
                out["sync"] = _sync_table(self._events(sync), launches, base)  # type: ignore[arg-type]
            if len(nccl):
                rpc = self._events(self._joined(ann_rpc, cpu_rpc))
                out["collectives"] = _collectives_from_kernels(self._events(nccl), rpc, launches, base,  # type: ignore[arg-type]
                                                                warnings)
        return _rank_tables(out, warnings)


__all__ = ["CATS", "ENABLED", "ERRORS", "FIELDS", "ODD", "SINK_BYTES_PER_ROW", "Extracted", "RankBuilder", "Rows",
           "Sink", "available", "decode", "extract", "outcomes"]
