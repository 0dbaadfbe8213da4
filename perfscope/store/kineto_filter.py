"""ctypes binding of the Kineto pre-filter (``kineto_filter.c``, built as ``_kineto_filter*.so``).

Most of a Kineto trace is events no perfscope table keeps: ``cpu_op`` ops, flows,
metadata.  :func:`run` copies a trace's JSON text without them, in one pass of C over the
text, so that the importer's msgspec decoders read a third of it.  Everything but the
``traceEvents`` array, and every kept event, is copied byte for byte: the decoded result
is the original's less the dropped events, by construction.

The rule (``decide()`` in the C source), from the event's own (depth-1) keys only:

* ``ph`` is text other than ``"X"`` and ``"C"``: dropped (tables keep no other phase);
* else ``cat`` is text that is not a category of the importer's tables: dropped;
* else ``ph`` is known and is not the phase that category is kept in: dropped;
* else ``cat`` is the by-name category (``cpu_op``) and ``name`` is text starting with
  none of the prefixes: dropped;
* else kept.  A value written with a backslash escape, a repeated key, a missing key or a
  value that is not text is unknown, and an escaped key makes the whole event unknown:
  both keep it unless a known key drops it.

The whole text is validated as strict JSON (RFC 8259, UTF-8, at most 100 levels deep).
The filter refuses (an ``error`` in the result) a text that is malformed, whose root is
not an object with one ``traceEvents`` array of objects, or that holds what the decoders
would reject or treat apart in a dropped event (``ph`` that is not text, ``cat`` or
``pid`` that is an object or array, an integer of more than 600 digits, an unpaired
surrogate escape): the importer then decodes the original text, which says what is wrong
in its usual words.  ``PERFSCOPE_KINETO_FILTER=0`` (or :data:`ENABLED` set false) turns
the filter off; so does a missing library (no C compiler at install time).

Big texts are scanned by two threads (the second from a guessed element boundary in the
middle, which the first checks), and the importer has the kept text written over the
original (``in_place``), which saves a second buffer's page faults.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

#: Set false to decode every trace whole (tests compare both paths).
ENABLED = True

#: kf_filter's status codes, by value.
ERRORS = {
    1: "syntax", 2: "truncated", 3: "depth", 4: "root", 5: "no_events", 6: "events", 7: "event",
    8: "shape", 9: "utf8", 10: "number", 11: "output", 12: "arguments",
}


class _Result(ctypes.Structure):
    _fields_ = [("events", ctypes.c_int64), ("kept", ctypes.c_int64), ("out_len", ctypes.c_int64),
                ("error_offset", ctypes.c_int64), ("split", ctypes.c_int64)]


class Rules(NamedTuple):
    """What the importer keeps: ``cats`` maps each table category to the phase its events
    are kept in (``"X"`` or ``"C"``); events of ``by_name`` are kept only when their name
    starts with one of ``prefixes``."""

    cats: dict[str, str]
    by_name: str
    prefixes: tuple[str, ...]


class Filtered(NamedTuple):
    """The outcome of one :func:`run` call.

    Attributes:
        text: the filtered JSON (a view of an anonymous memory map), or None on error.
        events: elements of ``traceEvents`` in the input (up to the error, on error).
        kept: elements written to ``text``.
        chunk_kept: kept elements per ``chunk_events`` elements of the input (the last
            entry for the last, partial chunk; empty when there are no events or on error).
        chunk_counts: the same by category: per chunk, a tuple of the kept events of each
            category of the rules (in their order), then of those of unknown category.
        error: None, or the name of the error (a value of :data:`ERRORS`).
        offset: byte offset of the error in the input (-1 when none).
        split: a second thread filtered the second part of the events.
    """

    text: memoryview | None
    events: int
    kept: int
    chunk_kept: list[int]
    chunk_counts: list[tuple[int, ...]]
    error: str | None
    offset: int
    split: bool = False


_lib: ctypes.CDLL | None = None
_load_failed = False


def library_path() -> Path | None:
    """Return the built filter library (``$PERFSCOPE_KINETO_FILTER_LIB`` first), or None."""
    env = os.environ.get("PERFSCOPE_KINETO_FILTER_LIB")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        p = here / f"_kineto_filter{suffix}"
        if p.exists():
            return p
    hits = sorted(here.glob("_kineto_filter*.so"))
    return hits[0] if hits else None


def _load() -> ctypes.CDLL | None:
    """The library, loaded once, or None when it is not built or does not load."""
    global _lib, _load_failed
    if _lib is not None or _load_failed:
        return _lib
    path = library_path()
    try:
        lib = ctypes.CDLL(str(path)) if path is not None else None
    except OSError:
        lib = None  # built for another machine: the importer works without it
    if lib is None:
        _load_failed = True
        return None
    u8p = ctypes.c_char_p
    lib.kf_filter.restype = ctypes.c_int
    lib.kf_filter.argtypes = [u8p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, u8p, ctypes.c_size_t,
                              u8p, ctypes.c_size_t, u8p, ctypes.c_size_t, ctypes.c_int64,
                              ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(_Result)]
    _lib = lib
    return lib


def available() -> bool:
    """True when the filter is enabled and its library loads."""
    return ENABLED and os.environ.get("PERFSCOPE_KINETO_FILTER", "1") != "0" and _load() is not None


def _encode_rules(rules: Rules) -> tuple[bytes, bytes, bytes]:
    cats = b"\n".join(phase.encode() + cat.encode() for cat, phase in rules.cats.items())
    return cats, rules.by_name.encode(), b"\n".join(p.encode() for p in rules.prefixes)


def _threads() -> int:
    """Threads the filter may use: 2 when this process may run on two CPUs or more."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return 2 if cpus > 1 else 1


