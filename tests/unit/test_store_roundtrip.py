"""The store: schema coercion, writer part files, reader column/rank selection, metadata."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from perfscope.errors import CorruptRunError, InputError, NotARunError, RunExistsError, SchemaVersionError, UsageError
from perfscope.store import RankWriter, TABLES, create_run, open_run, update_run, write_rank_meta, write_rank_tables
from perfscope.store.schema import SCHEMA_VERSION

EPOCH = 1_764_000_000_000_000_000  # ns; past 2**53, so a float64 detour would corrupt it


def make_run(path: Path, ranks: int = 2) -> Path:
    create_run(path, command=["train.py"], source="test", world_size=ranks)
    for r in range(ranks):
        write_rank_meta(path, r, {"status": "complete"})
        write_rank_tables(path, r, {
            "kernels": {"start_ns": [EPOCH + 1, EPOCH + 10], "dur_ns": [3, 4], "name": ["gemm", "nccl"], "stream": [7, 8]},
            "memcpy": {"start_ns": [EPOCH + 20], "dur_ns": [5], "copy_kind": ["H2D"], "bytes": [4096], "pageable": [True]},
        })
    update_run(path, status="complete")
    return path


def test_given_two_ranks_when_read_then_rows_ranks_and_exact_ns(tmp_path: Path) -> None:
    run = open_run(make_run(tmp_path / "r"))
    df = run.table("kernels")
    assert run.ranks == [0, 1]
    assert run.status == "complete"
    assert len(df) == 4
    assert df["start_ns"].dtype == "int64"
    assert df["start_ns"].iloc[0] == EPOCH + 1
    assert sorted(df["rank"].unique().tolist()) == [0, 1]
    assert list(df.columns) == [*TABLES["kernels"].column_names, "rank"]


def test_only_requested_ranks_and_columns_are_returned(tmp_path: Path) -> None:
    run = open_run(make_run(tmp_path / "r"))
    df = run.table("kernels", ranks=[1], columns=["name", "rank"])
    assert list(df.columns) == ["name", "rank"]
    assert set(df["rank"]) == {1}
    assert list(df["name"].astype(str)) == ["gemm", "nccl"]


def test_empty_table_has_declared_columns(tmp_path: Path) -> None:
    df = open_run(make_run(tmp_path / "r")).table("collectives")
    assert df.empty
    assert "comm_id" in df.columns and "rank" in df.columns


def test_row_counts_come_from_footers(tmp_path: Path) -> None:
    counts = open_run(make_run(tmp_path / "r")).row_counts()
    assert counts["kernels"] == 4 and counts["memcpy"] == 2 and counts["metrics"] == 0
    assert set(counts) == set(TABLES)


def test_nullable_int_columns_keep_nulls_without_float(tmp_path: Path) -> None:
    df = open_run(make_run(tmp_path / "r")).table("kernels", columns=["correlation"])
    assert str(df["correlation"].dtype) == "Int64"
    assert df["correlation"].isna().all()


def test_unknown_column_and_table_are_usage_errors(tmp_path: Path) -> None:
    run = open_run(make_run(tmp_path / "r"))
    with pytest.raises(UsageError, match="no column"):
        run.table("kernels", columns=["nope"])
    with pytest.raises(UsageError, match="unknown table"):
        run.table("nope")
    with RankWriter(tmp_path / "r", 0) as w, pytest.raises(UsageError, match="no column"):
        w.append("kernels", {"start_ns": [1], "typo_ns": [2]})


def test_missing_path_and_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such run"):
        open_run(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotARunError, match="not a perfscope run"):
        open_run(tmp_path / "plain")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = make_run(tmp_path / "r")
    meta = json.loads((path / "run.json").read_text())
    meta["schema_version"] = SCHEMA_VERSION + 1
    (path / "run.json").write_text(json.dumps(meta))
    with pytest.raises(SchemaVersionError, match="upgrade perfscope"):
        open_run(path)


def test_truncated_part_file_is_a_clear_error(tmp_path: Path) -> None:
    path = make_run(tmp_path / "r")
    part = next((path / "kernels" / "rank=0").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:40])
    run = open_run(path)
    with pytest.raises(CorruptRunError, match="part-00000"):
        run.table("kernels")
    # Other tables still read.
    assert len(run.table("memcpy")) == 2


def test_existing_run_is_not_overwritten_without_force(tmp_path: Path) -> None:
    path = make_run(tmp_path / "r")
    with pytest.raises(RunExistsError, match="--force"):
        create_run(path)
    assert open_run(path).row_counts()["kernels"] == 4
    create_run(path, overwrite=True)
    assert open_run(path).row_counts()["kernels"] == 0


def test_same_run_id_joins_existing_run(tmp_path: Path) -> None:
    meta = create_run(tmp_path / "r", run_id="abc")
    assert create_run(tmp_path / "r", run_id="abc")["created_ns"] == meta["created_ns"]


def test_writer_flushes_on_size_and_bounds_memory(tmp_path: Path) -> None:
    create_run(tmp_path / "r")
    w = RankWriter(tmp_path / "r", 0, flush_rows=1000, flush_interval_s=1e9)
    for i in range(10):
        w.append("kernels", {"start_ns": list(range(i * 500, i * 500 + 500)), "dur_ns": [1] * 500})
        rows_buffered = sum(t.num_rows for ts in w._buffers.values() for t in ts)
        assert rows_buffered < 1000
    w.close()
    parts = list((tmp_path / "r" / "kernels" / "rank=0").glob("part-*.parquet"))
    assert len(parts) == 5
    assert len(open_run(tmp_path / "r").table("kernels")) == 5000


def test_writer_flushes_on_interval(tmp_path: Path) -> None:
    create_run(tmp_path / "r")
    w = RankWriter(tmp_path / "r", 0, flush_interval_s=0.0)
    w.append("steps", {"step": [1], "start_ns": [1], "dur_ns": [2]})
    assert list((tmp_path / "r" / "steps" / "rank=0").glob("part-*.parquet"))
    w.close()


def test_killed_writer_leaves_readable_incomplete_run(tmp_path: Path) -> None:
    """A process killed with SIGKILL keeps every flushed part and reads as incomplete."""
    path = tmp_path / "r"
    script = textwrap.dedent(f"""
        import time
        from perfscope.store import RankWriter, create_run, write_rank_meta
        create_run({str(path)!r})
        write_rank_meta({str(path)!r}, 0, {{"status": "recording"}})
        w = RankWriter({str(path)!r}, 0, flush_interval_s=0.05)
        w.start_background_flush()
        i = 0
        while True:
            w.append("kernels", {{"start_ns": [i], "dur_ns": [1]}})
            i += 1
            if i == 50:
                print("ready", flush=True)
            time.sleep(0.001)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run = open_run(path)
    assert run.status == "incomplete"
    n = len(run.table("kernels"))
    assert n >= 50
    assert not list((path / "kernels" / "rank=0").glob(".*tmp")) or n > 0


