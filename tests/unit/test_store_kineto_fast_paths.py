"""The Kineto importer's fast paths give what the general paths give.

* Filtered texts decode each event's ``args`` with the event (``_decode_whole(...,
  with_args=True)``); the tables must be those of args kept as raw spans and decoded in a
  second pass, including events without args, with ``"args": null`` and with args that
  are not an object.
* ``int_array`` converts all-int columns in one ``np.fromiter`` call; odd values must
  convert as :func:`to_int` says.
* The launch index keeps rows, not tuples; later calls win on a repeated correlation.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import msgspec

from perfscope.store.kineto import decode, events, import_kineto, links
from perfscope.store.arrays import int_array, to_int


def _trace(events: list[dict[str, Any]], base: int | None = 1_000_000) -> bytes:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    return json.dumps(doc).encode()


def _events(ts: float) -> list[dict[str, Any]]:
    """Kernels, API calls, copies and annotations with every shape of ``args``."""
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8, "ts": ts, "dur": 1.5,
         "args": {"correlation": 11, "cbid": 211, "External id": 3}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 9, "ts": ts + 1, "dur": 1,
         "args": {"correlation": 11, "cbid": 211}},  # a repeated correlation: the later call wins
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 7, "tid": 8, "ts": ts + 2, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0, "tid": 7,
         "ts": ts + 3, "dur": 2.25, "args": {"correlation": 11, "device": 0, "stream": 7, "grid": [1, 2, 3],
                                             "block": [64, 1, 1], "Collective name": "allreduce",
                                             "dtype": "Float", "In msg nelems": 10, "Out msg nelems": 10,
                                             "Group size": 2, "graph id": None}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": ts + 5, "dur": 1, "args": None},
        {"ph": "X", "cat": "kernel", "name": "k3", "pid": 0, "tid": 7, "ts": ts + 6, "dur": 1},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
         "ts": ts + 7, "dur": 1, "args": {"bytes": 1.0e3, "correlation": "12"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 7, "tid": 8, "ts": ts, "dur": 20,
         "args": {}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": ts + 1, "dur": 3},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": ts, "dur": 1,
         "args": {"Input Dims": [[1]]}},
        {"ph": "f", "cat": "ac2g", "name": "flow", "pid": 7, "tid": 8, "ts": ts, "id": 1},
    ]


def _tables(path: Path, tmp: Path, name: str) -> dict[str, Any]:
    out = tmp / name
    import_kineto([path], out)
    import pyarrow.parquet as pq

    return {str(p.relative_to(out)): pq.read_table(p).to_pydict() for p in sorted(out.rglob("*.parquet"))}


@pytest.mark.parametrize("ts", [4_458_676_983_543.183, 1_712_195_495_519_689.047], ids=["relative", "epoch"])
@pytest.mark.parametrize("odd_args", [False, True], ids=["objects", "not-an-object"])
def test_args_decoded_with_events_give_the_same_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       ts: float, odd_args: bool) -> None:
    events = _events(ts)
    if odd_args:  # the typed decoders refuse it: the raw-span ones take the text
        events.append({"ph": "X", "cat": "kernel", "name": "k4", "pid": 0, "tid": 7, "ts": ts + 8, "dur": 1,
                       "args": [1, 2]})
    path = tmp_path / "t.json"
    path.write_bytes(_trace(events, base=1_000_000 if ts < 2**43 else None))
    fast = _tables(path, tmp_path, "fast")
    monkeypatch.setattr(decode, "WHOLE_FLOAT_TIMES_ARGS", decode.WHOLE_FLOAT_TIMES)
    monkeypatch.setattr(decode, "WHOLE_RAW_TIMES_ARGS", decode.WHOLE_RAW_TIMES)
    assert _tables(path, tmp_path, "raw") == fast
    assert "collectives/rank=0/part-00000.parquet" in fast


def test_decode_with_args_falls_back_when_args_are_not_objects() -> None:
    text = _trace([{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 1.0, "args": "text"}])
    trace = decode.decode_whole(text, False, with_args=True)
    assert isinstance(trace.traceEvents[0].args, type(msgspec.Raw()))
    trace = decode.decode_whole(_trace(_events(1.0)), False, with_args=True)
    assert {type(e.args) for e in trace.traceEvents if e.ph == "X"} <= {events.EventArgs, type(None)}


@pytest.mark.parametrize("values", [
    [1, 2, 3], [1, 2.7, -2.7], [1, "12", " 7 "], [True, False, 3], [1, None, 3], [None, None],
    [1, float("nan")], [1, "1.5"], [1, "x"], [1, [2]], [2**40, -(2**40)], [1.0e3, "1e3"],
])
def test_int_array_fast_path_matches_to_int(values: list[Any]) -> None:
    expected = [to_int(v) for v in values]
    assert int_array(values).to_pylist() == expected
    if all(v is None or abs(v) < 2**31 for v in expected):
        assert int_array(values, pa.int32()).to_pylist() == expected


def test_int_array_out_of_range_still_raises() -> None:
    with pytest.raises((OverflowError, pa.ArrowInvalid)):
        int_array([1, 2**70])
    with pytest.raises((OverflowError, pa.ArrowInvalid)):
        int_array([1, 2**40], pa.int32())


def test_launch_index_later_rows_win() -> None:
    args = [events.EventArgs(correlation=5, ps={"tid": 99}), events.EventArgs(correlation=6), events.EventArgs(correlation=5)]
    parts = [(args[:2], [1, 1], [10, 11], np.array([100, 200], np.int64)),
             (args[2:], [2], [12], np.array([300], np.int64))]
    index = links.LaunchIndex(parts, base_ns=50)
    assert index.get(5) == links.Launch(2, 12, 250, None)
    assert index.get(6) == links.Launch(1, 11, 150, None)
    assert index.get(7) is None and index.get("5") is None
    assert links.LaunchIndex().get(5) is None
