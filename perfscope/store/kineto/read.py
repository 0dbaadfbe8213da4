"""Reading one trace file for the import: the file, gzip, the native pre-filter, streams.

:func:`read_trace` is the importer's way in: it inflates gzip (while filtering it, for
big files: :func:`_read_streamed`), has the pre-filter (:mod:`.prefilter`) cut the
events no table keeps, and decodes what is left, through the native column extractor
(:mod:`.native`) when it takes the text, else with msgspec (:mod:`.decode`).  A text the
filter refuses, or whose filtered decode fails, is decoded whole, so errors read the
same either way.
"""
from __future__ import annotations

import os
import stat
import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from perfscope.errors import InputError
from perfscope.store.kineto import decode, formats, native, prefilter
from perfscope.store.kineto.classify import FILTER_RULES
from perfscope.store.kineto.decode import (
    decode_text,
    decode_trace,
    looks_kineto,
    needs_text_times,
)
from perfscope.store.kineto.events import Trace

try:  # ISA-L's inflate is 2-3x faster than zlib's (same output); zlib when it is missing
    from isal import igzip_lib as _isal
except ImportError:  # pragma: no cover - isal is a dependency, but keep working without it
    _isal = None

_ISAL_ERRORS: tuple[type[BaseException], ...] = (_isal.IsalError,) if _isal is not None else ()


class ReadTrace(NamedTuple):
    """One trace file as :func:`read_trace` read it.

    Attributes:
        trace: the decoded trace; its ``traceEvents`` are events (msgspec route) or
            :class:`~perfscope.store.kineto.native.Rows` (native route).
        text_times: its timestamps are decoded as text (see :func:`needs_text_times`).
        chunk_sizes: the chunks to hand its events to the table builders in: for a
            filtered trace those of the original's boundaries (see :func:`chunk_sizes`),
            else plain chunks of :data:`~perfscope.store.kineto.decode.CHUNK_EVENTS`.
        counts: events per category of the whole trace when :func:`.formats.prepare`
            counted them (an old spelling, or an unknown category near the start), or as
            the pre-filter saw them when it dropped an unknown category
            (:func:`.formats.filtered_counts`), else None.
    """

    trace: Trace
    text_times: bool
    chunk_sizes: list[int]
    counts: Counter[str] | None = None


