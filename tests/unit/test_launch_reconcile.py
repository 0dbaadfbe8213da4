"""The launcher's last word on each rank file (`perfscope.launch.reconcile_ranks`), on
synthetic runs: which ranks it marks, with what reason, and which it leaves alone."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from perfscope.launch import reconcile_ranks
from perfscope.store.meta import create_run, write_rank_meta


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _run(tmp_path: Path, ranks: dict[int, dict[str, Any]]) -> Path:
    out = tmp_path / "run"
    create_run(out, command=["python", "x.py"], durable=False)
    for rank, info in ranks.items():
        write_rank_meta(out, rank, {"host": socket.gethostname(), **info}, durable=False)
    return out


def _rank(out: Path, rank: int) -> dict[str, Any]:
    return json.loads((out / "ranks" / f"rank-{rank}.json").read_text())


def test_each_rank_is_settled_by_how_its_process_ended(tmp_path: Path) -> None:
    command, gone = _gone_pid(), _gone_pid()
    out = _run(tmp_path, {
        0: {"pid": command, "status": "recording"},            # the command, killed by SIGKILL
        1: {"pid": gone, "status": "recording"},               # a rank under it, gone without a word
        2: {"pid": os.getpid(), "status": "recording"},        # still running (a daemon): left alone
        3: {"pid": gone, "status": "recording", "host": "elsewhere"},  # another host: cannot tell
        4: {"pid": gone, "status": "incomplete", "stop_reason": "SIGTERM"},
        5: {"pid": gone, "status": "complete"},
    })
    notes = reconcile_ranks(out, command, -signal.SIGKILL)
    assert _rank(out, 0)["status"] == "incomplete"
    assert _rank(out, 0)["stop_reason"] == "killed (SIGKILL) before its last flush"
    assert _rank(out, 1)["status"] == "incomplete"
    assert _rank(out, 1)["stop_reason"] == "killed (SIGKILL or out of memory) before its last flush"
    assert _rank(out, 1)["pid"] == gone and _rank(out, 1)["host"] == socket.gethostname()  # still the rank's own
    assert [_rank(out, r)["status"] for r in (2, 3, 4, 5)] == ["recording", "recording", "incomplete", "complete"]
    assert _rank(out, 4)["stop_reason"] == "SIGTERM"
    assert notes == ["rank 0 was killed (SIGKILL) before its last flush",
                     "rank 1 was killed (SIGKILL or out of memory) before its last flush"]


def test_the_commands_rank_killed_after_a_clean_stop_is_incomplete(tmp_path: Path) -> None:
    command = _gone_pid()
    out = _run(tmp_path, {0: {"pid": command, "status": "complete"}})
    assert reconcile_ranks(out, command, -signal.SIGINT) == ["rank 0: SIGINT ended the process after its recorder stopped"]
    assert _rank(out, 0)["status"] == "incomplete"


def test_a_command_that_exited_by_itself_changes_no_complete_rank(tmp_path: Path) -> None:
    command = _gone_pid()
    out = _run(tmp_path, {0: {"pid": command, "status": "complete"}})
    assert reconcile_ranks(out, command, 3) == []
    assert _rank(out, 0)["status"] == "complete"


def test_a_damaged_rank_file_is_left_to_the_reader(tmp_path: Path) -> None:
    out = _run(tmp_path, {})
    (out / "ranks").mkdir(exist_ok=True)
    (out / "ranks" / "rank-0.json").write_text("{not json")
    assert reconcile_ranks(out, _gone_pid(), -signal.SIGKILL) == []
    assert (out / "ranks" / "rank-0.json").read_text() == "{not json"
