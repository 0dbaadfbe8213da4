"""Decoding a Kineto trace's JSON text with msgspec (the Structs of :mod:`.events`).

Texts up to :data:`WHOLE_DECODE_BYTES` are decoded in one pass; bigger ones keep their
events as raw spans, which :func:`iter_event_chunks` decodes :data:`CHUNK_EVENTS` at a
time.  Each step tries the typed decoders first and falls back to the loose ones, which
give the same result for traces the typed ones refuse.
"""
from __future__ import annotations

import mmap
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from perfscope.errors import InputError
from perfscope.store.kineto.events import (
    ARGS_DECODER,
    ARGS_LIST_DECODER,
    CHUNK_LOOSE_FLOAT_TIMES,
    CHUNK_RAW_TIMES,
    EMPTY_ARGS,
    FLOAT_EXACT_US,
    LOOSE_FLOAT_TIME_EVENTS,
    LOOSE_FLOAT_TIME_TRACE,
    LOOSE_TEXT_TIME_EVENTS,
    LOOSE_TEXT_TIME_TRACE,
    TRACE_DECODER,
    WHOLE_FLOAT_TIMES,
    WHOLE_FLOAT_TIMES_ARGS,
    WHOLE_RAW_TIMES,
    WHOLE_RAW_TIMES_ARGS,
    ApiCallArgs,
    Event,
    EventArgs,
    Trace,
)

_TS_BIG = re.compile(rb'"ts"\s*:\s*-?(\d{13,})')
#: Events decoded (and handed to the table builders) at a time; read at call time by
#: :mod:`.read` (tests make it small).
CHUNK_EVENTS = 16384
#: JSON texts up to this size are decoded in one pass (see :func:`decode_trace`).
WHOLE_DECODE_BYTES = 64 << 20


#: Categories only Kineto writes: a trace without Kineto's header keys must have one.
KINETO_CATS = frozenset({
    "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "cuda_runtime", "cuda_driver",
    "user_annotation", "gpu_user_annotation", "cpu_op", "python_function", "ac2g",
})


def needs_text_times(data: bytes) -> bool:
    """True when the first MB of the trace holds an epoch-µs timestamp (>= 2**43 µs).

    Such traces decode their timestamps as text (whole values still arrive as ints); a
    float could not tell ``...689.047`` from ``...689.0``.
    """
    m = _TS_BIG.search(data, 0, 1 << 20)
    return m is not None and int(m.group(1)) >= (1 << 43)


def decode_trace(data: bytes, path: Path, *, whole: bool | None = None, text_times: bool | None = None) -> Trace:
    """Decode Kineto JSON text, every event of it (the importer decodes a filtered copy:
    see :func:`.read.read_trace`).

    Files up to :data:`WHOLE_DECODE_BYTES` are decoded in one pass, events included (one
    parse instead of a scan plus chunks: faster, and the memory saved by chunks is small
    there).  Bigger files keep their events as raw spans, decoded a chunk at a time by
    :func:`iter_event_chunks`, which accepts either form.

    Args:
        data: the JSON text.
        path: the file it came from (for messages).
        whole: decode events in one pass (True) or keep raw spans (False); by size if None.
        text_times: :func:`needs_text_times` of ``data``, when the caller has it.

    Returns:
        the decoded :class:`Trace`.

    Raises:
        InputError: malformed JSON, or JSON that is not a Kineto/Chrome trace object.
    """
    if text_times is None:
        text_times = needs_text_times(data)
    trace = decode_text(data, path, whole, text_times)
    if data.count(b'"traceEvents"') > 1 and _events_arrays(data) > 1:
        raise InputError(f"{path} has {_events_arrays(data)} traceEvents members; a JSON reader keeps only the "
                         "last one. Merge their events into one array, or split the file into one trace each")
    if trace.traceEvents and not looks_kineto(trace):
        head = next(iter_event_chunks(trace.traceEvents[:1000], text_times=True, path=path))
        if not any(e.cat in KINETO_CATS for e in head):
            raise InputError(f"{path} is a Chrome trace but not a PyTorch profiler (Kineto) trace: none of its events has a Kineto category")
    return trace


def decode_text(data: bytes | memoryview, path: Path, whole: bool | None, text_times: bool,
                 *, with_args: bool = False) -> Trace:
    """Decode ``data`` (see :func:`decode_trace`) and return the trace, which has a
    ``traceEvents`` list (``with_args``: see :func:`decode_whole`).

    Raises:
        InputError: malformed JSON, not a JSON object, or no ``traceEvents`` list.
    """
    if whole is None:
        whole = len(data) <= WHOLE_DECODE_BYTES
    try:
        trace = decode_whole(data, text_times, with_args=with_args) if whole else TRACE_DECODER.decode(data)
    except msgspec.ValidationError as e:
        raise InputError(f"{path} is not a Kineto trace ({e}); expected a JSON object with a traceEvents list") from None
    except msgspec.DecodeError as e:
        if "trailing characters" in str(e):
            raise InputError(f"{path} holds more than one JSON document ({e}): two traces joined into one file? "
                             "Import each trace as a file of its own") from None
        raise InputError(f"{path} is not valid JSON ({e}); the file may be truncated, re-export the trace") from None
    if trace.traceEvents is None:
        raise InputError(f"{path} is not a Kineto trace: it has no traceEvents list")
    return trace


