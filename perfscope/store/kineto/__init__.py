"""Import PyTorch profiler (Kineto) Chrome-trace JSON into a perfscope run.

``import_kineto(files, out)`` reads one ``.json`` or ``.json.gz`` trace per rank and writes
the store's tables (see :mod:`perfscope.store.schema`).  The modules, in the order a file
goes through them:

* :mod:`.formats` rewrites the PyTorch 1.8-1.9 spellings into today's before anything is
  decoded, and afterwards refuses a trace none of whose events became a row, warns of the
  categories it dropped and reads the trace's provenance (``docs/import.md``);
* :mod:`.read`: the file, gzip, the pre-filter and streams; :mod:`.prefilter` is the
  pre-filter's binding (``prefilter.c``), built with the column extractor (``columns.c``)
  by :mod:`.build`;
* :mod:`.native` reads the filtered text into columns (``columns.c``), and
  :mod:`.native_tables` builds a rank's tables from them; otherwise
* :mod:`.decode` decodes the text with msgspec into the Structs of :mod:`.events`,
  :mod:`.classify` sorts a chunk of events into kinds, :mod:`.builder` builds a rank's
  tables from them chunk by chunk (:mod:`.tables`, :mod:`.links`, :mod:`.exports`,
  with :mod:`.timestamps` and :mod:`.parse` for the values);
* :mod:`.importer` assigns ranks and writes the run.

Which table each event goes to:

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
``cpu_op`` / ``python_function``       ``operators`` (nested per thread, with call sites:
                                       :mod:`.operators`)
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
  (:mod:`.prefilter`, one pass of C over the text, which it validates
  as strict JSON) first cuts the events no table keeps (flows, metadata, instants: about
  a third of a Kineto trace) and writes the rest over the text; every kept event
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
  (:mod:`.native` and :mod:`.native_tables`: one pass of C filling int64 columns, timestamps
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
  the kept events' ``args`` are decoded (flows' never are; of ``cpu_op`` arguments only
  ``External id`` is read), and no event dict is ever built.  A trace the typed decoders cannot take (an
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

from perfscope.store.kineto.importer import ImportResult, ProgressFn, import_kineto
from perfscope.store.kineto.parse import (
    is_nccl_kernel,
    parse_memcpy_name,
    parse_memset_kind,
    parse_nccl_kernel,
    parse_sync_kind,
)
from perfscope.store.names import dtype_size, normalize_collective

__all__ = [
    "ImportResult", "ProgressFn", "import_kineto", "parse_memcpy_name", "parse_memset_kind", "parse_sync_kind",
    "parse_nccl_kernel", "normalize_collective", "dtype_size", "is_nccl_kernel",
]
