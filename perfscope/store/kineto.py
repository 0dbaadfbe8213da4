"""Import PyTorch profiler (Kineto) Chrome-trace JSON into a perfscope run.

``import_kineto(files, out)`` reads one ``.json`` or ``.json.gz`` trace per rank and writes
the store's tables (see :mod:`perfscope.store.schema`):

=====================================  ===================================================
Kineto event (``ph == "X"``)           perfscope table
=====================================  ===================================================
``cat == "kernel"``                    ``kernels`` (every one; NCCL ones also ``collectives``)
``gpu_memcpy``                         ``memcpy`` (copy and memory kinds from the name)
``gpu_memset``                         ``memset``
``cuda_sync``                          ``sync`` (``tid`` from the API call it correlates to)
``cuda_runtime`` / ``cuda_driver``     ``api``
``user_annotation``                    ``markers`` (``ProfilerStep#N`` goes to ``steps``)
``gpu_user_annotation``                ``markers`` (with device and stream)
``perfscope_*`` (our own exports)      ``host``, ``collectives``, ``metrics``
=====================================  ===================================================

Decisions worth knowing:

* **Timestamps are exact.**  Kineto writes ``ts``/``dur`` as microseconds with three
  decimals (``1712195495519689.047``), relative to ``baseTimeNanoseconds`` when that key is
  present; a float64 cannot hold an *epoch* microsecond value to the nanosecond.  For
  epoch traces the whole-file decoder keeps each timestamp as a raw span of the text, and
  each table's spans are parsed in one call as ``decimal128(38, 3)`` (whose stored integer
  *is* the nanoseconds).  Relative traces, and chunks of big files, use floats where they
  are exact (below 2**43 µs, checked by the decoder) and the same raw spans otherwise.
  Values the decimal parse refuses (more than three decimals, text) go through
  64-bit-mantissa arithmetic, exact up to ~10^16 µs.
* **What no table keeps is not decoded.**  A native pre-filter
  (:mod:`perfscope.store.kineto_filter`, one pass of C over the text, which it validates
  as strict JSON) first cuts the events no table keeps (``cpu_op`` ops, flows, metadata:
  about two thirds of a Kineto trace) and writes the rest over the text; every kept event
  and every other member is copied byte for byte, and the kept events reach the table
  builders in chunks of the original's boundaries, so the tables are the unfiltered
  trace's, row for row.  A text the filter refuses, or without the library, is decoded
  whole as below (which also words the errors).
* **gzip is filtered while it is inflated.**  A big ``.json.gz`` is inflated in pieces on
  the calling thread while the filter reads what has come on another one (two cores:
  inflating, filtering and extracting the columns overlap); a file that is not one gzip
  member of the size its trailer says, or that the filter refuses, is read again as
  below from its compressed bytes (``PERFSCOPE_KINETO_STREAM=0`` turns streams off).
* **Ordinary traces skip the event objects.**  The filtered text of a Kineto trace (not
  one of perfscope's own exports) is read by a native column extractor
  (:mod:`perfscope.store.kineto_native`: one pass of C filling int64 columns, timestamps
  parsed from the text as exact nanoseconds, names unescaped into one Arrow buffer), and
  the tables are built from those columns in bulk with numpy and Arrow, the per-chunk row
  order included; only syncs, NCCL kernels and ``record_param_comms`` ops are decoded as
  events, from their spans.  Anything the extractor cannot read exactly as msgspec would
  (an escaped or repeated key, a float or text where an int is expected, a timestamp
  with an exponent or more than three decimals, ``args.ps``) sends the whole text to the
  msgspec route below, which gives the same tables (``PERFSCOPE_KINETO_NATIVE=0`` forces
  it).
* **Decoding is typed, and only what a table needs is built.**  msgspec decodes events
  into small Structs tagged by their phase: complete (``X``) and counter (``C``) events
  get the fields used here, flows, metadata and the other phases become empty structs.
  Files up to 64 MB of JSON are decoded in one pass; bigger ones are first scanned into
  raw spans (no objects) and decoded 16,384 events at a time, so memory stays the file's
  text plus one chunk of events.  Events are sorted into tables a chunk at a time, only
  the kept events' ``args`` are decoded (``cpu_op`` arguments, call stacks and flows never
  are), and no event dict is ever built.  A trace the typed decoders cannot take (an
  unknown phase, a name that is not text) goes through looser ones, with the same result.
* **No pandas.**  Columns become Arrow arrays from numpy buffers
  (:mod:`perfscope.store.arrays`), because ``pa.array`` imports pandas (0.15 s, 45 MB),
  and gzip is inflated with ISA-L (``isal``) when it is installed.
* **Collectives.**  Every NCCL kernel (name containing ``nccl``) becomes a ``collectives``
  row.  Its arguments (``Collective name``, ``dtype``, ``In msg nelems``, ``Group size``,
  ``Process Group Name`` ...) come from the kernel itself when Kineto copied them there,
  else from the ``record_param_comms`` op that launched it: the one whose ``External id``
  the kernel carries, or else the innermost one enclosing the launching runtime call (found
  through the correlation id) on the same thread.  ``count`` follows NCCL's convention:
  the smaller of the in and out element counts (per-rank input of AllGather, per-rank
  output of ReduceScatter); ``bytes`` is ``count`` times the element size.
* **Nothing half-written.**  A run is built in a hidden sibling folder and moved into
  place only when every file has imported; an existing run is replaced only with
  ``force`` and is left untouched when anything fails.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import mmap
import os
import re
import shutil
import stat
import tempfile
import zlib
from bisect import bisect_right
from operator import attrgetter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, NamedTuple, Union

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc  # casts and encodings below; imported here, not on first use

from perfscope.errors import InputError, PerfscopeError, RunExistsError, UsageError
from perfscope.store import kineto_filter
from perfscope.store.arrays import bool_array, column, float_array, from_numpy, int_array, str_array, str_or_none, to_int
from perfscope.store.names import normalize_collective
from perfscope.store.reader import MemoryRun
from perfscope.store.writer import BackgroundWrite, stored_tables

try:  # ISA-L's inflate is 2-3x faster than zlib's (same output); zlib when it is missing
    from isal import igzip_lib as _isal
except ImportError:  # pragma: no cover - isal is a dependency, but keep working without it
    _isal = None

#: ``progress(message, done, total)``: done/total count input bytes.
ProgressFn = Callable[[str, int, int], None]

PathLike = str | os.PathLike[str]


# ---------------------------------------------------------------------------------------
# Typed decoding
# ---------------------------------------------------------------------------------------
def _f(json_name: str) -> Any:
    return msgspec.field(name=json_name, default=None)


class _Args(msgspec.Struct, gc=False):
    """The ``args`` keys perfscope reads; every other key is skipped by the decoder.

    Values are left loosely typed (``Any``) because producers disagree (``"bytes": 1.0``,
    ranks as a string or a list); columns are coerced in bulk afterwards.  Float literals
    arrive as their text (the decoder's ``float_hook``).
    """

    external_id: Any = _f("External id")
    device: Any = None
    stream: Any = None
    correlation: Any = None
    registers: Any = _f("registers per thread")
    shared_memory: Any = _f("shared memory")
    grid: Any = None
    block: Any = None
    graph_id: Any = _f("graph id")
    bytes: Any = None
    cbid: Any = None
    cuda_sync_kind: Any = None
    collective: Any = _f("Collective name")
    dtype: Any = None
    in_nelems: Any = _f("In msg nelems")
    out_nelems: Any = _f("Out msg nelems")
    group_size: Any = _f("Group size")
    pg_name: Any = _f("Process Group Name")
    pg_id: Any = _f("Process Group ID")
    seq: Any = None
    value: Any = None  # counter events ("C") of perfscope's exports
    # Keys only perfscope's own exporter writes, so that a round trip is exact.
    ps: Any = None


class _Event(msgspec.Struct, gc=False):
    """One trace event.  ``args`` is decoded in two steps to save time and memory: the
    trace decoder keeps it as a :class:`msgspec.Raw` span of the input (no objects built),
    and :func:`build_rank_tables` replaces it by an :class:`_Args` (or None) only for the
    events it keeps.  Most events (``cpu_op``, flows) never have their args decoded."""

    ph: str = ""
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = 0
    dur: Any = 0
    args: Any = msgspec.field(default_factory=msgspec.Raw)


class _RawArgsEvent(_Event, gc=False):
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _FloatTimeEvent(_RawArgsEvent, gc=False):
    """An event whose ``ts``/``dur`` are decoded as floats (24 bytes instead of ~70 for the
    text), used when every timestamp is exact as a double (see :func:`decode_trace`)."""

    ts: float = 0.0
    dur: float = 0.0


class _Trace(msgspec.Struct, gc=False):
    """The top level of a trace.  Events stay :class:`msgspec.Raw` spans (48 bytes each,
    no copy) and are decoded a chunk at a time by :func:`iter_event_chunks`, so only one
    chunk of every-event objects is alive at once."""

    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815 - JSON key
    baseTimeNanoseconds: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    host_name: Any = None
    perfscope: Any = None


# float_hook=str: float literals in untyped fields come back as their exact text.
_DECODER = msgspec.json.Decoder(_Trace, float_hook=str)
_TEXT_TIME_EVENTS = msgspec.json.Decoder(list[_RawArgsEvent], float_hook=str)
_FLOAT_TIME_EVENTS = msgspec.json.Decoder(list[_FloatTimeEvent], float_hook=str)
# Below 2**43 µs (~100 days) a double is within 0.5 ns of any 3-decimal µs value, so the
# nanoseconds can be recovered exactly from it; above (epoch µs) only the text can do it.
_FLOAT_EXACT_US = float(1 << 43)
_TS_BIG = re.compile(rb'"ts"\s*:\s*-?(\d{13,})')
CHUNK_EVENTS = 16384
#: JSON texts up to this size are decoded in one pass (see :func:`decode_trace`).
WHOLE_DECODE_BYTES = 64 << 20


class _WholeTextTrace(_Trace, gc=False):
    traceEvents: list[_RawArgsEvent] | None = None  # type: ignore[assignment]  # noqa: N815


class _WholeFloatTrace(_Trace, gc=False):
    traceEvents: list[_FloatTimeEvent] | None = None  # type: ignore[assignment]  # noqa: N815


_WHOLE_TEXT_DECODER = msgspec.json.Decoder(_WholeTextTrace, float_hook=str)
_WHOLE_FLOAT_DECODER = msgspec.json.Decoder(_WholeFloatTrace, float_hook=str)
_ARGS_DECODER = msgspec.json.Decoder(_Args | None, float_hook=str)


# -- Fast path: events typed by their phase ----------------------------------------------
# A tagged union on ``ph`` lets msgspec build a full struct only for complete ("X") and
# counter ("C") events; flows, metadata, instants and the rest of the Chrome phases become
# empty structs (their fields are skipped, not built).  Timestamps are raw spans (_XR) or,
# in chunks of relative traces, floats with a bound, so that an epoch-µs value fails
# validation instead of losing its nanoseconds.  A trace this cannot type (a phase outside
# the list, a missing ``ph``, a name that is not text) is decoded by the loose decoders
# above instead, with the same result.
_ExactUs = Annotated[float, msgspec.Meta(gt=-_FLOAT_EXACT_US, lt=_FLOAT_EXACT_US)]


class _X(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event of the chunked decoder (the base of :class:`_XF`)."""

    ph: ClassVar[str] = "X"
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = 0
    dur: Any = 0
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _XF(_X, tag="X", gc=False):
    """A complete event whose ``ts``/``dur`` are exact as floats (below 2**43 µs)."""

    ts: _ExactUs = 0.0
    dur: _ExactUs = 0.0


class _CF(_XF, tag="C", gc=False):
    ph: ClassVar[str] = "C"


_NUMBER = msgspec.json.Decoder(float_hook=str)


def _raw_value(raw: msgspec.Raw) -> Any:
    """A raw JSON value as the loose decoders give it: whole numbers as ints, other
    numbers as their text, 0 when the key was absent."""
    return _NUMBER.decode(raw) if raw else 0


class _XR(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event whose ``ts``/``dur`` stay raw spans of the JSON text.

    The whole-file decoder uses these: no float or str object is built per timestamp,
    and :func:`_ts_ns` turns a table's spans into exact nanoseconds in one decimal parse
    (the same for epoch and relative µs).  ``.ts``/``.dur`` give the values the other
    event types hold, for the few places that look at one event.
    """

    ph: ClassVar[str] = "X"
    # Typed text decodes faster than Any; a trace whose cat or name is not text (never
    # seen from Kineto) fails validation and takes the loose decoders.
    cat: str | None = None
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts_raw: msgspec.Raw = msgspec.field(name="ts", default_factory=msgspec.Raw)
    dur_raw: msgspec.Raw = msgspec.field(name="dur", default_factory=msgspec.Raw)
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)

    @property
    def ts(self) -> Any:
        return _raw_value(self.ts_raw)

    @property
    def dur(self) -> Any:
        return _raw_value(self.dur_raw)


class _CR(_XR, tag="C", gc=False):
    ph: ClassVar[str] = "C"


class _XRF(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event of the whole-file decoder for relative traces (no epoch-µs
    timestamp in the first MB): like :class:`_XR`, but ``ts``/``dur`` are floats, exact
    below 2**43 µs (:data:`_ExactUs`) and cheaper to decode and convert in bulk than text.
    An epoch-µs value further on fails validation, and the text types take the file."""

    ph: ClassVar[str] = "X"
    cat: str | None = None
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts: _ExactUs = 0.0
    dur: _ExactUs = 0.0
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _CRF(_XRF, tag="C", gc=False):
    ph: ClassVar[str] = "C"


def _skipped_phase(ph: str) -> type:
    """An empty struct for events of phase ``ph``: no table keeps them, so none of their
    fields is decoded; class attributes answer the few questions asked of every event."""
    attrs = {"ph": ph, "cat": None, "name": None, "pid": None, "tid": None, "ts": 0, "dur": 0, "args": None}
    ns: dict[str, Any] = {"__annotations__": {k: ClassVar[Any] for k in attrs}, **attrs}
    return msgspec.defstruct(f"_Skip_{ord(ph)}", [], namespace=ns, tag_field="ph", tag=ph, gc=False)


# Every other phase of the Chrome trace event format: duration B/E, instant i/I/R, async
# b/n/e and legacy S/T/p/F, flow s/t/f, sample P, object N/O/D, metadata M, memory dump
# v/V, clock sync c, context ( and ).
_SKIPPED = tuple(_skipped_phase(ph) for ph in "BEiIRbneSTpFstfPNODMvVc()")
_FastFloat = Union[(_XF, _CF, *_SKIPPED)]  # noqa: UP007 - built from a tuple
_FastRaw = Union[(_XR, _CR, *_SKIPPED)]  # noqa: UP007


class _FastRawTrace(_Trace, gc=False):
    traceEvents: list[_FastRaw] | None = None  # type: ignore[assignment,valid-type]  # noqa: N815


_FastRawFloat = Union[(_XRF, _CRF, *_SKIPPED)]  # noqa: UP007


class _FastFloatTrace(_Trace, gc=False):
    traceEvents: list[_FastRawFloat] | None = None  # type: ignore[assignment,valid-type]  # noqa: N815


_FAST_WHOLE_RAW = msgspec.json.Decoder(_FastRawTrace, float_hook=str)
_FAST_WHOLE_FLOAT = msgspec.json.Decoder(_FastFloatTrace, float_hook=str)


# -- Filtered texts: args decoded with their event -----------------------------------------
# In a text the native pre-filter wrote, every event is one some table keeps, so every
# event's args are needed: decoding them in the same pass (as :class:`_Args`) costs less
# than keeping them as raw spans and decoding those again in a second pass.  An absent or
# null ``args`` is None here; :func:`_decode_args_batch` gives those events the shared
# empty ``_Args``, as it does to raw spans that are absent or null.  Args that are not an
# object fail validation, and the raw-span decoders take the text.
class _XRA(_XR, tag="X", gc=False):
    """:class:`_XR` (timestamps as raw spans) with its args decoded."""

    args: _Args | None = None  # type: ignore[assignment]


class _CRA(_XRA, tag="C", gc=False):
    ph: ClassVar[str] = "C"


class _XRFA(_XRF, tag="X", gc=False):
    """:class:`_XRF` (timestamps as exact floats) with its args decoded."""

    args: _Args | None = None  # type: ignore[assignment]


class _CRFA(_XRFA, tag="C", gc=False):
    ph: ClassVar[str] = "C"


class _FastRawArgsTrace(_Trace, gc=False):
    traceEvents: list[Union[(_XRA, _CRA, *_SKIPPED)]] | None = None  # type: ignore[assignment,valid-type]  # noqa: N815, UP007


class _FastFloatArgsTrace(_Trace, gc=False):
    traceEvents: list[Union[(_XRFA, _CRFA, *_SKIPPED)]] | None = None  # type: ignore[assignment,valid-type]  # noqa: N815, UP007


_FAST_WHOLE_RAW_ARGS = msgspec.json.Decoder(_FastRawArgsTrace, float_hook=str)
_FAST_WHOLE_FLOAT_ARGS = msgspec.json.Decoder(_FastFloatArgsTrace, float_hook=str)
_FAST_RAW_EVENTS = msgspec.json.Decoder(list[_FastRaw], float_hook=str)  # type: ignore[valid-type]
_FAST_FLOAT_EVENTS = msgspec.json.Decoder(list[_FastFloat], float_hook=str)  # type: ignore[valid-type]


_KINETO_CATS = frozenset({
    "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "cuda_runtime", "cuda_driver",
    "user_annotation", "gpu_user_annotation", "cpu_op", "python_function", "ac2g",
})


# ---------------------------------------------------------------------------------------
# Result
# ---------------------------------------------------------------------------------------
@dataclass
class ImportResult:
    """What :func:`import_kineto` wrote.

    Attributes:
        path: the run directory.
        rows: rows written per rank, then per table name.
        warnings: things the user should know (guessed ranks, skipped events, ...).
        run: with ``background=True``, the imported run in memory (a
            :class:`~perfscope.store.reader.MemoryRun`, read like ``open_run(path)`` and
            giving the same frames), readable before the run is on disk; else None.
    """

    path: Path
    rows: dict[int, dict[str, int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    run: MemoryRun | None = None
    # With ``background``: each rank's (rank, stored tables, metadata) until the write ends,
    # and the write itself.
    _staged: list[tuple[int, dict[str, pa.Table], dict[str, Any]]] = field(default_factory=list, repr=False)
    _writing: BackgroundWrite | None = field(default=None, repr=False)

    @property
    def ranks(self) -> list[int]:
        """The ranks imported, sorted."""
        return sorted(self.rows)

    def total(self, table: str) -> int:
        """Rows of ``table`` over all ranks."""
        return sum(r.get(table, 0) for r in self.rows.values())

    @property
    def writing(self) -> bool:
        """True while the background write of a ``background=True`` import still runs."""
        return self._writing is not None and not self._writing.done

    def wait(self) -> None:
        """Return once the run is complete at :attr:`path` (at once unless imported with
        ``background=True``).

        Raises:
            PerfscopeError: the background write failed (the hidden folder it wrote is
                removed, and an existing run at ``path`` is left as it was).
            RunExistsError: ``path`` was taken meanwhile.
        """
        if self._writing is not None:
            self._writing.wait()


# ---------------------------------------------------------------------------------------
# Reading one file
# ---------------------------------------------------------------------------------------
_ISAL_ERRORS: tuple[type[BaseException], ...] = (_isal.IsalError,) if _isal is not None else ()


def read_trace_bytes(path: Path) -> bytes:
    """Return the JSON text of ``path``, gunzipped when it is gzip (by content, not name).

    Raises:
        InputError: missing, unreadable or truncated/corrupt gzip.
    """
    data = _read_file(path)
    return _gunzip(data, path) if _is_gzip(data) else data


def _read_file(path: Path) -> bytes:
    """Return the bytes of ``path`` as they are.

    Raises:
        InputError: missing or unreadable.
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory; pass the trace files themselves (e.g. {path}/*.json.gz)") from None
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None


def _is_gzip(data: bytes) -> bool:
    return data[:2] == b"\x1f\x8b"


def _gunzip(data: bytes, path: Path) -> bytes:
    """Return the gunzipped ``data`` (read from ``path``, named in errors).

    Raises:
        InputError: truncated or corrupt gzip.
    """
    try:
        # One allocation of the final size (the gzip trailer holds it, mod 2**32), so the
        # peak is compressed + uncompressed bytes; multi-member files take gzip's path.
        size = int.from_bytes(data[-4:], "little")
        if _isal is not None:
            text = _isal.decompress(data, flag=_isal.DECOMP_GZIP, bufsize=max(size, 1 << 16))
        else:
            text = zlib.decompress(data, wbits=31, bufsize=max(size, 1 << 16))
        return text if len(text) % (1 << 32) == size else gzip.decompress(data)
    except (OSError, EOFError, zlib.error, *_ISAL_ERRORS) as e:
        raise InputError(f"{path} is not a complete gzip file ({e}); copy it again or gunzip it to check") from None


def _needs_text_times(data: bytes) -> bool:
    """True when the first MB of the trace holds an epoch-µs timestamp (>= 2**43 µs).

    Such traces decode their timestamps as text (whole values still arrive as ints); a
    float could not tell ``...689.047`` from ``...689.0``.
    """
    m = _TS_BIG.search(data, 0, 1 << 20)
    return m is not None and int(m.group(1)) >= (1 << 43)


def decode_trace(data: bytes, path: Path, *, whole: bool | None = None, text_times: bool | None = None) -> _Trace:
    """Decode Kineto JSON text, every event of it (the importer decodes a filtered copy:
    see :func:`_read_trace`).

    Files up to :data:`WHOLE_DECODE_BYTES` are decoded in one pass, events included (one
    parse instead of a scan plus chunks: faster, and the memory saved by chunks is small
    there).  Bigger files keep their events as raw spans, decoded a chunk at a time by
    :func:`iter_event_chunks`, which accepts either form.

    Args:
        data: the JSON text.
        path: the file it came from (for messages).
        whole: decode events in one pass (True) or keep raw spans (False); by size if None.
        text_times: :func:`_needs_text_times` of ``data``, when the caller has it.

    Returns:
        the decoded :class:`_Trace`.

    Raises:
        InputError: malformed JSON, or JSON that is not a Kineto/Chrome trace object.
    """
    if text_times is None:
        text_times = _needs_text_times(data)
    trace = _decode_text(data, path, whole, text_times)
    if trace.traceEvents and not _looks_kineto(trace):
        head = next(iter_event_chunks(trace.traceEvents[:1000], text_times=True, path=path))
        if not any(e.cat in _KINETO_CATS for e in head):
            raise InputError(f"{path} is a Chrome trace but not a PyTorch profiler (Kineto) trace: none of its events has a Kineto category")
    return trace


#: texts from this size on are filtered in place by :func:`_read_trace`.
_IN_PLACE_BYTES = 1 << 16


def _read_trace(path: Path) -> tuple[_Trace, bool, list[int] | None]:
    """Read and decode one trace file for the import: when the native pre-filter is built
    (:mod:`perfscope.store.kineto_filter`), only the events some table may keep are
    decoded; the trace is the original's less the others, every other member the same.  A
    text the filter refuses, or whose filtered decode fails, goes through
    :func:`decode_trace` whole, so errors read the same either way.

    Returns:
        (the trace, whether its timestamps are decoded as text (see
        :func:`_needs_text_times`), and for a filtered trace the sizes of the chunks to
        hand its events out in (see :func:`_chunk_sizes`), else None).

    A big gzip file is filtered while it is inflated (see :func:`_read_streamed`).

    Raises:
        InputError: see :func:`read_trace_bytes` and :func:`decode_trace`.
    """
    data = _read_file(path)
    if _is_gzip(data):
        streamed = _read_streamed(data, path)
        if streamed is not None:
            return streamed
        data = _gunzip(data, path)
    text_times = _needs_text_times(data)
    if kineto_filter.available():
        # In place when big: the text is a fresh object of ours alone (tiny ones may be
        # shared), so the filtered text can be written over it, without a second buffer's
        # memory and page faults.  The original is then read again if it is needed, so
        # only from a regular file: a pipe (`<(zcat ...)`) cannot be read twice.
        in_place = len(data) >= _IN_PLACE_BYTES and _is_regular_file(path)
        kept = kineto_filter.run(data, _FILTER_RULES, chunk_events=CHUNK_EVENTS, in_place=in_place)
        if in_place:
            del data  # overwritten: only kept.text may be read now
        trace = _decode_kept(kept, path, text_times)
        sizes = _chunk_sizes(kept.chunk_counts, list(_FILTER_RULES.cats), CHUNK_EVENTS)
        del kept
        if trace is not None:
            # (They always add up; if they ever did not, plain chunks lose no event.)
            return trace, text_times, sizes if sum(sizes) == len(trace.traceEvents or ()) else None
        if in_place:
            data = read_trace_bytes(path)
    # Unfiltered: its decode gives the errors their usual words and offsets.
    return decode_trace(data, path, text_times=text_times), text_times, None


#: gzip texts from this size on (by their trailer) are filtered while they are inflated.
_STREAM_BYTES = 1 << 20
#: Bytes inflated at a time for the filter (tests make it tiny).  Smaller pieces start the
#: filter sooner and stay in cache, at ~5 us of Python per piece (measured best: 256 KB).
_STREAM_PIECE = 1 << 18
#: > 0: the streamed filter sees the text at most this many bytes further at a time, so
#: that its scans run into the end of what has come at every byte (tests).
_STREAM_STEP = 0


def _read_streamed(data: bytes, path: Path) -> tuple[_Trace, bool, list[int] | None] | None:
    """:func:`_read_trace` of the gzip file ``path`` whose bytes are ``data``, inflated in
    pieces that the filter reads on a thread of its own as they come (a
    :class:`perfscope.store.kineto_filter.Stream`); this thread, done inflating, filters
    part of the rest, and the two then extract the kept events' columns (into a
    :class:`perfscope.store.kineto_native.Sink`).  On two cores that takes a third less
    time than the three steps one after another (15.5 ms instead of 23.7 for a 15 MB text).

    Returns:
        :func:`_read_trace`'s result, or None when the text was not read this way (too
        small, no filter or ISA-L, not exactly one gzip member of the size its trailer
        says, corrupt, or the filter stopped on an error): the caller then reads the file
        as it would without streams, from the start, which gives every error its usual
        words.

    Raises:
        InputError: see :func:`decode_trace`.
    """
    size = int.from_bytes(data[-4:], "little")
    if _isal is None or size < _STREAM_BYTES or not kineto_filter.streaming():
        return None
    sink = kineto_native.Sink(size) if kineto_native.available() else None
    stream = kineto_filter.Stream(size, _FILTER_RULES, chunk_events=CHUNK_EVENTS, sink=sink, step=_STREAM_STEP)
    complete, text_times = False, False
    try:
        if stream.started:
            complete, text_times = _inflate_into(stream, data)
    finally:
        kept = stream.finish(complete)
    del stream, sink
    if not complete or kept.error is not None:
        return None
    trace = _decode_kept(kept, path, text_times)
    sizes = _chunk_sizes(kept.chunk_counts, list(_FILTER_RULES.cats), CHUNK_EVENTS)
    del kept
    if trace is None:
        # The filtered text cannot give the answer (see _decode_kept): the original does.
        return decode_trace(_gunzip(data, path), path, text_times=text_times), text_times, None
    return trace, text_times, sizes if sum(sizes) == len(trace.traceEvents or ()) else None


def _inflate_into(stream: kineto_filter.Stream, data: bytes) -> tuple[bool, bool]:
    """Inflate the gzip ``data`` into ``stream``, :data:`_STREAM_PIECE` bytes at a time.

    Returns:
        (whether the stream got the whole text: one gzip member, checksum and length
        right, nothing after it, exactly the size the stream was made for; and
        :func:`_needs_text_times` of the text, meaningful only when it did).
    """
    inflater = _isal.IgzipDecompressor(flag=_isal.DECOMP_GZIP)
    head: list[bytes] = []  # the first MB, for _needs_text_times (the filter overwrites the text)
    head_len = 0
    text_times: bool | None = None
    try:
        piece = inflater.decompress(data, _STREAM_PIECE)
        while True:
            if text_times is None:
                head.append(piece)
                head_len += len(piece)
                if head_len >= 1 << 20:
                    text_times = _needs_text_times(b"".join(head))
                    head = []
            if not stream.write(piece):
                return False, False  # the filter stopped on an error, or the text is too long
            if inflater.eof or inflater.needs_input:
                break  # (needing input with all of it given: truncated)
            piece = inflater.decompress(b"", _STREAM_PIECE)
    except (EOFError, *_ISAL_ERRORS):
        return False, False  # corrupt: the caller's gunzip says how
    if not inflater.eof or inflater.unused_data or stream.written != stream.size:
        return False, False  # truncated, more members (or bytes) after the first, or another size
    if text_times is None:
        text_times = _needs_text_times(b"".join(head))
    return True, text_times


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


# Events are classified a chunk at a time, and a few lists are joined per chunk from two
# categories, the first's events then the second's: api rows (CUDA runtime, then driver
# calls), markers (host, then GPU annotations), steps and record_param_comms ops (from
# user annotations, then from cpu ops).
_JOINED_PER_CHUNK = (("cuda_runtime", "cuda_driver"), ("user_annotation", "gpu_user_annotation"),
                     ("user_annotation", "cpu_op"))


def _chunk_sizes(counts: Sequence[Sequence[int]], cats: Sequence[str], limit: int) -> list[int]:
    """The chunks to hand a filtered trace's events to the table builders in, so that the
    tables are those of the unfiltered trace, rows in the same order.

    Args:
        counts: per chunk of ``limit`` events of the original trace, its kept events of
            each category of ``cats`` and then of unknown ones (``Filtered.chunk_counts``).
        cats: the categories, in the order of ``counts``.
        limit: the most events in a chunk (:data:`CHUNK_EVENTS`).

    Returns:
        the sizes of the chunks: the original's, except that consecutive ones are joined
        (fewer chunks cost less) while that changes no order of :data:`_JOINED_PER_CHUNK`
        (the one joined first has none of a pair's second category, or the next none of its
        first) and keeps them within ``limit``.
    """
    index = {cat: i for i, cat in enumerate(cats)}
    pairs = [(index[first], index[second]) for first, second in _JOINED_PER_CHUNK]
    unknown = len(cats)  # could be of any category: never joined
    sizes: list[int] = []
    held: list[int] = []  # per category, in the chunk being built
    for row in counts:
        n = sum(row)
        if (sizes and sizes[-1] + n <= limit and not row[unknown] and not held[unknown]
                and not any(held[second] and row[first] for first, second in pairs)):
            sizes[-1] += n
            held = [a + b for a, b in zip(held, row)]
        else:
            sizes.append(n)
            held = list(row)
    return sizes


def _decode_kept(kept: kineto_filter.Filtered, path: Path, text_times: bool) -> _Trace | None:
    """Decode a filtered text; None when only the original text can be trusted to give the
    answer (the filter refused it, the decode failed, or the Kineto check of
    :func:`decode_trace` needs the events that were dropped).

    Ordinary Kineto traces take the native route when it is built: their ``traceEvents``
    are then :class:`perfscope.store.kineto_native.Rows`, columns instead of events (see
    :func:`_builders`).  A text that route refuses is decoded here with msgspec."""
    if kept.text is None:
        return None
    trace = kineto_native.decode(kept) if kineto_native.available() else None
    if trace is None:
        try:
            trace = _decode_text(kept.text, path, None, text_times, with_args=True)
        except (InputError, RecursionError):
            return None  # the original's decode raises the error, with its own offsets
    # Without Kineto's header keys decode_trace looks at the first 1000 events' categories,
    # dropped ones included.
    if kept.events and not _looks_kineto(trace):
        return None
    return trace


def _decode_text(data: bytes | memoryview, path: Path, whole: bool | None, text_times: bool,
                 *, with_args: bool = False) -> _Trace:
    """Decode ``data`` (see :func:`decode_trace`) and return the trace, which has a
    ``traceEvents`` list (``with_args``: see :func:`_decode_whole`).

    Raises:
        InputError: malformed JSON, not a JSON object, or no ``traceEvents`` list.
    """
    if whole is None:
        whole = len(data) <= WHOLE_DECODE_BYTES
    try:
        trace = _decode_whole(data, text_times, with_args=with_args) if whole else _DECODER.decode(data)
    except msgspec.ValidationError as e:
        raise InputError(f"{path} is not a Kineto trace ({e}); expected a JSON object with a traceEvents list") from None
    except msgspec.DecodeError as e:
        raise InputError(f"{path} is not valid JSON ({e}); the file may be truncated, re-export the trace") from None
    if trace.traceEvents is None:
        raise InputError(f"{path} is not a Kineto trace: it has no traceEvents list")
    return trace


def _looks_kineto(trace: _Trace) -> bool:
    """True when the trace's top level has a key only Kineto (or perfscope) writes."""
    return (
        trace.schemaVersion is not None or trace.deviceProperties is not None
        or trace.distributedInfo is not None or trace.baseTimeNanoseconds is not None
        or trace.perfscope is not None
    )


def _decode_whole(data: bytes | memoryview, text_times: bool | None = None, *, with_args: bool = False) -> _Trace:
    """Header and events in one pass: float timestamps when exact, else their text
    (``text_times``: :func:`_needs_text_times` of the original text, computed if None).

    ``with_args`` (for filtered texts, whose events all have their args read) first tries
    the decoders that decode each event's args with it; a text they refuse takes the
    others, which give the same trace with the args as raw spans."""
    if text_times is None:
        text_times = _needs_text_times(data)
    if with_args:
        # Same order as below: a trace the float one refuses for its timestamps is one the
        # raw one takes; one refused for its args (not an object) is refused by both.
        for decoder in (_FAST_WHOLE_RAW_ARGS,) if text_times else (_FAST_WHOLE_FLOAT_ARGS, _FAST_WHOLE_RAW_ARGS):
            try:
                return decoder.decode(data)  # type: ignore[no-any-return]
            except msgspec.ValidationError:
                pass
    if not text_times:
        try:
            return _FAST_WHOLE_FLOAT.decode(data)  # type: ignore[no-any-return]
        except msgspec.ValidationError:
            pass  # an epoch-µs value after the first MB, or an event the union does not cover
    try:
        return _FAST_WHOLE_RAW.decode(data)  # type: ignore[no-any-return]
    except msgspec.ValidationError:
        pass  # an event the typed union does not cover: the loose decoders take it
    if not text_times:
        try:
            trace = _WHOLE_FLOAT_DECODER.decode(data)
        except msgspec.ValidationError:
            trace = None  # e.g. a timestamp written as a string: the loose decoder takes it
        if trace is not None and (not trace.traceEvents or max(abs(e.ts) for e in trace.traceEvents) < _FLOAT_EXACT_US):
            return trace
        del trace
    return _WHOLE_TEXT_DECODER.decode(data)


def iter_event_chunks(raws: list[Any], *, text_times: bool, path: Path | str = "trace",
                      chunk: int = CHUNK_EVENTS, sizes: Sequence[int] | None = None) -> Iterator[list[_Event]]:
    """Decode raw events ``chunk`` at a time into :class:`_Event` lists (a list of events
    already decoded by :func:`decode_trace` is handed out in chunks, and emptied).

    ``sizes``, when given, are the chunks' lengths instead (empty chunks are skipped): a
    filtered trace's events go out in the chunks of the original's boundaries, so that the
    tables' rows come in the same order (markers and steps are joined per chunk).

    Timestamps decode as floats when that is exact (below 2**43 µs, i.e. relative to
    ``baseTimeNanoseconds``) and as their text otherwise (whole numbers arrive as ints):
    ``text_times`` (from :func:`_needs_text_times`) forces text, and a chunk whose float
    values turn out to be epoch µs is decoded again as text.

    Raises:
        InputError: an event is not a JSON object of the expected shape.
    """
    if sizes is None:
        sizes = [chunk] * -(-len(raws) // chunk)
    if raws and not isinstance(raws[0], msgspec.Raw):
        # Already decoded: hand the list out a chunk at a time, removing each chunk from it
        # so that the events no table keeps are freed as the import goes.
        for n in sizes:
            if n and raws:
                events = raws[:n]
                del raws[:n]
                yield events
        return
    stop = 0
    for n in sizes:
        start, stop = stop, stop + n
        if not n:
            continue
        data = _chunk_buffer(raws[start:stop])
        events: list[Any] | None = None
        # Epoch-µs traces keep their timestamps as raw spans (no text object per value).
        for decoder in (_FAST_RAW_EVENTS,) if text_times else (_FAST_FLOAT_EVENTS, _FAST_RAW_EVENTS):
            try:
                events = decoder.decode(data)
                break
            except msgspec.ValidationError:
                pass  # see _decode_whole
        if events is None and not text_times:
            try:
                events = _FLOAT_TIME_EVENTS.decode(data)
            except msgspec.ValidationError:
                events = None  # e.g. a timestamp written as a string: the loose decoder takes it
            if events and max(abs(e.ts) for e in events) >= _FLOAT_EXACT_US:
                events = None  # epoch µs after all: only the text keeps every nanosecond
        if events is None:
            try:
                events = _TEXT_TIME_EVENTS.decode(data)
            except msgspec.ValidationError as e:
                raise InputError(f"{path}: an event in traceEvents[{start}:{stop}] is malformed ({e})") from None
        # The map is unmapped when the last Raw pointing into it (the chunk's undecoded args)
        # goes, i.e. once the caller moves on to the next chunk.
        del data
        yield events


def _chunk_buffer(raws: list[msgspec.Raw]) -> mmap.mmap:
    """``[raw,raw,...]`` in an anonymous memory map: unlike a bytes object of that size,
    its pages go back to the OS when it is freed instead of leaving a hole in the heap
    below the events decoded from it.  (The joined bytes are freed before any event is.)"""
    joined = b",".join(raws)
    buf = mmap.mmap(-1, len(joined) + 2)
    buf.write(b"[")
    buf.write(joined)
    buf.write(b"]")
    return buf


# ---------------------------------------------------------------------------------------
# Conversions (bulk, exact)
# ---------------------------------------------------------------------------------------
_EXTENDED = np.finfo(np.longdouble).nmant >= 63


def _us_to_ns(values: Sequence[Any]) -> np.ndarray:
    """Convert microsecond values (float, int, or decimal text from the decoder) to int64 ns,
    exactly.

    Floats (only ever below 2**43 µs, see :func:`iter_event_chunks`) are split
    into whole µs and fraction.  Integers take a pure integer path.  Decimal text goes through 80-bit long doubles
    (64-bit mantissa): for |value| < 9e15 µs the text's nearest long double is within
    1e-4 ns of it, so rounding ``value * 1000`` recovers every nanosecond digit.  Where
    long double is only 64-bit (some platforms) the text is converted with ``decimal``.
    """
    if not values:
        return np.zeros(0, np.int64)
    if values[0].__class__ is float:
        try:
            us = np.array(values, dtype=np.float64)
        except (TypeError, ValueError):
            us = None
        if us is not None and np.all(np.abs(us) < 2.0**52):
            # Split off the whole µs (exact) so that only the fraction is scaled: the result
            # is the nanosecond nearest to the double, which is the one the text said.
            whole = np.floor(us)
            return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
    if values[0].__class__ is str:
        ns = _decimal_us_to_ns(values)
        if ns is not None:
            return ns
    try:
        ints = np.array(values)
    except (ValueError, OverflowError, TypeError):
        ints = None
    if ints is not None and ints.ndim == 1 and ints.dtype.kind == "i":
        return ints.astype(np.int64, copy=False) * 1000
    if _EXTENDED:
        try:
            ld = np.array(values, dtype=object).astype(np.longdouble)
            if np.all(np.abs(ld) < 9e15):
                return np.rint(ld * 1000).astype(np.int64)
        except (ValueError, TypeError):
            pass
    return np.array([_one_us_to_ns(v) for v in values], dtype=np.int64)


_DECIMAL_US = pa.decimal128(38, 3)
_CAST_DECIMAL_US = pc.CastOptions(target_type=_DECIMAL_US)  # safe: more decimals fail


def _warm_up_arrow() -> None:
    """Make Arrow do its once-per-process set-up now, at import, on a few values: the
    first cast of a process builds the table of cast kernels, the first dictionary
    encoding and the first zstd Parquet file have set-up of their own (2-4 ms together,
    none of it depending on a trace)."""
    import io

    import pyarrow.parquet as pq

    ints = from_numpy(np.arange(2, dtype=np.int64))
    text = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(np.array([0, 1, 4], np.int32)),
                                                  pa.py_buffer(b"11.25")])
    pc.cast(ints, pa.int32())
    pc.call_function("cast", [text], _CAST_DECIMAL_US)
    names = text.cast(pa.dictionary(pa.int32(), pa.string()))
    pq.write_table(pa.table({"a": ints, "b": names}), io.BytesIO(), compression="zstd",
                   use_dictionary=["b"], write_statistics=["a"])


_warm_up_arrow()


def _decimal_us_to_ns(values: Sequence[Any]) -> np.ndarray | None:
    """Decimal µs text (``"1712195495519689.047"``) to int64 ns through Arrow's exact
    decimal parser, or None when some value is not text, has more than three decimals or
    does not fit: the caller's slower paths take those.

    A ``decimal128(38, 3)`` value is stored as its unscaled integer, i.e. the nanoseconds,
    in two 64-bit words (low first); the low word is the answer when the high one is just
    its sign extension.
    """
    text = str_array(values, strict=True)
    return None if text is None else _decimal_text_to_ns(text)


def _raw_us_to_ns(raws: list[msgspec.Raw]) -> np.ndarray:
    """Raw JSON numbers (µs) to int64 ns, exactly: the spans joined are the data of an
    Arrow string array, parsed as decimals in one call.  Absent values, nulls, strings and
    numbers with more than three decimals take the per-value path (:func:`_us_to_ns`)."""
    n = len(raws)
    if n == 0:
        return np.zeros(0, np.int64)
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    ns = None
    if lengths.min() > 0:
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] < 2**31:
            text = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                          pa.py_buffer(b"".join(raws))])
            ns = _decimal_text_to_ns(text)
    return ns if ns is not None else _us_to_ns([_raw_value(r) for r in raws])


