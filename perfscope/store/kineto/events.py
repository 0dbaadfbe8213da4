"""The msgspec Structs a Kineto trace is decoded into, and their decoders.

Complete (``X``) and counter (``C``) events are typed by their phase; what differs between
the types is how ``ts``/``dur`` arrive (raw spans of the text, or floats where those are
exact) and whether ``args`` is decoded with the event (filtered texts) or kept as a raw
span.  :mod:`perfscope.store.kineto.decode` picks the decoder for a text.
"""
from __future__ import annotations

from typing import Annotated, Any, ClassVar, Union

import msgspec


def _field(json_name: str) -> Any:
    return msgspec.field(name=json_name, default=None)


class EventArgs(msgspec.Struct, gc=False):
    """The ``args`` keys perfscope reads; every other key is skipped by the decoder.

    Values are left loosely typed (``Any``) because producers disagree (``"bytes": 1.0``,
    ranks as a string or a list); columns are coerced in bulk afterwards.  Float literals
    arrive as their text (the decoder's ``float_hook``).
    """

    external_id: Any = _field("External id")
    device: Any = None
    stream: Any = None
    correlation: Any = None
    registers: Any = _field("registers per thread")
    shared_memory: Any = _field("shared memory")
    grid: Any = None
    block: Any = None
    graph_id: Any = _field("graph id")
    bytes: Any = None
    cbid: Any = None
    cuda_sync_kind: Any = None
    collective: Any = _field("Collective name")
    dtype: Any = None
    in_nelems: Any = _field("In msg nelems")
    out_nelems: Any = _field("Out msg nelems")
    group_size: Any = _field("Group size")
    pg_name: Any = _field("Process Group Name")
    pg_id: Any = _field("Process Group ID")
    seq: Any = None
    value: Any = None  # counter events ("C") of perfscope's exports
    # Keys only perfscope's own exporter writes, so that a round trip is exact.
    ps: Any = None


class Event(msgspec.Struct, gc=False):
    """One trace event.  ``args`` is decoded in two steps to save time and memory: the
    trace decoder keeps it as a :class:`msgspec.Raw` span of the input (no objects built),
    and the table builders replace it by an :class:`EventArgs` (or None) only for the
    events it keeps.  Most events (``cpu_op``, flows) never have their args decoded."""

    ph: str = ""
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = 0
    dur: Any = 0
    args: Any = msgspec.field(default_factory=msgspec.Raw)


class TextTimeEvent(Event, gc=False):
    """An event of the loose decoders: ``ts``/``dur`` as ints or their text (floats arrive
    as text through ``float_hook``), ``args`` a raw span."""

    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class FloatTimeEvent(TextTimeEvent, gc=False):
    """An event whose ``ts``/``dur`` are decoded as floats (24 bytes instead of ~70 for the
    text), used when every timestamp is exact as a double (see :func:`.decode.decode_whole`)."""

    ts: float = 0.0
    dur: float = 0.0


class Trace(msgspec.Struct, gc=False):
    """The top level of a trace.  Events stay :class:`msgspec.Raw` spans (48 bytes each,
    no copy) and are decoded a chunk at a time by :func:`.decode.iter_event_chunks`, so only one
    chunk of every-event objects is alive at once."""

    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815 - JSON key
    baseTimeNanoseconds: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    host_name: Any = None
    perfscope: Any = None
    # Provenance only (:func:`.formats.provenance`).
    displayTimeUnit: Any = None  # noqa: N815
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    hip_runtime_version: Any = None
    roctracer_version: Any = None


# float_hook=str: float literals in untyped fields come back as their exact text.
TRACE_DECODER = msgspec.json.Decoder(Trace, float_hook=str)
LOOSE_TEXT_TIME_EVENTS = msgspec.json.Decoder(list[TextTimeEvent], float_hook=str)
LOOSE_FLOAT_TIME_EVENTS = msgspec.json.Decoder(list[FloatTimeEvent], float_hook=str)


# Below 2**43 µs (~100 days) a double is within 0.5 ns of any 3-decimal µs value, so the
# nanoseconds can be recovered exactly from it; above (epoch µs) only the text can do it.
FLOAT_EXACT_US = float(1 << 43)


class LooseTextTimeTrace(Trace, gc=False):
    """A whole trace decoded with :class:`TextTimeEvent` events."""

    traceEvents: list[TextTimeEvent] | None = None  # type: ignore[assignment]  # noqa: N815


class LooseFloatTimeTrace(Trace, gc=False):
    """A whole trace decoded with :class:`FloatTimeEvent` events."""

    traceEvents: list[FloatTimeEvent] | None = None  # type: ignore[assignment]  # noqa: N815


