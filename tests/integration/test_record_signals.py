"""`perfscope record`: rank and run status agree however the job ends (issue #20).

The rule (docs/reliability.md, "Recording and signals"): a rank is ``complete`` when its
process ended by itself, else ``incomplete`` with a ``stop_reason``; the run is
``complete`` when the command exited by itself and every rank is ``complete``.  Each test
checks ``run.json`` as written, each rank file, and what ``open_run`` reads.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import perfscope
from test_record_e2e import MARKER_SCRIPT, RECORD, _env, _rows_on_disk, _wait_for

CPU_ONLY = ["--no-cupti", "--no-nccl", "--no-nvml"]
TIMEOUT_S = 60


def _statuses(out: Path) -> tuple[str, dict[int, dict[str, object]]]:
    """(run.json's own status, {rank: rank file}) after checking they agree with the rule."""
    written = json.loads((out / "run.json").read_text())["status"]
    ranks = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in (out / "ranks").glob("rank-*.json")}
    assert ranks, "no rank file"
    assert all(r["status"] in ("complete", "incomplete") for r in ranks.values()), ranks
    assert (written == "complete") == all(r["status"] == "complete" for r in ranks.values()), (written, ranks)
    assert perfscope.open_run(out).status == written
    return written, ranks


def _start(tmp_path: Path, script: str, *command_prefix: str, flush: str = "600") -> tuple[subprocess.Popen[str], int]:
    (tmp_path / "s.py").write_text(script)
    ready = tmp_path / "pid"
    cmd = [*RECORD, "-o", str(tmp_path / "run"), "--flush-interval", flush, *CPU_ONLY, "--",
           *command_prefix, sys.executable, str(tmp_path / "s.py"), str(ready)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        return proc, int(_wait_for(ready, TIMEOUT_S))
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def _finish(proc: subprocess.Popen[str]) -> str:
    try:
        return proc.communicate(timeout=TIMEOUT_S)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def test_sigint_marks_the_rank_incomplete_like_the_run(tmp_path: Path) -> None:
    # GIVEN a recorded script that never catches KeyboardInterrupt
    proc, _ = _start(tmp_path, MARKER_SCRIPT.format(n=5, sleep=60))
    # WHEN Ctrl-C reaches the launcher (no terminal here: it forwards SIGINT to the command)
    proc.send_signal(signal.SIGINT)
    err = _finish(proc)
    # THEN the process died of SIGINT, everything was flushed, and rank and run both say incomplete
    assert proc.returncode == 128 + signal.SIGINT, err
    status, ranks = _statuses(tmp_path / "run")
    assert status == "incomplete"
    assert ranks[0]["status"] == "incomplete" and "SIGINT" in str(ranks[0]["stop_reason"])
    assert perfscope.open_run(tmp_path / "run").row_counts()["markers"] == 5


def test_a_caught_keyboard_interrupt_is_a_complete_run(tmp_path: Path) -> None:
    # GIVEN a program that handles Ctrl-C itself and exits normally
    script = MARKER_SCRIPT.format(n=3, sleep=0).replace(
        "time.sleep(0)", "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('caught')")
    proc, _ = _start(tmp_path, script)
    proc.send_signal(signal.SIGINT)
    err = _finish(proc)
    # THEN it ended by itself: rank and run complete
    assert proc.returncode == 0, err
    status, ranks = _statuses(tmp_path / "run")
    assert status == "complete" and ranks[0]["status"] == "complete"


def _kill_after_flush(proc: subprocess.Popen[str], pid: int, out: Path, rows: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and _rows_on_disk(out / "markers") < rows:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def test_sigkill_of_the_command_marks_its_rank_incomplete(tmp_path: Path) -> None:
    # GIVEN a recorded script flushing every 0.1 s WHEN it is killed with SIGKILL
    proc, pid = _start(tmp_path, MARKER_SCRIPT.format(n=7, sleep=60), flush="0.1")
    _kill_after_flush(proc, pid, tmp_path / "run", 7)
    err = _finish(proc)
    assert proc.returncode == 128 + signal.SIGKILL, err
    # THEN its rank no longer says `recording`: the launcher marked it, with the signal
    status, ranks = _statuses(tmp_path / "run")
    assert status == "incomplete"
    assert ranks[0]["status"] == "incomplete"
    assert ranks[0]["stop_reason"] == "killed (SIGKILL) before its last flush"
    assert perfscope.open_run(tmp_path / "run").row_counts()["markers"] == 7


def test_sigkill_of_a_rank_under_a_surviving_launcher_marks_both_incomplete(tmp_path: Path) -> None:
    # GIVEN a shell that runs the recorded rank and then exits 0 by itself
    proc, pid = _start(tmp_path, MARKER_SCRIPT.format(n=4, sleep=60), "sh", "-c", '"$@"; exit 0', "sh", flush="0.1")
    # WHEN the rank (not the command) is killed with SIGKILL
    _kill_after_flush(proc, pid, tmp_path / "run", 4)
    err = _finish(proc)
    assert proc.returncode == 0, err
    # THEN the command exited normally, but the killed rank makes the run incomplete too
    status, ranks = _statuses(tmp_path / "run")
    assert status == "incomplete"
    assert ranks[0]["status"] == "incomplete"
    assert str(ranks[0]["stop_reason"]).startswith("killed (") and "before its last flush" in str(ranks[0]["stop_reason"])
    assert "rank 0 was killed" in err