def _decimal_text_to_ns(text: pa.Array) -> np.ndarray | None:
    """A string array of decimal µs to int64 ns (see :func:`_decimal_us_to_ns`)."""
    try:
        dec = pc.call_function("cast", [text], _CAST_DECIMAL_US)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if dec.null_count:
        return None
    words = np.frombuffer(dec.buffers()[1], dtype=np.int64, count=2 * len(dec), offset=16 * dec.offset).reshape(-1, 2)
    low = words[:, 0]
    if not np.array_equal(words[:, 1], low >> 63):
        return None
    return low.copy()


def _one_us_to_ns(v: Any) -> int:
    from decimal import Decimal, InvalidOperation

    if v is None:
        return 0
    if isinstance(v, int):
        return v * 1000
    try:
        return int((Decimal(str(v)) * 1000).to_integral_value())
    except InvalidOperation:
        raise InputError(f"timestamp {v!r} is not a number") from None


def _int_col(values: list[Any], type_: pa.DataType = pa.int64()) -> pa.Array:
    """Integer column with nulls; tolerates floats-as-text and numeric strings."""
    return int_array(values, type_)


_to_int = to_int
_str_or_none = str_or_none


def _arg(e: _Event, name: str) -> Any:
    a = e.args
    return None if a is None else getattr(a, name)


