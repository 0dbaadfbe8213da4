"""`perfscope record --schedule/--on-demand` and `perfscope trigger` end to end (CPU only)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import perfscope
from perfscope.cli.main import main

RECORD = [sys.executable, "-m", "perfscope", "record"]
TRIGGER = [sys.executable, "-m", "perfscope", "trigger"]
CPU_ONLY = ["--no-cupti", "--no-nccl", "--no-nvml"]

# A job that loops until told to stop: steps through a perfscope.profile that joins the
# `record` run, one annotate range per step (markers are kept in recorded steps only).
LOOP = """
import sys, time
from pathlib import Path
import perfscope
with perfscope.profile("unused") as prof:
    Path(sys.argv[1]).write_text("ready")
    for i in range({max_steps}):
        if Path(sys.argv[2]).exists():
            break
        with perfscope.annotate(f"it{{i}}"):
            time.sleep(0.003)
        prof.step()
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for k in ("PERFSCOPE_RUN_DIR", "PERFSCOPE_OWNER", "PERFSCOPE_SCHEDULE"):
        env.pop(k, None)
    return env


def _wait_for(path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.02)


def test_on_demand_job_records_only_the_triggered_windows(tmp_path: Path) -> None:
    # GIVEN a job recorded with --on-demand, running
    script, ready, stop, out = tmp_path / "loop.py", tmp_path / "ready", tmp_path / "stop", tmp_path / "od.perfscope"
    script.write_text(LOOP.format(max_steps=20000))
    job = subprocess.Popen([*RECORD, "-o", str(out), "--on-demand", "--flush-interval", "0.2", *CPU_ONLY, "--",
                            sys.executable, str(script), str(ready), str(stop)],
                           cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(ready)
        time.sleep(0.3)
        # WHEN a window of 5 steps is triggered by run folder, then one of 3 by the launcher's pid
        first = subprocess.run([*TRIGGER, str(out), "--steps", "5", "--wait", "30"], env=_env(),
                               capture_output=True, text=True, timeout=60)
        second = subprocess.run([*TRIGGER, str(job.pid), "--steps", "3", "--warmup", "0", "--wait", "30"], env=_env(),
                                capture_output=True, text=True, timeout=60)
    finally:
        stop.write_text("1")
        _, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    assert "armed; open a window with: perfscope trigger" in err
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    # THEN each trigger says which steps were recorded, and the run holds exactly those
    w1 = [int(x) for x in first.stdout.split("recorded steps ")[1].split()[0].split("-")]
    w2 = [int(x) for x in second.stdout.split("recorded steps ")[1].split()[0].split("-")]
    assert w1[1] - w1[0] + 1 == 5 and w2[1] - w2[0] + 1 == 3 and w2[0] > w1[1]
    run = perfscope.open_run(out)
    expected = list(range(w1[0], w1[1] + 1)) + list(range(w2[0], w2[1] + 1))
    assert run.table("steps")["step"].tolist() == expected
    assert sorted(run.table("markers")["name"].astype(str).tolist()) == sorted(f"it{i}" for i in expected)
    meta = run.rank_meta(0)
    assert meta["schedule"] == {"skip": 0, "record": None, "on_demand": True}
    assert [(w["first_step"], w["last_step"]) for w in meta["windows"]] == [tuple(w1), tuple(w2)]


def test_scheduled_record_keeps_only_active_steps(tmp_path: Path) -> None:
    script, out = tmp_path / "loop.py", tmp_path / "s.perfscope"
    script.write_text(LOOP.format(max_steps=14))
    res = subprocess.run([*RECORD, "-o", str(out), "--schedule", "wait=2,warmup=1,active=2,repeat=2", *CPU_ONLY, "--",
                          sys.executable, str(script), str(tmp_path / "ready"), str(tmp_path / "never")],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    run = perfscope.open_run(out)
    # steps are counted from the attached profile's start: the cycle is steps 0-4, 5-9
    assert run.table("steps")["step"].tolist() == [3, 4, 8, 9]
    assert sorted(run.table("markers")["name"].astype(str).tolist()) == ["it3", "it4", "it8", "it9"]
    assert run.meta["schedule"]["wait"] == 2


@pytest.mark.parametrize("args, says", [
    (["--schedule", "wait=1,warmup=1"], "active must be given"),
    (["--schedule", "wait=1,active=2", "--on-demand"], "--schedule and --on-demand exclude each other"),
    (["--schedule", "wait=x,active=2"], "wait must be a non-negative integer"),
])
def test_record_refuses_bad_schedules_before_running_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               args: list[str], says: str) -> None:
    code = main(["record", "-o", str(tmp_path / "r"), *args, "--", sys.executable, "-c", "pass"])
    err = capsys.readouterr().err
    assert code == 2 and says in err
    assert not (tmp_path / "r").exists()


def test_trigger_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trigger", str(tmp_path), "--steps", "2"]) == 2
    assert "is not a perfscope run" in capsys.readouterr().err
    assert main(["trigger", "nonsense", "--steps", "2"]) == 2
    assert "neither a run folder nor a process id" in capsys.readouterr().err
    assert main(["trigger", str(os.getpid()), "--steps", "2"]) == 2
    assert "is not recorded by `perfscope record`" in capsys.readouterr().err
    with perfscope.profile(tmp_path / "all", cupti=False, nccl=False, nvml=False) as prof:
        prof.step()
    assert main(["trigger", str(tmp_path / "all"), "--steps", "2"]) == 2
    assert "was not recorded with `perfscope record --on-demand`" in capsys.readouterr().err
