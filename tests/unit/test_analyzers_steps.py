"""Step windows: sources, GPU extension, clipping, whole-run fallback."""
from __future__ import annotations

import pandas as pd

from perfscope.analyzers.steps import step_windows

E = pd.DataFrame


def _empty(cols: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})


STEPS_COLS = ["rank", "step", "start_ns", "dur_ns", "name", "source"]
MARK_COLS = ["rank", "start_ns", "dur_ns", "name", "device"]
HOST_COLS = ["rank", "start_ns", "dur_ns", "kind", "name"]
API_COLS = ["rank", "start_ns", "dur_ns", "correlation", "name"]
GPU_COLS = ["rank", "start_ns", "end_ns", "correlation"]


def test_profiler_steps_extend_to_launched_gpu_work_and_clip() -> None:
    steps = E({"rank": [0, 0], "step": [1, 2], "start_ns": [0, 100], "dur_ns": [50, 50], "name": ["ProfilerStep#1", "ProfilerStep#2"], "source": "profiler_step"})
    api = E({"rank": [0, 0, 0], "start_ns": [10, 40, 110], "dur_ns": [1, 1, 1], "correlation": [1, 2, 3], "name": "cudaLaunchKernel"})
    gpu = E({"rank": [0, 0, 0], "start_ns": [20, 60, 120], "end_ns": [30, 90, 300], "correlation": [1, 2, 3]})
    r = step_windows(steps, _empty(MARK_COLS), _empty(HOST_COLS), api, gpu, [0])
    w = r.windows
    # step 1 ends when its last kernel (launched at 40) ends at 90; step 2 extends to 300.
    assert w["start_ns"].tolist() == [0, 100]
    assert w["end_ns"].tolist() == [90, 300]
    assert not r.warnings


def test_windows_follow_a_lagging_gpu_without_overlap() -> None:
    # GIVEN three host steps whose GPU work runs long after the host moved on
    steps = E({"rank": 0, "step": [1, 2, 3], "start_ns": [0, 100, 200], "dur_ns": [50, 50, 50], "name": ["a", "b", "c"], "source": "explicit"})
    api = E({"rank": 0, "start_ns": [40, 140, 240], "dur_ns": 1, "correlation": [7, 8, 9], "name": "cudaLaunchKernel"})
    gpu = E({"rank": 0, "start_ns": [60, 170, 290], "end_ns": [170, 290, 400], "correlation": [7, 8, 9]})
    w = step_windows(steps, _empty(MARK_COLS), _empty(HOST_COLS), api, gpu, [0]).windows
    # THEN each step starts where the previous one's GPU work ended (tb_plugin's rule)
    assert list(zip(w["start_ns"], w["end_ns"])) == [(0, 170), (170, 290), (290, 400)]


def test_explicit_preferred_over_profiler_step() -> None:
    steps = E({"rank": [0, 0], "step": [5, 1], "start_ns": [0, 3], "dur_ns": [10, 4], "name": ["ProfilerStep#5", "step"], "source": ["profiler_step", "explicit"]})
    w = step_windows(steps, _empty(MARK_COLS), _empty(HOST_COLS), _empty(API_COLS), _empty(GPU_COLS), [0]).windows
    assert w["source"].tolist() == ["explicit"] and w["step"].tolist() == [1]


def test_pattern_over_markers() -> None:
    markers = E({"rank": [0, 0, 0], "start_ns": [0, 5, 10], "dur_ns": [10, 1, 10], "name": ["iter 7", "fwd", "iter 8"], "device": pd.array([None, None, None], dtype="Int32")})
    w = step_windows(_empty(STEPS_COLS), markers, _empty(HOST_COLS), _empty(API_COLS), _empty(GPU_COLS), [0], step_pattern=r"^iter \d+").windows
    assert w["step"].tolist() == [7, 8] and w["source"].tolist() == ["pattern", "pattern"]


def test_optimizer_spans_make_windows() -> None:
    host = E({"rank": [0, 0, 0], "start_ns": [10, 30, 60], "dur_ns": [5, 5, 5], "kind": "optimizer_step", "name": "Adam.step"})
    w = step_windows(_empty(STEPS_COLS), _empty(MARK_COLS), host, _empty(API_COLS), _empty(GPU_COLS), [0]).windows
    assert list(zip(w["start_ns"], w["end_ns"])) == [(15, 35), (35, 65)]


def test_no_steps_whole_run_with_warning() -> None:
    gpu = E({"rank": [0, 0], "start_ns": [5, 50], "end_ns": [20, 80], "correlation": [1, 2]})
    api = E({"rank": [0], "start_ns": [1], "dur_ns": [2], "correlation": [1], "name": "cudaLaunchKernel"})
    r = step_windows(_empty(STEPS_COLS), _empty(MARK_COLS), _empty(HOST_COLS), api, gpu, [0])
    assert r.windows[["start_ns", "end_ns"]].values.tolist() == [[1, 80]]
    assert r.warnings and "whole run" in r.warnings[0]
