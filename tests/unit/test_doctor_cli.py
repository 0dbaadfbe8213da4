"""`perfscope doctor`: table and --json output, exit codes with --strict."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from doctor_fakes import FakeNvml, make_tree

import perfscope.cli.doctor as doctor_cli
from perfscope.cli.main import main
from perfscope.collectors.host.checks import CHECK_IDS
from perfscope.doctor import diagnose, environment_for_run


@pytest.fixture
def fake_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Point the CLI at a fake machine whose only failure is a 64 MiB /dev/shm."""
    roots = make_tree(tmp_path)
    doc = diagnose(nvml=FakeNvml(), env={"NCCL_DEBGU": "INFO"}, **roots)
    doc["facts"]["memory"]["shm"] = {"path": "/dev/shm", "total_bytes": 64 << 20, "free_bytes": 64 << 20}
    from perfscope.collectors.host.checks import run_checks, summarize

    doc["checks"] = run_checks(doc["facts"])
    doc["summary"] = summarize(doc["checks"])
    monkeypatch.setattr(doctor_cli, "diagnose", lambda: doc)
    return doc


def test_json_shape(fake_machine: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"facts", "checks", "summary"}
    assert [c["id"] for c in out["checks"]] == list(CHECK_IDS)
    assert all(set(c) == {"id", "status", "message", "fix"} for c in out["checks"])
    statuses = {c["id"]: c["status"] for c in out["checks"]}
    assert statuses["memory.shm"] == "fail" and statuses["nccl.names"] == "warn"
    assert out["summary"]["fail"] == 1


def test_strict_exits_1_on_failure(fake_machine: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--strict"]) == 1
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "memory.shm" in out and "fail" in out and "--shm-size" in out


def test_strict_exits_0_without_failure(fake_machine: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    fake_machine["checks"] = [c for c in fake_machine["checks"] if c["status"] != "fail"]
    assert main(["doctor", "--strict", "--json"]) == 0


def test_environment_for_run_is_the_same_document() -> None:
    doc = environment_for_run()
    # The machine's checks, then perfscope's own install (its native libraries).
    assert set(doc) >= {"facts", "checks"} and [c["id"] for c in doc["checks"]] == [*CHECK_IDS, "perfscope.native"]
    json.dumps(doc)


def test_environment_for_run_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import perfscope.doctor as d

    def boom(**_: Any) -> dict[str, Any]:
        raise RuntimeError("no /proc")

    monkeypatch.setattr(d, "snapshot", boom)
    doc = d.environment_for_run()
    assert doc["checks"] == [] and "no /proc" in doc["facts"]["errors"][0]


def test_doctor_runs_here_as_a_command() -> None:
    # End to end on whatever machine runs the tests (CI: no GPU, no root).
    proc = subprocess.run([sys.executable, "-m", "perfscope", "doctor", "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [c["id"] for c in doc["checks"]] == [*CHECK_IDS, "perfscope.native"]
