"""Arrow columns built without pa.array (perfscope.store.arrays) match pa.array's."""
from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from perfscope.store.arrays import bool_array, column, float_array, int_array, str_array


@pytest.mark.parametrize(
    ("values", "type_"),
    [
        ([1, 2, 3], pa.int64()),
        ([1, None, -5], pa.int64()),
        ([None, None], pa.int64()),
        ([], pa.int64()),
        ([7, None, 2**31 - 1], pa.int32()),
        ([2**62, -(2**62)], pa.int64()),
    ],
)
def test_int_array_matches_pa_array(values: list[Any], type_: pa.DataType) -> None:
    assert int_array(values, type_).equals(pa.array(values, type_))


def test_int_array_coerces_like_the_importer() -> None:
    # Numeric text, floats (truncated), bools; NaN and junk become nulls.
    assert int_array(["5", 2.9, True, float("nan"), "x", None]).to_pylist() == [5, 2, 1, None, None, None]
    assert int_array(np.array([3, 4], dtype=np.int32), pa.int32()).to_pylist() == [3, 4]


def test_int_array_refuses_values_the_type_cannot_hold() -> None:
    with pytest.raises((pa.ArrowInvalid, OverflowError)):
        int_array([2**40], pa.int32())


@pytest.mark.parametrize("values", [["a", "bé", "", None, "日本"], ["x"] * 3, [], [None], ["a", 5, 1.5]])
def test_str_array_matches_pa_array(values: list[Any]) -> None:
    expected = pa.array([None if v is None else str(v) for v in values], pa.string())
    got = str_array(values)
    assert got.equals(expected)
    got.validate(full=True)


def test_str_array_strict_refuses_non_text() -> None:
    assert str_array(["1.5", 2], strict=True) is None
    assert str_array(["1.5"], strict=True).to_pylist() == ["1.5"]


def test_float_and_bool_arrays() -> None:
    assert float_array([1.5, None, 2]).equals(pa.array([1.5, None, 2.0], pa.float64()))
    assert bool_array([True, False, None]).equals(pa.array([True, False, None], pa.bool_()))
    assert bool_array([True, False]).equals(pa.array([True, False], pa.bool_()))


def test_column_dispatches_on_the_declared_type() -> None:
    assert column(np.arange(3, dtype=np.int64), pa.int32()).type == pa.int32()
    assert column(np.array([0.5]), pa.float64()).to_pylist() == [0.5]
    assert column(["a", None], pa.string()).to_pylist() == ["a", None]
    arr = pa.array([1, 2])
    assert column(arr, pa.int64()) is arr


def test_building_columns_does_not_import_pandas() -> None:
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from perfscope.store.arrays import column\n"
        "column([1, None], pa.int64()); column(['a', None], pa.string()); column(np.arange(3), pa.int64())\n"
        "column([True], pa.bool_()); column([1.5, None], pa.float64())\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_importing_a_trace_does_not_import_pandas(tmp_path: Any) -> None:
    """`import perfscope` and a whole Kineto import stay clear of pandas (0.15 s, 45 MB)."""
    from pathlib import Path

    trace = Path(__file__).resolve().parents[1] / "data" / "kineto" / "ddp_rank0.json.gz"
    code = (
        "import sys, perfscope\n"
        "from perfscope.store.kineto import import_kineto\n"
        f"import_kineto({str(trace)!r}, {str(tmp_path / 'run')!r})\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
