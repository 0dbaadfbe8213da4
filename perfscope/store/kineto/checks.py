"""What values a Kineto trace may hold, checked before they are converted.

Every number that becomes a column is range-checked in O(1) before it is converted (a
``ts`` of ``1e999000`` once took minutes to become a million-digit integer, a 39-digit
one wrapped into a plausible date): a value perfscope cannot represent is a
:class:`TraceValueError`.  The importer turns it, and any other failure to convert a
trace's values, into one :class:`~perfscope.errors.InputError` that names the file, the
event and the field (:func:`import_error`, which finds the event with
:func:`first_bad_event`).

The limits:

* times (``ts``, ``dur``) within +-:data:`LIMIT_US` microseconds, finite numbers: with
  ``baseTimeNanoseconds`` within +-:data:`LIMIT_NS`, a start plus a duration always fits
  the store's int64 nanoseconds;
* ``ProfilerStep#N`` numbers of at most 18 digits (int64);
* the ``args`` the tables keep fit their column's type (int32 or int64).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from perfscope.errors import InputError
from perfscope.store.arrays import to_int

#: |nanoseconds| a time or a base may have (2**62 ns: 146 years from 0).  A start is a base
#: plus a ``ts``, its end that plus a ``dur``: within 3 * 2**62, so int64 holds them all
#: as long as the base and ``ts`` are epoch-like (checked once more on the tables).
LIMIT_NS = 1 << 62
#: The same in microseconds, the unit of the trace (a few hundred ns of slack at the edge).
LIMIT_US = LIMIT_NS // 1000
#: Longest text a number may have to be read (more is no time perfscope can store: 19
#: integer digits, three decimals, a sign, an exponent would be far less).
MAX_NUMBER_TEXT = 64
#: Digits a ``ProfilerStep#N`` number may have (int64).
MAX_STEP_DIGITS = 18

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


class TraceValueError(InputError):
    """A value of a trace that perfscope cannot represent (out of range, not a number).

    Attributes:
        value: the value as the decoder gave it.
        field: the field (``ts``, ``dur``, ``args.stream`` ...), when known where it was found.
    """

    def __init__(self, message: str, value: Any = None, field: str | None = None) -> None:
        super().__init__(message)
        self.value = value
        self.field = field


def show(value: Any, limit: int = 40) -> str:
    """``value`` as a short text for a message (long values cut in the middle)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit // 2]}...{text[-8:]} ({len(text)} chars)"


