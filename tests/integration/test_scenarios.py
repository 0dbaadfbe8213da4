"""Ground truth: each H200-recorded scenario gets the right dominant bucket and first advice.

The fixtures are Kineto traces recorded by benchmarks/scenarios/run_all.sh (see
tests/data/scenarios/README.md); each is imported through the CLI and analysed.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from perfscope.analyzers import analyze_run
from perfscope.analyzers.result import BUCKET_COLUMNS
from perfscope.cli.main import main
from perfscope.store import open_run

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "scenarios" / "kineto"

# scenario -> (ranks, dominant bucket, first recommendation's bucket)
EXPECTED = {
    "slow_dataloader": (1, "data_loading", "data_loading"),
    "pageable_copies": (1, "pcie", "pcie"),
    "host_sync": (1, "host", "sync"),
    "launch_bound": (1, "host", "host"),
    "compute_bound": (1, "compute", "compute"),
    "comm_heavy": (2, "network", "network"),
    "straggler": (4, "sync", "sync"),
}


@pytest.fixture(scope="module")
def analyses(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = {}
    for name, (ranks, _, _) in EXPECTED.items():
        files = [str(FIXTURES / f"{name}_rank{r}.json.gz") for r in range(ranks)]
        run_dir = tmp_path_factory.mktemp("scen") / name
        assert main(["import", "kineto", *files, "-o", str(run_dir)]) == 0
        out[name] = analyze_run(open_run(run_dir))
    return out


def _dominant(analysis) -> str:
    totals = analysis.steps[list(BUCKET_COLUMNS)].sum()
    return str(totals.idxmax()).removesuffix("_ns")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_dominant_bucket(analyses: dict, name: str) -> None:
    assert _dominant(analyses[name]) == EXPECTED[name][1]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_first_recommendation_targets_the_injected_bottleneck(analyses: dict, name: str) -> None:
    recs = analyses[name].recommendations
    assert recs, f"{name}: no recommendation"
    assert recs[0].bucket == EXPECTED[name][2], [(r.id, r.bucket, r.saving_ns) for r in recs]
    assert recs[0].saving_ns > 0 and recs[0].evidence and recs[0].change


def test_steps_sum_to_wall_time(analyses: dict) -> None:
    for a in analyses.values():
        assert (a.steps[list(BUCKET_COLUMNS)].sum(axis=1) == a.steps["wall_ns"]).all()


def test_straggler_is_rank_2_and_others_wait_in_sync(analyses: dict) -> None:
    a = analyses["straggler"]
    top = a.stragglers.sort_values("last_count", ascending=False).iloc[0]
    assert int(top["rank"]) == 2
    sync = a.steps.groupby("rank")["sync_ns"].sum()
    assert all(sync[r] > sync[2] for r in (0, 1, 3))
