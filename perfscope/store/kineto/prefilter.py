"""ctypes binding of the Kineto pre-filter (``prefilter.c``, built as ``_libkineto*.so``).

Much of a Kineto trace is events no perfscope table keeps: flows, metadata,
instants.  :func:`run` copies a trace's JSON text without them, in one pass of C over the
text, so that the importer's msgspec decoders read a third of it.  Everything but the
``traceEvents`` array, and every kept event, is copied byte for byte: the decoded result
is the original's less the dropped events, by construction.

The rule (``decide()`` in the C source), from the event's own (depth-1) keys only:

* ``ph`` is text other than ``"X"`` and ``"C"``: dropped (tables keep no other phase);
* else ``cat`` is text that is not a category of the importer's tables: dropped;
* else ``ph`` is known and is not the phase that category is kept in: dropped;
* else ``cat`` is the by-name category, if the rules name one, and ``name`` is text
  starting with none of the prefixes: dropped (the importer names none: it keeps every
  ``cpu_op`` for the ``operators`` table);
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

A gzip trace need not be inflated whole first: :class:`Stream` filters a text on a thread
of its own while the caller is still writing it (inflating the next pieces), each scan
that reaches the end of what is written so far being retried once more is there.  The
caller, done writing, filters part of the rest itself, and both threads then extract the
kept events' columns (into a :class:`perfscope.store.kineto.native.Sink`).  The result is :func:`run`'s on the
whole text, in place.  ``PERFSCOPE_KINETO_STREAM=0`` (or :data:`STREAM` set false) turns
that off.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from perfscope.options import (
    kineto_filter_enabled,
    kineto_filter_library,
    kineto_stream_enabled,
)

#: Set false to decode every trace whole (tests compare both paths).
ENABLED = True
#: Set false to filter gzip traces only once inflated whole (tests compare both ways).
STREAM = True

#: kf_filter's status codes, by value.
ERRORS = {
    1: "syntax", 2: "truncated", 3: "depth", 4: "root", 5: "no_events", 6: "events", 7: "event",
    8: "shape", 9: "utf8", 10: "number", 11: "output", 12: "arguments", 13: "input",
}


#: ``kf_tally``'s size: distinct names noted, and the most bytes of a name.
TALLY_CATS, TALLY_NAME = 16, 48
#: The key of :attr:`Filtered.dropped` for events of names past the tally's room.
TALLY_OTHER = "(other categories)"


class _Tally(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int64), ("other", ctypes.c_int64), ("count", ctypes.c_int64 * TALLY_CATS),
                ("len", ctypes.c_int64 * TALLY_CATS), ("name", (ctypes.c_uint8 * TALLY_NAME) * TALLY_CATS)]

    def counts(self) -> dict[str, int]:
        """Events per category name (and :data:`TALLY_OTHER` for the rest)."""
        out = {bytes(self.name[i][:self.len[i]]).decode("utf-8", "replace"): int(self.count[i]) for i in range(self.n)}
        if self.other:
            out[TALLY_OTHER] = int(self.other)
        return out


class _Result(ctypes.Structure):
    _fields_ = [("events", ctypes.c_int64), ("kept", ctypes.c_int64), ("out_len", ctypes.c_int64),
                ("error_offset", ctypes.c_int64), ("split", ctypes.c_int64), ("dropped", _Tally)]


class Rules(NamedTuple):
    """What the importer keeps: ``cats`` maps each table category to the phase its events
    are kept in (``"X"`` or ``"C"``); events of ``by_name`` are kept only when their name
    starts with one of ``prefixes`` (None: every category's events are kept whatever their
    name)."""

    cats: dict[str, str]
    by_name: str | None
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
        columns: the ``sink`` a :class:`Stream` filled with each kept event's columns
            (its ``code`` says whether it holds them all), else None.
        dropped: complete and counter events dropped because the rules name no table for
            their category (text): events per category name (the first 16 names;
            :data:`TALLY_OTHER` for the rest); None on error.
    """

    text: memoryview | None
    events: int
    kept: int
    chunk_kept: list[int]
    chunk_counts: list[tuple[int, ...]]
    error: str | None
    offset: int
    split: bool = False
    columns: Any = None
    dropped: dict[str, int] | None = None


_lib: ctypes.CDLL | None = None
_load_failed = False


