"""Import and analyse in one go: the in-memory run, the background write and the CLI form.

``import_and_analyze`` analyses the tables the import has just built (a ``MemoryRun``)
while the run is written on a background thread.  Everything here checks that this is the
same as importing, then ``analyze_run(open_run(...))``, to the bit; that a failed write
leaves nothing half-written; and ``perfscope analyze TRACE``.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfscope.analyzers import AnalysisConfig, analyze_run
from perfscope.analyzers.result import Analysis
from perfscope.cli.main import main
from perfscope.errors import PerfscopeError, RunExistsError, UsageError
from perfscope.pipeline import import_and_analyze
from perfscope.reports.jsondoc import analysis_to_json
from perfscope.store import open_run
from perfscope.store.chrome import export_chrome
from perfscope.store.kineto import import_kineto
from perfscope.store.reader import MemoryRun, Run
from perfscope.store.schema import TABLES
from perfscope.store.writer import stored_tables

DATA = Path(__file__).resolve().parents[1] / "data"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kineto"
SHARED_TRACES = sorted(SHARED.glob("*.json.gz")) if SHARED.is_dir() else []
FIXTURE_TRACES = [DATA / "kineto" / "ddp_rank0.json.gz", DATA / "kineto" / "ddp_rank1.json.gz",
                  DATA / "kineto" / "single_gpu_absolute.json"]
# One trace per run, plus the multi-file imports (one file per rank).
IMPORTS: dict[str, list[Path]] = {p.name: [p] for p in [*SHARED_TRACES, *FIXTURE_TRACES]}
IMPORTS["ddp_both_ranks"] = FIXTURE_TRACES[:2]
if (SHARED / "trace_filter_sampled_rank-0.json.gz").exists():
    IMPORTS["trace_filter_sampled_both_ranks"] = [SHARED / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
H200_RUNS = sorted((DATA / "h200").glob("*.perfscope"))


def assert_same_analysis(a: Analysis, b: Analysis) -> None:
    """Every field of two analyses is equal (frames: values, dtypes, index, column order)."""
    for f in dataclasses.fields(Analysis):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y, check_exact=True, obj=f.name)
        else:
            assert x == y, f.name
    assert json.dumps(analysis_to_json(a), allow_nan=False) == json.dumps(analysis_to_json(b), allow_nan=False)


def assert_same_run(mem: MemoryRun, disk: Run) -> None:
    """The in-memory run reads exactly like the stored one: metadata, ranks, every table."""
    assert mem.meta == disk.meta
    assert (mem.ranks, mem.status, mem.row_counts()) == (disk.ranks, disk.status, disk.row_counts())
    for r in disk.ranks:
        assert mem.rank_meta(r) == disk.rank_meta(r)
    for name, decl in TABLES.items():
        pd.testing.assert_frame_equal(mem.table(name), disk.table(name), check_exact=True, obj=name)
        for r in disk.ranks:  # one rank, some columns (as the analysis reads them), rank first
            cols = ["rank", *decl.column_names[:3]]
            pd.testing.assert_frame_equal(mem.table(name, ranks=[r], columns=cols),
                                          disk.table(name, ranks=[r], columns=cols), check_exact=True, obj=name)


@pytest.mark.parametrize("name", sorted(IMPORTS))
def test_in_memory_analysis_equals_the_stored_runs(tmp_path: Path, name: str) -> None:
    files = IMPORTS[name]
    result, analysis = import_and_analyze(files, tmp_path / "run")
    assert (tmp_path / "run" / "run.json").is_file() and not result.writing
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no hidden folder left behind
    disk = open_run(tmp_path / "run")
    assert result.run is not None
    assert_same_run(result.run, disk)
    assert_same_analysis(analysis, analyze_run(disk))
    # The stored run is the one a plain import writes (same rows, same files).
    plain = import_kineto(files, tmp_path / "plain")
    assert plain.rows == result.rows and plain.warnings == result.warnings
    assert sorted(p.relative_to(tmp_path / "run").as_posix() for p in (tmp_path / "run").rglob("*")) == \
        sorted(p.relative_to(tmp_path / "plain").as_posix() for p in (tmp_path / "plain").rglob("*"))


def test_options_reach_the_analysis(tmp_path: Path) -> None:
    cfg = AnalysisConfig(step_pattern="ProfilerStep", ranks=(1,))
    _, analysis = import_and_analyze(IMPORTS["ddp_both_ranks"], tmp_path / "run", cfg)
    assert_same_analysis(analysis, analyze_run(open_run(tmp_path / "run"), cfg))
    assert set(analysis.steps["rank"]) == {1}


def _memory_copy(run: Run) -> MemoryRun:
    """``run``'s tables read back raw from its part files, as the writer was given them."""
    tables: dict[str, dict[int, pa.Table]] = {}
    for name in TABLES:
        for r in run.ranks:
            parts = [pq.read_table(p) for _, p in run.part_files(name, [r])]
            if parts:
                tbl = stored_tables({name: pa.concat_tables(parts, promote_options="default")}).get(name)
                if tbl is not None:
                    tables.setdefault(name, {})[r] = tbl
    return MemoryRun(run.path, run.meta, tables)