def _xyz(v: Any, i: int) -> int | None:
    if isinstance(v, (list, tuple)) and len(v) > i:
        return _to_int(v[i])
    return None


# ---------------------------------------------------------------------------------------
# Name parsing
# ---------------------------------------------------------------------------------------
_COPY_KINDS = {
    "htod": "H2D", "dtoh": "D2H", "dtod": "D2D", "ptop": "P2P", "htoh": "H2H",
    "htoa": "H2D", "atoh": "D2H", "atod": "D2D", "dtoa": "D2D", "atoa": "D2D",
}
_MEM_KINDS = {
    "pageable": "pageable", "pinned": "pinned", "device": "device", "managed": "managed",
    "array": "array", "device static": "device", "managed static": "managed", "unknown": "unknown",
}
_MEMCPY_RE = re.compile(r"^\s*memcpy\s+(\w+)(?:\s*\(\s*([^)]*?)\s*->\s*([^)]*?)\s*\))?", re.IGNORECASE)
_PAREN_RE = re.compile(r"\(\s*([^)]*?)\s*\)")


def parse_memcpy_name(name: str) -> tuple[str, str, str, bool]:
    """Parse a Kineto memcpy name such as ``"Memcpy HtoD (Pageable -> Device)"``.

    Returns:
        (copy_kind, src_kind, dst_kind, pageable): copy_kind is H2D, D2H, D2D, P2P, H2H or
        ``other``; memory kinds are pageable, pinned, device, managed, array or ``unknown``;
        pageable is true when either side is pageable host memory.
    """
    m = _MEMCPY_RE.match(name or "")
    if not m:
        return "other", "unknown", "unknown", False
    copy_kind = _COPY_KINDS.get(m.group(1).lower(), "other")
    src = _MEM_KINDS.get((m.group(2) or "unknown").strip().lower(), "unknown")
    dst = _MEM_KINDS.get((m.group(3) or "unknown").strip().lower(), "unknown")
    if m.group(2) is None:
        # No "(src -> dst)": the direction still tells which side is device memory.
        src = "device" if copy_kind in ("D2H", "D2D", "P2P") else "unknown"
        dst = "device" if copy_kind in ("H2D", "D2D", "P2P") else "unknown"
    return copy_kind, src, dst, "pageable" in (src, dst)