def check_us(value: Any, field: str = "ts") -> None:
    """Raise :class:`TraceValueError` unless ``value`` (a ``ts``/``dur`` as the decoders give
    it: an int, a float, the text of a number, or None for absent) is a finite number of at
    most :data:`LIMIT_US` microseconds.  O(1): long text is refused before it is parsed."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        ok = -LIMIT_US <= value <= LIMIT_US
    elif isinstance(value, float):
        ok = math.isfinite(value) and abs(value) <= LIMIT_US
    elif isinstance(value, str):
        if len(value) > MAX_NUMBER_TEXT:
            ok = False
        else:
            try:
                f = float(value)
            except ValueError:
                raise TraceValueError(f"{field} {show(value)} is not a number", value, field) from None
            if math.isnan(f) or (math.isinf(f) and "INF" in value.upper()):
                raise TraceValueError(f"{field} {show(value)} is not a finite number", value, field)
            ok = abs(f) <= LIMIT_US
    else:
        raise TraceValueError(f"{field} {show(value)} is not a number", value, field)
    if not ok:
        raise TraceValueError(f"{field} {show(value)} is out of range (times must be finite and within "
                              f"+-{LIMIT_US:.3g} us, about 146 years)", value, field)


def check_base(value: Any) -> int:
    """``baseTimeNanoseconds`` as an int (0 when absent), within +-:data:`LIMIT_NS`.

    Raises:
        TraceValueError: not an integer, or out of range.
    """
    if value is None:
        return 0
    base = to_int(value) if not isinstance(value, str) or len(value) <= MAX_NUMBER_TEXT else None
    if base is None or not -LIMIT_NS <= base <= LIMIT_NS:
        raise TraceValueError(f"baseTimeNanoseconds {show(value)} is not an integer within +-{LIMIT_NS:.3g} ns "
                              "(about 146 years); fix it and import again", value, "baseTimeNanoseconds")
    return base


def step_number(digits: str) -> int:
    """The number of ``ProfilerStep#<digits>``.

    Raises:
        TraceValueError: more than :data:`MAX_STEP_DIGITS` digits.
    """
    if len(digits) > MAX_STEP_DIGITS:
        raise TraceValueError(f"step number {show(digits)} is out of range (at most {MAX_STEP_DIGITS} digits)",
                              digits, "name")
    return int(digits)


def drop_negative_durations(tables: dict[str, pa.Table]) -> tuple[dict[str, pa.Table], dict[str, int]]:
    """``tables`` (a rank's, as stored) without their rows whose ``dur_ns`` is negative (no
    interval has a negative length: the analysis would ignore them), and the rows dropped
    per table (only tables that lost some).

    Raises:
        TraceValueError: a row's end (``start_ns + dur_ns``) does not fit int64 (only a base
            and times both near the limits can do that).
    """
    out, dropped = {}, {}
    for name, tbl in tables.items():
        if "dur_ns" in tbl.column_names and tbl.num_rows:
            # (no Python scalar in these calls: pyarrow would import pandas to convert it)
            sign, dur = pc.sign(tbl["dur_ns"]), tbl["dur_ns"]
            negative_rows = pc.and_kleene(pc.less(sign, pc.abs(sign)), pc.is_valid(dur))
            negative = pc.sum(negative_rows).as_py() or 0
            if negative:
                tbl = tbl.filter(pc.invert(negative_rows))
                dropped[name] = negative
            if "start_ns" in tbl.column_names and tbl.num_rows:
                try:
                    pc.add_checked(tbl["start_ns"], tbl["dur_ns"])
                except pa.ArrowInvalid:
                    raise TraceValueError(f"a {name} event ends after the last time int64 nanoseconds can hold "
                                          "(its start, with baseTimeNanoseconds, and its dur are too big)") from None
        out[name] = tbl
    return out, dropped


# -- Finding the event behind a failure ----------------------------------------------------
class _Root(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815 - the JSON member's name


class _Event(msgspec.Struct):
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


_ROOT = msgspec.json.Decoder(_Root)
_EVENT = msgspec.json.Decoder(_Event, float_hook=str)
# args keys and the column type they go to (see tables.py, links.py and the schema)
_ARG_RANGES = {
    "device": INT32, "registers per thread": INT32, "cbid": INT32, "Group size": INT32,
    "stream": INT64, "correlation": INT64, "External id": INT64, "shared memory": INT64, "graph id": INT64,
    "bytes": INT64, "In msg nelems": INT64, "Out msg nelems": INT64, "seq": INT64,
}
_ARGS = msgspec.json.Decoder(dict[str, Any], float_hook=str)


def _event_problems(raw: msgspec.Raw, kept_cats: frozenset[str]) -> Iterator[tuple[str, str]]:
    """(field, what is wrong) for one event's text, first problem first."""
    try:
        e = _EVENT.decode(raw)
    except RecursionError:
        yield "", "is nested too deeply"
        return
    except msgspec.DecodeError as err:
        yield "", f"cannot be read ({err})"
        return
    if isinstance(e.cat, (dict, list)):
        yield "cat", f"{show(e.cat)} is not text"
        return
    if not isinstance(e.cat, str) or e.cat not in kept_cats:
        return
    for name in ("pid", "tid"):
        v = getattr(e, name)
        if isinstance(v, int) and not INT64[0] <= v <= INT64[1]:
            yield name, f"{name} {show(v)} is out of range (int64)"
    for name in ("ts", "dur"):
        try:
            check_us(getattr(e, name), name)
        except TraceValueError as err:
            yield name, str(err)
    if isinstance(e.name, str) and e.name.startswith("ProfilerStep#") and e.name[13:].isdigit():
        try:
            step_number(e.name[13:])
        except TraceValueError as err:
            yield "name", str(err)
    if not e.args:
        return
    try:
        args = _ARGS.decode(e.args)
    except RecursionError:
        yield "args", "is nested too deeply"
        return
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        yield "args", f"cannot be read ({err})"
        return
    for key, (lo, hi) in _ARG_RANGES.items():
        v = args.get(key)
        values = v if isinstance(v, list) else [v]
        for x in values:
            if isinstance(x, int) and not isinstance(x, bool) and not lo <= x <= hi:
                yield f"args.{key}", f"{show(x)} is out of range for its column ({lo} to {hi})"
    for key in ("grid", "block"):
        v = args.get(key)
        if isinstance(v, list) and any(isinstance(x, int) and not INT32[0] <= x <= INT32[1] for x in v):
            yield f"args.{key}", f"{show(v)} is out of range for its int32 columns"


def first_bad_event(text: bytes, kept_cats: frozenset[str]) -> tuple[int, str, str] | None:
    """The first event of the trace ``text`` (of a category in ``kept_cats``, or whose
    ``cat`` is not text) holding a value the import cannot represent, as (its index in
    ``traceEvents``, the field, what is wrong), or None (none found, or the text cannot
    be read this way)."""
    try:
        events = _ROOT.decode(text).traceEvents or []
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    for i, raw in enumerate(events):
        for field, why in _event_problems(raw, kept_cats):
            return i, field, why
    return None


#: Exceptions a trace's values can raise while they are converted (all but
#: PerfscopeError, which passes as it is): each becomes :func:`import_error`'s InputError.
VALUE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, TypeError, OverflowError, RecursionError, msgspec.DecodeError, msgspec.ValidationError,
)


def import_error(path: Path, error: BaseException, text: bytes | None, kept_cats: frozenset[str]) -> InputError:
    """The one-line error for a trace ``path`` whose import failed with ``error`` while
    converting its values: it names the event and the field when ``text`` (the trace's
    JSON, None when it cannot be read again) shows which."""
    found = first_bad_event(text, kept_cats) if text is not None else None
    if found is not None:
        index, field, why = found
        where = f"traceEvents[{index}]" + (f".{field}" if field and not why.startswith(field) else "")
        return InputError(f"{path}: {where}: {why}; fix or remove that event and import again")
    if isinstance(error, TraceValueError):
        return InputError(f"{path}: {error}; fix that value and import again")
    if isinstance(error, RecursionError):
        return InputError(f"{path} holds a value nested too deeply to read (hundreds of levels); check the trace "
                          "with a JSON tool or re-export it")
    return InputError(f"{path} holds a value perfscope cannot import ({type(error).__name__}: {show(str(error), 160)}); "
                      "check the trace with a JSON tool or re-export it")


__all__ = ["INT32", "INT64", "LIMIT_NS", "LIMIT_US", "MAX_NUMBER_TEXT", "MAX_STEP_DIGITS", "VALUE_ERRORS",
           "TraceValueError", "check_base", "check_us", "drop_negative_durations", "first_bad_event", "import_error", "show", "step_number"]
