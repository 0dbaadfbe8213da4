"""Timeline lanes (``perfscope.analyzers.timeline``) on synthetic runs and an H200 fixture."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dashboard_fixtures import NCCL_KERNEL, NCCL_STREAM, T0, make_run
from perfscope import open_run
from perfscope.analyzers.timeline import lane_order, nesting_depth, timeline_events

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"
STEP_NS = 20_000_000


@pytest.fixture(scope="module")
def run_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "a"
    make_run(path, ranks=1, steps=2, step_ns=STEP_NS, straggler_extra_ns=0)
    return path


def test_zooming_inside_a_long_collective_keeps_it_at_any_zoom(run_path: Path) -> None:
    run = open_run(run_path)
    # The exposed all-reduce of the first step covers 72-85% of it (14.4-17.0 ms).
    for a_ms, b_ms in ((14.5, 16.9), (15.0, 15.5), (15.7, 15.701)):
        t0, t1 = T0 + int(a_ms * 1e6), T0 + int(b_ms * 1e6)
        ev = timeline_events(run, 0, t0, t1)
        assert ev["lane"].tolist() == [f"stream {NCCL_STREAM}", "collectives"]
        assert ev["name"].tolist() == [NCCL_KERNEL, "AllReduce 4.19 MB on pg0"]
        assert (ev["start_ns"] < t0).all() and (ev["start_ns"] + ev["dur_ns"] > t1).all()
    assert timeline_events(run, 3, T0, T0 + STEP_NS).empty  # a rank without rows
    assert list(timeline_events(run, 3, T0, T0 + STEP_NS).columns) == ["lane", "start_ns", "dur_ns", "name"]


def test_lanes_of_a_whole_step_in_order_with_their_names(run_path: Path) -> None:
    ev = timeline_events(open_run(run_path), 0, T0, T0 + STEP_NS)
    assert list(dict.fromkeys(ev["lane"])) == ["host: dataloader_wait", "host: optimizer_step", "markers", "stream 7",
                                               f"stream {NCCL_STREAM}", "copies", "collectives", "sync"]
    assert ev["start_ns"].dtype == "int64" and ev["dur_ns"].dtype == "int64"
    assert set(ev.loc[ev["lane"] == "copies", "name"]) == {"H2D 67.11 MB"}
    assert set(ev.loc[ev["lane"] == "sync", "name"]) == {"synchronize stream"}
    for _, lane in ev.groupby("lane", sort=False):
        assert lane["start_ns"].is_monotonic_increasing


def test_h200_step_inside_an_allreduce_shows_it() -> None:
    run = open_run(H200 / "comm_heavy.perfscope")
    steps = run.table("steps", [0])
    step = steps[steps["step"] == 4].iloc[0]
    t0, t1 = int(step["start_ns"]), int(step["start_ns"] + step["dur_ns"])
    ev = timeline_events(run, 0, t0 + 500_000, t0 + 510_000)
    coll = ev[ev["lane"] == "collectives"]
    assert len(coll) == 1 and coll["name"].iloc[0].startswith("AllReduce ")
    assert int(coll["start_ns"].iloc[0]) < t0 and int(coll["start_ns"].iloc[0] + coll["dur_ns"].iloc[0]) > t1


def test_nested_markers_get_their_own_lanes() -> None:
    # step [0,100] > forward [1,51] > two layers back to back; an op that overlaps its neighbour
    start = np.array([0, 1, 2, 5, 10, 11])
    dur = np.array([100, 50, 3, 3, 5, 20])
    assert nesting_depth(start, dur).tolist() == [0, 1, 2, 2, 2, 3]
    assert nesting_depth(np.array([], "int64"), np.array([], "int64")).tolist() == []


def test_lane_order() -> None:
    lanes = ["sync", "stream ?", "collectives", "markers 3", "stream 20", "copies", "host: barrier", "markers",
             "stream 7", "other"]
    assert sorted(lanes, key=lane_order) == ["host: barrier", "markers", "markers 3", "stream 7", "stream 20",
                                             "stream ?", "copies", "collectives", "sync", "other"]
