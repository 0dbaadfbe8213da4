"""A scheduled or on-demand recording drives its window collectors (CPU only, fake collectors)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

import perfscope
from perfscope.collectors import registry
from perfscope.collectors.base import CollectorContext, CollectorSpec, CollectorStats
from perfscope.recorder.trigger import RequestPoller, request_windows, write_request
from perfscope.errors import UsageError

CPU_ONLY = {"cupti": False, "nccl": False, "nvml": False}
EVENTS: list[str] = []


class PausableToy:
    """Writes one row per flush while running (``start_ns`` = now), counts pauses."""

    def __init__(self) -> None:
        self.ctx: CollectorContext | None = None
        self.paused = False

    def start(self, ctx: CollectorContext) -> bool:
        self.ctx = ctx
        EVENTS.append("start")
        return True

    def pause(self) -> None:
        self.paused = True
        EVENTS.append("pause")

    def resume(self) -> None:
        self.paused = False
        EVENTS.append("resume")

    def record(self, t_ns: int) -> None:
        assert self.ctx is not None and self.ctx.writer is not None
        if not self.paused:
            self.ctx.writer.append("markers", {"start_ns": [t_ns], "dur_ns": [1], "name": ["toy"], "tid": [0]})

    def flush(self) -> None:
        pass

    def stop(self) -> CollectorStats:
        EVENTS.append("stop")
        return CollectorStats()


TOYS: list[PausableToy] = []


def _make() -> PausableToy:
    toy = PausableToy()
    TOYS.append(toy)
    return toy


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = CollectorSpec("toy", f"{__name__}:_make", "window", option="host_hooks", pausable=True)
    monkeypatch.setattr(registry, "REGISTRY", (*registry.REGISTRY, spec))
    EVENTS.clear()
    TOYS.clear()


def test_pausable_collector_starts_once_and_is_paused_between_windows(tmp_path: Path, toy: None) -> None:
    # GIVEN wait=2, warmup=1, active=2, repeat=2 and a collector that writes one row per step
    with perfscope.profile(tmp_path / "r", schedule="wait=2,warmup=1,active=2,repeat=2", **CPU_ONLY) as prof:
        assert EVENTS == ["start", "pause"]  # started with the recording, paused through the wait
        for _ in range(12):
            TOYS[0].record(time.time_ns())
            prof.step()
    # THEN it ran in warm-up and active steps only, never restarted
    assert EVENTS == ["start", "pause", "resume", "pause", "resume", "pause", "stop"]
    run = perfscope.open_run(tmp_path / "r")
    assert run.table("steps")["step"].tolist() == [3, 4, 8, 9]
    # its warm-up rows (steps 2 and 7) were dropped: only the active steps' rows are left
    assert len(run.table("markers")) == 4
    meta = run.rank_meta(0)
    assert meta["schedule"] == {"skip": 0, "record": 2, "wait": 2, "warmup": 1, "repeat": 2}
    assert [(w["first_step"], w["last_step"]) for w in meta["windows"]] == [(3, 4), (8, 9)]
    assert perfscope.open_run(tmp_path / "r").meta["schedule"]["wait"] == 2


def test_schedule_whose_window_is_never_reached_says_so(tmp_path: Path, toy: None) -> None:
    with perfscope.profile(tmp_path / "r", schedule="wait=50,active=2", **CPU_ONLY) as prof:
        for _ in range(3):
            prof.step()
    warnings = perfscope.open_run(tmp_path / "r").rank_meta(0)["warnings"]
    assert any("first window was not reached in the 3 steps seen: nothing was recorded" in w for w in warnings)


def test_on_demand_request_opens_one_window_in_the_running_profiler(tmp_path: Path, toy: None) -> None:
    with perfscope.profile(tmp_path / "od", schedule="on-demand", flush_interval_s=60, **CPU_ONLY) as prof:
        for _ in range(4):
            prof.step()
        assert EVENTS == ["start", "pause"]
        req = write_request(tmp_path / "od", 3, warmup=1)
        for _ in range(10):
            TOYS[0].record(time.time_ns())
            prof.step()
        prof.flush()
        # the rank reports the window under the request's id
        win = request_windows(tmp_path / "od", req["id"])[0]
        assert (win["first_step"], win["last_step"]) == (6, 8)
    assert EVENTS == ["start", "pause", "resume", "pause", "stop"]
    run = perfscope.open_run(tmp_path / "od")
    assert run.table("steps")["step"].tolist() == [6, 7, 8]
    assert len(run.table("markers")) == 3


def test_trigger_requests_refused_for_runs_that_take_none(tmp_path: Path) -> None:
    with perfscope.profile(tmp_path / "all", **CPU_ONLY) as prof:
        prof.step()
        with pytest.raises(UsageError, match="not recorded with `perfscope record --on-demand`"):
            write_request(tmp_path / "all", 5)
    with perfscope.profile(tmp_path / "od", schedule="on-demand", **CPU_ONLY) as prof:
        with pytest.raises(UsageError, match="--steps must be at least 1"):
            write_request(tmp_path / "od", 0)
    with pytest.raises(UsageError, match="has ended"):
        write_request(tmp_path / "od", 5)


def test_poller_returns_each_request_once_in_order(tmp_path: Path) -> None:
    with perfscope.profile(tmp_path / "od", schedule="on-demand", **CPU_ONLY):
        poller = RequestPoller(tmp_path / "od")
        assert poller.poll() == []
        a = write_request(tmp_path / "od", 2)
        b = write_request(tmp_path / "od", 3, warmup=0, align=10)  # same mtime tick, most likely
        got = poller.poll()
        assert [(r["id"], r["steps"], r["warmup"], r["align"]) for r in got] == [(a["id"], 2, 1, 1), (b["id"], 3, 0, 10)]
        assert poller.poll() == []
        (tmp_path / "od" / "control" / "trigger-0-bad.json").write_text("{not json")
        assert poller.poll() == []


SEEN_AT_JOB_STOP: list[object] = []


class WindowReader:
    """A job-wide collector like the CUPTI decoder: reads the rank file's windows when it stops."""

    def start(self, ctx: CollectorContext) -> bool:
        self.ctx = ctx
        return True

    def flush(self) -> None:
        pass

    def stop(self) -> CollectorStats:
        from perfscope._steps import settled_warmups
        from perfscope.store.meta import rank_meta_path, read_json

        windows = read_json(rank_meta_path(self.ctx.run_path, 0)).get("windows") or []
        SEEN_AT_JOB_STOP.append(settled_warmups(windows))
        return CollectorStats()


