"""``perfscope.analyze``: the one entry that opens (or imports) a run and analyses it."""
from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest

import perfscope
from perfscope.analyzers import AnalysisConfig, analyze_run
from perfscope.errors import InputError, UsageError
from perfscope.pipeline import TraceImportWarning, default_run_dir
from perfscope.reports.jsondoc import analysis_to_json
from perfscope.store import open_run

DATA = Path(__file__).resolve().parents[1] / "data"
TWO_RANKS = DATA / "h200" / "nccl_record_2rank.perfscope"
# A trace without distributedInfo.rank: its import has to guess the rank.
NO_RANK_TRACE = DATA / "kineto" / "single_gpu_absolute.json"


def _doc(a: object) -> str:
    return json.dumps(analysis_to_json(a), allow_nan=False)  # type: ignore[arg-type]


def test_a_run_directory_and_an_open_run_give_the_analysis_of_analyze_run() -> None:
    want = _doc(analyze_run(open_run(TWO_RANKS)))
    assert _doc(perfscope.analyze(TWO_RANKS)) == want
    assert _doc(perfscope.analyze(str(TWO_RANKS))) == want
    assert _doc(perfscope.analyze(open_run(TWO_RANKS))) == want


def test_config_and_progress_reach_the_analysis() -> None:
    said: list[str] = []
    a = perfscope.analyze(TWO_RANKS, AnalysisConfig(ranks=(1,)), progress=said.append)
    assert set(a.steps["rank"]) == {1}
    assert any(m.startswith("rank 1") for m in said)


def test_a_trace_is_imported_then_analysed(tmp_path: Path) -> None:
    with pytest.warns(TraceImportWarning, match="distributedInfo.rank"):
        a = perfscope.analyze(NO_RANK_TRACE, run_out=tmp_path / "run")
    assert open_run(tmp_path / "run").status == "complete"
    assert _doc(a) == _doc(perfscope.analyze(tmp_path / "run"))


def test_a_trace_goes_beside_itself_by_default_and_is_replaced_only_with_force(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    shutil.copy(NO_RANK_TRACE, trace)
    assert default_run_dir(trace) == tmp_path / "t.perfscope"
    with pytest.warns(TraceImportWarning):
        first = perfscope.analyze(trace)
    assert open_run(tmp_path / "t.perfscope").status == "complete"
    run_json = (tmp_path / "t.perfscope" / "run.json").read_bytes()
    # The same unchanged trace: its run is reused (nothing imported, nothing to warn).
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceImportWarning)
        assert _doc(perfscope.analyze(trace)) == _doc(first)
    assert (tmp_path / "t.perfscope" / "run.json").read_bytes() == run_json
    # A changed trace is not silently replaced.
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))
    with pytest.raises(perfscope.PerfscopeError, match="--force"):
        perfscope.analyze(trace)
    with pytest.warns(TraceImportWarning):
        perfscope.analyze(trace, force=True)
    assert (tmp_path / "t.perfscope" / "run.json").read_bytes() != run_json


def test_run_options_are_for_traces_and_a_missing_trace_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="apply to trace files"):
        perfscope.analyze(TWO_RANKS, run_out=tmp_path / "x")
    with pytest.raises(UsageError, match="apply to trace files"):
        perfscope.analyze(open_run(TWO_RANKS), force=True)
    with pytest.raises(InputError, match="no such trace file"):
        perfscope.analyze(tmp_path / "missing.json.gz")


def test_a_rank_the_run_lacks_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no rank"):
        perfscope.analyze(TWO_RANKS, AnalysisConfig(ranks=(5,)))
