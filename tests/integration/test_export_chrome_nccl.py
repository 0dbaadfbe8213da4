"""The Chrome export's NCCL lanes: the profiler plugin's per-channel kernel timing
(``nccl_channels``) and proxy operations and network steps (``proxy``)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from perfscope.store import create_run, open_run, write_rank_meta, write_rank_tables
from perfscope.store.chrome import export_chrome

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"
T0 = 1_796_000_000_123_456_789  # ns; past 2**53


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _lanes(doc: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}


def _processes(doc: dict[str, Any]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}


@pytest.mark.parametrize("fixture", ["comm_heavy.perfscope", "nccl_record_2rank.perfscope"])
def test_channel_lanes_per_rank_and_channel(tmp_path: Path, fixture: str) -> None:
    run = open_run(H200 / fixture)
    channels = run.table("nccl_channels")
    assert len(channels)  # the fixture holds the table this test is about
    doc = _load(export_chrome(run, tmp_path / "t.json").path)
    lanes, procs = _lanes(doc), _processes(doc)
    events = [e for e in doc["traceEvents"] if e.get("cat") == "perfscope_nccl_channel"]
    assert len(events) == len(channels)
    base = doc["baseTimeNanoseconds"]
    for rank in run.ranks:
        mine = channels[channels["rank"] == rank]
        gpu = run.rank_meta(rank)["gpu"]["index"]
        got = [e for e in events if procs[e["pid"]] == f"rank {rank} GPU {gpu}"]
        assert len(got) == len(mine)
        # One lane per channel, named after it, holding exactly that channel's rows.
        by_lane = Counter(lanes[(e["pid"], e["tid"])] for e in got)
        assert by_lane == Counter(f"NCCL channel {c}" for c in mine["channel"])
        first = mine.sort_values(["start_ns", "channel"]).iloc[0]
        ev = min(got, key=lambda e: (e["ts"], e["args"]["ps"]["channel"]))
        assert round(ev["ts"] * 1000) + base == first["start_ns"] and round(ev["dur"] * 1000) == first["dur_ns"]
        assert ev["args"]["ps"]["seq"] == first["seq"] and ev["args"]["ps"]["gpu_timed"] is True
        assert ev["name"] == f"{first['func']} ch{first['channel']}"


def test_collectives_without_a_device_sit_on_the_ranks_gpu(tmp_path: Path) -> None:
    run = open_run(H200 / "comm_heavy.perfscope")
    doc = _load(export_chrome(run, tmp_path / "t.json").path)
    procs = _processes(doc)
    where = {procs[e["pid"]] for e in doc["traceEvents"] if e.get("cat") == "perfscope_collective"}
    assert where == {"rank 0 GPU 0", "rank 1 GPU 0"}


def _proxy_run(path: Path) -> Path:
    """A one-rank run with a proxy send operation holding two network steps, and a receive."""
    create_run(path, command=["x"], source="test", world_size=2)
    write_rank_meta(path, 0, {"host": "n", "pid": 42, "gpu": {"index": 0, "name": "G"}})
    write_rank_tables(path, 0, {"proxy": {
        "start_ns": [T0, T0 + 100, T0 + 600, T0 + 50],
        "dur_ns": [1000, 400, 300, 900],
        "comm_id": ["0xabc"] * 4, "seq": [3] * 4, "func": ["AllReduce"] * 4,
        "kind": ["op", "step", "step", "op"], "channel": [1, 1, 1, 0], "peer": [1, 1, 1, 1],
        "is_send": [True, True, True, False], "step": [None, 0, 1, None], "nsteps": [2, 2, 2, 1],
        "chunk_bytes": [4096] * 4, "trans_bytes": [None, 4096, 4096, None],
        "send_wait_ns": [None, 200, 150, None],
    }})
    return path


def test_proxy_lanes_nest_steps_in_their_operation(tmp_path: Path) -> None:
    doc = _load(export_chrome(_proxy_run(tmp_path / "r"), tmp_path / "t.json").path)
    lanes, procs = _lanes(doc), _processes(doc)
    events = [e for e in doc["traceEvents"] if e.get("cat") == "perfscope_proxy"]
    assert len(events) == 4
    assert {procs[e["pid"]] for e in events} == {"rank 0 host (pid 42)"}
    by_lane: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_lane.setdefault(lanes[(e["pid"], e["tid"])], []).append(e)
    assert sorted(by_lane) == ["NCCL proxy ch0 recv", "NCCL proxy ch1 send"]
    op, *steps = sorted(by_lane["NCCL proxy ch1 send"], key=lambda e: e["ts"])
    assert op["name"] == "AllReduce send peer 1 op"
    assert [s["name"] for s in steps] == ["AllReduce send peer 1 step 0", "AllReduce send peer 1 step 1"]
    for s in steps:  # inside the operation, so viewers draw them beneath it
        assert op["ts"] <= s["ts"] and s["ts"] + s["dur"] <= op["ts"] + op["dur"]
    assert steps[0]["args"]["ps"]["send_wait_ns"] == 200 and steps[0]["args"]["ps"]["trans_bytes"] == 4096
    # The run's earliest event is a proxy row: the trace's time base comes from it.
    assert doc["baseTimeNanoseconds"] == T0 // 1_000_000_000 * 1_000_000_000