def test_dataframe_batches_are_accepted(tmp_path: Path) -> None:
    create_run(tmp_path / "r")
    df = pd.DataFrame({"ts_ns": [EPOCH], "device": [0], "metric": ["power_w"], "value": [512.5]})
    write_rank_tables(tmp_path / "r", 0, {"metrics": df})
    out = open_run(tmp_path / "r").table("metrics")
    assert out["ts_ns"].iloc[0] == EPOCH and out["value"].iloc[0] == 512.5


def test_two_writers_of_one_rank_never_overwrite_each_others_parts(tmp_path: Path) -> None:
    # Two processes that record as the same rank must not lose each other's rows.
    create_run(tmp_path / "r")
    a = RankWriter(tmp_path / "r", 0, flush_interval_s=1e9)
    b = RankWriter(tmp_path / "r", 0, flush_interval_s=1e9)
    a.append("kernels", {"start_ns": [1, 2], "dur_ns": [1, 1]})
    b.append("kernels", {"start_ns": [3, 4, 5], "dur_ns": [1, 1, 1]})
    a.flush()
    b.flush()
    a.append("kernels", {"start_ns": [6], "dur_ns": [1]})
    a.close()
    b.close()
    folder = tmp_path / "r" / "kernels" / "rank=0"
    assert len(open_run(tmp_path / "r").table("kernels")) == 6
    assert not list(folder.glob(".*.tmp"))


def test_failed_part_write_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    create_run(tmp_path / "r")
    w = RankWriter(tmp_path / "r", 0, flush_interval_s=1e9)
    w.append("kernels", {"start_ns": [1], "dur_ns": [1]})
    real = pq.write_table

    def half_then_fail(table: object, where: object, **kw: object) -> None:
        real(table, where, **kw)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", half_then_fail)
    with pytest.raises(OSError):
        w.flush()
    assert not list((tmp_path / "r" / "kernels" / "rank=0").iterdir())


def test_failed_metadata_write_leaves_no_temporary_and_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfscope.store import meta as meta_mod

    write_rank_meta(tmp_path / "r", 0, {"status": "recording"})

    def full_disk(*_a: object, **_kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(meta_mod.os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_rank_meta(tmp_path / "r", 0, {"status": "complete"})
    assert [p.name for p in (tmp_path / "r" / "ranks").iterdir()] == ["rank-0.json"]
    assert json.loads((tmp_path / "r" / "ranks" / "rank-0.json").read_text())["status"] == "recording"
