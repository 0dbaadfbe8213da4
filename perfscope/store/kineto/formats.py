"""The spellings of Kineto traces across PyTorch releases, mapped onto today's.

The importer's tables are built from today's spelling (PyTorch 1.10 onward); older traces,
and traces other tools rewrote, spell the same events differently.  This module detects a
trace's spelling cheaply, rewrites an old one into today's (so the importer's table
building runs unchanged), counts the categories a trace holds against those the importer
knows, and reads the trace's provenance for ``perfscope info``.

Spellings (the importer reads the right-hand column):

=========================  ===========================  ====================================
PyTorch 1.8-1.9            PyTorch 1.10 onward, ROCm    perfscope table
=========================  ===========================  ====================================
``cat: "Kernel"``          ``kernel``                   ``kernels`` (NCCL ones: ``collectives``)
``cat: "Runtime"``         ``cuda_runtime``             ``api``
(none)                     ``cuda_driver``              ``api``
``cat: "Operator"``        ``cpu_op``                   ``operators``; ``steps``, comms too
(none)                     ``python_function``          ``operators`` (Python frames)
``cat: "Memcpy"``          ``gpu_memcpy``               ``memcpy``
``cat: "Memset"``          ``gpu_memset``               ``memset``
(none)                     ``cuda_sync``                ``sync``
``user_annotation``        ``user_annotation``          ``markers`` / ``steps``
(none)                     ``gpu_user_annotation``      ``markers``
``cat: "async"`` s/f       ``ac2g`` s/f flows           (none: correlation ids are in args)
``cat: "Trace"``           ``Trace``                    (none: the profiler's own span)
``args."external id"``     ``args."External id"``       kernels/api ``external_id``
``args.correlation``       ``args.correlation``         correlation ids (same spelling)
``args.device/stream``     the same, plain integers     device, stream
``tid: "stream 7"``        ``tid: 7``                   stream when ``args.stream`` is absent
``tid: "25738"`` (host)    ``tid: 25738``               api/marker thread ids
=========================  ===========================  ====================================

ROCm builds (HTA reads them; seen on ROCm 6.2, MI250) write today's categories: their
``cuda_runtime`` events are HIP calls (``hipLaunchKernel``, args ``kernel``, ``stream``
as text), ``gpu_memcpy`` carries ``kind`` instead of ``bytes``; they need no rewriting.

Decisions:

* **Today's traces pay a bounded prefix.**  :func:`prefix_spelling` looks at the first
  :data:`PREFIX_BYTES` of the text (of a gzip file, of its inflated start only): an old
  category spelling there means an old trace, a category only today's releases write
  (``kernel``, ``cpu_op``, ...) a today's one.  A prefix with neither (metadata, flows,
  ``user_annotation`` only) decides nothing, and the whole text is counted
  (:func:`census`) to decide.  A trace whose prefix holds a category perfscope does not
  know is counted whole too, so that the import can name what it drops; one whose first
  unknown category comes later is named by the native pre-filter's tally of the
  categories it dropped (:func:`filtered_counts`; without the filter library, it is not).
* **The rewrite keeps every value's text.**  :func:`rewrite` decodes events as maps of raw
  JSON spans (:class:`msgspec.Raw`, no value decoded), changes only the spellings above,
  and encodes them again; timestamps and every other value are the original bytes, so the
  importer's exact-nanosecond parsing is unaffected.
* **Loud refusal.**  :func:`account` sorts a trace's categories into the ones a table is
  built from, the ones known to carry nothing a table keeps (flows, the profiler's own
  span, ...), and the unknown rest, which are dropped and named:
  in a warning when something was recognised, in an :class:`UnrecognisedTraceError`
  (exit 2) when a trace with events gives an empty run.
"""
from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from perfscope.errors import UnrecognisedTraceError
from perfscope.store.kineto.classify import CAT_KIND

#: bytes of a trace's text that :func:`needs_rewrite` looks at.
PREFIX_BYTES = 1 << 16
#: :func:`spelling` of a trace that needs no rewrite.
TODAY = "pytorch-1.10+"
#: :func:`spelling` of a trace that :func:`rewrite` must rewrite.
OLD = "pytorch-1.8/1.9"