def library_path() -> Path | None:
    """Return the built filter library (``$PERFSCOPE_KINETO_FILTER_LIB`` first), or None."""
    env = kineto_filter_library()
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        p = here / f"_libkineto{suffix}"
        if p.exists():
            return p
    hits = sorted(here.glob("_libkineto*.so"))
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
    if hasattr(lib, "kf_stream_start"):  # (a library built before streams existed has none)
        vp, size = ctypes.c_void_p, ctypes.c_size_t
        lib.kf_stream_start.restype = vp
        lib.kf_stream_start.argtypes = [vp, size, u8p, size, u8p, size, u8p, size, ctypes.c_int64,
                                        ctypes.POINTER(ctypes.c_int64), size, size, size, ctypes.c_int64,
                                        ctypes.POINTER(_Result),
                                        u8p, size, vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, vp, vp, size, vp]
        lib.kf_stream_write.restype = ctypes.c_int
        lib.kf_stream_write.argtypes = [vp, u8p, size]
        lib.kf_stream_close.restype = None
        lib.kf_stream_close.argtypes = [vp, ctypes.c_int]
        lib.kf_stream_finish.restype = ctypes.c_int
        lib.kf_stream_finish.argtypes = [vp, ctypes.POINTER(ctypes.c_int)]
    _lib = lib
    return lib


def available() -> bool:
    """True when the filter is enabled and its library loads."""
    return ENABLED and kineto_filter_enabled() and _load() is not None


def streaming() -> bool:
    """True when :class:`Stream` may be used: the filter is available, streams are enabled,
    the library has them, and two CPUs are free to this process (on one, a thread
    filtering while the caller inflates only takes turns with it)."""
    return (available() and STREAM and kineto_stream_enabled()
            and hasattr(_load(), "kf_stream_start") and _threads() > 1)


def anonymous_map(size: int) -> mmap.mmap:
    """A private, zeroed anonymous memory map of ``size`` bytes (at least 1), with huge
    pages advised.

    Pages are only made resident when first written, and a fresh page costs a fault each
    time: for buffers of many MB written at once, a 2 MB page per fault costs a third of
    4 KB ones (measured: 15 MB in ~2 ms instead of ~5.5 ms).  Private, because a shared
    anonymous map (``mmap``'s default) is shared memory, whose faults cost more again."""
    m = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # no transparent huge pages here: plain pages
            pass
    return m


class Sink(Protocol):
    """The buffers :class:`Stream` has the column extractor fill (``native.Sink``)."""

    code: int | None

    def c_args(self) -> tuple[Any, ...]:
        """The last ten arguments of ``kf_stream_start`` (``kc_sink_open``'s)."""
        ...


#: :class:`Stream`'s defaults: the caller's thread, done writing, filters part of what
#: the filter has not reached from 1 MB of it on, and extracts half of the rows from 4096
#: of them on (below that, the cost of handing work over is not made up for).
HELP_BYTES = 1 << 20
SHARE_ROWS = 4096

#: What ``kf_stream_start`` takes instead of a sink's arguments when there is none.
_NO_SINK = (None, 0, None, 0, 0, 0, None, None, 0, None)