def _read_result(trace: Trace, text_times: bool, sizes: list[int] | None = None) -> ReadTrace:
    """The :class:`ReadTrace` of ``trace``: filtered chunk ``sizes`` when they add up to its
    events (they always do; if they ever did not, plain chunks lose no event)."""
    n = len(trace.traceEvents or ())
    if sizes is None or sum(sizes) != n:
        chunk = decode.CHUNK_EVENTS  # (read at call time: tests make it small)
        sizes = [chunk] * -(-n // chunk)
    return ReadTrace(trace, text_times, sizes)


#: The most bytes a gzip trace may inflate to when the caller sets no limit (8 GiB: a
#: bigger text needs some 20 GB of memory to import, and a 1 MB "gzip bomb" can claim 1 GB).
MAX_INFLATE_DEFAULT = 8 << 30


def inflate_limit(max_inflate: int | None) -> int:
    """The inflate limit in bytes: ``max_inflate``, :data:`MAX_INFLATE_DEFAULT` for None,
    0 (no limit) for 0."""
    return MAX_INFLATE_DEFAULT if max_inflate is None else max(max_inflate, 0)


def read_trace_bytes(path: Path, *, max_inflate: int | None = None) -> bytes:
    """Return the JSON text of ``path``, gunzipped when it is gzip (by content, not name),
    every gzip member of it (a file of several members is read as their texts joined).

    Raises:
        InputError: missing, unreadable, truncated/corrupt gzip, or inflating to more than
            ``max_inflate`` bytes (see :func:`inflate_limit`).
    """
    data = _read_file(path)
    return _gunzip(data, path, max_inflate) if _is_gzip(data) else data


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


def _gunzip(data: bytes, path: Path, max_inflate: int | None = None) -> bytes:
    """Return the gunzipped ``data`` (read from ``path``, named in errors): the texts of all
    its gzip members, joined (``gzip`` itself reads them so; what the JSON then makes of
    them is the decoder's business).

    Raises:
        InputError: truncated or corrupt gzip, bytes after the last member that are not
            gzip, or more than ``max_inflate`` bytes (see :func:`inflate_limit`).
    """
    limit = inflate_limit(max_inflate)
    texts: list[bytes] = []
    total, rest, member = 0, data, 0
    try:
        while True:
            text, rest = _inflate_member(rest, limit - total if limit else 0)
            texts.append(text)
            total += len(text)
            member += 1
            if limit and total > limit:
                raise InputError(f"{path} inflates to more than {_size(limit)} (--max-inflate); raise the limit "
                                 "if the trace is that big, or check the file")
            if not rest.strip(b"\0"):
                break  # (gzip pads some files with zeros)
            if not _is_gzip(rest):
                raise InputError(f"{path} has {len(rest):,} bytes after its gzip data that are not gzip; copy it again")
    except (OSError, EOFError, zlib.error, *_ISAL_ERRORS) as e:
        raise InputError(f"{path} is not a complete gzip file ({e or 'truncated'}); copy it again or gunzip it "
                         "to check") from None
    # (one member, the usual case: join returns that text itself, without a copy)
    return b"".join(texts)


def _inflate_member(data: bytes, room: int) -> tuple[bytes, bytes]:
    """(the text of the gzip member at the start of ``data``, the bytes after it), inflating
    at most ``room`` + 1 bytes (0: any), so that a text over a limit stops early.

    Raises:
        EOFError: the member is truncated.
    """
    if _isal is None:  # pragma: no cover - isal is a dependency
        d = zlib.decompressobj(wbits=31)
        text = d.decompress(data, room + 1 if room else 0)
        if not d.eof and not (room and len(text) > room):
            raise EOFError("truncated")
        return text, d.unused_data
    inflater = _isal.IgzipDecompressor(flag=_isal.DECOMP_GZIP)
    # One buffer of the member's size when its trailer tells (mod 2**32) and it is within
    # the room: the peak is compressed + uncompressed bytes.
    text = inflater.decompress(data, room + 1 if room else -1)
    if not inflater.eof and not (room and len(text) > room):
        raise EOFError("truncated")
    return text, inflater.unused_data


def _size(n: int) -> str:
    """``n`` bytes as a short text (``8 GiB``)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} bytes"


#: texts from this size on are filtered in place by :func:`read_trace`.
_IN_PLACE_BYTES = 1 << 16


def read_trace(path: Path, *, max_inflate: int | None = None) -> ReadTrace:
    """Read and decode one trace file for the import: when the native pre-filter is built
    (:mod:`.prefilter`), only the events some table may keep are
    decoded; the trace is the original's less the others, every other member the same.  A
    text the filter refuses, or whose filtered decode fails, goes through
    :func:`decode_trace` whole, so errors read the same either way.

    Returns:
        a :class:`ReadTrace`.

    A big gzip file is filtered while it is inflated (see :func:`_read_streamed`).

    Raises:
        InputError: see :func:`read_trace_bytes` and :func:`decode_trace`.
    """
    # An old spelling comes back rewritten as today's (plain text, not the file's bytes).
    data, counts = formats.prepare(_read_file(path), lambda d: _gunzip(d, path, max_inflate))
    rewritten = counts is not None and formats.spelling(counts) != formats.TODAY
    if _is_gzip(data):
        streamed = _read_streamed(data, path, inflate_limit(max_inflate))
        if streamed is not None:
            return streamed if counts is None else streamed._replace(counts=counts)
        data = _gunzip(data, path, max_inflate)
    text_times = needs_text_times(data)
    if prefilter.available():
        # In place when big: the text is a fresh object of ours alone (tiny ones may be
        # shared), so the filtered text can be written over it, without a second buffer's
        # memory and page faults.  The original is then read again if it is needed, so
        # only from a regular file: a pipe (`<(zcat ...)`) cannot be read twice.
        in_place = len(data) >= _IN_PLACE_BYTES and _is_regular_file(path) and not rewritten
        chunk = decode.CHUNK_EVENTS
        kept = prefilter.run(data, FILTER_RULES, chunk_events=chunk, in_place=in_place)
        if in_place:
            del data  # overwritten: only kept.text may be read now
        trace = _decode_kept(kept, path, text_times)
        sizes = chunk_sizes(kept.chunk_counts, list(FILTER_RULES.cats), chunk)
        if counts is None:
            counts = formats.filtered_counts(list(FILTER_RULES.cats), kept.chunk_counts, kept.dropped)
        del kept
        if trace is not None:
            return _read_result(trace, text_times, sizes)._replace(counts=counts)
        if in_place:
            data = read_trace_bytes(path, max_inflate=max_inflate)
    # Unfiltered: its decode gives the errors their usual words and offsets.
    return _read_result(decode_trace(data, path, text_times=text_times), text_times)._replace(counts=counts)


#: gzip texts from this size on (by their trailer) are filtered while they are inflated.
_STREAM_BYTES = 1 << 20
#: Bytes inflated at a time for the filter (tests make it tiny).  Smaller pieces start the
#: filter sooner and stay in cache, at ~5 us of Python per piece (measured best: 256 KB).
_STREAM_PIECE = 1 << 18
#: > 0: the streamed filter sees the text at most this many bytes further at a time, so
#: that its scans run into the end of what has come at every byte (tests).
_STREAM_STEP = 0


def _read_streamed(data: bytes, path: Path, limit: int) -> ReadTrace | None:
    """:func:`read_trace` of the gzip file ``path`` whose bytes are ``data``, inflated in
    pieces that the filter reads on a thread of its own as they come (a
    :class:`.prefilter.Stream`); this thread, done inflating, filters part of the rest,
    and the two then extract the kept events' columns (into a :class:`.native.Sink`).  On two cores that takes a third less
    time than the three steps one after another (15.5 ms instead of 23.7 for a 15 MB text).

    Returns:
        :func:`read_trace`'s result, or None when the text was not read this way (too
        small, no filter or ISA-L, not exactly one gzip member of the size its trailer
        says, bigger than ``limit`` (0: none), corrupt, or the filter stopped on an
        error; a file of several members is among these): the caller then reads the file
        as it would without streams, from the start, which gives every error its usual
        words.

    Raises:
        InputError: see :func:`decode_trace`.
    """
    size = int.from_bytes(data[-4:], "little")
    if _isal is None or size < _STREAM_BYTES or (limit and size > limit) or not prefilter.streaming():
        return None
    sink = native.Sink(size) if native.available() else None
    chunk = decode.CHUNK_EVENTS
    stream = prefilter.Stream(size, FILTER_RULES, chunk_events=chunk, sink=sink, step=_STREAM_STEP)
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
    sizes = chunk_sizes(kept.chunk_counts, list(FILTER_RULES.cats), chunk)
    counts = formats.filtered_counts(list(FILTER_RULES.cats), kept.chunk_counts, kept.dropped)
    del kept
    if trace is None:
        # The filtered text cannot give the answer (see _decode_kept): the original does.
        return _read_result(decode_trace(_gunzip(data, path, limit), path, text_times=text_times),
                            text_times)._replace(counts=counts)
    return _read_result(trace, text_times, sizes)._replace(counts=counts)


def _inflate_into(stream: prefilter.Stream, data: bytes) -> tuple[bool, bool]:
    """Inflate the gzip ``data`` into ``stream``, :data:`_STREAM_PIECE` bytes at a time.

    Returns:
        (whether the stream got the whole text: one gzip member, checksum and length
        right, nothing after it, exactly the size the stream was made for; and
        :func:`needs_text_times` of the text, meaningful only when it did).
    """
    inflater = _isal.IgzipDecompressor(flag=_isal.DECOMP_GZIP)
    head: list[bytes] = []  # the first MB, for needs_text_times (the filter overwrites the text)
    head_len = 0
    text_times: bool | None = None
    try:
        piece = inflater.decompress(data, _STREAM_PIECE)
        while True:
            if text_times is None:
                head.append(piece)
                head_len += len(piece)
                if head_len >= 1 << 20:
                    text_times = needs_text_times(b"".join(head))
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
        text_times = needs_text_times(b"".join(head))
    return True, text_times


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


# Events are classified a chunk at a time, and a few lists are joined per chunk from two
# categories, the first's events then the second's: api rows (CUDA runtime, then driver
# calls), markers (host, then GPU annotations), steps and record_param_comms ops (from
# user annotations, then from cpu ops), operators (cpu ops, then Python frames).
JOINED_PER_CHUNK = (("cuda_runtime", "cuda_driver"), ("user_annotation", "gpu_user_annotation"),
                     ("user_annotation", "cpu_op"), ("cpu_op", "python_function"))


def chunk_sizes(counts: Sequence[Sequence[int]], cats: Sequence[str], limit: int) -> list[int]:
    """The chunks to hand a filtered trace's events to the table builders in, so that the
    tables are those of the unfiltered trace, rows in the same order.

    Args:
        counts: per chunk of ``limit`` events of the original trace, its kept events of
            each category of ``cats`` and then of unknown ones (``Filtered.chunk_counts``).
        cats: the categories, in the order of ``counts``.
        limit: the most events in a chunk (:data:`.decode.CHUNK_EVENTS`).

    Returns:
        the sizes of the chunks: the original's, except that consecutive ones are joined
        (fewer chunks cost less) while that changes no order of :data:`JOINED_PER_CHUNK`
        (the one joined first has none of a pair's second category, or the next none of its
        first) and keeps them within ``limit``.
    """
    index = {cat: i for i, cat in enumerate(cats)}
    pairs = [(index[first], index[second]) for first, second in JOINED_PER_CHUNK]
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


def _decode_kept(kept: prefilter.Filtered, path: Path, text_times: bool) -> Trace | None:
    """Decode a filtered text; None when only the original text can be trusted to give the
    answer (the filter refused it, the decode failed, or the Kineto check of
    :func:`decode_trace` needs the events that were dropped).

    Ordinary Kineto traces take the native route when it is built: their ``traceEvents``
    are then :class:`perfscope.store.kineto.native.Rows`, columns instead of events (see
    :func:`.importer._builders`).  A text that route refuses is decoded here with msgspec."""
    if kept.text is None:
        return None
    trace = native.decode(kept) if native.available() else None
    if trace is None:
        try:
            trace = decode_text(kept.text, path, None, text_times, with_args=True)
        except (InputError, RecursionError):
            return None  # the original's decode raises the error, with its own offsets
    # Without Kineto's header keys decode_trace looks at the first 1000 events' categories,
    # dropped ones included.
    if kept.events and not looks_kineto(trace):
        return None
    return trace