#: old category spelling -> today's.
CATEGORY_SPELLINGS: dict[str, str] = {
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Operator": "cpu_op",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "async": "ac2g",
}
#: old ``args`` key -> today's.
ARG_SPELLINGS: dict[str, str] = {"external id": "External id"}

#: Today's categories the importer builds tables from.
TABLE_CATEGORIES = frozenset(CAT_KIND)
#: Of those, the ones both spellings share (so they tell nothing of a trace's release).
SHARED_CATEGORIES = frozenset({"user_annotation"})
#: Categories known to hold nothing a table keeps: flows (their ids are the correlation
#: ids the events' args already carry), the profiler's own span, instants and overhead
#: records.
IGNORED_CATEGORIES = frozenset({
    "ac2g", "async", "fwdbwd", "Trace", "Python", "cpu_instant_event",
    "overhead", "Overhead", "Memory", "memory",
})

_CAT_RE = re.compile(rb'"cat"\s*:\s*"([^"\\]{0,200})"')
_OLD_CAT_RE = re.compile(rb'"cat"\s*:\s*"(?:' + b"|".join(k.encode() for k in CATEGORY_SPELLINGS if k != "async") + rb')"')
_TODAY_CAT_RE = re.compile(rb'"cat"\s*:\s*"(?:' + b"|".join(
    re.escape(c.encode()) for c in sorted(TABLE_CATEGORIES - SHARED_CATEGORIES)) + rb')"')
# A category that is not today's known spelling: one search of a prefix finds none in the
# usual trace (three times faster than counting them).
_UNUSUAL_CAT_RE = re.compile(rb'"cat"\s*:\s*"(?!(?:' + b"|".join(
    re.escape(c.encode()) for c in sorted(TABLE_CATEGORIES | IGNORED_CATEGORIES, key=len, reverse=True)) + rb')")')
_STREAM_TID = re.compile(rb'^"stream (\d+)"$')
_DIGITS_TID = re.compile(rb'^"(-?\d{1,19})"$')


# ---------------------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------------------
def text_prefix(data: bytes | memoryview, limit: int = PREFIX_BYTES) -> bytes:
    """The first ``limit`` bytes of a trace's JSON text: of ``data`` itself, or for gzip
    bytes, of the inflated start only (a corrupt stream gives what inflated before it)."""
    if bytes(data[:2]) != b"\x1f\x8b":
        return bytes(data[:limit])
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        return d.decompress(bytes(data[:limit]), limit)
    except zlib.error:
        return b""


def prefix_spelling(data: bytes | memoryview) -> str | None:
    """The :func:`spelling` the start of a trace (``data``: its text or gzip bytes) shows:
    ``"pytorch-1.8/1.9"`` when it spells a category the old way, :data:`TODAY` when it
    holds a category only today's releases write, else None (the start decides nothing)."""
    prefix = text_prefix(data)
    if _OLD_CAT_RE.search(prefix) is not None:
        return OLD
    return TODAY if _TODAY_CAT_RE.search(prefix) is not None else None


def census(text: bytes | memoryview) -> Counter[str]:
    """Events per category of the whole JSON ``text`` (a scan of the text, nothing
    decoded; events without a ``cat`` are not counted)."""
    return Counter(m.decode("utf-8", "replace") for m in _CAT_RE.findall(text))


def spelling(counts: Mapping[str, int]) -> str:
    """``"pytorch-1.8/1.9"`` when ``counts`` (events per category) hold an old category
    spelling, else ``"pytorch-1.10+"``."""
    return OLD if any(c in CATEGORY_SPELLINGS and c != "async" for c in counts) else TODAY