def parse_memset_kind(name: str) -> str:
    """``"Memset (Device)"`` -> ``device``; unknown when the name gives no kind."""
    m = _PAREN_RE.search(name or "")
    return _MEM_KINDS.get(m.group(1).strip().lower(), "unknown") if m else "unknown"


_SYNC_KINDS = {
    "stream sync": "stream", "stream synchronize": "stream", "event sync": "event",
    "event synchronize": "event", "context sync": "context", "device sync": "context",
    "device synchronize": "context", "stream wait event": "stream_wait_event",
}


def parse_sync_kind(kind_arg: Any, name: Any) -> str:
    """Map Kineto's ``cuda_sync_kind`` (or the event name) to stream, event, context,
    stream_wait_event or unknown."""
    for text in (kind_arg, name):
        if isinstance(text, str):
            k = _SYNC_KINDS.get(text.strip().lower())
            if k:
                return k
    return "unknown"




_ALGOS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS", "RING", "TREE", "PAT")
_PROTOS = ("LL128", "LL", "SIMPLE")
_NCCL_KERNEL_RE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


def parse_nccl_kernel(name: str) -> tuple[str | None, str | None, str | None]:
    """Parse ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` or
    ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``.

    Returns:
        (func, algorithm, protocol), each None when the name does not say.
    """
    base = (name or "").split("(", 1)[0]
    m = _NCCL_KERNEL_RE.search(base)
    func = m.group(1) if m else None
    if func is not None and func.lower() == "generic":
        func = None
    tokens = base.split("_")
    joined = "_" + base.upper() + "_"
    algo = next((a for a in _ALGOS if f"_{a}_" in joined), None)
    proto = next((p for p in _PROTOS if p in tokens), None)
    return func, algo, proto


