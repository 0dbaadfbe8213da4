"""Distributed analysis (``perfscope.distributed``): the per-rank passes as Dask tasks give
the analysis of one process, to the byte of its JSON document."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

distributed = pytest.importorskip("distributed")

import perfscope  # noqa: E402
from perfscope.analyzers import AnalysisConfig, analyze_run  # noqa: E402
from perfscope.cli.main import main  # noqa: E402
from perfscope.distributed import analyze_on_dask, dask_client  # noqa: E402
from perfscope.errors import UsageError  # noqa: E402
from perfscope.reports.jsondoc import analysis_to_json  # noqa: E402
from perfscope.store import open_run  # noqa: E402
from perfscope.store.kineto import import_kineto  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "h200"
MULTI_RANK = ["straggler.perfscope", "comm_heavy.perfscope", "nccl_record_2rank.perfscope"]


def _doc(a: Any) -> str:
    return json.dumps(analysis_to_json(a), allow_nan=False)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """Two single-threaded workers in this process (fast to start; the tasks still go
    through the scheduler and their arguments and results through pickling)."""
    with dask_client(2, processes=False) as c:
        yield c


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks without an NCCL table: collectives are rebuilt from NCCL kernels."""
    out = tmp_path_factory.mktemp("ddp") / "ddp.perfscope"
    import_kineto([DATA / "kineto" / "ddp_rank0.json.gz", DATA / "kineto" / "ddp_rank1.json.gz"], out)
    return out


@pytest.mark.parametrize("name", MULTI_RANK)
def test_the_passes_on_dask_give_the_json_of_one_process(client: Any, name: str) -> None:
    run = H200 / name
    want = _doc(analyze_run(open_run(run)))
    assert _doc(analyze_on_dask(run, client=client)) == want
    assert json.loads(want)["stragglers"] or name != "straggler.perfscope"  # the fixture's straggler is found


def test_runs_without_an_nccl_table_and_rank_subsets_match_too(client: Any, ddp_run: Path) -> None:
    assert _doc(analyze_on_dask(ddp_run, client=client)) == _doc(analyze_run(open_run(ddp_run)))
    cfg = AnalysisConfig(ranks=(1, 3), top_kernels=3)
    run = H200 / "straggler.perfscope"
    assert _doc(analyze_on_dask(open_run(run), cfg, client=client)) == _doc(analyze_run(open_run(run), cfg))


def test_progress_names_each_rank_as_it_comes_back(client: Any) -> None:
    said: list[str] = []
    analyze_on_dask(H200 / "straggler.perfscope", client=client, progress=said.append)
    done = [m for m in said if "on the Dask cluster" in m]
    assert len(done) == 4 and done[-1].startswith("rank ") and "(4/4)" in done[-1]


def test_cli_workers_starts_a_local_cluster_of_processes(capsys: pytest.CaptureFixture[str]) -> None:
    run = str(H200 / "straggler.perfscope")
    assert main(["analyze", run, "--format", "json"]) == 0
    want = capsys.readouterr().out
    assert main(["analyze", run, "--format", "json", "--workers", "2"]) == 0
    assert capsys.readouterr().out == want


def test_a_trace_file_or_a_run_in_memory_is_refused_with_what_to_do(tmp_path: Path) -> None:
    trace = DATA / "kineto" / "single_gpu_absolute.json"
    with pytest.raises(UsageError, match="import traces first"):
        perfscope.analyze(trace, workers=1)
    result = import_kineto([trace], tmp_path / "t.perfscope", background=True)
    try:
        with pytest.raises(UsageError, match="import traces first"):
            analyze_on_dask(result.run, client=None)  # type: ignore[arg-type]
    finally:
        result.wait()


def test_traces_whose_run_is_reused_go_to_the_cluster(client: Any, tmp_path: Path) -> None:
    import shutil

    for name in ("ddp_rank0.json.gz", "ddp_rank1.json.gz"):
        shutil.copy(DATA / "kineto" / name, tmp_path / name)
    files = [tmp_path / "ddp_rank0.json.gz", tmp_path / "ddp_rank1.json.gz"]
    out = tmp_path / "ddp.perfscope"
    with pytest.raises(UsageError, match="import traces first"):
        perfscope.analyze(files, run_out=out, scheduler=client.scheduler.address)
    assert not out.exists()
    want = _doc(perfscope.analyze(files, run_out=out))  # imports them
    assert _doc(perfscope.analyze(files, run_out=out, scheduler=client.scheduler.address)) == want


def test_dask_client_takes_workers_or_a_scheduler() -> None:
    for kwargs in ({}, {"workers": 2, "scheduler": "tcp://127.0.0.1:1"}):
        with pytest.raises(UsageError, match="either"), dask_client(**kwargs):
            pass
    with pytest.raises(UsageError, match="at least 1"), dask_client(0):
        pass