def prepare(data: bytes, gunzip: Callable[[bytes], bytes]) -> tuple[bytes, Counter[str] | None]:
    """The importer's entry, before anything is decoded: ``data`` (a trace file's bytes,
    gzip or not) as the importer should read it.

    A trace whose first :data:`PREFIX_BYTES` show today's spelling (:func:`prefix_spelling`)
    and hold no unknown category (the usual case) is returned as it is, and the counts are
    None.  Otherwise the whole text is counted (:func:`census`), and an old spelling is
    rewritten (:func:`rewrite`).

    Args:
        data: the file's bytes.
        gunzip: the importer's gunzip (its errors name the file).

    Returns:
        (the bytes to import: ``data`` itself or the rewritten text of an old spelling; events per category
        of the whole trace, or None when only the prefix was looked at).
    """
    prefix = text_prefix(data)
    if (_OLD_CAT_RE.search(prefix) is None and _TODAY_CAT_RE.search(prefix) is not None
            and (_UNUSUAL_CAT_RE.search(prefix) is None or not account(census(prefix)).dropped)):
        return data, None
    text = gunzip(data) if bytes(data[:2]) == b"\x1f\x8b" else data
    counts = census(text)
    if spelling(counts) == TODAY:
        return data, counts  # (gzip stays gzip: the importer's streamed read takes it)
    try:
        return rewrite(text), counts
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError):
        return text, counts  # the importer's decode of the original words what is wrong


def check_import(source: object, tables: Iterable[Mapping[str, Mapping[str, Any]]],
                 counts: Mapping[str, int] | None, read_text: Callable[[], bytes]) -> str | None:
    """The importer's check once a file's tables are built.

    Args:
        source: the file (for messages).
        tables: per rank of the file, table name -> column name -> column.
        counts: events per category from :func:`prepare`, or None.
        read_text: gives the file's JSON text (called only when counts are needed).

    Returns:
        the warning about dropped categories, or about a trace of flows and metadata
        only (an empty run), or None.

    Raises:
        UnrecognisedTraceError: every table is empty while the trace holds events other
            than those known to carry nothing (flows, metadata, the profiler's span); the
            error names the categories.
    """
    empty = not any(_rows(t) for t in tables)
    if not empty:
        return account(counts).warning() if counts is not None else None
    text = read_text()
    whole = census(text) if counts is None else counts
    a = account(whole)
    if counts is None and spelling(whole) == OLD:
        # The start showed today's spelling (prepare saw no old category): a mix.
        raise UnrecognisedTraceError(
            f"{source}: this trace spells categories both the PyTorch 1.8-1.9 way and today's, and its first "
            f"{PREFIX_BYTES // 1024} KB only today's, so nothing became a table row (it holds {_listed(whole)}); "
            "perfscope reads one spelling per file; report where this trace came from as a perfscope issue")
    if a.recognised or a.dropped:
        raise a.error(str(source))
    if a.ignored or re.search(rb'"ph"\s*:', text):
        return f"the trace holds no activity, only {_listed(a.ignored) if a.ignored else 'metadata'}: the run is empty"
    return None


def _rows(tables: Mapping[str, Mapping[str, Any]]) -> int:
    """Rows over ``tables`` (each a column name -> column mapping)."""
    return sum(len(next(iter(cols.values()))) for cols in tables.values() if cols)


# ---------------------------------------------------------------------------------------
# Rewriting
# ---------------------------------------------------------------------------------------
_ROOT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_ARGS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_CATS = {msgspec.json.encode(old): msgspec.Raw(msgspec.json.encode(new)) for old, new in CATEGORY_SPELLINGS.items()}
_RAW_ARG_KEYS = tuple(msgspec.json.encode(k) for k in ARG_SPELLINGS)


def rewrite(text: bytes | memoryview) -> bytes:
    """``text``, a trace's JSON, with every old spelling of the module table replaced by
    today's: categories, ``args`` keys, and ``tid`` given as text (``"stream 7"`` -> 7,
    ``"25738"`` -> 25738) on events of a rewritten category.  Every other member and
    value is its original text (compact JSON around them).

    Raises:
        msgspec.DecodeError / ValidationError: ``text`` is not a JSON object whose
            ``traceEvents`` is a list of objects (the importer's own decode then words it).
    """
    root = _ROOT.decode(text)
    events: list[dict[str, Any]] = _EVENTS.decode(root["traceEvents"])  # (Raw values, args decoded or not)
    for e in events:
        cat = e.get("cat")
        new = _RAW_CATS.get(bytes(cat)) if cat is not None else None
        if new is None:
            continue
        e["cat"] = new
        tid = e.get("tid")
        if tid is not None:
            m = _STREAM_TID.match(bytes(tid)) or _DIGITS_TID.match(bytes(tid))
            if m:
                e["tid"] = msgspec.Raw(m.group(1))
        args = e.get("args")
        if args is not None and any(k in bytes(args) for k in _RAW_ARG_KEYS):
            e["args"] = _renamed_args(_ARGS.decode(args))
    out: dict[str, Any] = dict(root)
    out["traceEvents"] = events
    return msgspec.json.encode(out)


