"""``analyze_run`` reads a run's tables as arrays (``Run.arrays``, names as codes); a run that
only offers ``table`` (DataFrames, names as categoricals) is analysed the same, to the bit."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from perfscope.analyzers import AnalysisConfig, analyze_run
from perfscope.store import open_run
from perfscope.store.kineto import import_kineto

from test_import_and_analyze import assert_same_analysis

DATA = Path(__file__).resolve().parents[1] / "data"
RUNS = sorted((DATA / "h200").glob("*.perfscope"))


class TableOnlyRun:
    """A run read only through ``table``, as a reader without ``arrays`` would be."""

    def __init__(self, run: Any) -> None:
        self._run = run
        self.meta, self.ranks = run.meta, run.ranks

    def rank_meta(self, rank: int) -> dict[str, Any]:
        return self._run.rank_meta(rank)

    def table(self, name: str, ranks: Any = None, columns: Any = None) -> pd.DataFrame:
        return self._run.table(name, ranks=ranks, columns=columns)


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_recorded_runs_analyse_the_same_from_tables(path: Path) -> None:
    run = open_run(path)
    assert_same_analysis(analyze_run(run), analyze_run(TableOnlyRun(run)))


def test_imported_ranks_analyse_the_same_from_tables(tmp_path: Path) -> None:
    files = [DATA / "kineto" / "ddp_rank0.json.gz", DATA / "kineto" / "ddp_rank1.json.gz"]
    result = import_kineto(files, tmp_path / "run", background=True)
    result.wait()
    for cfg in (AnalysisConfig(), AnalysisConfig(step_pattern="ProfilerStep", hta_compat=False)):
        want = analyze_run(TableOnlyRun(open_run(tmp_path / "run")), cfg)
        assert_same_analysis(analyze_run(result.run, cfg), want)
        assert_same_analysis(analyze_run(open_run(tmp_path / "run"), cfg), want)