@pytest.mark.parametrize("path", H200_RUNS, ids=lambda p: p.name)
def test_memory_run_of_recorded_runs(path: Path) -> None:
    """Runs recorded on the H200 (CUPTI, NCCL plugin, host hooks: nulls, several ranks,
    collectives) read and analyse the same from memory as from their Parquet files."""
    disk = open_run(path)
    mem = _memory_copy(disk)
    assert_same_run(mem, disk)
    assert_same_analysis(analyze_run(mem), analyze_run(disk))


@pytest.mark.parametrize("path", [p for p in H200_RUNS if p.name in ("comm_heavy.perfscope", "straggler.perfscope",
                                                                    "pageable_copies.perfscope")], ids=lambda p: p.name)
def test_recorded_runs_exported_then_imported_and_analysed(tmp_path: Path, path: Path) -> None:
    """A recorded run exported as a trace, then imported and analysed in one go."""
    export_chrome(path, tmp_path / "t.json.gz")
    result, analysis = import_and_analyze(tmp_path / "t.json.gz", tmp_path / "run")
    assert result.run is not None
    assert_same_run(result.run, open_run(tmp_path / "run"))
    assert_same_analysis(analysis, analyze_run(open_run(tmp_path / "run")))


# -- failures ------------------------------------------------------------------------------
def _disk_full(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_failed_background_write_raises_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import perfscope.store.writer as writer

    monkeypatch.setattr(writer.pq, "write_table", _disk_full)
    with pytest.raises(PerfscopeError, match="cannot write the run .*No space left on device"):
        import_and_analyze(FIXTURE_TRACES[0], tmp_path / "run")
    assert list(tmp_path.iterdir()) == []  # neither the run nor its hidden folder


def test_failed_background_write_leaves_the_existing_run_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import perfscope.store.writer as writer

    import_kineto(FIXTURE_TRACES[2], tmp_path / "run")
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    monkeypatch.setattr(writer.pq, "write_table", _disk_full)
    with pytest.raises(PerfscopeError, match="cannot write the run"):
        import_and_analyze(FIXTURE_TRACES[0], tmp_path / "run", force=True)
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_failed_replacement_puts_the_old_run_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    out = tmp_path / "run"
    import_kineto(FIXTURE_TRACES[2], out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real, moved = os.replace, []

    def flaky(src: object, dst: object) -> None:
        # The second of the new run's entries cannot be moved in.
        if ".importing-" in str(src) and Path(str(dst)).parent == out:
            moved.append(dst)
            if len(moved) == 2:
                raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(PerfscopeError, match="cannot write the run"):
        import_and_analyze(FIXTURE_TRACES[0], out, force=True)
    monkeypatch.undo()
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no staging or backup folder left


def test_two_background_imports_to_one_output_do_not_mix(tmp_path: Path) -> None:
    out = tmp_path / "run"
    results, failed = [], 0
    for trace in (FIXTURE_TRACES[0], FIXTURE_TRACES[2]):
        try:
            results.append((trace, import_kineto(trace, out, background=True)))
        except RunExistsError:  # the first was in place already when the second started
            failed += 1
    won = []
    for trace, r in results:
        try:
            r.wait()
            won.append((trace, r))
        except RunExistsError:  # the other one moved into place first
            failed += 1
    assert len(won) == 1 and failed == 1
    # The run on disk is the winner's, whole: tables, rank metadata and run.json.
    (trace, r), run = won[0], open_run(out)
    assert run.row_counts()["kernels"] == r.rows[r.ranks[0]]["kernels"]
    assert run.meta["notes"][0].endswith(trace.name)
    assert run.rank_meta(r.ranks[0])["source_file"].endswith(trace.name)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_existing_run_needs_force(tmp_path: Path) -> None:
    import_and_analyze(FIXTURE_TRACES[2], tmp_path / "run")
    with pytest.raises(RunExistsError):
        import_and_analyze(FIXTURE_TRACES[0], tmp_path / "run")
    result, _ = import_and_analyze(FIXTURE_TRACES[0], tmp_path / "run", force=True)
    assert open_run(tmp_path / "run").ranks == result.ranks == [0]


def test_failed_analysis_raises_once_the_run_is_written(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no rank"):
        import_and_analyze(FIXTURE_TRACES[2], tmp_path / "run", AnalysisConfig(ranks=(7,)))
    assert open_run(tmp_path / "run").status == "complete"  # the import itself was fine


def test_write_error_wins_over_the_analysis_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import perfscope.store.writer as writer

    monkeypatch.setattr(writer.pq, "write_table", _disk_full)
    with pytest.raises(PerfscopeError, match="cannot write the run") as info:
        import_and_analyze(FIXTURE_TRACES[2], tmp_path / "run", AnalysisConfig(ranks=(7,)))
    assert isinstance(info.value.__context__, UsageError)
    assert list(tmp_path.iterdir()) == []


def test_a_trace_that_does_not_import_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    with pytest.raises(PerfscopeError):
        import_and_analyze(bad, tmp_path / "run")
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"]


def test_a_bad_step_pattern_is_refused_before_the_import(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="step-pattern"):
        import_and_analyze(FIXTURE_TRACES[2], tmp_path / "run", AnalysisConfig(step_pattern="("))
    assert not (tmp_path / "run").exists()  # nothing imported: the fixed command needs no --force


def test_zero_length_steps_hold_no_kernel(tmp_path: Path) -> None:
    # The only step window has no length: the launch statistics count nothing in it (this
    # indexed an empty window array before).
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 2, "ts": 100, "dur": 0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 5, "dur": 1,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    _, a = import_and_analyze(trace, tmp_path / "run")
    assert a.launch["kernels"].tolist() == [0]


# -- the CLI -------------------------------------------------------------------------------
def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``perfscope ARGV``; return (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_analyze_a_trace_into_a_chosen_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "analyze", str(FIXTURE_TRACES[0]), "--run-out", str(tmp_path / "run"), "--format", "json")
    assert code == 0, err
    assert f"imported {FIXTURE_TRACES[0]} into {tmp_path / 'run'}" in err
    code, again, err = cli(capsys, "analyze", str(tmp_path / "run"), "--format", "json")
    assert code == 0, err
    assert json.loads(out) == json.loads(again)


def test_cli_analyze_a_trace_beside_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json.gz"
    shutil.copy(FIXTURE_TRACES[0], trace)
    code, out, err = cli(capsys, "analyze", str(trace))
    assert code == 0, err
    assert "Median step per rank" in out and f"into {tmp_path / 't.perfscope'}" in err
    assert open_run(tmp_path / "t.perfscope").status == "complete"
    before = (tmp_path / "t.perfscope" / "run.json").read_bytes()
    shutil.copy(FIXTURE_TRACES[1], trace)  # another trace under the same name
    code, _, err = cli(capsys, "analyze", str(trace))  # refuses to replace the run
    assert code != 0 and err.count("\n") == 1 and "--force" in err
    assert (tmp_path / "t.perfscope" / "run.json").read_bytes() == before
    code, _, err = cli(capsys, "analyze", str(trace), "--force", "--format", "json")
    assert code == 0, err
    assert (tmp_path / "t.perfscope" / "run.json").read_bytes() != before


def test_cli_run_options_only_with_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import_kineto(FIXTURE_TRACES[2], tmp_path / "run")
    code, _, err = cli(capsys, "analyze", str(tmp_path / "run"), "--run-out", str(tmp_path / "other"))
    assert code != 0 and "--run-out applies to trace files" in err
    code, _, err = cli(capsys, "analyze", str(tmp_path / "missing.json.gz"))
    assert code != 0 and "no such trace file" in err
    code, _, err = cli(capsys, "analyze", str(FIXTURE_TRACES[2]), "--run-out", str(tmp_path / "r2"), "--ranks", "5")
    assert code != 0 and "no rank" in err
    assert open_run(tmp_path / "r2").status == "complete"