def test_job_collectors_read_the_final_windows_when_they_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a short block (no periodic flush in it): the decoder still learns where the warm-up ended
    spec = CollectorSpec("reader", f"{__name__}:WindowReader", "job", option="host_hooks")
    monkeypatch.setattr(registry, "REGISTRY", (*registry.REGISTRY, spec))
    SEEN_AT_JOB_STOP.clear()
    with perfscope.profile(tmp_path / "r", schedule="wait=2,warmup=1,active=2", flush_interval_s=60, **CPU_ONLY) as prof:
        for _ in range(6):
            prof.step()
    (warmups,) = SEEN_AT_JOB_STOP
    assert len(warmups) == 1 and warmups[0][0] < warmups[0][1]  # type: ignore[index]


def test_a_recording_never_loads_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas at its first ``pa.array`` (~33 MB more RSS in the training process):
    a recording builds its columns from buffers instead, warm-up rows dropped from an Arrow
    table included (what the in-process CUPTI decoder hands the writer).  In a fresh process."""
    import subprocess
    import sys

    code = f"""
import sys
import numpy as np, pyarrow as pa
import perfscope
from perfscope._steps import drop_rows
from perfscope.store.arrays import from_numpy
t = pa.Table.from_arrays([from_numpy(np.arange(10, dtype=np.int64))], names=["start_ns"])  # pa.table would load pandas
kept, n = drop_rows(t, [(2, 5)])
assert n == 3 and kept.column("start_ns").to_pylist() == [0, 1, 5, 6, 7, 8, 9], kept
with perfscope.profile({str(tmp_path / "run.perfscope")!r}, schedule="wait=1,warmup=1,active=2,repeat=1",
                       cupti=False, nccl=False, nvml=False) as prof:
    for _ in range(6):
        with perfscope.annotate("work"):
            pass
        prof.step()
assert "pandas" not in sys.modules, "a recording imported pandas"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
    steps = perfscope.open_run(tmp_path / "run.perfscope").table("steps")
    assert len(steps) == 2  # the window's two active steps were written