def _events_arrays(data: bytes) -> int:
    """How many ``traceEvents`` members the root object of the JSON ``data`` has (msgspec,
    like most readers, keeps the last).  Only called when the text holds the key twice:
    the filter refuses such texts, so they reach :func:`decode_trace`; this reads the text
    again with the standard library, which sees every member."""
    import json

    roots: list[list[tuple[str, Any]]] = []

    def pairs(members: list[tuple[str, Any]]) -> int:
        roots[:] = [members]  # the root object comes last: every other one is inside it
        return 0

    try:
        json.loads(data, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return 1
    return sum(key == "traceEvents" for key, _ in roots[0]) if roots else 0


def looks_kineto(trace: Trace) -> bool:
    """True when the trace's top level has a key only Kineto (or perfscope) writes."""
    return (
        trace.schemaVersion is not None or trace.deviceProperties is not None
        or trace.distributedInfo is not None or trace.baseTimeNanoseconds is not None
        or trace.perfscope is not None
    )


def decode_whole(data: bytes | memoryview, text_times: bool | None = None, *, with_args: bool = False) -> Trace:
    """Header and events in one pass: float timestamps when exact, else their text
    (``text_times``: :func:`needs_text_times` of the original text, computed if None).

    ``with_args`` (for filtered texts, whose events all have their args read) first tries
    the decoders that decode each event's args with it; a text they refuse takes the
    others, which give the same trace with the args as raw spans."""
    if text_times is None:
        text_times = needs_text_times(data)
    if with_args:
        # Same order as below: a trace the float one refuses for its timestamps is one the
        # raw one takes; one refused for its args (not an object) is refused by both.
        for decoder in (WHOLE_RAW_TIMES_ARGS,) if text_times else (WHOLE_FLOAT_TIMES_ARGS, WHOLE_RAW_TIMES_ARGS):
            try:
                return decoder.decode(data)
            except msgspec.ValidationError:
                pass
    if not text_times:
        try:
            return WHOLE_FLOAT_TIMES.decode(data)
        except msgspec.ValidationError:
            pass  # an epoch-µs value after the first MB, or an event the union does not cover
    try:
        return WHOLE_RAW_TIMES.decode(data)
    except msgspec.ValidationError:
        pass  # an event the typed union does not cover: the loose decoders take it
    if not text_times:
        try:
            trace = LOOSE_FLOAT_TIME_TRACE.decode(data)
        except msgspec.ValidationError:
            trace = None  # e.g. a timestamp written as a string: the loose decoder takes it
        if trace is not None and (not trace.traceEvents or max(abs(e.ts) for e in trace.traceEvents) < FLOAT_EXACT_US):
            return trace
        del trace
    return LOOSE_TEXT_TIME_TRACE.decode(data)


def iter_event_chunks(raws: list[Any], *, text_times: bool, path: Path | str = "trace",
                      chunk: int = CHUNK_EVENTS, sizes: Sequence[int] | None = None) -> Iterator[list[Event]]:
    """Decode raw events ``chunk`` at a time into :class:`Event` lists (a list of events
    already decoded by :func:`decode_trace` is handed out in chunks, and emptied).

    ``sizes``, when given, are the chunks' lengths instead (empty chunks are skipped): a
    filtered trace's events go out in the chunks of the original's boundaries, so that the
    tables' rows come in the same order (markers and steps are joined per chunk).

    Timestamps decode as floats when that is exact (below 2**43 µs, i.e. relative to
    ``baseTimeNanoseconds``) and as their text otherwise (whole numbers arrive as ints):
    ``text_times`` (from :func:`needs_text_times`) forces text, and a chunk whose float
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
        for decoder in (CHUNK_RAW_TIMES,) if text_times else (CHUNK_LOOSE_FLOAT_TIMES, CHUNK_RAW_TIMES):
            try:
                events = decoder.decode(data)
                break
            except msgspec.ValidationError:
                pass  # see decode_whole
        if events is None and not text_times:
            try:
                events = LOOSE_FLOAT_TIME_EVENTS.decode(data)
            except msgspec.ValidationError:
                events = None  # e.g. a timestamp written as a string: the loose decoder takes it
            if events and max(abs(e.ts) for e in events) >= FLOAT_EXACT_US:
                events = None  # epoch µs after all: only the text keeps every nanosecond
        if events is None:
            try:
                events = LOOSE_TEXT_TIME_EVENTS.decode(data)
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


_ONLY_RAW = frozenset({msgspec.Raw})
_DECODED_ARGS = frozenset({EventArgs, ApiCallArgs})
_NONE_TYPE = type(None)


def decode_args_batch(events: list[Event], *,
                      decoder: msgspec.json.Decoder = ARGS_LIST_DECODER) -> list[EventArgs]:
    """Decode the Raw ``args`` of ``events`` (in one call) and return every event's
    :class:`EventArgs` (an empty one where an event has none).  Decoded args are stored back on
    the events, so that none keeps pointing into the JSON text; events already decoded are
    left as they are."""
    raws = [e.args for e in events]  # (a comprehension reads struct fields faster than attrgetter)
    kinds = set(map(type, raws))
    if kinds <= _DECODED_ARGS:  # decoded with the events (filtered texts) or before
        return raws
    if _NONE_TYPE in kinds:  # decoded with the events, some without args or with "args": null
        for e in events:
            if e.args is None:
                e.args = EMPTY_ARGS
        if msgspec.Raw not in kinds:
            return [a if a is not None else EMPTY_ARGS for a in raws]
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
            decoded = [a if a is not None else EMPTY_ARGS for a in decoded]
        for e, a in zip(pending, decoded):
            e.args = a
        if pending is events:
            return decoded
    return [e.args if e.args is not None else EMPTY_ARGS for e in events]


def _decode_one(raw: Any) -> EventArgs | None:
    try:
        return ARGS_DECODER.decode(raw)
    except msgspec.ValidationError:
        return None
