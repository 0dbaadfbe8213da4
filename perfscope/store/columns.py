"""Arrow columns as the arrays the reader hands out, without pandas' per-row conversion.

Integer columns become numpy ``int64`` (pandas ``IntegerArray`` where they hold nulls, so
epoch nanoseconds are never rounded through float64); dictionary-encoded strings become
pandas categoricals whose categories are their distinct values in order of first
appearance, or :class:`Coded` (the same codes and names without pandas objects).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class Coded:
    """A dictionary-encoded string column without pandas objects: what ``arrays(...,
    coded=True)`` gives instead of a categorical.

    Attributes:
        codes: integers (int32 or int64), one per row: the position of the row's value in
            ``names``, -1 for null; read-only where they are Arrow's own buffer (no copy).
        names: object array of the distinct non-null values (``str``), in order of first
            appearance: the categories of the categorical ``table`` gives.
    """

    codes: np.ndarray
    names: np.ndarray

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows: Any) -> Coded:
        """The rows ``rows`` (a boolean mask, positions or a slice), over the same names."""
        return Coded(self.codes[rows], self.names)


def categorical_column(col: pa.ChunkedArray) -> Any:
    """A dictionary-encoded column as a pandas categorical whose categories are its distinct
    non-null values in order of first appearance (what ``dictionary_encode`` gives), built
    from the dictionary and its indices without decoding a string per row."""
    coded = _codes(col)
    return _encoded(col) if coded is None else from_codes(coded.codes, coded.names)


def coded_column(col: pa.ChunkedArray) -> Coded:
    """A dictionary-encoded column as a :class:`Coded`: the codes and categories of
    :func:`categorical_column`'s result, without the pandas objects."""
    coded = _codes(col)
    if coded is None:  # the rare columns categorical_column converts through Arrow's to_pandas
        cat = _encoded(col).array
        return Coded(np.asarray(cat.codes), np.asarray(cat.categories, dtype=object))
    return coded


def _codes(col: pa.ChunkedArray) -> Coded | None:
    """The codes (any integer dtype) and names of :func:`categorical_column`; None where it falls
    back to Arrow's conversion (values that are not strings, a dictionary repeating a value)."""
    import pandas as pd

    fresh = False  # a dictionary Arrow has just built: first appearance, each value once
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        # What _encoded() converts, taken apart here instead (to_pandas costs more than
        # building the categorical, or than the codes alone): a MemoryRun's strings are plain.
        col, fresh = col.dictionary_encode(), True
    elif not pa.types.is_dictionary(col.type) or not (pa.types.is_string(col.type.value_type)
                                                        or pa.types.is_large_string(col.type.value_type)):
        return None
    if col.num_chunks > 1:
        col = col.unify_dictionaries()
    if col.num_chunks == 0:
        return None
    dictionary = col.chunk(0).dictionary
    idx = [c.indices for c in col.chunks]
    if any(i.null_count for i in idx):
        codes, null = ints_and_nulls(pa.chunked_array(idx))
        codes[null] = -1
    else:
        codes = np.concatenate([i.to_numpy() for i in idx]) if len(idx) > 1 else idx[0].to_numpy()
    if not fresh or col.num_chunks > 1:  # unify_dictionaries() keeps the order; checked all the same
        valid = codes >= 0
        all_valid = bool(valid.all())
        # The dictionary in the file may hold values in another order, unused values or (a
        # writer given a dictionary array) repeated values: re-code to first appearance.
        used = pd.unique(codes if all_valid else codes[valid])
        if used.size != len(dictionary) or (used != np.arange(used.size)).any():
            mapping = np.full(len(dictionary), -1, dtype=np.int64)
            mapping[used] = np.arange(used.size)
            codes = mapping[codes] if all_valid else np.where(valid, mapping[np.where(valid, codes, 0)], -1)
            dictionary = dictionary.take(pa.array(used))
    names = dictionary.to_numpy(zero_copy_only=False)
    if not fresh and len(set(names)) != len(names):  # a repeated value: decode and re-encode
        return None
    return Coded(codes, names)


def _encoded(col: pa.ChunkedArray) -> Any:
    """``col`` (strings) dictionary-encoded by Arrow and converted by it: the reference the
    fast path in :func:`categorical_column` reproduces."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col.dictionary_encode().to_pandas()


def from_codes(codes: np.ndarray, names: np.ndarray) -> Any:
    """A pandas Categorical of ``names[codes]`` (-1 is null), with the categories dtype
    Arrow's ``to_pandas`` gives: ``str`` (object when there is no category)."""
    import pandas as pd

    if len(names):
        dtype = pd.CategoricalDtype(pd.Index(names, dtype=_category_values_dtype()), ordered=False)
    else:
        dtype = _no_categories()
    return pd.Categorical.from_codes(codes, dtype=dtype, validate=False)


@functools.cache
def _category_values_dtype() -> Any:
    """The dtype Arrow's ``to_pandas`` gives the categories of a string dictionary column:
    ``str`` on pandas 3, ``object`` on pandas 2 (asked of Arrow once, not assumed)."""
    one = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array(["a"]))
    return one.to_pandas().cat.categories.dtype


@functools.cache
def _no_categories() -> Any:
    """The dtype of a categorical without categories (dtypes are immutable: one serves all)."""
    import pandas as pd

    return pd.CategoricalDtype(pd.Index([], dtype=object), ordered=False)


def column_array(col: pa.ChunkedArray, dictionary: bool, coded: bool = False) -> Any:
    """One Arrow column as the array the reader returns (see the module docstring); with
    ``coded``, a dictionary column as a :class:`Coded`."""
    import pandas as pd

    if dictionary:
        return coded_column(col) if coded else categorical_column(col)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_integer(col.type):
        if col.null_count:
            return pd.arrays.IntegerArray(*ints_and_nulls(col))
        return col.to_numpy().astype("int64", copy=False)
    if not col.null_count and (pa.types.is_boolean(col.type) or pa.types.is_floating(col.type)):
        return col.to_numpy()  # what to_pandas gives, without its per-call overhead
    return col.to_pandas()


def ints_and_nulls(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64, 0 under a null; null mask) of an integer column: the parts of the
    ``IntegerArray`` that ``to_pandas(types_mapper=Int64Dtype)`` gives, read from the Arrow
    buffers as pandas reads them (no compute function: the first call of one costs more
    than the whole read of a small table)."""
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    values, nulls = [], []
    for ch in col.chunks:
        n, off = len(ch), ch.offset
        validity, data = ch.buffers()[:2]
        values.append(np.frombuffer(data, dtype=ch.type.to_pandas_dtype(), count=off + n)[off:])
        nulls.append(np.zeros(n, dtype=bool) if validity is None else
                     ~np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=off + n, bitorder="little")[off:].astype(bool))
    null = np.concatenate(nulls) if len(nulls) != 1 else nulls[0]
    v = np.concatenate(values).astype(np.int64) if len(values) != 1 else values[0].astype(np.int64)  # a writable copy
    v[null] = 0  # what sits under a null in the buffer is undefined
    return v, null


__all__ = ["Coded", "categorical_column", "coded_column", "column_array", "from_codes", "ints_and_nulls"]