class Stream:
    """The filter of a text that is still being written: ``kf_stream_start``'s thread
    filters it, in place, as far as :meth:`write` has got.

    Use: :meth:`write` the text's pieces in order (it returns False once the filter has
    stopped on an error: the rest is not needed), then :meth:`finish`, always (in a
    ``finally``), which helps the filter from the caller's thread and waits for it.

    Args:
        size: the text's length; a text that turns out longer is refused by :meth:`write`.
        rules: what the importer keeps.
        chunk_events: see :func:`run`.
        sink: where the kept events' columns go (``kc_sink_*``, read by both threads
            once the text is filtered), or None.
        step: > 0 lets the filter see at most that many more bytes at a time, so that
            every cut of the text is met (tests).
        help_bytes: once the whole text is written, :meth:`finish` filters the second
            part of what the filter has not reached yet on the caller's thread (the filter
            copies its kept events when it gets there), when that is this many bytes or
            more (0: never).
        share_rows: with a sink and this many kept events or more, :meth:`finish` also
            extracts the first half of their rows on the caller's thread, while the
            filter's reads the second half (0: never).

    Attributes:
        started: False when the stream could not start (no memory or thread, or rules the
            library refuses): :meth:`write` and :meth:`finish` then do nothing, and the
            caller filters the whole text instead.
        written: the bytes written so far.
    """

    def __init__(self, size: int, rules: Rules, *, chunk_events: int = 16384, sink: Sink | None = None,
                 step: int = 0, help_bytes: int = HELP_BYTES, share_rows: int = SHARE_ROWS) -> None:
        lib = _load()
        if lib is None or not hasattr(lib, "kf_stream_start"):
            raise RuntimeError("perfscope's Kineto filter library is not built with streams "
                               "(python perfscope/store/kineto/build.py)")
        _check(rules, chunk_events)
        self._lib = lib
        self.size = size
        self.written = 0
        self._chunk_events = chunk_events
        self._width = len(rules.cats) + 1
        # Referenced by the filter's thread until finish(): kept alive here.
        self._rules = _encode_rules(rules)
        self._buf = anonymous_map(size)
        self._target = ctypes.c_char.from_buffer(self._buf)
        slots = size // (3 * chunk_events) + 2  # (see run)
        self._counts = (ctypes.c_int64 * (slots * self._width))()
        self._res = _Result()
        self._sink = sink
        cats, by_name, prefixes = self._rules
        self._handle = lib.kf_stream_start(
            ctypes.addressof(self._target), size, cats, len(cats), by_name, len(by_name), prefixes, len(prefixes),
            chunk_events, self._counts, slots, step, help_bytes, share_rows, ctypes.byref(self._res),
            *(sink.c_args() if sink is not None else _NO_SINK))
        self.started = bool(self._handle)

    def write(self, piece: bytes) -> bool:
        """Append ``piece`` to the text.  Returns False when the filter has stopped (an
        error: the rest of the text is not needed) or the text would be longer than
        ``size`` (the stream is then to be finished as incomplete)."""
        if not self._handle:
            return False
        code = self._lib.kf_stream_write(self._handle, piece, len(piece))
        if code == 0:
            self.written += len(piece)
        return code == 0

    def finish(self, complete: bool) -> Filtered:
        """Close the text (``complete``: what was written is all of it, ``size`` bytes) and
        wait for the filter.

        Returns:
            :func:`run`'s result on the whole text, filtered in place (``text`` a view of
            the stream's buffer); error ``"input"`` when the text was not complete, or the
            stream did not start.
        """
        handle, self._handle = self._handle, None
        code, sink_code = 13, ctypes.c_int(-1)
        if handle:
            self._lib.kf_stream_close(handle, 1 if complete and self.written == self.size else 0)
            code = self._lib.kf_stream_finish(handle, ctypes.byref(sink_code))
        res, buf = self._res, self._buf
        del self._target  # an exported pointer would keep the map from closing
        self._buf = None  # type: ignore[assignment]
        if code != 0:
            buf.close()
            return Filtered(None, res.events, res.kept, [], [], ERRORS.get(code, str(code)), res.error_offset)
        if self._sink is not None:
            self._sink.code = sink_code.value
        flat = self._counts[:-(-res.events // self._chunk_events) * self._width]
        rows = [tuple(flat[i:i + self._width]) for i in range(0, len(flat), self._width)]
        return Filtered(memoryview(buf)[:res.out_len], res.events, res.kept, list(map(sum, rows)), rows, None, -1,
                        bool(res.split), self._sink, res.dropped.counts())


def _check(rules: Rules, chunk_events: int) -> None:
    """Raise ValueError for rules the library cannot be passed (empty names, a newline in
    one, a phase that is not one letter) or ``chunk_events`` < 1."""
    names: Iterable[str] = [*rules.cats, *([rules.by_name] if rules.by_name is not None else []), *rules.prefixes]
    if any(not n or "\n" in n for n in names) or any(len(p) != 1 for p in rules.cats.values()):
        raise ValueError(f"cannot pass these rules to the filter: {rules}")
    if chunk_events < 1:
        raise ValueError(f"chunk_events must be 1 or more, not {chunk_events}")


def _encode_rules(rules: Rules) -> tuple[bytes, bytes, bytes]:
    cats = b"\n".join(phase.encode() + cat.encode() for cat, phase in rules.cats.items())
    by_name = rules.by_name.encode() if rules.by_name is not None else b""  # (matches no category)
    return cats, by_name, b"\n".join(p.encode() for p in rules.prefixes)


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
        raise RuntimeError("perfscope's Kineto filter library is not built (python perfscope/store/kineto/build.py)")
    _check(rules, chunk_events)
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
    return Filtered(text, res.events, res.kept, list(map(sum, rows)), rows, None, -1, bool(res.split),
                    dropped=res.dropped.counts())


__all__ = ["ENABLED", "ERRORS", "STREAM", "Filtered", "Rules", "Sink", "Stream", "anonymous_map", "available",
           "library_path", "run", "streaming"]