def is_nccl_kernel(name: str) -> bool:
    """True for NCCL's device kernels (``ncclKernel_*``, ``ncclDevKernel_*``)."""
    return "nccl" in name.lower() if name else False


_DTYPE_SIZES = {
    "float": 4, "float32": 4, "f32": 4, "ncclfloat": 4, "ncclfloat32": 4,
    "double": 8, "float64": 8, "f64": 8, "ncclfloat64": 8, "nccldouble": 8,
    "half": 2, "float16": 2, "f16": 2, "ncclfloat16": 2, "ncclhalf": 2,
    "bfloat16": 2, "bf16": 2, "ncclbfloat16": 2,
    "int": 4, "int32": 4, "i32": 4, "ncclint32": 4, "ncclint": 4, "uint32": 4, "u32": 4, "nccluint32": 4,
    "long": 8, "int64": 8, "i64": 8, "ncclint64": 8, "uint64": 8, "u64": 8, "nccluint64": 8,
    "short": 2, "int16": 2, "uint16": 2,
    "char": 1, "int8": 1, "int8_t": 1, "i8": 1, "ncclint8": 1, "ncclchar": 1,
    "byte": 1, "uint8": 1, "u8": 1, "unsigned char": 1, "nccluint8": 1, "bool": 1,
    "complexhalf": 4, "complexfloat": 8, "complexdouble": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "ncclfloat8e4m3": 1, "ncclfloat8e5m2": 1,
}


def dtype_size(dtype: Any) -> int | None:
    """Bytes per element of a PyTorch or NCCL dtype name (``Float``, ``c10::BFloat16``,
    ``ncclFloat32``...), or None when unknown."""
    if not isinstance(dtype, str):
        return None
    key = dtype.strip().lower().removeprefix("c10::").removeprefix("torch.").removeprefix("at::")
    return _DTYPE_SIZES.get(key)


_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


# ---------------------------------------------------------------------------------------
# One rank: events -> column batches
# ---------------------------------------------------------------------------------------
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


def _times(events: list[_Event], base: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, duration) of ``events`` in int64 ns, start with ``base`` added."""
    n = len(events)
    try:  # both in one parse: each call has a fixed cost, and there are many small tables
        both = _raw_us_to_ns([e.ts_raw for e in events] + [e.dur_raw for e in events])
    except AttributeError:
        return _us_to_ns([e.ts for e in events]) + base, _us_to_ns([e.dur for e in events])
    return both[:n] + base, both[n:]


def _ts_ns(events: list[Any]) -> np.ndarray:
    """The events' ``ts`` in int64 ns (without any base)."""
    try:
        return _raw_us_to_ns([e.ts_raw for e in events])
    except AttributeError:  # events of the other decoders hold values, not spans
        return _us_to_ns([e.ts for e in events])


def _dur_ns(events: list[Any]) -> np.ndarray:
    """The events' ``dur`` in int64 ns."""
    try:
        return _raw_us_to_ns([e.dur_raw for e in events])
    except AttributeError:
        return _us_to_ns([e.dur for e in events])


def _dev(e: _Event) -> Any:
    d = _arg(e, "device")
    return d if d is not None else (e.pid if isinstance(e.pid, int) else None)


def _stream(e: _Event) -> Any:
    s = _arg(e, "stream")
    return s if s is not None else (e.tid if isinstance(e.tid, int) else None)


_EMPTY_ARGS = _Args()
_ARGS_LIST_DECODER = msgspec.json.Decoder(list[_Args | None], float_hook=str)


class _ApiArgs(msgspec.Struct, gc=False):
    """What the api table and the launch index read of a CUDA API call's ``args`` (its
    15k-100k events are the most numerous kept ones: a small struct decodes faster)."""

    correlation: Any = None
    cbid: Any = None
    ps: Any = None


_API_ARGS_LIST_DECODER = msgspec.json.Decoder(list[_ApiArgs | None], float_hook=str)


_ONLY_RAW = frozenset({msgspec.Raw})
_DECODED_ARGS = frozenset({_Args, _ApiArgs})
_NONE_TYPE = type(None)


def _decode_args_batch(events: list[_Event], *, store: bool = True,
                       decoder: msgspec.json.Decoder = _ARGS_LIST_DECODER) -> list[_Args]:
    """Decode the Raw ``args`` of ``events`` (in one call) and return every event's
    :class:`_Args` (an empty one where an event has none).  Decoded args are stored back on
    the events, so that none keeps pointing into the JSON text (``store`` is accepted for
    compatibility and ignored); events already decoded are left as they are."""
    raws = [e.args for e in events]  # (a comprehension reads struct fields faster than attrgetter)
    kinds = set(map(type, raws))
    if kinds <= _DECODED_ARGS:  # decoded with the events (filtered texts: _XRFA, _XRA) or before
        return raws
    if _NONE_TYPE in kinds:  # decoded with the events, some without args or with "args": null
        for e in events:
            if e.args is None:
                e.args = _EMPTY_ARGS
        if msgspec.Raw not in kinds:
            return [a if a is not None else _EMPTY_ARGS for a in raws]
        raws = [e.args for e in events]
        kinds = set(map(type, raws))
    if kinds <= _ONLY_RAW:  # a chunk's events, none decoded yet
        pending = events
    else:
        pending = [e for e in events if e.args.__class__ is msgspec.Raw]
        raws = [e.args for e in pending]
    if pending:
        if not all(raws):
            raws = [r or b"null" for r in raws]  # an event without args
        try:
            decoded = decoder.decode(b"[" + b",".join(raws) + b"]")
        except msgspec.ValidationError:
            decoded = [_decode_one(r) for r in raws]  # some event's args are not an object
        if _NONE_TYPE in set(map(type, decoded)):  # an event with "args": null
            decoded = [a if a is not None else _EMPTY_ARGS for a in decoded]
        for e, a in zip(pending, decoded):
            e.args = a
        if pending is events:
            return decoded  # type: ignore[no-any-return]
    return [e.args if e.args is not None else _EMPTY_ARGS for e in events]


def _decode_one(raw: Any) -> _Args | None:
    try:
        return _ARGS_DECODER.decode(raw)
    except msgspec.ValidationError:
        return None


def _ints(values: list[Any], fallback: list[Any] | None = None, type_: pa.DataType = pa.int64()) -> pa.Array:
    """Integer column from ``values``, taking ``fallback[i]`` where ``values[i]`` is None."""
    if fallback is not None:
        values = [v if v is not None else f for v, f in zip(values, fallback)]
    return _int_col(values, type_)


def _strs(values: list[Any]) -> pa.Array:
    return str_array(values)


def _triples(values: list[Any]) -> tuple[pa.Array, pa.Array, pa.Array]:
    """x, y, z int32 columns from ``[x, y, z]`` lists (Kineto's grid/block)."""
    n = len(values)
    try:
        arr = np.array(values, dtype=np.int64)
        if arr.shape == (n, 3):
            return tuple(from_numpy(np.ascontiguousarray(arr[:, i]), pa.int32()) for i in range(3))  # type: ignore[return-value]
    except (ValueError, TypeError, OverflowError):
        pass
    return tuple(_int_col([_xyz(v, i) for v in values], pa.int32()) for i in range(3))  # type: ignore[return-value]


def _extras(args: list[_Args]) -> list[dict[str, Any]] | None:
    """The per-event ``args.ps`` dicts of perfscope's own exports, or None when no event has one."""
    ps = [a.ps for a in args]
    if ps.count(None) == len(ps):
        return None
    return [p if isinstance(p, dict) else {} for p in ps]


def _with_extra(values: list[Any], extras: list[dict[str, Any]] | None, key: str) -> list[Any]:
    """``values`` with ``extras[i][key]`` where that key is present (even when null)."""
    if extras is None:
        return values
    return [x[key] if key in x else v for v, x in zip(values, extras)]


def _pids(events: list[_Event], pid_map: dict[Any, Any] | None) -> list[Any]:
    """The events' pids, through ``pid_map`` (see :func:`_mapped`)."""
    return _mapped([e.pid for e in events], pid_map)


def _mapped(pids: list[Any], pid_map: dict[Any, Any] | None) -> list[Any]:
    """``pids`` with those ``pid_map`` has replaced (a new list then; ``pids`` itself
    when there is no map)."""
    return [pid_map.get(p, p) for p in pids] if pid_map else pids


@dataclass
class _Classified:
    """One rank's events that some table needs, by kind, with their args decoded."""

    kernels: list[_Event] = field(default_factory=list)
    memcpy: list[_Event] = field(default_factory=list)
    memset: list[_Event] = field(default_factory=list)
    sync: list[_Event] = field(default_factory=list)
    api: list[_Event] = field(default_factory=list)
    markers: list[_Event] = field(default_factory=list)
    gpu_markers: list[_Event] = field(default_factory=list)
    steps: list[tuple[int, _Event]] = field(default_factory=list)
    host: list[_Event] = field(default_factory=list)
    colls: list[_Event] = field(default_factory=list)
    metrics: list[_Event] = field(default_factory=list)
    rpc: list[_Event] = field(default_factory=list)

    def add(self, events: Iterable[_Event]) -> None:
        """Sort ``events`` into their kinds and decode the kept ones' args.

        Everything else (``cpu_op`` ops, flows, metadata: most of a trace) is dropped, and
        with it the chunk's text, since kept events no longer point into it.
        """
        by_cat: dict[Any, list[_Event]] = {cat: [] for cat in _CAT_KIND}
        get = by_cat.get
        for e in events:
            # One dict probe per event: most events (cpu_op aside) are flows and metadata
            # whose category is not a key.
            bucket = get(e.cat)
            if bucket is not None:
                bucket.append(e)
        kept: dict[str, list[_Event]] = {}
        for cat, kind in _CAT_KIND.items():
            bucket = by_cat[cat]
            ph = _kept_phase(kind)
            # The typed decoders' classes say the phase: when every event of the bucket has
            # it by its class (the usual case), no event needs looking at.
            if bucket and not set(map(type, bucket)) <= _PHASE_TYPES[ph]:
                bucket = [e for e in bucket if e.ph == ph]
            kept.setdefault(kind, []).extend(bucket)
        cpu_ops = kept.pop("cpu_op")
        # Most events of a trace; only record_param_comms and old-style steps matter.  One
        # search of all the names tells whether any can be there; if so, one cheap test per
        # op (a prefix), then the exact ones on the few left.
        try:
            names = "\n".join(map(_NAME, cpu_ops))
            maybe_special = any(p in names for p in _CPU_OP_PREFIXES)
        except TypeError:  # a name that is not text (loose decoders only)
            maybe_special = True
        special = ([e for e in cpu_ops if e.name.__class__ is str and e.name.startswith(_CPU_OP_PREFIXES)]
                   if maybe_special else [])
        del cpu_ops
        kept["rpc"] = [e for e in special if e.name == "record_param_comms"]
        cpu_steps = [e for e in special if _STEP_RE.match(e.name)]
        annotations = kept.pop("annotations")
        # user_annotation: steps (ProfilerStep#N, or marked by our exporter), record_param_comms
        # (some PyTorch versions), everything else a marker.
        for e, a in zip(annotations, _decode_args_batch(annotations)):
            name = e.name
            if isinstance(a.ps, dict):
                if a.ps.get("step") is not None:
                    self.steps.append((int(a.ps["step"]), e))
                else:
                    self.markers.append(e)
            elif isinstance(name, str) and name.startswith("ProfilerStep#") and _STEP_RE.match(name):
                self.steps.append((int(name[13:]), e))
            elif name == "record_param_comms":
                self.rpc.append(e)
            else:
                self.markers.append(e)
        _decode_args_batch(cpu_steps)
        self.steps.extend((int(e.name[13:]), e) for e in cpu_steps)
        for kind, evs in kept.items():
            if evs:
                _decode_args_batch(evs, decoder=_API_ARGS_LIST_DECODER if kind == "api" else _ARGS_LIST_DECODER)
                getattr(self, kind).extend(evs)


