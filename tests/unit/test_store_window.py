"""``Run.window`` / ``MemoryRun.window``: the rows of one rank that overlap a time window,
at any zoom level, reading only the row groups that can hold them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from perfscope.errors import UsageError
from perfscope.store import create_run, open_run, write_rank_tables
from perfscope.store import reader as store_reader
from perfscope.store.reader import MemoryRun, Run
from perfscope.store.schema import TABLES
from perfscope.store.writer import stored_tables

T0 = 1_764_000_000_000_000_000  # past 2**53: a float64 detour would show
H200 = Path(__file__).resolve().parents[1] / "data" / "h200"

# Kernels on rank 0 around the window [T0 + 100, T0 + 200).
KERNELS = {
    "start_ns": [T0 + 0, T0 + 50, T0 + 90, T0 + 100, T0 + 150, T0 + 199, T0 + 200, T0 + 120, T0 + 60],
    "dur_ns": [1000, 50, 20, 5, 0, 1, 10, None, 40],
    "name": ["spans_all", "ends_at_t0", "crosses_t0", "starts_at_t0", "zero_inside", "last_ns",
             "starts_at_t1", "null_dur", "ends_at_t0_too"],
    "stream": [7] * 9,
}
INSIDE = ["spans_all", "crosses_t0", "starts_at_t0", "zero_inside", "last_ns", "null_dur"]
METRICS = {"ts_ns": [T0 + 99, T0 + 100, T0 + 150, T0 + 200], "device": [0] * 4,
           "metric": ["power_w"] * 4, "value": [1.0, 2.0, 3.0, 4.0]}


def _run(path: Path, parts: int = 1) -> Run:
    """Rank 0 holds KERNELS (split over ``parts`` part files) and METRICS; rank 1 has only
    a memcpy far from the window."""
    create_run(path, command=["train.py"], source="test", world_size=2)
    bounds = np.linspace(0, len(KERNELS["name"]), parts + 1).astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):
        write_rank_tables(path, 0, {"kernels": {k: v[a:b] for k, v in KERNELS.items()}})
    write_rank_tables(path, 0, {"metrics": METRICS})
    write_rank_tables(path, 1, {"memcpy": {"start_ns": [T0 + 10_000], "dur_ns": [5], "bytes": [1]}})
    return open_run(path)


def _memory(run: Run) -> MemoryRun:
    tables: dict[str, dict[int, pa.Table]] = {}
    for name in TABLES:
        for r in run.ranks:
            t = run.table(name, [r], TABLES[name].column_names)
            if len(t):
                tables.setdefault(name, {})[r] = stored_tables({name: t})[name]
    return MemoryRun(run.path, run.meta, tables)


@pytest.mark.parametrize("parts", [1, 3])
def test_window_keeps_spans_that_overlap_and_drops_those_that_end_at_t0(tmp_path: Path, parts: int) -> None:
    run = _run(tmp_path / "r", parts)
    for source in (run, _memory(run)):
        w = source.window("kernels", 0, ["name", "start_ns", "dur_ns", "rank"], T0 + 100, T0 + 200)
        assert sorted(w["name"].astype(str)) == sorted(INSIDE)
        assert list(w.columns) == ["name", "start_ns", "dur_ns", "rank"]
        assert w["start_ns"].dtype == "int64" and isinstance(w["name"].dtype, pd.CategoricalDtype)
        assert set(w["rank"]) == {0}


def test_an_event_spanning_the_window_is_found_at_any_zoom(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    for width in (1, 7, 100, 900):
        for source in (run, _memory(run)):
            w = source.window("kernels", 0, ["name"], T0 + 500, T0 + 500 + width)
            assert list(w["name"].astype(str)) == ["spans_all"]


def test_window_of_a_point_table_keeps_the_samples_inside(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    for source in (run, _memory(run)):
        w = source.window("metrics", 0, ["ts_ns", "value"], T0 + 100, T0 + 200)
        assert w["ts_ns"].tolist() == [T0 + 100, T0 + 150] and w["value"].tolist() == [2.0, 3.0]


def test_missing_table_empty_rank_and_empty_window_give_no_rows_with_the_columns(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    expected = run.table("collectives", [0], ["start_ns", "func", "rank"])
    for source in (run, _memory(run)):
        for table, rank, t1 in (("collectives", 0, T0 + 200), ("kernels", 1, T0 + 200),
                                ("kernels", 5, T0 + 200), ("kernels", 0, T0 + 100)):
            cols = ["start_ns", "func", "rank"] if table == "collectives" else ["start_ns", "name", "rank"]
            w = source.window(table, rank, cols, T0 + 100, t1)
            assert w.empty and list(w.columns) == cols
        pd.testing.assert_frame_equal(source.window("collectives", 0, ["start_ns", "func", "rank"], T0, T0 + 9), expected)
        assert list(source.window("kernels", 0, None, T0 + 100, T0 + 200).columns) == [*TABLES["kernels"].column_names, "rank"]


def test_bad_windows_and_names_are_usage_errors(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    for source in (run, _memory(run)):
        with pytest.raises(UsageError, match="ends before it starts"):
            source.window("kernels", 0, ["name"], T0 + 2, T0 + 1)
        with pytest.raises(UsageError, match="unknown table"):
            source.window("nope", 0, ["name"], T0, T0 + 1)
        with pytest.raises(UsageError, match="no column"):
            source.window("kernels", 0, ["nope"], T0, T0 + 1)


def test_window_reads_only_the_part_files_that_hold_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r"
    create_run(path, command=["train.py"], source="test", world_size=1)
    for i in range(4):  # four part files, each 1000 ns of back-to-back 10 ns kernels
        start = T0 + i * 1000 + np.arange(100) * 10
        write_rank_tables(path, 0, {"kernels": {"start_ns": start, "dur_ns": np.full(100, 10), "name": [f"k{i}"] * 100}})
    run = open_run(path)
    read: list[str] = []
    real = store_reader._read_part
    monkeypatch.setattr(store_reader, "_read_part",
                        lambda decl, p, cols, groups=None: read.append(p.name) or real(decl, p, cols, groups))
    w = run.window("kernels", 0, ["name", "start_ns"], T0 + 2005, T0 + 2035)
    assert w["start_ns"].tolist() == [T0 + 2000, T0 + 2010, T0 + 2020, T0 + 2030]
    assert read == ["part-00002.parquet"]  # parts 0-1 end before the window, part 3 starts after it


def test_window_on_the_h200_fixture_equals_a_filter_of_the_whole_table() -> None:
    run = open_run(H200 / "comm_heavy.perfscope")
    steps = run.table("steps", [0])
    step4 = steps[steps["step"] == 4].iloc[0]
    s0, s1 = int(step4["start_ns"]), int(step4["start_ns"] + step4["dur_ns"])
    # The step lies inside one long AllReduce: zooming into any part of it keeps it.
    for a, b in ((s0, s1), (s0 + 400_000, s0 + 410_000), (s1 - 1, s1)):
        coll = run.window("collectives", 0, ["func", "start_ns", "dur_ns"], a, b)
        assert coll["func"].astype(str).tolist() == ["AllReduce"]
        assert int(coll["start_ns"].iloc[0]) < a and int(coll["start_ns"].iloc[0] + coll["dur_ns"].iloc[0]) > b
    memory = _memory(run)
    for table in ("kernels", "memcpy", "memset", "host", "markers", "sync", "collectives", "api", "metrics"):
        time_col = "ts_ns" if table == "metrics" else "start_ns"
        whole = run.table(table, [0])
        start = whole[time_col]
        end = start + (whole["dur_ns"].fillna(0) if "dur_ns" in whole else 0)
        inside = (start >= s0) & (start < s1)
        expected = whole[inside | ((start < s0) & (end > s0))] if "dur_ns" in whole else whole[inside]
        for source in (run, memory):
            got = source.window(table, 0, None, s0, s1)
            pd.testing.assert_frame_equal(got.reset_index(drop=True).astype(object),
                                          expected.reset_index(drop=True).astype(object), check_exact=True)


@pytest.mark.parametrize("dur_stats", [True, False])
def test_row_groups_are_skipped_by_their_statistics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dur_stats: bool) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "r"
    create_run(path, command=["train.py"], source="test", world_size=1)
    # Five row groups of 100 back-to-back 10 ns kernels, 1000 ns each; group 1 also holds
    # one long kernel that reaches into group 3's time.
    start = T0 + np.arange(500) * 10
    dur = np.full(500, 10)
    dur[150] = 2000  # starts at T0 + 1500, ends at T0 + 3500
    tbl = stored_tables({"kernels": {"start_ns": start, "dur_ns": dur, "name": [f"k{i}" for i in range(500)]}})["kernels"]
    folder = path / "kernels" / "rank=0"
    folder.mkdir(parents=True)
    pq.write_table(tbl, folder / "part-00000.parquet", row_group_size=100,
                   write_statistics=["start_ns", "dur_ns"] if dur_stats else ["start_ns"])
    run = open_run(path)
    calls: list[list[int]] = []
    real = pq.ParquetFile.read_row_groups
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups",
                        lambda self, groups, *a, **kw: calls.append(list(groups)) or real(self, groups, *a, **kw))
    w = run.window("kernels", 0, ["name", "start_ns"], T0 + 3200, T0 + 3300)
    assert w["name"].astype(str).tolist() == ["k150", *(f"k{i}" for i in range(320, 330))]
    times_read = [1, 3] if dur_stats else [0, 1, 2, 3]  # group 4 starts after the window
    assert calls == [times_read, [1, 3]]  # then the asked columns of the groups with rows only
