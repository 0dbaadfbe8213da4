"""Kineto microsecond timestamps to exact int64 nanoseconds, in bulk."""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfscope.store.arrays import from_numpy, str_array
from perfscope.store.kineto.checks import LIMIT_NS, LIMIT_US, check_us
from perfscope.store.kineto.events import Event, raw_value

_EXTENDED = np.finfo(np.longdouble).nmant >= 63


def us_to_ns(values: Sequence[Any]) -> np.ndarray:
    """Convert microsecond values (float, int, or decimal text from the decoder) to int64 ns,
    exactly.

    Floats (only ever below 2**43 µs, see :func:`iter_event_chunks`) are split
    into whole µs and fraction.  Integers take a pure integer path.  Decimal text goes through 80-bit long doubles
    (64-bit mantissa): for |value| < 9e15 µs the text's nearest long double is within
    1e-4 ns of it, so rounding ``value * 1000`` recovers every nanosecond digit.  Where
    long double is only 64-bit (some platforms) the text is converted with ``decimal``.

    Raises:
        TraceValueError: a value is not a finite number within +-``LIMIT_US`` (checked in
            O(1) per value before it is converted: see :mod:`.checks`).
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
    if ints is not None and ints.ndim == 1 and ints.dtype.kind == "i" and np.all(np.abs(ints) <= LIMIT_US):
        return ints.astype(np.int64, copy=False) * 1000
    if _EXTENDED:
        try:
            with warnings.catch_warnings():  # (text beyond long double: inf, refused below)
                warnings.simplefilter("ignore", RuntimeWarning)
                ld = np.array(values, dtype=object).astype(np.longdouble)
            if np.all(np.abs(ld) <= LIMIT_US):
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


def raw_us_to_ns(raws: list[msgspec.Raw]) -> np.ndarray:
    """Raw JSON numbers (µs) to int64 ns, exactly: the spans joined are the data of an
    Arrow string array, parsed as decimals in one call.  Absent values, nulls, strings and
    numbers with more than three decimals take the per-value path (:func:`us_to_ns`)."""
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
    return ns if ns is not None else us_to_ns([raw_value(r) for r in raws])


#: Longest text the decimal parse is given: 19 integer digits, a point, 3 decimals and a
#: sign.  A longer number wraps modulo 2**128 in the cast (39 digits and more), so it takes
#: the per-value path, which checks its range first.
_DECIMAL_TEXT_MAX = 24


def _decimal_text_to_ns(text: pa.Array) -> np.ndarray | None:
    """A string array of decimal µs to int64 ns (see :func:`_decimal_us_to_ns`), or None
    when some text is too long, not a decimal or out of range."""
    if len(text) and pc.max(pc.binary_length(text)).as_py() > _DECIMAL_TEXT_MAX:
        return None
    try:
        dec = pc.call_function("cast", [text], _CAST_DECIMAL_US)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if dec.null_count:
        return None
    words = np.frombuffer(dec.buffers()[1], dtype=np.int64, count=2 * len(dec), offset=16 * dec.offset).reshape(-1, 2)
    low = words[:, 0]
    if not np.array_equal(words[:, 1], low >> 63) or (len(low) and (low.max() > LIMIT_NS or low.min() < -LIMIT_NS)):
        return None
    return low.copy()


def _one_us_to_ns(v: Any) -> int:
    """One value of :func:`us_to_ns` (checked first: the decimal arithmetic is then on
    a short number of bounded size)."""
    from decimal import Decimal

    check_us(v)
    if v is None:
        return 0
    if isinstance(v, int):
        return v * 1000
    return int((Decimal(str(v)) * 1000).to_integral_value())


def event_times(events: list[Event], base: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, duration) of ``events`` in int64 ns, start with ``base`` added."""
    n = len(events)
    try:  # both in one parse: each call has a fixed cost, and there are many small tables
        both = raw_us_to_ns([e.ts_raw for e in events] + [e.dur_raw for e in events])
    except AttributeError:
        return us_to_ns([e.ts for e in events]) + base, us_to_ns([e.dur for e in events])
    return both[:n] + base, both[n:]


def ts_ns(events: list[Any]) -> np.ndarray:
    """The events' ``ts`` in int64 ns (without any base)."""
    try:
        return raw_us_to_ns([e.ts_raw for e in events])
    except AttributeError:  # events of the other decoders hold values, not spans
        return us_to_ns([e.ts for e in events])


def dur_ns(events: list[Any]) -> np.ndarray:
    """The events' ``dur`` in int64 ns."""
    try:
        return raw_us_to_ns([e.dur_raw for e in events])
    except AttributeError:
        return us_to_ns([e.dur for e in events])

