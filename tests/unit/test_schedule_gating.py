"""Between a schedule's windows every collector pauses, not only CUPTI (CPU only).

The NCCL plugin is paused through its level (the plugin's own pause is tested with the
native harness in test_nccl_plugin.py), NVML through a fake pynvml, the host hooks through
the span buffer; what a warm-up recorded is dropped from every table.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from doctor_fakes import FakeNvml

import perfscope
from perfscope.collectors.nccl import env as nccl_env, recording as nccl_recording
from perfscope.collectors.nccl.env import PAUSED_VAR, PLUGIN_VAR, drop_warmup_operations
from perfscope.recorder.state import PerfscopeWarning

SCHEDULE = "wait=2,warmup=1,active=2,repeat=2"
# phases of steps 0-11 under SCHEDULE: off off warmup active active | off off warmup active active | off off
RUNNING = [False, False, True, True, True, False, False, True, True, True, False, False]


@pytest.fixture
def levels(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The levels the recorder sets on the plugin 'loaded' in this process (level 1 before)."""
    calls: list[int] = []
    current = [1]

    def set_level(level: int) -> int:
        calls.append(level)
        old, current[0] = current[0], level
        return old

    monkeypatch.setattr(nccl_recording, "set_level_in_process", set_level)
    for var in (PLUGIN_VAR, PAUSED_VAR, nccl_env.LEVEL_VAR, nccl_env.DIR_VAR):
        monkeypatch.delenv(var, raising=False)
    return calls


def test_the_nccl_plugin_is_paused_outside_the_windows(tmp_path: Path, levels: list[int]) -> None:
    # GIVEN a scheduled recording with the NCCL plugin set up for this process
    paused: list[bool] = []
    with perfscope.profile(tmp_path / "r", schedule=SCHEDULE, cupti=False, nvml=False) as prof:
        assert os.environ.get(PLUGIN_VAR)  # the plugin is set up
        for _ in range(12):
            paused.append(os.environ.get(PAUSED_VAR) == "1")
            prof.step()
    # THEN the plugin was paused through every off step (and would load paused in one),
    # resumed for each window's warm-up and active steps, and the environment is restored
    assert paused == [not r for r in RUNNING]
    assert levels == [0, 1, 0, 1, 0]
    assert PAUSED_VAR not in os.environ and PLUGIN_VAR not in os.environ
    assert "nccl_window" in perfscope.open_run(tmp_path / "r").rank_meta(0)["collectors"]


def test_the_nccl_gate_resumes_to_the_level_set_while_recording(tmp_path: Path, levels: list[int]) -> None:
    with perfscope.profile(tmp_path / "r", schedule="wait=1,active=1,repeat=2", cupti=False, nvml=False) as prof:
        prof.step()  # step 1: the window
        nccl_recording.set_level_in_process(3)  # raised by hand in it
        for _ in range(3):
            prof.step()
    assert levels == [0, 1, 3, 0, 3, 0]


def test_no_gate_without_perfscope_s_plugin(tmp_path: Path, levels: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLUGIN_VAR, "/opt/their/libnccl-profiler.so")  # the user's own plugin: never touched
    with pytest.warns(PerfscopeWarning, match="keeping it"), \
            perfscope.profile(tmp_path / "r", schedule=SCHEDULE, cupti=False, nvml=False) as prof:
        for _ in range(6):
            prof.step()
    assert levels == [] and PAUSED_VAR not in os.environ
    assert "nccl_window" not in perfscope.open_run(tmp_path / "r").rank_meta(0)["collectors"]


def test_nvml_samples_and_host_spans_only_inside_the_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN NVML (a fake) sampling every 100 ms and a host span in every step of 60 ms
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    with perfscope.profile(tmp_path / "r", schedule=SCHEDULE, cupti=False, nccl=False) as prof:
        for _ in range(12):
            t0 = time.time_ns()
            time.sleep(0.06)
            prof._spans.add(t0, "dataloader_wait", "DataLoader.__next__")
            prof.step()
    run = perfscope.open_run(tmp_path / "r")
    windows = [w for w in run.rank_meta(0)["windows"] if w["first_step"] is not None]
    assert len(windows) == 2
    stats = run.rank_meta(0)["collector_stats"]["nvml"]
    # THEN the sampler slept outside the windows: it looped in about 6 of the 12 steps
    assert 0 < stats["loops"] <= 0.72 / 0.1 + 3, stats
    # and every row left lies in a window (a sample under way at a pause: one read late)
    slack = 10_000_000
    for table, col in (("metrics", "ts_ns"), ("host", "start_ns")):
        ts = run.table(table)[col]
        assert len(ts), table
        inside = pd.concat([(ts >= w["start_ns"]) & (ts <= w["end_ns"] + slack) for w in windows], axis=1).any(axis=1)
        assert inside.all(), (table, ts[~inside].tolist(), windows)
    assert len(run.table("host")) == 4  # the active steps' spans only


def _ops(rows: list[tuple[int, int | None, int]]) -> dict[str, Any]:
    """collectives (seq, enqueue_ns, start_ns) of one communicator, one channel per operation,
    and a proxy row tied to no operation at each time."""
    seq = [r[0] for r in rows]
    return {
        "collectives": pd.DataFrame({"comm_id": "0x1", "func": "AllReduce", "seq": seq,
                                     "enqueue_ns": pd.array([r[1] for r in rows], dtype="Int64"),
                                     "start_ns": [r[2] for r in rows]}),
        "nccl_channels": pd.DataFrame({"comm_id": "0x1", "func": "AllReduce", "seq": seq,
                                       "host_start_ns": [r[2] + 500 for r in rows], "start_ns": [r[2] for r in rows]}),
        "proxy": pd.DataFrame({"comm_id": "0x1", "func": None, "seq": pd.array([None] * len(rows), dtype="Int64"),
                               "start_ns": [r[2] for r in rows]}),
    }


def test_warmup_operations_and_their_rows_are_dropped() -> None:
    # GIVEN operations enqueued before (1), in (2, 3) and after (4) a warm-up [100, 200);
    # op 3's GPU time falls after the warm-up, op 4's host time is unknown (GPU time decides)
    tables = _ops([(1, 50, 60), (2, 100, 150), (3, 199, 260), (4, None, 300)])
    out = drop_warmup_operations(tables, [(100, 200)])
    assert out["collectives"]["seq"].tolist() == [1, 4]
    assert out["nccl_channels"]["seq"].tolist() == [1, 4]  # joined on the operation
    assert out["proxy"]["start_ns"].tolist() == [60, 260, 300]  # no operation: host time decides
    # an open warm-up (end None) drops everything from its start; no warm-up keeps everything
    assert "collectives" not in drop_warmup_operations(_ops([(1, 150, 160)]), [(100, None)])
    assert drop_warmup_operations(tables, []) is tables