_CPU_OP_PREFIXES = ("record_param_comms", "ProfilerStep#")
_NAME = attrgetter("name")
#: phase -> the set of classes of a bucket whose events all have that phase by their class.
_PHASE_TYPES = {"X": frozenset({_XR, _XRF, _XF, _X, _XRA, _XRFA}), "C": frozenset({_CR, _CRF, _CF, _CRA, _CRFA})}
_CAT_KIND = {
    "cpu_op": "cpu_op", "cuda_runtime": "api", "cuda_driver": "api", "kernel": "kernels",
    "user_annotation": "annotations", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync",
    "gpu_user_annotation": "gpu_markers", "perfscope_host": "host", "perfscope_collective": "colls",
    "perfscope_metric": "metrics",
}


def _kept_phase(kind: str) -> str:
    """The phase of the events of ``kind`` (a value of :data:`_CAT_KIND`) that are kept:
    counters (``C``) for metrics, complete events (``X``) for every other kind."""
    return "C" if kind == "metrics" else "X"


# What :class:`_Classified` can keep, for the native pre-filter (_read_trace): the
# categories and their phase, and the cpu_op names that matter.
_FILTER_RULES = kineto_filter.Rules(
    cats={cat: _kept_phase(kind) for cat, kind in _CAT_KIND.items()},
    by_name=next(cat for cat, kind in _CAT_KIND.items() if kind == "cpu_op"),
    prefixes=_CPU_OP_PREFIXES,
)


class _Launch(NamedTuple):
    """What later lookups need of a CUDA API call (kept per correlation id, not the event)."""

    pid: Any
    tid: Any
    ts_ns: int  # start, ns without the trace's base
    ps: Any