def run(data: bytes, rules: Rules, *, chunk_events: int = 16384, threads: int | None = None,
        in_place: bool = False) -> Filtered:
    """Filter ``data`` (a trace's JSON text) with ``rules``; the library must load.

    Args:
        data: the text.
        rules: what the importer keeps.
        chunk_events: count kept events per this many input events (``chunk_kept``).
        threads: > 1 lets a second thread scan the second half of a big text (the result
            is the same); default 2 where two CPUs are free to this process.
        in_place: write the filtered text over ``data`` itself instead of a new memory
            map (no new pages to fault in: ~3 ms less for 7 MB).  ``data`` must be a bytes
            object nothing else refers to; it is garbage afterwards, even on error.

    Returns:
        a :class:`Filtered`: the text and counts, or the error and its offset.

    Raises:
        RuntimeError: the library is not built.
        ValueError: the rules cannot be passed (empty names, a newline in one), or
            ``chunk_events`` < 1.
    """
    lib = _load()
    if lib is None:
        raise RuntimeError("perfscope's Kineto filter library is not built (python perfscope/store/kineto_filter_build.py)")
    names: Iterable[str] = [*rules.cats, rules.by_name, *rules.prefixes]
    if any(not n or "\n" in n for n in names) or any(len(p) != 1 for p in rules.cats.values()):
        raise ValueError(f"cannot pass these rules to the filter: {rules}")
    if chunk_events < 1:
        raise ValueError(f"chunk_events must be 1 or more, not {chunk_events}")
    if in_place and type(data) is not bytes:
        raise ValueError(f"in-place filtering needs a bytes object, not {type(data).__name__}")
    cats, by_name, prefixes = _encode_rules(rules)
    res = _Result()
    nthreads = _threads() if threads is None else threads
    # An element and the comma after it take 3 bytes or more.
    slots = len(data) // (3 * chunk_events) + 2
    width = len(rules.cats) + 1
    counts = (ctypes.c_int64 * (slots * width))()
    common = (cats, len(cats), by_name, len(by_name), prefixes, len(prefixes), chunk_events, counts, slots, nthreads,
              ctypes.byref(res))
    if in_place:
        # ctypes passes a bytes object's own buffer (no copy): the filter writes the kept
        # text over the text it has already read.
        addr = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
        code = lib.kf_filter(data, len(data), addr, len(data), *common)
        text: memoryview | None = memoryview(data)[:res.out_len] if code == 0 else None
    else:
        # The output is never longer than the input.  An anonymous map: pages never written
        # are never resident, and unlike a bytes object of that size it goes back to the OS
        # when the last view of it (events' raw args) goes.
        out = mmap.mmap(-1, max(len(data), 1))
        target = ctypes.c_char.from_buffer(out)
        code = lib.kf_filter(data, len(data), ctypes.addressof(target), len(out), *common)
        del target  # an exported pointer would keep the map from closing
        text = memoryview(out)[:res.out_len] if code == 0 else None
        if text is None:
            out.close()
    if code != 0:
        return Filtered(None, res.events, res.kept, [], [], ERRORS.get(code, str(code)), res.error_offset)
    flat = counts[:-(-res.events // chunk_events) * width]
    rows = [tuple(flat[i:i + width]) for i in range(0, len(flat), width)]
    return Filtered(text, res.events, res.kept, list(map(sum, rows)), rows, None, -1, bool(res.split))


__all__ = ["ENABLED", "ERRORS", "Filtered", "Rules", "available", "library_path", "run"]