LOOSE_TEXT_TIME_TRACE = msgspec.json.Decoder(LooseTextTimeTrace, float_hook=str)
LOOSE_FLOAT_TIME_TRACE = msgspec.json.Decoder(LooseFloatTimeTrace, float_hook=str)
ARGS_DECODER = msgspec.json.Decoder(EventArgs | None, float_hook=str)


# -- Fast path: events typed by their phase ----------------------------------------------
# A tagged union on ``ph`` lets msgspec build a full struct only for complete ("X") and
# counter ("C") events; flows, metadata, instants and the rest of the Chrome phases become
# empty structs (their fields are skipped, not built).  Timestamps are raw spans
# (CompleteRawTimes) or, in relative traces, floats with a bound, so that an epoch-µs value fails
# validation instead of losing its nanoseconds.  A trace this cannot type (a phase outside
# the list, a missing ``ph``, a name that is not text) is decoded by the loose decoders
# above instead, with the same result.
ExactUs = Annotated[float, msgspec.Meta(gt=-FLOAT_EXACT_US, lt=FLOAT_EXACT_US)]


class LooseComplete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event of the chunked decoder (the base of :class:`LooseCompleteFloatTimes`)."""

    ph: ClassVar[str] = "X"
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = 0
    dur: Any = 0
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class LooseCompleteFloatTimes(LooseComplete, tag="X", gc=False):
    """A complete event whose ``ts``/``dur`` are exact as floats (below 2**43 µs)."""

    ts: ExactUs = 0.0
    dur: ExactUs = 0.0


class LooseCounterFloatTimes(LooseCompleteFloatTimes, tag="C", gc=False):
    ph: ClassVar[str] = "C"


_NUMBER = msgspec.json.Decoder(float_hook=str)


def raw_value(raw: msgspec.Raw) -> Any:
    """A raw JSON value as the loose decoders give it: whole numbers as ints, other
    numbers as their text, 0 when the key was absent."""
    return _NUMBER.decode(raw) if raw else 0


class CompleteRawTimes(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event whose ``ts``/``dur`` stay raw spans of the JSON text.

    The whole-file decoder uses these: no float or str object is built per timestamp,
    and :func:`.timestamps.ts_ns` turns a table's spans into exact nanoseconds in one decimal parse
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
        return raw_value(self.ts_raw)

    @property
    def dur(self) -> Any:
        return raw_value(self.dur_raw)


class CounterRawTimes(CompleteRawTimes, tag="C", gc=False):
    ph: ClassVar[str] = "C"


class CompleteFloatTimes(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event of the whole-file decoder for relative traces (no epoch-µs
    timestamp in the first MB): like :class:`CompleteRawTimes`, but ``ts``/``dur`` are
    floats, exact below 2**43 µs (:data:`ExactUs`) and cheaper to decode and convert in bulk than text.
    An epoch-µs value further on fails validation, and the text types take the file."""

    ph: ClassVar[str] = "X"
    cat: str | None = None
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts: ExactUs = 0.0
    dur: ExactUs = 0.0
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class CounterFloatTimes(CompleteFloatTimes, tag="C", gc=False):
    ph: ClassVar[str] = "C"


def _skipped_phase(ph: str) -> type:
    """An empty struct for events of phase ``ph``: no table keeps them, so none of their
    fields is decoded; class attributes answer the few questions asked of every event."""
    attrs = {"ph": ph, "cat": None, "name": None, "pid": None, "tid": None, "ts": 0, "dur": 0, "args": None}
    ns: dict[str, Any] = {"__annotations__": dict.fromkeys(attrs, ClassVar[Any]), **attrs}
    return msgspec.defstruct(f"_Skip_{ord(ph)}", [], namespace=ns, tag_field="ph", tag=ph, gc=False)


# Every other phase of the Chrome trace event format: duration B/E, instant i/I/R, async
# b/n/e and legacy S/T/p/F, flow s/t/f, sample P, object N/O/D, metadata M, memory dump
# v/V, clock sync c, context ( and ).
_SKIPPED = tuple(_skipped_phase(ph) for ph in "BEiIRbneSTpFstfPNODMvVc()")
_LooseFloatTimesPhases = Union[(LooseCompleteFloatTimes, LooseCounterFloatTimes) + _SKIPPED]  # type: ignore[valid-type]  # noqa: UP007 - a Union over a computed tuple of types
_RawTimesPhases = Union[(CompleteRawTimes, CounterRawTimes) + _SKIPPED]  # type: ignore[valid-type]  # noqa: UP007 - a Union over a computed tuple of types


