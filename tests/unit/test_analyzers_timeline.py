"""Timeline lanes (``perfscope.analyzers.timeline``) on synthetic runs and an H200 fixture."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dashboard_fixtures import NCCL_KERNEL, NCCL_STREAM, T0, make_run
from perfscope import open_run
from perfscope.analyzers.counters import COUNTERS, counter_samples, counter_summary
from perfscope.analyzers.timeline import (EVENT_COLUMNS, lane_order, launch_index, marker_lanes, nesting_depth,
                                         rank_lanes, timeline_events)

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
        assert ev["lane"].tolist() == [f"stream {NCCL_STREAM}", "NCCL"]
        assert ev["kind"].tolist() == ["network", "network"]  # NCCL kernels in the network colour
        assert ev["name"].tolist() == [NCCL_KERNEL, "AllReduce 4.19 MB on pg0"]
        assert (ev["start_ns"] < t0).all() and (ev["start_ns"] + ev["dur_ns"] > t1).all()
    assert timeline_events(run, 3, T0, T0 + STEP_NS).empty  # a rank without rows
    assert list(timeline_events(run, 3, T0, T0 + STEP_NS).columns) == list(EVENT_COLUMNS)


def test_lanes_of_a_whole_step_in_order_with_their_names(run_path: Path) -> None:
    ev = timeline_events(open_run(run_path), 0, T0, T0 + STEP_NS)
    assert list(dict.fromkeys(ev["lane"])) == ["NVTX default", "host: dataloader_wait", "host: optimizer_step",
                                               "stream 7", f"stream {NCCL_STREAM}", "copies", "NCCL", "sync"]
    kinds = ev.groupby("lane")["kind"].agg(set).to_dict()
    assert kinds == {"NVTX default": {"marker"}, "host: dataloader_wait": {"data_loading"}, "host: optimizer_step": {"host"},
                     "stream 7": {"compute"}, f"stream {NCCL_STREAM}": {"network"}, "copies": {"pcie"},
                     "NCCL": {"network"}, "sync": {"sync"}}
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
    coll = ev[ev["lane"] == "NCCL"]
    assert len(coll) == 1 and coll["name"].iloc[0].startswith("AllReduce ")
    assert int(coll["start_ns"].iloc[0]) < t0 and int(coll["start_ns"].iloc[0] + coll["dur_ns"].iloc[0]) > t1


def test_nested_markers_get_their_own_lanes() -> None:
    # step [0,100] > forward [1,51] > two layers back to back; an op that overlaps its neighbour
    start = np.array([0, 1, 2, 5, 10, 11])
    dur = np.array([100, 50, 3, 3, 5, 20])
    assert nesting_depth(start, dur).tolist() == [0, 1, 2, 2, 2, 3]
    assert nesting_depth(np.array([], "int64"), np.array([], "int64")).tolist() == []


def test_lane_order() -> None:
    lanes = ["sync", "stream ?", "NCCL", "NVTX default, level 3", "stream 20", "copies", "host: barrier",
             "NVTX default", "API thread 9", "stream 7", "NVTX NCCL", "API main thread", "NVTX default, level 2"]
    assert sorted(lanes, key=lane_order) == [
        "NVTX NCCL", "NVTX default", "NVTX default, level 2", "NVTX default, level 3", "host: barrier",
        "API main thread", "API thread 9", "stream 7", "stream 20", "stream ?", "copies", "NCCL", "sync"]


def test_marker_lanes_are_named_by_source_and_domain_and_level() -> None:
    lanes = marker_lanes(np.array(["nvtx", "nvtx", "user_annotation", "gpu_user_annotation"], dtype=object),
                         np.array(["NCCL", "", "user_annotation", "gpu_user_annotation"], dtype=object),
                         np.array([0, 2, 0, 1]))
    assert lanes.tolist() == ["NVTX NCCL", "NVTX, level 3", "user annotation", "gpu user annotation, level 2"]


def test_lanes_are_steady_across_windows_and_come_from_the_whole_run(run_path: Path) -> None:
    run = open_run(run_path)
    lanes = rank_lanes(run, 0)
    assert lanes == ["NVTX default", "host: dataloader_wait", "host: optimizer_step", "stream 7",
                     f"stream {NCCL_STREAM}", "copies", "NCCL", "sync"]
    # Every window's lanes are among them, whatever the zoom.
    for a_ms, b_ms in ((0, 20), (2.0, 2.5), (15.0, 15.2), (19.0, 19.5)):
        ev = timeline_events(run, 0, T0 + int(a_ms * 1e6), T0 + int(b_ms * 1e6))
        assert set(ev["lane"]) <= set(lanes), (a_ms, b_ms)


def test_h200_kernels_link_to_the_api_call_that_launched_them() -> None:
    run = open_run(H200 / "straggler.perfscope")
    # The GPU runs far behind the host here: launches precede their kernels by up to 0.4 s.
    t0 = int(run.table("kernels", [1], ["start_ns"])["start_ns"].sort_values().iloc[60])
    ev = timeline_events(run, 1, t0, t0 + 5_000_000, launch_index(run, 1))
    assert set(timeline_events(run, 1, t0, t0 + 5_000_000)["link_name"]) == {""}  # the calls lie before the window
    kernels = ev[ev["lane"].str.startswith("stream ")]
    linked = kernels[kernels["link_name"] != ""]
    k = run.window("kernels", 1, ["correlation"], t0, t0 + 5_000_000)
    launched = k["correlation"].isin(run.table("api", [1], ["correlation"])["correlation"])
    assert len(kernels) == len(k) and len(linked) == int(launched.sum()) > 0  # all that have their call in the store
    assert set(linked["link_name"]) <= {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"}
    assert linked["link_lane"].str.startswith("API ").all()
    assert (linked["link_start_ns"] <= linked["start_ns"]).all()  # a launch precedes its kernel
    # and in a window holding both, the API call knows its kernel
    first = linked.iloc[0]
    wide = timeline_events(run, 1, int(first["link_start_ns"]), int(first["start_ns"]) + 1, launch_index(run, 1))
    call = wide[(wide["start_ns"] == first["link_start_ns"]) & wide["lane"].str.startswith("API ")]
    assert call["link_name"].tolist() == [first["name"]] and call["link_lane"].tolist() == [first["lane"]]
    assert call["link_start_ns"].tolist() == [first["start_ns"]]
    idx = launch_index(run, 1)
    assert idx["corr"].is_monotonic_increasing and idx["corr"].is_unique and len(idx) > 100


def test_counters_of_an_h200_run() -> None:
    run = open_run(H200 / "straggler.perfscope")
    summary = counter_summary(run)
    assert sorted(summary["rank"].unique()) == [0, 1, 2, 3]
    assert {"sm_util_pct", "sm_clock_mhz", "power_w", "mem_used_bytes", "pcie_tx_bytes_s"} <= set(summary["metric"])
    util = summary[summary["metric"] == "sm_util_pct"]
    assert (util["scale"] == 100.0).all() and ((util["mean"] >= 0) & (util["max"] <= 100)).all()
    mem = summary[summary["metric"] == "mem_used_bytes"]
    assert (mem["unit"] == "GiB").all() and 0.1 < mem["max"].max() < 141  # bytes shown as GiB on an H200
    steps = run.table("steps", [0])
    t0 = int(steps["start_ns"].iloc[3])
    s = counter_samples(run, 0, t0, t0 + 1_000_000)  # a 1 ms window, far narrower than the sampling period
    per_metric = s.groupby("metric")["ts_ns"].agg(["min", "max", "size"])
    assert (per_metric["min"] < t0 + 1_000_000).all() and (per_metric["size"] >= 1).all()
    assert set(s["metric"]) <= set(COUNTERS)


def test_counters_of_a_run_without_samples(run_path: Path) -> None:
    run = open_run(run_path)
    assert counter_summary(run).empty and counter_samples(run, 0, T0, T0 + STEP_NS).empty