def _renamed_args(args: dict[str, msgspec.Raw]) -> dict[str, msgspec.Raw]:
    """``args`` with old key spellings renamed; today's spelling wins where both exist."""
    for old, new in ARG_SPELLINGS.items():
        if old in args:
            value = args.pop(old)
            args.setdefault(new, value)
    return args


# ---------------------------------------------------------------------------------------
# Category accounting
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CategoryAccount:
    """A trace's categories sorted by what the importer does with them (events per
    category, in today's spelling).

    Attributes:
        recognised: categories some table is built from.
        ignored: categories known to hold nothing a table keeps.
        dropped: unknown categories, whose events no table holds.
    """

    recognised: dict[str, int] = field(default_factory=dict)
    ignored: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        """Events with a category, over all three groups."""
        return sum(self.recognised.values()) + sum(self.ignored.values()) + sum(self.dropped.values())

    def warning(self) -> str | None:
        """The text of the import warning about dropped categories, or None when none were."""
        if not self.dropped:
            return None
        n = sum(self.dropped.values())
        return (f"dropped {n:,} event{'s' if n != 1 else ''} of categories perfscope does not know: "
                f"{_listed(self.dropped)}; the run holds the rest ({_listed(self.recognised)})")

    def error(self, source: str) -> UnrecognisedTraceError:
        """The error for an import of ``source`` that gave an empty run."""
        if self.dropped:
            what = f"categories it does not know: {_listed(self.dropped)}"
        else:
            what = f"no event a table keeps (it holds {_listed({**self.recognised, **self.ignored})})"
        return UnrecognisedTraceError(
            f"{source}: nothing in this trace becomes a table row: {what}. The categories perfscope reads are "
            f"{', '.join(sorted(TABLE_CATEGORIES - {'perfscope_host', 'perfscope_collective', 'perfscope_metric'}))} "
            "(and the PyTorch 1.8-1.9 spellings Kernel, Runtime, Operator, Memcpy, Memset); "
            "if this trace comes from a newer profiler, report its categories as a perfscope issue")


def filtered_counts(cats: Sequence[str], chunk_counts: Sequence[Sequence[int]],
                    dropped: Mapping[str, int] | None) -> Counter[str] | None:
    """Events per category as the native pre-filter saw them: those it kept, per category of
    ``cats`` (``Filtered.chunk_counts`` summed), and those it dropped for a category no table
    reads (``Filtered.dropped``); None unless that tally holds a category :func:`account`
    calls dropped (unknown to perfscope), so that a trace whose start decided everything
    (:func:`prepare`) is still warned about a category it first spells further on."""
    if not dropped or not account(dropped).dropped:
        return None
    counts: Counter[str] = Counter({cat: n for cat, n in zip(cats, map(sum, zip(*chunk_counts))) if n})
    counts.update(dropped)
    return counts


def account(counts: Mapping[str, int]) -> CategoryAccount:
    """``counts`` (events per category, any spelling) sorted into a :class:`CategoryAccount`,
    old spellings counted under today's."""
    groups: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
    for cat, n in counts.items():
        cat = CATEGORY_SPELLINGS.get(cat, cat)
        group = groups[0] if cat in TABLE_CATEGORIES else groups[1] if cat in IGNORED_CATEGORIES else groups[2]
        group[cat] = group.get(cat, 0) + n
    return CategoryAccount(*groups)


