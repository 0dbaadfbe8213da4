"""`perfscope recover` and the automatic recovery of `info`: a run whose job was killed
(launcher and decoder too) with CUPTI segments left undecoded under raw/.

The segments are written by the native sink's own writer (records fed without CUPTI, as
in tests/unit/test_cupti_segments.py); the run's metadata says what a killed job leaves:
``recording`` everywhere, written by processes that are gone.
"""
from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path

import pytest

import perfscope
from perfscope.cli.main import main
from perfscope.collectors.cupti import cbids, layouts, segments
from perfscope.store import create_run, update_run, write_rank_meta
from tests.unit.test_cupti_sink import _api, _kernel, sink  # noqa: F401 - the sink fixture

LAUNCH = next(k for k, v in cbids.RUNTIME.items() if v == "cudaLaunchKernel")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def killed_run(sink, tmp_path: Path) -> Path:  # noqa: F811
    """A run as `perfscope record` leaves it after kill -9 of the launcher and the job:
    two whole segments of rank 0, one unfinished, nothing decoded."""
    run = tmp_path / "killed.perfscope"
    create_run(run, source="record", world_size=1)
    dead = _dead_pid()
    update_run(run, pid=dead)
    write_rank_meta(run, 0, {"status": "recording", "pid": dead, "collectors": ["steps", "cupti"]})
    folder = segments.rank_folder(run, 0)
    folder.mkdir(parents=True)
    sink.reset()
    sink.configure([layouts.KIND_CONCURRENT_KERNEL, layouts.KIND_RUNTIME])
    sink.set_api_filter(cbids.RUNTIME, cbids.DRIVER)
    sink.segments_open(folder, 0, 0, 1 << 20)
    try:
        names = [ctypes.create_string_buffer(b"_Z6kernelPf"), ctypes.create_string_buffer(b"gemm")]
        for i, name in enumerate(names):
            sink.feed_plain(_kernel(ctypes.addressof(name), 10_000 * (i + 1), i).tobytes()
                            + _api(layouts.KIND_RUNTIME, LAUNCH, i).tobytes())
            sink.segments_cycle()
    finally:
        sink.segments_close()
    (folder / f".{dead}-00000009.cupti.tmp").write_bytes(segments.MAGIC)
    return run


def test_recover_decodes_what_the_killed_job_left_and_marks_the_run(killed_run: Path, capsys) -> None:
    assert "never decoded" in " ".join(perfscope.open_run(killed_run).integrity_warnings)
    assert main(["recover", str(killed_run)]) == 0
    out = capsys.readouterr()
    err = out.out + out.err
    assert "decoded 2 raw file(s), 1 left out" in err and "kernels 2" in err and "status incomplete" in err, err
    assert "unfinished CUPTI segment" in err and "rank 0 was killed" in err, err
    run = perfscope.open_run(killed_run)
    assert run.status == "incomplete"
    assert run.meta["recovered"]["by"] == "perfscope recover" and run.meta["recovered"]["segments"] == 2
    rank = run.rank_meta(0)
    assert rank["status"] == "incomplete" and rank["collector_stats"]["cupti_decode"]["recovered"] is True
    assert run.table("kernels")["name"].astype(str).tolist() == ["kernel(float*)", "gemm"]
    assert run.table("api")["name"].astype(str).tolist() == ["cudaLaunchKernel"] * 2
    found = run.verify()
    assert found.ok and found.files >= 2 and not found.warnings, (found.errors, found.warnings)
    assert not run.integrity_warnings
    # the decoder's parts are in a manifest of its own
    listed = [json.loads(line)["table"] for f in (killed_run / "ranks").glob("parts-rank-0-*.jsonl")
              for line in f.read_text().splitlines()]
    assert sorted(listed) == ["api", "kernels"]
    # nothing is left to do: a second recover decodes nothing and changes no row
    assert main(["recover", str(killed_run)]) == 0
    assert "decoded 0 raw file(s)" in capsys.readouterr().out
    assert perfscope.open_run(killed_run).row_counts()["kernels"] == 2


def test_info_recovers_on_its_own_and_says_so(killed_run: Path, capsys) -> None:
    assert main(["info", str(killed_run), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "decoded 2 raw file(s) a killed job left undecoded" in out.err, out.err
    doc = json.loads(out.out)
    assert doc["tables"]["kernels"] == 2 and doc["status"] == "incomplete"
    assert perfscope.open_run(killed_run).meta["recovered"]["by"] == "perfscope info"
    assert main(["info", str(killed_run)]) == 0
    assert "decoded" not in capsys.readouterr().err  # once


def test_recover_refuses_a_run_still_recording(tmp_path: Path, capsys) -> None:
    run = tmp_path / "live"
    create_run(run, source="record")  # this (live) process created it
    (segments.rank_folder(run, 0)).mkdir(parents=True)
    (segments.rank_folder(run, 0) / "1-00000000.cupti").write_bytes(b"x")
    assert main(["recover", str(run)]) != 0
    assert "still being recorded" in capsys.readouterr().err
    assert main(["info", str(run)]) == 0  # info leaves it to the live decoder
    assert "decoded" not in capsys.readouterr().err


def test_a_replaced_run_takes_its_raw_folder_along(killed_run: Path) -> None:
    create_run(killed_run, source="record", overwrite=True)
    assert not (killed_run / "raw").exists()
