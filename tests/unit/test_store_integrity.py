"""Run integrity: the manifest and part checks, --force replacing only a run's own files,
exclusive run creation, and the mode of a run built in a staging folder."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import stat
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfscope.errors import CorruptRunError, RunExistsError, RunIntegrityError
from perfscope.store import RankWriter, create_run, open_run, update_run, write_rank_meta, write_rank_tables
from perfscope.store.meta import check_output, replace_run, staging_dir

T0 = 1_764_000_000_000_000_000
DATA = Path(__file__).resolve().parents[1] / "data" / "h200"


def make_run(path: Path, ranks: int = 2) -> Path:
    create_run(path, command=["train.py"], source="test", world_size=ranks)
    for r in range(ranks):
        write_rank_meta(path, r, {"status": "complete"})
        write_rank_tables(path, r, {
            "kernels": {"start_ns": [T0 + 1, T0 + 10, T0 + 30], "dur_ns": [3, 4, 5], "name": ["gemm", "relu", "gemm"]},
            "memcpy": {"start_ns": [T0 + 20], "dur_ns": [5], "copy_kind": ["H2D"], "bytes": [4096], "pageable": [True]},
        })
    update_run(path, status="complete")
    return path


def part(run: Path, table: str, rank: int = 0, n: int = 0) -> Path:
    return run / table / f"rank={rank}" / f"part-{n:05d}.parquet"


# -- the manifest ------------------------------------------------------------------------

def test_every_part_is_listed_with_rows_size_and_checksum(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    lines = [json.loads(x) for f in sorted((run / "ranks").glob("parts-rank-0-*.jsonl")) for x in f.read_text().splitlines()]
    by_file = {e["file"]: e for e in lines}
    assert set(by_file) == {"kernels/rank=0/part-00000.parquet", "memcpy/rank=0/part-00000.parquet"}
    k = by_file["kernels/rank=0/part-00000.parquet"]
    assert (k["table"], k["rank"], k["rows"], k["bytes"]) == ("kernels", 0, 3, part(run, "kernels").stat().st_size)
    assert json.loads((run / "run.json").read_text())["manifest"] == 1
    assert pq.read_metadata(part(run, "kernels")).metadata[b"perfscope.table"] == b"kernels"
    found = open_run(run).verify()
    assert found.ok and found.files == 4 and not found.warnings
    assert found.hashed_bytes == sum(p.stat().st_size for p in run.rglob("*.parquet"))


def test_a_part_of_another_table_is_refused(tmp_path: Path) -> None:
    # The fault campaign's case: the analysis of such a run flipped to compute.bound.
    run = make_run(tmp_path / "r")
    shutil.copyfile(part(run, "memcpy"), part(run, "kernels"))
    r = open_run(run)
    with pytest.raises(RunIntegrityError, match=r"kernels/rank=0/part-00000.parquet.*part of table 'memcpy'"):
        r.table("kernels")
    with pytest.raises(RunIntegrityError):
        r.row_counts()
    assert len(r.table("memcpy")) == 2  # the other tables still read
    assert not r.verify().ok


def test_a_part_of_another_table_is_refused_without_manifest_or_footer_metadata(tmp_path: Path) -> None:
    # As in a run written before manifests: the columns alone show it.
    run = make_run(tmp_path / "r")
    for f in (run / "ranks").glob("parts-*.jsonl"):
        f.unlink()
    meta = json.loads((run / "run.json").read_text())
    del meta["manifest"]
    (run / "run.json").write_text(json.dumps(meta))
    memcpy = pq.read_table(part(run, "memcpy")).replace_schema_metadata(None)
    pq.write_table(memcpy, part(run, "kernels"))
    with pytest.raises(RunIntegrityError, match=r"column\(s\) \['copy_kind'.*not declare"):
        open_run(run).table("kernels")


def test_a_column_of_another_type_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    pq.write_table(pa.table({"start_ns": pa.array(["x"]), "dur_ns": pa.array([1])}), part(run, "kernels", 0, 7))
    with pytest.raises(RunIntegrityError, match="start_ns is string, not int64"):
        open_run(run).table("kernels")


def test_a_part_of_another_rank_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    shutil.copyfile(part(run, "kernels", 1), part(run, "kernels", 0))
    with pytest.raises(RunIntegrityError, match="belongs to rank 1"):
        open_run(run).table("kernels", ranks=[0])


def test_a_replaced_part_of_the_same_table_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    other = make_run(tmp_path / "other", ranks=1)
    write_rank_tables(other, 0, {"kernels": {"start_ns": list(range(50)), "dur_ns": [1] * 50}})
    shutil.copyfile(part(other, "kernels", 0, 1), part(run, "kernels"))
    with pytest.raises(RunIntegrityError, match="manifest says 3 rows"):
        open_run(run).table("kernels")


def test_a_changed_byte_is_found_by_verify_only(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    p = part(run, "kernels")
    data = bytearray(p.read_bytes())
    data[8] ^= 0xFF  # inside the first column chunk: same size, footer intact
    p.write_bytes(bytes(data))
    open_run(run).row_counts()  # reading checks sizes and footers only: cheap
    found = open_run(run).verify()
    assert len(found.errors) == 1 and "CRC-32" in found.errors[0] and str(p) in found.errors[0]


@pytest.mark.parametrize("what", ["part", "table folder", "rank folder"])
def test_a_missing_part_is_an_error_never_no_rows(tmp_path: Path, what: str) -> None:
    run = make_run(tmp_path / "r")
    victim = {"part": part(run, "kernels", 1), "table folder": run / "kernels", "rank folder": run / "kernels" / "rank=1"}[what]
    shutil.rmtree(victim) if victim.is_dir() else victim.unlink()
    with pytest.raises(RunIntegrityError, match="table folder kernels/ is missing" if what == "table folder"
                       else r"kernels/rank=1/part-00000.parquet listed in the manifest \(3 rows\) is missing"):
        open_run(run)
    salvaged = open_run(run, check=False)  # reads what is there, saying what is not
    assert len(salvaged.table("memcpy")) == 2 and any("missing" in w for w in salvaged.integrity_warnings)


def test_a_part_not_in_the_manifest_is_read_with_a_warning(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    extra = part(run, "kernels", 0, 5)
    pq.write_table(pq.read_table(part(run, "kernels")), extra)
    r = open_run(run)
    assert len(r.table("kernels")) == 9
    assert [w for w in r.integrity_warnings if str(extra) in w and "not in the run's manifest" in w]
    assert r.verify().ok and r.verify().warnings


def test_a_half_written_last_manifest_line_is_ignored_a_damaged_line_is_not(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", ranks=1)
    manifest = next((run / "ranks").glob("parts-rank-0-*.jsonl"))
    good = manifest.read_text()
    manifest.write_text(good + '{"file": "kernels/ra')  # a writer killed mid-line
    assert len(open_run(run).table("kernels")) == 3
    manifest.write_text('{"file": "kernels/ra\n' + good)
    with pytest.raises(RunIntegrityError, match="line 1 is damaged"):
        open_run(run)


def test_a_recording_run_lists_parts_as_it_flushes(tmp_path: Path) -> None:
    create_run(tmp_path / "r")
    w = RankWriter(tmp_path / "r", 0, flush_interval_s=1e9)
    for i in range(3):
        w.append("steps", {"step": [i], "start_ns": [T0 + i], "dur_ns": [1]})
        w.flush()
        r = open_run(tmp_path / "r")
        assert r.row_counts()["steps"] == i + 1 and not r.integrity_warnings
    w.close()
    assert open_run(tmp_path / "r").verify().ok


def test_two_writers_of_one_rank_keep_manifests_of_their_own(tmp_path: Path) -> None:
    create_run(tmp_path / "r")
    with RankWriter(tmp_path / "r", 0) as a, RankWriter(tmp_path / "r", 0) as b:
        a.append("steps", {"step": [0], "start_ns": [T0], "dur_ns": [1]})
        b.append("steps", {"step": [1], "start_ns": [T0 + 1], "dur_ns": [1]})
    assert len(list((tmp_path / "r" / "ranks").glob("parts-rank-0-*.jsonl"))) == 2
    r = open_run(tmp_path / "r")
    assert r.row_counts()["steps"] == 2 and r.verify().ok and not r.integrity_warnings


@pytest.mark.parametrize("fixture", sorted(DATA.glob("*.perfscope")), ids=lambda p: p.name)
def test_runs_written_before_manifests_open_and_check_clean(fixture: Path) -> None:
    r = open_run(fixture)
    assert sum(r.row_counts().values()) > 0 and not r.integrity_warnings
    found = r.verify()
    assert found.ok and found.files > 0 and found.hashed_bytes == 0  # no manifest: nothing to hash against


# -- --force replaces only what a run owns ---------------------------------------------------

def test_force_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    (out / "kernels").mkdir(parents=True)
    (out / "kernels" / "thesis.tex").write_text("years of work")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RunExistsError, match="not a perfscope run"):
        create_run(out, overwrite=True)
    assert (out / "kernels" / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in out.iterdir()) == ["kernels", "notes.txt"]


def test_force_refuses_a_run_whose_table_folder_holds_a_users_file(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    (run / "kernels" / "rank=0" / "keep.csv").write_text("1,2")
    with pytest.raises(RunExistsError, match="keep.csv was not written by perfscope"):
        create_run(run, overwrite=True)
    assert (run / "kernels" / "rank=0" / "keep.csv").exists() and part(run, "kernels").exists()


def test_force_replaces_a_run_and_keeps_the_users_files_beside_it(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    (run / "report.html").write_text("<p>kept</p>")
    create_run(run, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["report.html", "run.json"]
    assert open_run(run).row_counts()["kernels"] == 0


def test_force_replaces_the_remains_of_a_run_without_run_json(tmp_path: Path) -> None:
    # What perfscope.profile's same-id replacement leaves before it calls create_run.
    run = make_run(tmp_path / "r")
    (run / "run.json").unlink()
    with pytest.raises(RunExistsError, match="--force"):
        create_run(run)
    create_run(run, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["run.json"]


def test_replace_run_moves_a_staged_run_in_and_keeps_other_files(tmp_path: Path) -> None:
    out = make_run(tmp_path / "r")
    (out / "report.html").write_text("kept")
    staged = staging_dir(out)
    make_run_in = make_run(staged / "x", ranks=1)  # build it one level down, then lift it
    for child in make_run_in.iterdir():
        os.replace(child, staged / child.name)
    make_run_in.rmdir()
    with pytest.raises(RunExistsError, match="--force"):
        replace_run(staged, out, force=False)
    replace_run(staged, out, force=True)
    assert open_run(out).ranks == [0] and (out / "report.html").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no staging or backup folder left


def test_check_output_names_what_is_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(RunExistsError, match="is a file"):
        check_output(tmp_path / "f", True)
    check_output(tmp_path / "new", False)
    (tmp_path / "empty").mkdir()
    check_output(tmp_path / "empty", False)


# -- exclusive creation ----------------------------------------------------------------------

def _create(path: str, run_id: str | None) -> str:
    try:
        return create_run(path, run_id=run_id)["run_id"]
    except RunExistsError:
        return "refused"


def test_racing_creators_exactly_one_wins(tmp_path: Path) -> None:
    for trial in range(30):
        path = str(tmp_path / f"r{trial}")
        results: list[str] = []
        barrier = threading.Barrier(8)

        def go(path: str = path, barrier: threading.Barrier = barrier, results: list[str] = results) -> None:
            barrier.wait()
            results.append(_create(path, None))

        threads = [threading.Thread(target=go) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [r for r in results if r != "refused"]
        assert len(winners) == 1, results
        assert json.loads(Path(path, "run.json").read_text())["run_id"] == winners[0]


def test_racing_processes_exactly_one_wins_and_ranks_of_one_job_join(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(6) as pool:
        for trial in range(8):
            path = str(tmp_path / f"r{trial}")
            got = pool.starmap(_create, [(path, None)] * 6)
            assert sum(r != "refused" for r in got) == 1, got
            job = str(tmp_path / f"job{trial}")
            assert pool.starmap(_create, [(job, "same-job")] * 6) == ["same-job"] * 6


def test_a_run_created_elsewhere_meanwhile_is_not_joined_by_another_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The loser of a race: run.json appears between the checks and the link.
    from perfscope.store import meta

    real = meta.check_output

    def late(out: Path, force: bool) -> None:
        real(out, force)
        monkeypatch.setattr(meta, "check_output", real)
        create_run(out, run_id="winner")

    monkeypatch.setattr(meta, "check_output", late)
    with pytest.raises(RunExistsError, match="another process"):
        create_run(tmp_path / "r", run_id="loser")
    assert json.loads((tmp_path / "r" / "run.json").read_text())["run_id"] == "winner"
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["run.json"]  # no temporary left


# -- modes -----------------------------------------------------------------------------------

def test_a_staged_run_gets_the_modes_mkdir_gives(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        staged = staging_dir(tmp_path / "run")
        create_run(staged, durable=False)
        write_rank_tables(staged, 0, {"steps": {"step": [0], "start_ns": [T0], "dur_ns": [1]}})
        replace_run(staged, tmp_path / "run", force=False)
    finally:
        os.umask(old)
    out = tmp_path / "run"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "run.json").stat().st_mode) == 0o644
    assert stat.S_IMODE(part(out, "steps").stat().st_mode) == 0o644


def test_a_damaged_run_json_is_still_a_corrupt_run(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    (run / "run.json").write_text("{")
    with pytest.raises(CorruptRunError):
        open_run(run)


def test_a_read_part_is_checked_once_and_its_footer_not_kept(tmp_path: Path) -> None:
    run = open_run(make_run(tmp_path / "r.perfscope"))
    first = run.arrays("kernels", ranks=[0])
    # The footer parsed to check the part is handed to its read, then let go: an analysis of
    # a thousand ranks would otherwise hold every part's footer to the end (~30 KiB each).
    assert run._footers == {} and part(tmp_path / "r.perfscope", "kernels") in run._checked
    again = run.arrays("kernels", ranks=[0])
    assert list(again["start_ns"]) == list(first["start_ns"]) == [T0 + 1, T0 + 10, T0 + 30]
    assert run.row_counts()["kernels"] == 6  # the footers read again where they are needed, not kept
    assert run._footers == {}