def _listed(counts: Mapping[str, int]) -> str:
    """``"kernel 8,772, cpu_op 23,646"``, largest first (at most 8 named)."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{cat!r} {n:,}" for cat, n in items[:8])
    return text + (f" and {len(items) - 8} more" if len(items) > 8 else "")


# ---------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------
#: Root keys that say which software wrote a trace, as ``perfscope info`` names them (each
#: a field of :class:`.events.Trace`).  No trace seen (PyTorch 1.8 to 2.x, ROCm) carries
#: PyTorch's own version.
VERSION_KEYS: dict[str, str] = {
    "schemaVersion": "schema",
    "cupti_version": "cupti",
    "cuda_runtime_version": "cuda_runtime",
    "cuda_driver_version": "cuda_driver",
    "hip_runtime_version": "hip_runtime",
    "roctracer_version": "roctracer",
}


def provenance(root: Mapping[str, Any], counts: Mapping[str, int] | None = None) -> dict[str, Any]:
    """What a trace says of the software and GPU that wrote it, for the run's metadata.

    Args:
        root: the trace's top-level members other than ``traceEvents`` (decoded values).
        counts: events per category, or None when :func:`prepare` found today's spelling
            in the trace's start (gives ``spelling``).

    Returns:
        a dict with ``versions`` (name -> value, from :data:`VERSION_KEYS` present),
        ``spelling`` (see :func:`spelling`), ``trace_name``, ``base_time_ns``,
        ``display_time_unit``, ``gpu`` (name and ``compute_capability`` "7.0" of the first
        of ``deviceProperties``, or None) and ``vendor`` ("amd" for ROCm devices, "nvidia"
        for CUDA ones, None when unknown).
    """
    versions = {name: root[key] for key, name in VERSION_KEYS.items() if root.get(key) is not None}
    dist = root.get("distributedInfo")
    if isinstance(dist, dict) and dist.get("nccl_version") is not None:
        versions["nccl"] = dist["nccl_version"]
    props = root.get("deviceProperties")
    gpu = None
    if isinstance(props, list) and props and isinstance(props[0], dict):
        p = props[0]
        major, minor = p.get("computeMajor"), p.get("computeMinor")
        gpu = {"name": p.get("name"), "compute_capability": f"{major}.{minor}" if major is not None else None,
               "count": len(props)}
    vendor = _vendor(gpu["name"] if gpu else None, root)
    return {
        "versions": versions,
        "spelling": spelling(counts) if counts is not None else TODAY,
        "trace_name": root.get("traceName") if isinstance(root.get("traceName"), str) else None,
        "base_time_ns": root.get("baseTimeNanoseconds"),
        "display_time_unit": root.get("displayTimeUnit"),
        "gpu": gpu,
        "vendor": vendor,
    }


def _vendor(gpu_name: Any, root: Mapping[str, Any]) -> str | None:
    """"amd", "nvidia" or None, from the GPU name or the runtime version keys."""
    name = gpu_name.lower() if isinstance(gpu_name, str) else ""
    if any(w in name for w in ("amd", "radeon", "instinct")) or _has(root, "hip_runtime_version", "roctracer_version"):
        return "amd"
    if any(w in name for w in ("nvidia", "tesla", "quadro", "geforce")) or _has(root, "cupti_version", "cuda_runtime_version"):
        return "nvidia"
    return None


def _has(root: Mapping[str, Any], *keys: str) -> bool:
    return any(root.get(k) is not None for k in keys)


def describe(source: Mapping[str, Any] | None) -> str | None:
    """One line for ``perfscope info`` from a rank's ``trace_source`` (:func:`provenance`),
    e.g. ``"Kineto schema 1, pytorch-1.8/1.9 spelling; Tesla V100-DGXS-32GB (compute 7.0)"``;
    None when there is nothing to say."""
    if not isinstance(source, Mapping):
        return None
    versions = dict(source.get("versions") or {})
    parts = []
    if "schema" in versions:
        parts.append(f"Kineto schema {versions.pop('schema')}")
    if source.get("spelling"):
        parts.append(f"{source['spelling']} spelling")
    parts.extend(f"{name} {value}" for name, value in versions.items())
    gpu = source.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("name"):
        cc = f" (compute {gpu['compute_capability']})" if gpu.get("compute_capability") else ""
        parts.append(f"{gpu['name']}{cc}")
    return ", ".join(parts) or None