class _LaunchIndex:
    """``get(correlation)`` -> :class:`_Launch` or None, over the API calls' columns.

    Built from the builder's per-chunk (args, pids, tids, starts) of the API calls: a dict
    from correlation id to row (later chunks, and later rows, win on a repeated one) and
    the columns themselves, so that a :class:`_Launch` is made only for the rows looked up
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

    def get(self, correlation: Any) -> _Launch | None:
        i = self.rows.get(correlation) if isinstance(correlation, int) else None
        if i is None:
            return None
        return _Launch(self.pids[i], self.tids[i], int(self.starts[i]), self.args[i].ps)


def _detach(*groups: list[Any]) -> None:
    """Give the raw timestamps of these (few) events their own copy of the bytes."""
    for events in groups:
        for e in events:
            if e.__class__ in (_XR, _CR, _XRA, _CRA):
                e.ts_raw, e.dur_raw = e.ts_raw.copy(), e.dur_raw.copy()




class _RankBuilder:
    """Builds one rank's tables from chunks of events, holding columns, not events.

    Per chunk, the events a table needs become column pieces at once; only what links
    across chunks is kept: API launches by correlation id (for the thread a sync waited on
    and the launch of an NCCL kernel), the sync events, NCCL kernels, record_param_comms ops
    and perfscope collective rows (all few).
    """

    def __init__(self, base_ns: int, pid_map: dict[Any, Any] | None = None,
                 device_map: dict[Any, Any] | None = None) -> None:
        self.base_ns = base_ns
        self.pid_map = pid_map
        self.device_map = device_map
        self.parts: dict[str, list[dict[str, Any]]] = {}
        # Per chunk, the api calls' (args, pids, tids, starts in ns without base): the launch
        # index is built from them only when a sync event or an NCCL kernel needs it.
        self.api_parts: list[tuple[list[Any], list[Any], list[Any], np.ndarray]] = []
        self.sync: list[_Event] = []
        self.nccl: list[_Event] = []
        self.rpc: list[_Event] = []
        self.colls: list[_Event] = []

    def add(self, events: Iterable[_Event] | _Classified) -> None:
        """Add a chunk of events (or an already classified set)."""
        if isinstance(events, _Classified):
            c = events
        else:
            c = _Classified()
            c.add(events)
        n_nccl = len(self.nccl)
        self.sync.extend(c.sync)
        self.rpc.extend(c.rpc)
        self.colls.extend(c.colls)
        try:  # most traces have no NCCL kernel: one search of all the names says so
            joined = "\n".join([e.name for e in c.kernels])
            maybe_nccl = "nccl" in joined or "nccl" in joined.lower()  # (NCCL's own names need no lower())
        except TypeError:
            maybe_nccl = True
        if maybe_nccl:
            # is_nccl_kernel, inline: a call per kernel costs more than the test.
            self.nccl += [e for e in c.kernels if isinstance(e.name, str) and e.name and "nccl" in e.name.lower()]
        # Events kept past this chunk must not pin its text through their raw timestamps.
        _detach(c.sync, c.rpc, c.colls, self.nccl[n_nccl:])
        # The api calls' args, pids, tids and starts (ns) come back in api_parts; nothing
        # there points into the chunk's text (decoded args, pids and tids are objects of
        # their own).
        tables = _basic_tables(c, self.base_ns, self.pid_map, self.device_map, api_parts=self.api_parts)
        for name, cols in tables.items():
            self.parts.setdefault(name, []).append(cols)

    def finish(self) -> RankTables:
        """Join the pieces and build the tables that link across chunks."""
        out = {name: _concat_columns(pieces) for name, pieces in self.parts.items()}
        self.parts.clear()
        warnings: list[str] = []
        launches = _LaunchIndex(self.api_parts if self.sync or (self.nccl and not self.colls) else (), self.base_ns)
        if self.sync:
            out["sync"] = _sync_table(self.sync, launches, self.base_ns)
        if self.colls:
            _decode_args_batch(self.colls)
            out["collectives"] = _collectives_from_export(self.colls, self.base_ns)
        elif self.nccl:
            out["collectives"] = _collectives_from_kernels(self.nccl, self.rpc, launches, self.base_ns, warnings)
        return _rank_tables(out, warnings)


def _concat_columns(pieces: list[dict[str, Any]]) -> dict[str, Any]:
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
            out[col] = pa.chunked_array([x for x in parts], type=first.type)
        else:
            out[col] = [v for x in parts for v in x]
    return out


def build_rank_tables(events: Iterable[_Event] | _Classified, base_ns: int, *, pid_map: dict[Any, Any] | None = None) -> RankTables:
    """Turn one rank's events into column batches for the store.

    Args:
        events: the rank's decoded events (any order), or a :class:`_Classified` set.
        base_ns: ``baseTimeNanoseconds`` (0 when the trace has absolute timestamps).
        pid_map: exported-pid -> original host pid (perfscope's own multi-rank exports).

    Returns:
        a :class:`RankTables` whose ``tables`` map table names to {column: values}.
    """
    builder = _RankBuilder(base_ns, pid_map)
    builder.add(events)
    return builder.finish()


def _basic_tables(c: _Classified, base_ns: int, pid_map: dict[Any, Any] | None,
                  device_map: dict[Any, Any] | None = None, *,
                  api_parts: list[tuple[list[Any], list[Any], list[Any], np.ndarray]] | None = None,
                  ) -> dict[str, dict[str, Any]]:
    """The tables whose rows need nothing from other chunks: api, kernels, memcpy, memset,
    markers, steps, host and metrics (each {column: values}).

    ``api_parts``, when given, gets the API calls' (args, pids, tids, start_ns) appended
    (pids and tids as in the events, start with the base), for the launch index."""
    kernels, memcpy, memset, api = c.kernels, c.memcpy, c.memset, c.api
    markers, gpu_markers, steps, host, metrics = c.markers, c.gpu_markers, c.steps, c.host, c.metrics
    out: dict[str, dict[str, Any]] = {}

    # -- api -----------------------------------------------------------------------------
    if api:
        api_args = _decode_args_batch(api)
        x = _extras(api_args)
        start, dur = _times(api, base_ns)
        pids = [e.pid for e in api]
        tids = [e.tid for e in api]
        out["api"] = {
            "start_ns": start, "dur_ns": dur,
            "pid": _int_col(_with_extra(_mapped(pids, pid_map), x, "pid")),
            "tid": _int_col(_with_extra(tids, x, "tid")),
            "correlation": _int_col([a.correlation for a in api_args]),
            "name": _strs([e.name for e in api]),
            "kind": _with_extra(["driver" if e.cat == "cuda_driver" else "runtime" for e in api], x, "kind"),
            "cbid": _int_col([a.cbid for a in api_args], pa.int32()),
        }
        if api_parts is not None:
            api_parts.append((api_args, pids, tids, start))

    # -- kernels -------------------------------------------------------------------------
    if kernels:
        args = _decode_args_batch(kernels)
        start, dur = _times(kernels, base_ns)
        gx, gy, gz = _triples([a.grid for a in args])
        bx, by, bz = _triples([a.block for a in args])
        out["kernels"] = {
            "start_ns": start, "dur_ns": dur,
            "device": _ints([a.device for a in args], [e.pid for e in kernels], pa.int32()),
            "stream": _ints([a.stream for a in args], [e.tid for e in kernels]),
            "correlation": _int_col([a.correlation for a in args]),
            "name": _strs([e.name for e in kernels]),
            "grid_x": gx, "grid_y": gy, "grid_z": gz, "block_x": bx, "block_y": by, "block_z": bz,
            "registers_per_thread": _int_col([a.registers for a in args], pa.int32()),
            "shared_mem_bytes": _int_col([a.shared_memory for a in args]),
            "graph_id": _int_col([a.graph_id for a in args]),
        }

    # -- memcpy / memset -----------------------------------------------------------------
    if memcpy:
        args = _decode_args_batch(memcpy, store=False)
        x = _extras(args)
        start, dur = _times(memcpy, base_ns)
        cache: dict[Any, tuple[str, str, str, bool]] = {}
        parsed = [cache.get(e.name) or cache.setdefault(e.name, parse_memcpy_name(e.name if isinstance(e.name, str) else ""))
                  for e in memcpy]
        out["memcpy"] = {
            "start_ns": start, "dur_ns": dur,
            "device": _ints([a.device for a in args], [e.pid for e in memcpy], pa.int32()),
            "stream": _ints([a.stream for a in args], [e.tid for e in memcpy]),
            "correlation": _int_col([a.correlation for a in args]),
            "copy_kind": _with_extra([p[0] for p in parsed], x, "copy_kind"),
            "bytes": _int_col([a.bytes for a in args]),
            "src_kind": _with_extra([p[1] for p in parsed], x, "src_kind"),
            "dst_kind": _with_extra([p[2] for p in parsed], x, "dst_kind"),
            "pageable": bool_array(_with_extra([p[3] for p in parsed], x, "pageable")),
        }
    if memset:
        args = _decode_args_batch(memset, store=False)
        x = _extras(args)
        start, dur = _times(memset, base_ns)
        out["memset"] = {
            "start_ns": start, "dur_ns": dur,
            "device": _ints([a.device for a in args], [e.pid for e in memset], pa.int32()),
            "stream": _ints([a.stream for a in args], [e.tid for e in memset]),
            "correlation": _int_col([a.correlation for a in args]),
            "bytes": _int_col([a.bytes for a in args]),
            "value": _int_col(_with_extra([None] * len(memset), x, "value")),
            "mem_kind": _with_extra([parse_memset_kind(e.name if isinstance(e.name, str) else "") for e in memset], x, "mem_kind"),
        }

    # -- markers: host annotations then GPU annotations ----------------------------------
    gpu_args = _decode_args_batch(gpu_markers, store=False)
    all_markers = markers + gpu_markers
    if all_markers:
        args = [e.args for e in markers] + gpu_args
        x = _extras(args)
        n_host = len(markers)
        start, dur = _times(all_markers, base_ns)
        cats = [e.cat for e in all_markers]
        out["markers"] = {
            "start_ns": start, "dur_ns": dur,
            "pid": _int_col(_with_extra(_pids(markers, pid_map) + [None] * len(gpu_markers), x, "pid")),
            "tid": _int_col(_with_extra([e.tid for e in markers] + [None] * len(gpu_markers), x, "tid")),
            "name": _strs([e.name for e in all_markers]),
            "domain": _with_extra(cats, x, "domain"),
            "source": _with_extra(cats, x, "source"),
            "device": _int_col(_with_extra([None] * n_host + [a.device if a.device is not None else e.pid
                                                               for a, e in zip(gpu_args, gpu_markers)], x, "device"), pa.int32()),
            "stream": _int_col(_with_extra([None] * n_host + [a.stream if a.stream is not None else e.tid
                                                               for a, e in zip(gpu_args, gpu_markers)], x, "stream")),
        }

    # -- steps ---------------------------------------------------------------------------
    if steps:
        evs = [e for _, e in steps]
        start, dur = _times(evs, base_ns)
        x = _extras([e.args for e in evs])
        out["steps"] = {
            "step": np.array([n for n, _ in steps], np.int64),
            "start_ns": start, "dur_ns": dur,
            "name": _strs([e.name for e in evs]),
            "source": _with_extra(["profiler_step"] * len(evs), x, "source"),
        }

    # -- host (perfscope exports only) ---------------------------------------------------
    if host:
        args = _decode_args_batch(host, store=False)
        x = _extras(args) or [{}] * len(host)
        start, dur = _times(host, base_ns)
        out["host"] = {
            "start_ns": start, "dur_ns": dur,
            "tid": _int_col(_with_extra([e.tid for e in host], x, "tid")),
            "kind": [p.get("kind", "other") for p in x],
            "name": _strs([e.name for e in host]),
        }

    # -- metrics (perfscope exports only) ------------------------------------------------
    if metrics:
        args = _decode_args_batch(metrics)
        # A counter's device is the GPU process it sits in (the export's pid map says which).
        devices = device_map or {}
        out["metrics"] = {
            "ts_ns": _ts_ns(metrics) + base_ns,
            "device": _int_col([devices.get(e.pid, e.pid) for e in metrics], pa.int32()),
            "metric": _strs([e.name for e in metrics]),
            "value": float_array([_to_float(a.value) for a in args]),
        }

    return out


def _sync_table(sync: list[_Event], launches: _LaunchIndex, base_ns: int) -> dict[str, Any]:
    """The ``sync`` table; the waiting thread is the one that made the correlated API call."""
    args = _decode_args_batch(sync)
    x = _extras(args)
    start, dur = _times(sync, base_ns)
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
        "device": _ints([a.device for a in args], [e.pid for e in sync], pa.int32()),
        "stream": _ints([a.stream for a in args], [e.tid for e in sync]),
        "correlation": _int_col([a.correlation for a in args]),
        "sync_kind": _with_extra([parse_sync_kind(a.cuda_sync_kind, e.name) for a, e in zip(args, sync)], x, "sync_kind"),
        "tid": _int_col(tids),
    }


def _rank_tables(out: dict[str, dict[str, Any]], warnings: list[str]) -> RankTables:
    """Wrap built tables with the facts the rank's metadata needs."""
    host_pids = out["api"]["pid"] if "api" in out else (out["markers"]["pid"] if "markers" in out else None)
    host_pid = None
    if host_pids is not None and len(host_pids.drop_null()):
        vc = host_pids.drop_null().value_counts()
        counts = vc.field("counts").to_pylist()  # few; to_numpy() would import pandas
        host_pid = int(vc.field("values")[counts.index(max(counts))].as_py())
    spans = [(t["start_ns"], t["dur_ns"]) for name, t in out.items() if name != "metrics"]
    started = min((int(s.min()) for s, _ in spans if len(s)), default=None)
    stopped = max((int((s + d).max()) for s, d in spans if len(s)), default=None)
    # Distinct values first: a Python int per kernel costs ~0.2 ms on 4k kernels.
    devices = sorted(pc.unique(out["kernels"]["device"].drop_null()).to_pylist()) if "kernels" in out else []
    return RankTables(out, warnings, host_pid, devices, started, stopped)


def _to_float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _collectives_from_export(colls: list[_Event], base_ns: int) -> dict[str, Any]:
    start, dur = _times(colls, base_ns)
    p = [e.args.ps if e.args is not None and isinstance(e.args.ps, dict) else {} for e in colls]
    enq = [x.get("enqueue_us") for x in p]
    enq_ns = [None if v is None else int(n) + base_ns for v, n in zip(enq, _us_to_ns([0 if v is None else v for v in enq]))]
    cols: dict[str, Any] = {"start_ns": start, "dur_ns": dur, "enqueue_ns": int_array(enq_ns)}
    ints = {"seq": pa.int64(), "count": pa.int64(), "bytes": pa.int64(), "root": pa.int32(), "peer": pa.int32(),
            "nranks": pa.int32(), "nchannels": pa.int32(), "nwarps": pa.int32(), "device": pa.int32(),
            "stream": pa.int64(), "correlation": pa.int64()}
    for name, t in ints.items():
        cols[name] = _int_col([x.get(name) for x in p], t)
    for name in ("comm_id", "func", "datatype", "algorithm", "protocol", "kernel_name", "source"):
        cols[name] = [_str_or_none(x.get(name)) for x in p]
    return cols


def _collectives_from_kernels(
    nccl: list[_Event], rpc: list[_Event], api_by_corr: _LaunchIndex, base_ns: int, warnings: list[str]
) -> dict[str, Any]:
    """One row per NCCL kernel, with record_param_comms arguments where they can be linked."""
    by_ext = {e.args.external_id: e for e in rpc if e.args is not None and isinstance(e.args.external_id, int)}
    # Per thread: rpc ops sorted by start, to find the innermost one around a launch.
    rpc_ts = _ts_ns(rpc) if rpc else np.zeros(0, np.int64)
    rpc_dur = _dur_ns(rpc) if rpc else np.zeros(0, np.int64)
    by_thread: dict[tuple[Any, Any], list[tuple[int, int, _Event]]] = {}
    for e, t0, d in zip(rpc, rpc_ts.tolist(), rpc_dur.tolist()):
        by_thread.setdefault((e.pid, e.tid), []).append((t0, t0 + d, e))
    for lst in by_thread.values():
        lst.sort(key=lambda x: x[0])
    starts_by_thread = {k: [x[0] for x in v] for k, v in by_thread.items()}

    launches = [api_by_corr.get(_arg(k, "correlation")) for k in nccl]
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
        nin, nout = _to_int(pick("in_nelems")), _to_int(pick("out_nelems"))
        both = [n for n in (nin, nout) if n is not None]
        count = min(both) if both else None
        dtype = _str_or_none(pick("dtype"))
        size = dtype_size(dtype)
        comm = pick("pg_name")
        rows["enqueue_ns"].append(int(lts) + base_ns if launch is not None else None)
        rows["comm_id"].append(_str_or_none(comm if comm is not None else pick("pg_id")))
        rows["seq"].append(_to_int(pick("seq")))
        rows["func"].append(normalize_collective(collective) or func_k)
        rows["count"].append(count)
        rows["datatype"].append(dtype)
        rows["bytes"].append(count * size if count is not None and size is not None else None)
        rows["nranks"].append(_to_int(pick("group_size")))
        rows["algorithm"].append(algo)
        rows["protocol"].append(proto)
        rows["kernel_name"].append(_str_or_none(k.name))
        rows["device"].append(_dev(k))
        rows["stream"].append(_stream(k))
        rows["correlation"].append(_arg(k, "correlation"))
    if unlinked:
        warnings.append(
            f"{unlinked} of {len(nccl)} NCCL kernels have no collective arguments (no linked record_param_comms "
            "with 'Collective name'); their size and communicator are unknown")
    start, dur = _times(nccl, base_ns)
    return {
        "start_ns": start, "dur_ns": dur,
        "enqueue_ns": int_array(rows["enqueue_ns"]),
        "comm_id": rows["comm_id"], "seq": _int_col(rows["seq"]), "func": rows["func"],
        "count": _int_col(rows["count"]), "datatype": rows["datatype"], "bytes": _int_col(rows["bytes"]),
        "nranks": _int_col(rows["nranks"], pa.int32()), "algorithm": rows["algorithm"],
        "protocol": rows["protocol"], "kernel_name": rows["kernel_name"],
        "device": _int_col(rows["device"], pa.int32()), "stream": _int_col(rows["stream"]),
        "correlation": _int_col(rows["correlation"]), "source": ["kineto"] * len(nccl),
    }


def _enclosing(ops: list[tuple[int, int, _Event]] | None, starts: list[int] | None, t: int) -> _Event | None:
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


# ---------------------------------------------------------------------------------------
# Whole import
# ---------------------------------------------------------------------------------------
def _dist_rank(trace: _Trace) -> int | None:
    d = trace.distributedInfo
    if isinstance(d, dict):
        return _to_int(d.get("rank"))
    return None


def _gpu_info(props: Any, devices: list[int]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(gpu dict of the rank's device, all device dicts) from Kineto deviceProperties."""
    if not isinstance(props, list):
        return {}, []
    all_props = [p for p in props if isinstance(p, dict)]
    chosen = None
    for p in all_props:
        if devices and _to_int(p.get("id")) == devices[0]:
            chosen = p
            break
    if chosen is None and len(all_props) == 1:
        chosen = all_props[0]
    if chosen is None:
        return {}, all_props
    gpu = {
        "index": _to_int(chosen.get("id")),
        "name": chosen.get("name"),
        "memory_bytes": _to_int(chosen.get("totalGlobalMem")),
        "compute_capability": (f"{chosen.get('computeMajor')}.{chosen.get('computeMinor')}"
                               if chosen.get("computeMajor") is not None else None),
        "num_sms": _to_int(chosen.get("numSms")),
        "uuid": chosen.get("uuid"),
    }
    return {k: v for k, v in gpu.items() if v is not None}, all_props


def _check_output(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise RunExistsError(f"{out} exists and is a file; choose another output directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        what = "a run" if (out / "run.json").exists() else "other files"
        raise RunExistsError(f"{out} already holds {what}; choose another output or pass --force to replace it")


def import_kineto(
    files: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    rank: int | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
    background: bool = False,
) -> ImportResult:
    """Import Kineto trace files (one per rank) into a new run at ``out``.

    Args:
        files: ``.json`` or ``.json.gz`` traces (gzip detected by content).
        out: the run directory to create.
        rank: the rank of a single file without ``distributedInfo.rank``.
        force: replace an existing run (or the perfscope files in a non-empty folder).
        progress: called as ``progress(message, bytes_done, bytes_total)``.
        background: return once every file is decoded, with the run being written on a
            background thread (Parquet encoding releases the GIL: the caller can analyse
            ``result.run``, the tables in memory, meanwhile); ``result.wait()`` returns
            when the run is in place and raises what the write raised.  Every rank's
            tables are then held in memory until the write ends, not one rank's.

    Returns:
        an :class:`ImportResult` with the run path, rows per rank and table, and warnings
        (and with ``background``, the run in memory).

    Raises:
        InputError: a file is missing, unreadable, not JSON or not a Kineto trace.
        UsageError: ``rank`` given with several files, or two files claim the same rank.
        RunExistsError: ``out`` exists and ``force`` is false.
    """
    from perfscope.store.meta import as_read_back, create_run, merge_meta, rank_meta_record, update_run, write_rank_meta
    from perfscope.store.writer import write_rank_tables

    paths = [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]
    if not paths:
        raise UsageError("no trace files given; pass one .json or .json.gz file per rank")
    if rank is not None and len(paths) > 1:
        raise UsageError(f"--rank applies to a single file, but {len(paths)} were given; each file's rank comes from its distributedInfo")
    if rank is not None and rank < 0:
        raise UsageError(f"--rank must be 0 or more, not {rank}")
    out = Path(out)
    _check_output(out, force)
    for p in paths:
        if not p.exists():
            raise InputError(f"no such file: {p}")
    sizes = [p.stat().st_size if p.is_file() else 0 for p in paths]
    total = sum(sizes) or 1
    done = 0
    result = ImportResult(path=out)

    # A folder of this import's own: a background write may still be filling another
    # import's folder for the same output (a fixed name would let the two mix).
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.importing-", dir=out.parent))
    except OSError as e:
        raise PerfscopeError(f"cannot write the run at {out}: {e.strerror or e}; choose a writable output folder") from None
    # The import makes ~10^5 objects, none of them in a reference cycle: the cyclic
    # collector would only walk them (and every module's objects) again and again.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # Ranks are known only after decoding, and decoding every file first would hold all
        # of them in memory: decode one at a time, write its rank, then drop it.
        # Nothing is fsynced (1-9 ms per file on a plain disk): everything here is in a
        # hidden folder that is renamed into place at the end or removed, and the trace
        # files are still there to import again after a crash.
        create_run(tmp, source="import:kineto", collectors=["kineto"], command=[], durable=False)
        seen: dict[int, Path] = {}
        world_sizes: list[int] = []
        next_guess = 0
        guessed: list[str] = []
        for path, size in zip(paths, sizes):
            if progress:
                progress(f"reading {path.name}", done, total)
            trace, text_times, chunk_sizes = _read_trace(path)
            if progress:
                progress(f"converting {path.name}", done + size // 2, total)
            base = _to_int(trace.baseTimeNanoseconds) or 0
            ws = _to_int(trace.distributedInfo.get("world_size")) if isinstance(trace.distributedInfo, dict) else None
            if ws:
                world_sizes.append(ws)
            groups = _split_perfscope_export(trace)
            if groups is None:
                r = _dist_rank(trace)
                if r is None:
                    if rank is not None:
                        r = rank
                    else:
                        while next_guess in seen:
                            next_guess += 1
                        r = next_guess
                        guessed.append(f"{path.name} -> rank {r}")
                elif rank is not None and r != rank:
                    result.warnings.append(f"{path.name}: --rank {rank} overrides distributedInfo.rank {r}")
                    r = rank
                groups = [(r, None, trace.deviceProperties, trace.distributedInfo, None)]
            for r, *_ in groups:
                if r in seen:
                    raise UsageError(
                        f"{seen[r].name} and {path.name} are both rank {r}; import them into separate runs")
                seen[r] = path
            builders = _builders(trace, groups, base, text_times, chunk_sizes, path)
            trace.traceEvents = None
            for r, _, props, dist, _ in groups:
                rt = builders.pop(r).finish()
                # As the writer stores them (what a background import's analysis reads).
                tables = stored_tables(_arrow_tables(rt.tables))
                result.rows[r] = {name: tables[name].num_rows if name in tables else 0 for name in rt.tables}
                result.warnings.extend(f"rank {r}: {w}" for w in rt.warnings)
                gpu, all_props = _gpu_info(props, rt.devices)
                info: dict[str, Any] = {
                    "host": trace.host_name if isinstance(trace.host_name, str) else None,
                    "pid": rt.host_pid,
                    "local_rank": None,
                    "status": "complete",
                    "started_ns": rt.started_ns,
                    "stopped_ns": rt.stopped_ns,
                    "gpu": gpu,
                    "devices": all_props,
                    "versions": {"nccl": dist.get("nccl_version")} if isinstance(dist, dict) and dist.get("nccl_version") else {},
                    "clock_offset_ns": 0,
                    "collectors": ["kineto"],
                    "dropped_events": {},
                    "warnings": list(rt.warnings),
                    "source_file": str(path),
                    "trace_name": trace.traceName if isinstance(trace.traceName, str) else None,
                    "distributed_info": dist if isinstance(dist, dict) else None,
                    "base_time_ns": base,
                }
                if background:
                    result._staged.append((r, tables, info))  # written after the last file
                else:
                    write_rank_tables(tmp, r, tables)
                    write_rank_meta(tmp, r, info, durable=False)
                del tables
            del trace, groups
            done += size
        if guessed:
            if len(paths) == 1:
                result.warnings.append(f"{paths[0].name} has no distributedInfo.rank; imported as rank {seen and min(seen)} (pass --rank to choose)")
            else:
                result.warnings.append("no distributedInfo.rank in " + ", ".join(guessed) + " (ranks given in file order)")
        world = max(world_sizes) if world_sizes else None
        world = max(world or 0, len(seen), (max(seen) + 1) if seen else 0)
        run_json = update_run(tmp, status="complete", world_size=world,
                              notes=[f"imported from {p}" for p in paths] + result.warnings, durable=False)
        if progress:
            progress("writing run", total, total)
        if not background:
            _move_into_place(tmp, out, force)
        else:
            staged = result._staged
            by_table: dict[str, dict[int, pa.Table]] = {}
            for r, tables, _ in staged:
                for name, tbl in tables.items():
                    by_table.setdefault(name, {})[r] = tbl
            # The metadata open_run(out) will read: the files' JSON, merged as load_meta merges it.
            ranks_meta = [as_read_back(rank_meta_record(r, info)) for r, _, info in staged]
            result.run = MemoryRun(out, merge_meta(as_read_back(run_json), ranks_meta), by_table)

            def write() -> None:
                # From here on the thread owns ``tmp``: it cleans up as the handlers below do.
                try:
                    for r, tables, info in staged:
                        write_rank_tables(tmp, r, tables)
                        write_rank_meta(tmp, r, info, durable=False)
                    _move_into_place(tmp, out, force)
                except BaseException as e:
                    shutil.rmtree(tmp, ignore_errors=True)
                    if isinstance(e, OSError):
                        raise PerfscopeError(f"cannot write the run at {out}: {e.strerror or e}; "
                                             "choose a writable output folder") from None
                    raise
                finally:
                    staged.clear()  # the tables stay in memory only as long as result.run holds them

            result._writing = BackgroundWrite(write, name="perfscope-import-write")
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PerfscopeError(f"cannot write the run at {out}: {e.strerror or e}; choose a writable output folder") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if gc_was_enabled:
            gc.enable()
    return result


def _builders(trace: _Trace, groups: list[tuple[int, Any, Any, Any, Any]], base: int, text_times: bool,
              chunk_sizes: list[int] | None, path: Path) -> dict[int, Any]:
    """Per rank of ``groups``, a builder holding the rank's tables (``finish()`` gives
    its :class:`RankTables`), made from the trace's events.

    Events decoded by msgspec go through :class:`_RankBuilder` a chunk at a time, and
    only what a table needs is kept; columns the native extractor read (an ordinary
    trace, one rank) go to :class:`perfscope.store.kineto_native.RankBuilder`, which
    builds the same tables from them in bulk."""
    events = trace.traceEvents
    only = groups[0][0]
    if isinstance(events, kineto_native.Rows):
        return {only: kineto_native.RankBuilder(events, base, chunk_sizes, CHUNK_EVENTS)}
    owner = _pid_owner(trace)
    builders = {r: _RankBuilder(base, pid_map, device_map) for r, pid_map, _, _, device_map in groups}
    for chunk in iter_event_chunks(events or [], text_times=text_times, path=path,
                                   chunk=CHUNK_EVENTS, sizes=chunk_sizes):
        if owner is None:
            builders[only].add(chunk)
        else:
            by_rank: dict[int, list[_Event]] = {}
            for e in chunk:
                by_rank.setdefault(owner.get(e.pid, only), []).append(e)
            for r, evs in by_rank.items():
                builders[r].add(evs)
    return builders


def _arrow_tables(tables: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The built tables with every list and numpy column made an Arrow array of its
    declared type here (see :mod:`perfscope.store.arrays`: the writer's ``pa.array``
    would import pandas)."""
    from perfscope.store.schema import table as table_decl

    out: dict[str, dict[str, Any]] = {}
    for name, cols in tables.items():
        decl = table_decl(name)
        out[name] = {c: column(v, decl.column(c).type) if c in decl.column_names else v for c, v in cols.items()}
    return out


def _export_ranks(trace: _Trace) -> list[dict[str, Any]] | None:
    """The per-rank blocks of one of perfscope's own exports, or None for other traces."""
    ps = trace.perfscope
    if not isinstance(ps, dict) or not isinstance(ps.get("ranks"), list):
        return None
    ranks = [r for r in ps["ranks"] if isinstance(r, dict) and _to_int(r.get("rank")) is not None]
    return ranks or None


def _pid_owner(trace: _Trace) -> dict[Any, int] | None:
    """Exported pid -> rank for a multi-rank perfscope export (None otherwise)."""
    ranks = _export_ranks(trace)
    if ranks is None or len(ranks) < 2:
        return None
    return {entry["pid"]: int(r["rank"]) for r in ranks for entry in r.get("pids", [])
            if isinstance(entry, dict) and "pid" in entry}


def _split_perfscope_export(trace: _Trace) -> list[tuple[int, Any, Any, Any, Any]] | None:
    """The ranks of one of perfscope's own exports (the first is where unclaimed pids go).

    Returns None for ordinary Kineto traces.  Otherwise a list of (rank, exported host pid
    -> original host pid, deviceProperties, distributedInfo, exported GPU pid -> device).
    """
    ranks = _export_ranks(trace)
    if ranks is None:
        return None
    out = []
    for r in ranks:
        pid_map = {entry["pid"]: entry.get("host_pid") for entry in r.get("pids", [])
                   if isinstance(entry, dict) and "pid" in entry and entry.get("kind") == "host"}
        device_map = {entry["pid"]: entry.get("device") for entry in r.get("pids", [])
                      if isinstance(entry, dict) and "pid" in entry and entry.get("kind") == "gpu"}
        out.append((int(r["rank"]), pid_map, r.get("deviceProperties"), r.get("distributedInfo"), device_map))
    return out


def _move_into_place(tmp: Path, out: Path, force: bool) -> None:
    """Move the finished run from ``tmp`` to ``out`` (replacing perfscope files if forced)."""
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out)
        return
    _check_output(out, force)
    # The old run's files are moved aside first and put back if the new ones cannot all be
    # moved in, so that a failed replacement leaves the old run as it was.
    from perfscope.store.meta import perfscope_entries

    backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.replaced-", dir=out.parent))
    old = perfscope_entries(out)
    moved_in: list[str] = []
    try:
        for p in old:
            os.replace(p, backup / p.name)
        for child in list(tmp.iterdir()):
            os.replace(child, out / child.name)
            moved_in.append(child.name)
    except OSError:
        for name in moved_in:
            with contextlib.suppress(OSError):
                os.replace(out / name, tmp / name)
        for p in backup.iterdir():
            with contextlib.suppress(OSError):
                os.replace(p, out / p.name)
        with contextlib.suppress(OSError):
            backup.rmdir()
        raise
    shutil.rmtree(backup, ignore_errors=True)
    tmp.rmdir()


# Last: kineto_native builds on this module's helpers.  (Imported with the module, not on
# first use: that would be part of the first import's time.)
from perfscope.store import kineto_native  # noqa: E402

__all__ = [
    "ImportResult", "import_kineto", "parse_memcpy_name", "parse_memset_kind", "parse_sync_kind",
    "parse_nccl_kernel", "normalize_collective", "dtype_size", "is_nccl_kernel",
]
