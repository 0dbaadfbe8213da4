"""GPU tests of schedules and on-demand windows (marked gpu; run on the device machine).

Both record tests/gpu/schedule_workload.py, whose steps synchronise and then idle a few
ms, so a kernel that CUPTI recorded outside a window would start outside every window's
host range.  When ``$OUT`` is set the runs are kept under ``$OUT/schedule_gpu/``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import perfscope

pytestmark = pytest.mark.gpu
WORKLOAD = Path(__file__).resolve().parent / "schedule_workload.py"
SLACK_NS = 1_000_000  # clock conversion between CUPTI's and the host's timestamps


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = os.environ.get("OUT")
    path = Path(out) / "schedule_gpu" if out else tmp_path_factory.mktemp("schedule_gpu")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for k in ("PERFSCOPE_RUN_DIR", "PERFSCOPE_OWNER", "PERFSCOPE_SCHEDULE"):
        env.pop(k, None)
    return env


def _windows(run: Any) -> list[dict[str, Any]]:
    return [w for w in run.rank_meta(0)["windows"] if w["first_step"] is not None]


def _check_inside(run: Any, windows: list[dict[str, Any]]) -> dict[int, int]:
    """Assert every kernel and API call starts inside a window; return kernels per window."""
    per: dict[int, int] = {}
    for table in ("kernels", "api"):
        starts = run.table(table)["start_ns"].to_numpy(np.int64)
        assert len(starts), f"no {table} recorded"
        where = np.full(len(starts), -1)
        for i, w in enumerate(windows):
            inside = (starts >= w["start_ns"] - SLACK_NS) & (starts <= w["end_ns"] + SLACK_NS)
            where[inside] = i
        outside = starts[where < 0]
        assert not len(outside), f"{len(outside)} {table} rows outside the windows {windows}: {outside[:5]}"
        if table == "kernels":
            per = {i: int((where == i).sum()) for i in range(len(windows))}
    return per


def test_scheduled_recording_holds_no_kernels_outside_its_windows(base: Path) -> None:
    out = base / "scheduled.perfscope"
    proc = subprocess.run([sys.executable, "-m", "perfscope", "record", "-o", str(out), "--force", "--no-nccl",
                           "--schedule", "wait=3,warmup=1,active=2,repeat=0", "--",
                           sys.executable, str(WORKLOAD), "--steps", "20"],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = perfscope.open_run(out)
    windows = _windows(run)
    # cycles of 6 steps: active steps 4-5, 10-11, 16-17
    assert [(w["first_step"], w["last_step"]) for w in windows] == [(4, 5), (10, 11), (16, 17)]
    assert run.table("steps")["step"].tolist() == [4, 5, 10, 11, 16, 17]
    per = _check_inside(run, windows)
    assert min(per.values()) > 0 and max(per.values()) <= 2 * min(per.values()), per  # every window alike
    stats = run.rank_meta(0)["collector_stats"]["cupti"]
    assert stats["api_source"] == "callback", stats
    assert sum(stats["dropped"].values()) == 0, stats["dropped"]


def test_on_demand_trigger_opens_exactly_one_window_of_n_steps(base: Path) -> None:
    out, ready, stop = base / "on_demand.perfscope", base / "od.ready", base / "od.stop"
    for f in (ready, stop):
        f.unlink(missing_ok=True)
    job = subprocess.Popen([sys.executable, "-m", "perfscope", "record", "-o", str(out), "--force", "--no-nccl",
                            "--on-demand", "--flush-interval", "0.2", "--",
                            sys.executable, str(WORKLOAD), "--steps", "100000", "--ready", str(ready), "--stop", str(stop)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert time.monotonic() < deadline and job.poll() is None, "the job never started its loop"
            time.sleep(0.05)
        time.sleep(0.5)  # some steps with nothing recorded
        trig = subprocess.run([sys.executable, "-m", "perfscope", "trigger", str(out), "--steps", "4", "--wait", "60"],
                              capture_output=True, text=True, timeout=120, env=_env())
        time.sleep(0.5)  # and some after
    finally:
        stop.write_text("1")
        _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-4000:]
    assert trig.returncode == 0, trig.stderr + trig.stdout
    run = perfscope.open_run(out)
    windows = _windows(run)
    assert len(windows) == 1 and windows[0]["last_step"] - windows[0]["first_step"] == 3, windows
    first, last = windows[0]["first_step"], windows[0]["last_step"]
    assert f"rank 0: recorded steps {first}-{last}" in trig.stdout
    assert run.table("steps")["step"].tolist() == list(range(first, last + 1))
    per = _check_inside(run, windows)
    assert per[0] > 0
