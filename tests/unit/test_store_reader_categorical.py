"""The reader builds string categoricals from Parquet's dictionaries; the result must be what
decoding every string and dictionary-encoding it again gives, whatever the files hold."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfscope.store import create_run, open_run, write_rank_tables
from perfscope.store.columns import categorical_column

T0 = 1_764_000_000_000_000_000


def _reference(col: pa.ChunkedArray) -> pd.Series:
    """The reader's former conversion: decode to strings, then dictionary_encode."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col.dictionary_encode().to_pandas()


def _assert_same(got, want: pd.Series) -> None:
    got = pd.Series(got)
    pd.testing.assert_series_equal(got, want, check_categorical=True)
    assert list(got.cat.categories) == list(want.cat.categories)
    assert got.cat.categories.dtype == want.cat.categories.dtype
    assert got.cat.codes.dtype == want.cat.codes.dtype
    assert (got.cat.codes.to_numpy() == want.cat.codes.to_numpy()).all()


def _dict_chunk(indices: list[int | None], values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(values, pa.string()))


@pytest.mark.parametrize("chunks", [
    [(["b", "a", "b", None, "c"], None)],                       # plain strings (no dictionary)
    [([0, 1, 0], ["x", "y"])],                                   # first appearance already
    [([1, 0, 1, 1], ["x", "y"])],                                # dictionary in another order
    [([2, 2, 0], ["x", "unused", "z"])],                         # unused values
    [([0, 1, 2], ["x", "y", "x"])],                              # a repeated value
    [([None, 1, None], ["x", "y"])],                             # nulls
    [([None, None], ["x"])],                                     # nothing but nulls
    [([], ["x"])],                                               # no rows
    [([1, 0], ["p", "q"]), ([0, 2, None], ["r", "q", "p"])],     # several parts, different dictionaries
])
def test_categorical_matches_decode_and_encode(chunks) -> None:
    arrays = [pa.array(v, pa.string()) if d is None else _dict_chunk(v, d) for v, d in chunks]
    col = pa.chunked_array(arrays)
    _assert_same(categorical_column(col), _reference(col))


def test_random_dictionaries_match(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        k = int(rng.integers(1, 8))
        values = [f"name{int(v)}" for v in rng.integers(0, 5, k)]  # repeats allowed
        parts = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.integers(0, 30))
            idx = [None if rng.random() < 0.2 else int(i) for i in rng.integers(0, k, n)]
            parts.append(_dict_chunk(idx, values))
        col = pa.chunked_array(parts, type=pa.dictionary(pa.int32(), pa.string()))
        _assert_same(categorical_column(col), _reference(col))


def test_table_reads_parts_written_as_dictionaries(tmp_path: Path) -> None:
    """Part files whose dictionaries differ (order, unused entries) and a part lacking the column."""
    run = tmp_path / "run"
    create_run(run, world_size=1)
    write_rank_tables(run, 0, {"kernels": {"start_ns": [T0, T0 + 5], "dur_ns": [1, 2], "name": ["gemm", "relu"]}})
    folder = run / "kernels" / "rank=0"
    pq.write_table(pa.table({"start_ns": pa.array([T0 + 9, T0 + 12, T0 + 20], pa.int64()),
                             "dur_ns": pa.array([3, 4, 5], pa.int64()),
                             "name": _dict_chunk([2, None, 0], ["softmax", "unused", "relu"])}),
                   folder / "part-00001.parquet")
    pq.write_table(pa.table({"start_ns": pa.array([T0 + 30], pa.int64()), "dur_ns": pa.array([1], pa.int64())}),
                   folder / "part-00002.parquet")
    df = open_run(run).table("kernels", columns=["rank", "start_ns", "name"])
    assert df["name"].astype(object).where(df["name"].notna(), None).tolist() == ["gemm", "relu", "relu", None, "softmax", None]
    assert list(df["name"].cat.categories) == ["gemm", "relu", "softmax"]
    assert df["start_ns"].tolist() == [T0, T0 + 5, T0 + 9, T0 + 12, T0 + 20, T0 + 30]
    assert df["rank"].tolist() == [0] * 6


def test_empty_table_has_the_dtypes_of_a_read(tmp_path: Path) -> None:
    run = tmp_path / "run"
    create_run(run, world_size=1)
    write_rank_tables(run, 0, {"memcpy": {"start_ns": [T0], "dur_ns": [1], "copy_kind": ["H2D"], "bytes": [4], "pageable": [True],
                                          "device": [0], "stream": [7], "correlation": [1], "src_kind": ["pinned"], "dst_kind": ["device"]}})
    r = open_run(run)
    full, empty = r.table("memcpy"), r.table("memcpy", ranks=[])
    assert len(empty) == 0 and list(empty.columns) == list(full.columns)
    for c in full.columns:
        assert empty[c].dtype.kind == full[c].dtype.kind or isinstance(empty[c].dtype, pd.CategoricalDtype), c
