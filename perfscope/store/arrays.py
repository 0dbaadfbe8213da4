"""Arrow arrays from Python lists and numpy arrays, without ``pa.array``.

``pa.array`` on anything that is not already Arrow imports pandas first (pyarrow checks
every input for pandas types), which costs about 0.15 s and 45 MB the first time.  The
importer builds every column here instead, from numpy buffers (``pa.Array.from_buffers``),
so importing a trace never loads pandas.  The results are the arrays ``pa.array`` would
give for the same values; odd values (ints as text, floats in an int column) are coerced
like :func:`to_int` and :func:`str_or_none` say.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

def to_int(v: Any) -> int | None:
    """``v`` as an int: ints and bools as they are, numeric text and floats truncated,
    None (or anything else, NaN, infinities) as None."""
    if v is None or isinstance(v, bool):
        return None if v is None else int(v)
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return None
        return int(f) if f == f and abs(f) < 2**63 else None


def str_or_none(v: Any) -> str | None:
    """``v`` as text (``str(v)``), None as None."""
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)


def _validity(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    """(validity bitmap buffer or None when all valid, null count) from a bool mask."""
    nulls = int(len(valid) - np.count_nonzero(valid))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def from_numpy(values: np.ndarray, type_: pa.DataType | None = None, valid: np.ndarray | None = None) -> pa.Array:
    """A 1-D int64/int32/float64/bool numpy array (and an optional validity mask) as an
    Arrow array of ``type_`` (int64 and float64 are cast safely to a narrower ``type_``)."""
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        arrow_type = pa.bool_()
    else:
        arrow_type = {np.dtype(np.int64): pa.int64(), np.dtype(np.int32): pa.int32(),
                      np.dtype(np.float64): pa.float64()}[values.dtype]
        data = pa.py_buffer(np.ascontiguousarray(values))
    bitmap, nulls = _validity(valid) if valid is not None else (None, 0)
    arr = pa.Array.from_buffers(arrow_type, len(values), [bitmap, data], null_count=nulls)
    if type_ is not None and arr.type != type_:
        arr = pc.cast(arr, type_)  # safe: out-of-range values raise, as pa.array does
    return arr


def int_array(values: Sequence[Any] | np.ndarray, type_: pa.DataType = pa.int64()) -> pa.Array:
    """An integer column of ``type_`` from ints, None (null) or values :func:`to_int` reads.

    Raises:
        OverflowError / pa.ArrowInvalid: a value does not fit the type.
    """
    n = len(values)
    if isinstance(values, np.ndarray) and values.dtype.kind == "i":
        return from_numpy(values.astype(np.int64, copy=False), type_)
    if n == 0:
        return pa.nulls(0, type_)
    try:
        # The usual column, every value an int: one C loop, faster than np.array's type
        # inference.  Each value converts as int(v) does (floats truncated, numeric text
        # parsed), which is what to_int gives for any value int() takes; None, NaN, values
        # out of range and the rest raise, and take the paths below.
        return from_numpy(np.fromiter(values, np.int64, n), type_)
    except (TypeError, ValueError, OverflowError):
        pass
    if isinstance(values, list) and values.count(None) == n:
        return pa.nulls(n, type_)  # e.g. graph ids outside CUDA graphs: no per-value to_int
    try:
        arr = np.array(values)  # all Python ints within int64 come back as int64
    except (ValueError, OverflowError, TypeError):
        arr = None
    if arr is not None and arr.ndim == 1 and arr.dtype.kind == "i":
        return from_numpy(arr.astype(np.int64, copy=False), type_)
    ints = [v if v.__class__ is int else to_int(v) for v in values]
    valid = np.array([v is not None for v in ints], dtype=bool)
    if not valid.any():
        return pa.nulls(n, type_)
    data = np.array([0 if v is None else v for v in ints], dtype=np.int64)
    return from_numpy(data, type_, valid)


def float_array(values: Sequence[Any]) -> pa.Array:
    """A float64 column from floats (or ints) and None (null)."""
    if not len(values):
        return pa.nulls(0, pa.float64())
    valid = np.array([v is not None for v in values], dtype=bool)
    data = np.array([0.0 if v is None else v for v in values], dtype=np.float64)
    return from_numpy(data, pa.float64(), valid)


def bool_array(values: Sequence[Any]) -> pa.Array:
    """A bool column from truthy values and None (null)."""
    valid = np.array([v is not None for v in values], dtype=bool)
    data = np.array([bool(v) for v in values], dtype=bool)
    arr = from_numpy(data)
    return arr if valid.all() else from_numpy(data, pa.bool_(), valid)


def str_array(values: Sequence[Any], *, strict: bool = False) -> pa.Array | None:
    """A string column from str values, None (null) and anything else (``str(v)``); with
    ``strict``, None unless every value is a str."""
    n = len(values)
    if n == 0:
        return pa.nulls(0, pa.string())
    valid = None
    try:
        text = "".join(values)  # TypeError unless every value is a str
    except TypeError:
        if strict:
            return None
        strs = [str_or_none(v) for v in values]
        valid = np.array([s is not None for s in strs], dtype=bool)
        values = ["" if s is None else s for s in strs]
        text = "".join(values)
    data = text.encode("utf-8", "surrogatepass")
    if text.isascii():  # one byte per character: lengths are the str lengths
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    else:
        lengths = np.fromiter((len(s.encode("utf-8", "surrogatepass")) for s in values), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    big = offsets[-1] >= 2**31
    arrow_type = pa.large_string() if big else pa.string()
    offsets_buf = pa.py_buffer(offsets if big else offsets.astype(np.int32))
    bitmap, nulls = _validity(valid) if valid is not None else (None, 0)
    arr = pa.Array.from_buffers(arrow_type, n, [bitmap, offsets_buf, pa.py_buffer(data)], null_count=nulls)
    return pc.cast(arr, pa.string()) if big else arr


def int_values(arr: pa.Array, null: int | None = None) -> np.ndarray:
    """The values of an Arrow integer array as numpy, without pyarrow's pandas-importing
    conversions: a view of its buffer when ``null`` is None (meaningless where a value is
    null), else a copy with ``null`` where a value is null."""
    width = arr.type.bit_width // 8
    if arr.buffers()[1] is None:  # (all null)
        return np.full(len(arr), null or 0, dtype=f"<i{width}")
    values = np.frombuffer(arr.buffers()[1], dtype=f"<i{width}", count=len(arr), offset=arr.offset * width)
    if null is None or not arr.null_count:
        return values
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], np.uint8), bitorder="little")
    return np.where(bits[arr.offset:arr.offset + len(arr)].astype(bool), values, null)


def column(values: Any, type_: pa.DataType) -> Any:
    """``values`` (a list, numpy array or Arrow array) as an Arrow array of ``type_``,
    built here when it is a list or numpy array; Arrow arrays are returned as they are."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    base = type_.value_type if pa.types.is_dictionary(type_) else type_
    if isinstance(values, np.ndarray) and values.dtype.kind in "iufb" and values.ndim == 1:
        if values.dtype.kind in "iu" and pa.types.is_integer(base):
            return int_array(values, base)
        if values.dtype.kind == "f" and base == pa.float64():
            return from_numpy(values.astype(np.float64, copy=False))
        if values.dtype.kind == "b" and base == pa.bool_():
            return from_numpy(values)
    values = list(values)
    if pa.types.is_integer(base):
        return int_array(values, base)
    if pa.types.is_string(base):
        return str_array(values)
    if pa.types.is_boolean(base):
        return bool_array(values)
    if pa.types.is_floating(base):
        return float_array(values)
    raise TypeError(f"no Arrow conversion for a {base} column")  # pragma: no cover


__all__ = ["bool_array", "column", "float_array", "from_numpy", "int_array", "int_values", "str_array", "str_or_none", "to_int"]
