"""``Run.arrays`` / ``MemoryRun.arrays``: the columns ``table`` gives, without the frame; with
``coded=True``, dictionary-encoded strings as codes and names (the categorical's parts)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfscope.store import create_run, open_run, write_rank_tables
from perfscope.store.columns import Coded, categorical_column, coded_column, column_array
from perfscope.store.reader import MemoryRun, Run
from perfscope.store.schema import TABLES
from perfscope.store.writer import stored_tables

T0 = 1_764_000_000_000_000_000  # past 2**53: a float64 detour would show
H200 = Path(__file__).resolve().parents[1] / "data" / "h200"


def _memory(run: Run) -> MemoryRun:
    """``run``'s tables as the writer was given them (plain strings, not dictionaries)."""
    tables: dict[str, dict[int, pa.Table]] = {}
    for name in TABLES:
        for r in run.ranks:
            parts = [pq.read_table(p) for _, p in run.part_files(name, [r])]
            if parts:
                tbl = stored_tables({name: pa.concat_tables(parts, promote_options="default")}).get(name)
                if tbl is not None:
                    tables.setdefault(name, {})[r] = tbl
    return MemoryRun(run.path, run.meta, tables)


def _assert_arrays_are_the_table(run: Run | MemoryRun, name: str, ranks: list[int] | None, columns: list[str] | None) -> None:
    df = run.table(name, ranks=ranks, columns=columns)
    arrays = run.arrays(name, ranks=ranks, columns=columns)
    assert list(arrays) == list(df.columns)
    pd.testing.assert_frame_equal(pd.DataFrame(arrays), df, check_exact=True)
    coded = run.arrays(name, ranks=ranks, columns=columns, coded=True)
    assert list(coded) == list(df.columns)
    for c in df.columns:
        col = df[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            got = coded[c]
            assert isinstance(got, Coded) and len(got) == len(df)
            assert np.array_equal(np.asarray(got.codes, dtype=np.int64), col.cat.codes.to_numpy(np.int64))
            assert list(got.names) == list(col.cat.categories) and got.names.dtype == object
        else:
            pd.testing.assert_series_equal(pd.Series(coded[c], name=c), col, check_exact=True)


@pytest.mark.parametrize("path", sorted(H200.glob("*.perfscope")), ids=lambda p: p.name)
def test_arrays_are_the_columns_of_table(path: Path) -> None:
    """Recorded runs (nulls, several ranks, collectives): every table, whole and per rank, from
    the Parquet files and from memory."""
    disk = open_run(path)
    for run in (disk, _memory(disk)):
        for name, decl in TABLES.items():
            _assert_arrays_are_the_table(run, name, None, None)
            for r in [*disk.ranks, 99]:  # 99: a rank without rows
                _assert_arrays_are_the_table(run, name, [r], ["rank", *decl.column_names[:4]])


def test_empty_tables_give_zero_length_arrays(tmp_path: Path) -> None:
    run = tmp_path / "run"
    create_run(run, world_size=1)
    write_rank_tables(run, 0, {"kernels": {"start_ns": [T0], "dur_ns": [1], "name": ["gemm"]}})
    r = open_run(run)
    arrays = r.arrays("markers", columns=["rank", "start_ns", "name", "device"])
    assert [len(v) for v in arrays.values()] == [0, 0, 0, 0]
    pd.testing.assert_frame_equal(pd.DataFrame(arrays), r.table("markers", columns=["rank", "start_ns", "name", "device"]))
    coded = r.arrays("markers", columns=["name"], coded=True)["name"]
    assert isinstance(coded, Coded) and len(coded) == 0
    # Each call hands out arrays of its own.
    assert r.arrays("sync", columns=["start_ns"])["start_ns"] is not r.arrays("sync", columns=["start_ns"])["start_ns"]


def _dict_chunk(indices: list[int | None], values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(values, pa.string()))


@pytest.mark.parametrize("chunks", [
    [pa.array(["b", "a", "b", None, "c"])],                      # plain strings (a MemoryRun's)
    [pa.array(["b", None]), pa.array(["c", "b", None])],         # plain strings, several chunks
    [pa.array([None, None], pa.string())],                       # nothing but nulls
    [_dict_chunk([1, 0, 1, 1], ["x", "y"])],                     # a dictionary in another order
    [_dict_chunk([2, None, 0], ["x", "unused", "z"])],           # unused values and nulls
    [_dict_chunk([0, 1, 2], ["x", "y", "x"])],                   # a repeated value (Arrow's conversion)
    [_dict_chunk([1, 0], ["p", "q"]), _dict_chunk([0, 2, None], ["r", "q", "p"])],
])
def test_coded_is_the_categoricals_codes_and_categories(chunks: list[pa.Array]) -> None:
    col = pa.chunked_array(chunks)
    cat = pd.Series(categorical_column(col)).cat
    coded = coded_column(col)
    assert np.array_equal(np.asarray(coded.codes, dtype=np.int64), cat.codes.to_numpy(np.int64))
    assert list(coded.names) == list(cat.categories)
    mask = np.arange(len(coded)) % 2 == 0
    assert np.array_equal(coded[mask].codes, coded.codes[mask]) and coded[mask].names is coded.names


@pytest.mark.parametrize("type_", [pa.int8(), pa.int32(), pa.int64(), pa.uint16()])
def test_nullable_integers_are_what_to_pandas_gives(type_: pa.DataType) -> None:
    """Integer columns with nulls, read from the Arrow buffers (chunks, slices with offsets,
    epoch values past 2**53): the ``Int64`` array of ``to_pandas(types_mapper=...)``."""
    rng = np.random.default_rng(3)
    big = type_ == pa.int64()
    for _ in range(150):
        chunks = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.integers(0, 30))
            values = [None if rng.random() < 0.3 else int(rng.integers(0, 100)) + (T0 if big else 0) for _ in range(n)]
            a = pa.array(values, type_)
            chunks.append(a.slice(int(rng.integers(0, 3))) if n > 3 and rng.random() < 0.5 else a)
        col = pa.chunked_array(chunks, type=type_)
        if not col.null_count:
            continue
        got = column_array(col, False)
        want = col.to_pandas(types_mapper={col.type: pd.Int64Dtype()}.get).array
        assert isinstance(got, pd.arrays.IntegerArray)
        pd.testing.assert_extension_array_equal(got, want)
