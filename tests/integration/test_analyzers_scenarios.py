"""Synthetic one-bottleneck runs (see scenario_runs.py): dominant bucket and first advice."""
from __future__ import annotations

from pathlib import Path

import pytest
from scenario_runs import EXPECTED, finish

from perfscope.analyzers import analyze_run, step_summary
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS
from perfscope.store import open_run


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scenario_classified(tmp_path: Path, name: str) -> None:
    build, dominant, first = EXPECTED[name]
    run = build(tmp_path / name)
    finish(run)
    a = analyze_run(open_run(run))
    assert a.recommendations, "a bottleneck must trigger advice"
    assert a.recommendations[0].id == first, [r.id for r in a.recommendations]
    s = step_summary(a.steps)
    if name == "straggler":
        slow = a.recommendations[0].ranks[0]
        assert slow == 2 and a.stragglers.iloc[0]["rank"] == 2
        s = s[s["rank"] != slow]  # the others wait in sync
    for _, row in s.iterrows():
        assert BUCKETS[int(row[list(BUCKET_COLUMNS)].astype(float).values.argmax())] == dominant
    r = a.recommendations[0]
    assert r.saving_ns > 0 and 0 < r.saving_share <= 1 and r.change and r.evidence


def test_no_advice_without_evidence(tmp_path: Path) -> None:
    """A healthy run (82 % compute, 4 % input wait, 4 % pinned copies, 10 % host) fires nothing."""
    from scenario_runs import MS, T0, US, RankTrace, _run, _step

    _run(tmp_path / "ok", 1)
    tr = RankTrace()
    for i in range(5):
        t = T0 + i * 10 * MS
        _step(tr, i, t, t + 10 * MS)
        tr.host.append({"start_ns": t, "dur_ns": 400 * US, "kind": "dataloader_wait", "name": "next", "tid": 1})
        tr.copy(t + 400 * US, t + 400 * US, 400 * US)
        for j in range(8):
            tr.kernel(t + 800 * US + j * 10 * US, t + 800 * US + j * 1025 * US, 1025 * US)
    tr.write(tmp_path / "ok", 0)
    finish(tmp_path / "ok")
    a = analyze_run(open_run(tmp_path / "ok"))
    assert [r.id for r in a.recommendations] == []


H200 = Path(__file__).resolve().parents[1] / "data" / "h200"


@pytest.mark.parametrize(("name", "first", "slow"), [("comm_heavy", "comm.exposed", None), ("straggler", "comm.straggler", 2)])
def test_runs_recorded_by_perfscope(name: str, first: str, slow: int | None) -> None:
    """Runs recorded on the H200 by perfscope's own recorder (CUPTI + NCCL plugin + host hooks)."""
    path = H200 / f"{name}.perfscope"
    assert (path / "run.json").is_file(), f"committed fixture {path} is missing (check .gitignore)"
    a = analyze_run(open_run(path))
    assert a.recommendations[0].id == first
    assert all(r.saving_ns > 0 for r in a.recommendations if r.bucket != "environment")
    assert (a.steps[list(BUCKET_COLUMNS)].sum(axis=1) == a.steps["wall_ns"]).all()
    if slow is not None:
        assert int(a.stragglers.iloc[0]["rank"]) == slow
        others = a.steps[a.steps["rank"] != slow].groupby("rank")[["sync_ns", "collective_wait_ns"]].median()
        assert (others["collective_wait_ns"] > 0).all() and (others["sync_ns"] >= others["collective_wait_ns"]).all()


# The single-GPU scenarios recorded by `perfscope record` (no torch.profiler): each must be
# read like its torch.profiler trace (tests/integration/test_scenarios.py): the same dominant
# bucket and the same first recommendation.
RECORDED = {
    "slow_dataloader": ("data_loading", "dataloader.workers"),
    "pageable_copies": ("pcie", "copies.pageable"),
    "host_sync": ("host", "sync.host"),  # launch-bound too: the syncs must go first
    "launch_bound": ("host", "launch.bound"),
    "compute_bound": ("compute", "compute.bound"),
}


@pytest.mark.parametrize("name", list(RECORDED))
def test_single_gpu_scenarios_recorded_by_perfscope(name: str) -> None:
    path = H200 / f"{name}.perfscope"
    assert (path / "run.json").is_file(), f"committed fixture {path} is missing (check .gitignore)"
    run = open_run(path)
    assert run.meta["source"] == "record" and run.meta["status"] == "complete"
    # Every kernel links to the call that launched it (cuBLAS GEMMs through the driver API).
    kernels, api = run.table("kernels"), run.table("api")
    assert kernels["correlation"].isin(api["correlation"]).all()
    a = analyze_run(run)
    assert len(a.steps) >= 6  # steps from the optimizer hook, no marker in the script
    totals = a.steps[list(BUCKET_COLUMNS)].sum()
    dominant, first = RECORDED[name]
    assert str(totals.idxmax()).removesuffix("_ns") == dominant
    assert a.recommendations[0].id == first, [(r.id, r.saving_ns) for r in a.recommendations]
    assert (a.steps[list(BUCKET_COLUMNS)].sum(axis=1) == a.steps["wall_ns"]).all()


def test_launch_bound_is_judged_inside_the_steps() -> None:
    """A recorded run holds seconds of start-up (CUDA init, model build) with the GPU idle;
    judged over the whole span the launch-bound scenario's launch idle is ~3 % and the rule
    would not fire.  Inside the step windows it is most of the time."""
    a = analyze_run(open_run(H200 / "launch_bound.perfscope"))
    launch = a.launch.iloc[0]
    assert launch["launch_bound"] and launch["launch_idle_ns"] >= 0.5 * launch["span_ns"]
    assert launch["span_ns"] <= (a.steps["wall_ns"].sum() * 1.01)