class RawTimesTrace(Trace, gc=False):
    """A whole trace, events typed by phase with raw-span timestamps."""

    traceEvents: list[_RawTimesPhases] | None = None  # type: ignore[valid-type]  # noqa: N815


_FloatTimesPhases = Union[(CompleteFloatTimes, CounterFloatTimes) + _SKIPPED]  # type: ignore[valid-type]  # noqa: UP007 - a Union over a computed tuple of types


class FloatTimesTrace(Trace, gc=False):
    """A whole trace, events typed by phase with exact float timestamps."""

    traceEvents: list[_FloatTimesPhases] | None = None  # type: ignore[valid-type]  # noqa: N815


WHOLE_RAW_TIMES = msgspec.json.Decoder(RawTimesTrace, float_hook=str)
WHOLE_FLOAT_TIMES = msgspec.json.Decoder(FloatTimesTrace, float_hook=str)


# -- Filtered texts: args decoded with their event -----------------------------------------
# In a text the native pre-filter wrote, every event is one some table keeps, so every
# event's args are needed: decoding them in the same pass (as :class:`EventArgs`) costs
# less than keeping them as raw spans and decoding those again in a second pass.  An absent or
# null ``args`` is None here; :func:`.decode.decode_args_batch` gives those events the
# shared empty ``EventArgs``, as it does to raw spans that are absent or null.  Args that
# are not an object fail validation, and the raw-span decoders take the text.
class CompleteRawTimesArgs(CompleteRawTimes, tag="X", gc=False):
    """:class:`CompleteRawTimes` (timestamps as raw spans) with its args decoded."""

    args: EventArgs | None = None  # type: ignore[assignment]


class CounterRawTimesArgs(CompleteRawTimesArgs, tag="C", gc=False):
    ph: ClassVar[str] = "C"


class CompleteFloatTimesArgs(CompleteFloatTimes, tag="X", gc=False):
    """:class:`CompleteFloatTimes` (timestamps as exact floats) with its args decoded."""

    args: EventArgs | None = None  # type: ignore[assignment]


class CounterFloatTimesArgs(CompleteFloatTimesArgs, tag="C", gc=False):
    ph: ClassVar[str] = "C"


class RawTimesArgsTrace(Trace, gc=False):
    """:class:`RawTimesTrace` with each event's args decoded."""

    traceEvents: list[Union[(CompleteRawTimesArgs, CounterRawTimesArgs) + _SKIPPED]] | None = None  # type: ignore[valid-type]  # noqa: N815, UP007


class FloatTimesArgsTrace(Trace, gc=False):
    """:class:`FloatTimesTrace` with each event's args decoded."""

    traceEvents: list[Union[(CompleteFloatTimesArgs, CounterFloatTimesArgs) + _SKIPPED]] | None = None  # type: ignore[valid-type]  # noqa: N815, UP007


WHOLE_RAW_TIMES_ARGS = msgspec.json.Decoder(RawTimesArgsTrace, float_hook=str)
WHOLE_FLOAT_TIMES_ARGS = msgspec.json.Decoder(FloatTimesArgsTrace, float_hook=str)
CHUNK_RAW_TIMES = msgspec.json.Decoder(list[_RawTimesPhases], float_hook=str)  # type: ignore[valid-type]
CHUNK_LOOSE_FLOAT_TIMES = msgspec.json.Decoder(list[_LooseFloatTimesPhases], float_hook=str)  # type: ignore[valid-type]


EMPTY_ARGS = EventArgs()
ARGS_LIST_DECODER = msgspec.json.Decoder(list[EventArgs | None], float_hook=str)


class ApiCallArgs(msgspec.Struct, gc=False):
    """What the api table and the launch index read of a CUDA API call's ``args`` (its
    15k-100k events are the most numerous kept ones: a small struct decodes faster)."""

    correlation: Any = None
    cbid: Any = None
    ps: Any = None


API_ARGS_LIST_DECODER = msgspec.json.Decoder(list[ApiCallArgs | None], float_hook=str)


#: phase -> the set of classes of a bucket whose events all have that phase by their class.
PHASE_TYPES = {
    "X": frozenset({CompleteRawTimes, CompleteFloatTimes, LooseCompleteFloatTimes, LooseComplete,
                    CompleteRawTimesArgs, CompleteFloatTimesArgs}),
    "C": frozenset({CounterRawTimes, CounterFloatTimes, LooseCounterFloatTimes, CounterRawTimesArgs,
                    CounterFloatTimesArgs}),
}

