"""Native route of the Kineto import: table columns straight from the filtered text.

The pre-filter (:mod:`perfscope.store.kineto.prefilter`) leaves a trace's text with only the
events some table keeps.  Decoding those into msgspec structs and building the tables
from them in Python costs about twice as much as everything else in an import, so for
ordinary Kineto traces this module does it in two other steps:

1. ``kc_extract`` (``columns.c``, in the filter's library) reads the filtered text
   once and fills int64 columns, one row per event in text order: byte span, category,
   pid, tid, ``ts``/``dur`` as exact nanoseconds, the ``args`` the tables read, and the
   names, unescaped into one buffer that is an Arrow string array as it is.
2. :class:`~perfscope.store.kineto.native_tables.ColumnRankBuilder` selects rows with
   numpy masks and makes the columns of the msgspec route's tables from them; per-name
   work (memcpy kinds, NCCL kernels, ``ProfilerStep#N``) is done once per distinct name.
   The few events that link across tables (syncs, NCCL kernels, ``record_param_comms``
   ops) are decoded from their byte spans by the importer's own decoders, and go through
   :mod:`perfscope.store.kineto.links` as the msgspec route's do.

When the filter runs while a gzip trace is still being inflated (a
:class:`perfscope.store.kineto.prefilter.Stream`), step 1 happens there instead, on both of
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
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa

from perfscope.options import kineto_native_enabled
from perfscope.store.kineto import prefilter
from perfscope.store.kineto.checks import LIMIT_NS
from perfscope.store.kineto.classify import CAT_KIND
from perfscope.store.kineto.decode import looks_kineto
from perfscope.store.kineto.events import TRACE_DECODER, Trace
from perfscope.store.kineto.exports import export_ranks

#: Set false to decode every filtered text with msgspec (tests compare both routes).
ENABLED = True

#: kc_extract's columns, in its order (checked against ``kc_layout()`` when loading).
FIELDS = ("start", "end", "cat", "pid", "tid", "ts", "dur", "correlation", "device", "stream", "registers",
          "shared_memory", "graph_id", "bytes", "cbid", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
          "block_z", "external_id", "present", "odd")
FIELD = {name: i for i, name in enumerate(FIELDS)}

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
CATS = tuple(CAT_KIND)
CODE = {cat: i for i, cat in enumerate(CATS)}
_CATS_ARG = "\n".join(CATS).encode()
# perfscope's own categories come with args the native route does not read.
_PERFSCOPE_CODES = [code for cat, code in CODE.items() if cat.startswith("perfscope_")]


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
    path = prefilter.library_path()
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
    return ENABLED and kineto_native_enabled() and _load() is not None


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
        return self.cols[FIELD[name]]


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
        raise RuntimeError("perfscope's Kineto column extractor is not built (python perfscope/store/kineto/build.py)")
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
    """The buffers a :class:`perfscope.store.kineto.prefilter.Stream` has the extractor fill
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
        self._cols_map = prefilter.anonymous_map(self.capacity * width * 8)
        self._cols = np.frombuffer(self._cols_map, dtype=np.int64, count=self.capacity * width).reshape(self.capacity, width)
        self._offsets = np.empty(self.capacity + 1, dtype=np.int32)
        # Names are unescaped from the text, so never longer than it.
        self._blob_map = prefilter.anonymous_map(size)
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


def decode(kept: prefilter.Filtered) -> Trace | None:
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
    if len(rows) and any(rows.col(name).max() > LIMIT_NS or rows.col(name).min() < -LIMIT_NS for name in ("ts", "dur")):
        # (kc_extract reads all of int64: the msgspec route refuses these, naming the event)
        outcomes["refused: time out of range"] += 1
        return None
    if _PERFSCOPE_CODES and np.isin(rows.col("cat"), _PERFSCOPE_CODES).any():
        outcomes["refused: perfscope categories"] += 1
        return None
    # The root without its events: msgspec decodes the other members, none of the events.
    text, (first, last) = kept.text, ext.events
    try:
        trace = TRACE_DECODER.decode(b"".join((text[:first], b"[]", text[last + 1:])))
    except (msgspec.DecodeError, RecursionError):
        outcomes["refused: root"] += 1
        return None
    if export_ranks(trace) is not None:
        outcomes["refused: perfscope export"] += 1
        return None
    if kept.events and not looks_kineto(trace):
        # Only the dropped events can tell whether it is a Kineto trace (see _decode_kept).
        outcomes["refused: no Kineto header"] += 1
        return None
    trace.traceEvents = rows  # type: ignore[assignment]
    outcomes["native"] += 1
    return trace


__all__ = ["CATS", "CODE", "ENABLED", "ERRORS", "FIELD", "FIELDS", "ODD", "SINK_BYTES_PER_ROW", "Extracted", "Rows", "Sink",
           "available", "decode", "extract", "outcomes"]
