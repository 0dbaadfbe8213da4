"""GPU tests of schedules and on-demand windows (marked gpu; run on the device machine).

They record tests/gpu/schedule_workload.py (one rank) or schedule_nccl_workload.py (two
ranks on one GPU, with NCCL), whose steps synchronise and then idle a few ms, so a kernel,
a collective or an NVML sample recorded outside a window would start outside every
window's host range.  When ``$OUT`` is set the runs are kept under ``$OUT/schedule_gpu/``.
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
NCCL_WORKLOAD = Path(__file__).resolve().parent / "schedule_nccl_workload.py"
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


def _windows(run: Any, rank: int = 0) -> list[dict[str, Any]]:
    return [w for w in run.rank_meta(rank)["windows"] if w["first_step"] is not None]


def _outside(times: Any, windows: list[dict[str, Any]], slack_ns: int = SLACK_NS) -> Any:
    """The ``times`` (int64 ns) that lie in no window's host range (give or take ``slack_ns``)."""
    t = np.asarray(times, dtype=np.int64)
    inside = np.zeros(len(t), dtype=bool)
    for w in windows:
        inside |= (t >= w["start_ns"] - slack_ns) & (t <= w["end_ns"] + slack_ns)
    return t[~inside]


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


@pytest.mark.parametrize("detach", [False, True], ids=["disabled", "detached"])
def test_scheduled_recording_holds_no_kernels_outside_its_windows(base: Path, detach: bool) -> None:
    """Every window holds its kernels, none lies outside; detached (the default) CUPTI is
    finalized at each window's end and attached again for the next one; with
    PERFSCOPE_CUPTI_DETACH=0 it stays attached, disabled."""
    out = base / f"scheduled{'_detach' if detach else ''}.perfscope"
    proc = subprocess.run([sys.executable, "-m", "perfscope", "record", "-o", str(out), "--force", "--no-nccl",
                           "--schedule", "wait=3,warmup=1,active=2,repeat=0", "--",
                           sys.executable, str(WORKLOAD), "--steps", "20"],
                          capture_output=True, text=True, timeout=300,
                          env={**_env(), "PERFSCOPE_CUPTI_DETACH": "1" if detach else "0"})
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
    assert (stats["detaches"] >= 3) if detach else (stats["detaches"] == 0), stats


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


def test_scheduled_nccl_job_holds_no_collectives_or_samples_outside_its_windows(base: Path) -> None:
    """Issue 16: the NCCL plugin and the NVML sampler pause between windows too."""
    import shutil

    out = base / "scheduled_nccl.perfscope"
    env = {k: v for k, v in _env().items() if not k.startswith(("NCCL_PROFILER", "PERFSCOPE_NCCL"))}
    proc = subprocess.run([sys.executable, "-m", "perfscope", "record", "-o", str(out), "--force",
                           "--schedule", "wait=3,warmup=1,active=2,repeat=0", "--",
                           shutil.which("torchrun") or "torchrun", "--standalone", "--nproc-per-node", "2",
                           # steps of 60 ms: a window of 2 active steps then spans more than one
                           # NVML interval (0.1 s), so a sample lands in every window
                           str(NCCL_WORKLOAD), "--steps", "20", "--gap-ms", "60"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = perfscope.open_run(out)
    coll, channels = run.table("collectives"), run.table("nccl_channels")
    for rank in (0, 1):
        windows = _windows(run, rank)
        assert [(w["first_step"], w["last_step"]) for w in windows] == [(4, 5), (10, 11), (16, 17)]
        assert "nccl_window" in run.rank_meta(rank)["collectors"]
        mine = coll[coll["rank"] == rank]
        # THEN one all_reduce per active step: none from the waits (the first, which created the
        # communicator, included) nor from the warm-ups
        assert mine["func"].astype(str).tolist() == ["AllReduce"] * 6, mine[["func", "seq", "enqueue_ns"]]
        assert not len(_outside(mine["enqueue_ns"], windows)), (mine["enqueue_ns"].tolist(), windows)
        assert not len(_outside(run.table("host").query("rank == @rank")["start_ns"], windows))
        ch = channels[channels["rank"] == rank]
        assert len(ch) and set(ch["seq"]) <= set(mine["seq"])
        if "nvml" in run.rank_meta(rank)["collectors"]:
            ts = run.table("metrics").query("rank == @rank")["ts_ns"]
            assert len(ts), windows
            assert not len(_outside(ts, windows, slack_ns=50_000_000)), windows  # one NVML read late at most
    # the ranks recorded the same operations
    assert sorted(coll[coll["rank"] == 0]["seq"]) == sorted(coll[coll["rank"] == 1]["seq"])
