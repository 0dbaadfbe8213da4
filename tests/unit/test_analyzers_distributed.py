"""Warm-up steps, who made whom wait, communication overlap per rank, collectives by size."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfscope.analyzers import distributed as d
from perfscope.analyzers.collectives import analyze_collectives
from perfscope.analyzers.result import BUCKET_COLUMNS


def _steps(walls: list[list[float]], hidden: float = 0.0) -> pd.DataFrame:
    """One row per (rank, step) with the given wall times (ms); compute 40%, network 20%,
    sync 20%, host 20%."""
    rows = []
    for r, per_rank in enumerate(walls):
        t = 0
        for s, w in enumerate(per_rank):
            wall = int(w * 1e6)
            parts = dict.fromkeys(BUCKET_COLUMNS, 0)
            parts.update(compute_ns=int(0.4 * wall), network_ns=int(0.2 * wall), sync_ns=int(0.2 * wall))
            parts["host_ns"] = wall - sum(parts.values())
            rows.append({"rank": r, "step": s, "start_ns": t, "end_ns": t + wall, "wall_ns": wall, **parts,
                         "hidden_network_ns": int(hidden * 1e6), "hidden_pcie_ns": 0})
            t += wall
    return pd.DataFrame(rows)


def test_a_long_first_step_is_warm_up() -> None:
    steps = _steps([[201, 2.2, 1.9, 2.0, 1.9, 2.0, 1.8, 2.1]])
    assert d.warmup_steps(steps) == [0]
    assert 0 not in set(d.without_steps(steps, [0])["step"])


def test_warm_up_needs_a_clear_gap_and_a_steady_run_after_it() -> None:
    assert d.warmup_steps(_steps([[72, 62, 62, 62, 62, 62, 62]])) == []  # 1.16 x: not warm-up
    assert d.warmup_steps(_steps([[200, 2, 2]])) == []  # too few steps to tell
    assert d.warmup_steps(_steps([[300, 200, 2, 2, 2, 2, 2, 2]])) == [0, 1]  # a quarter at most
    assert d.warmup_steps(_steps([[2, 200, 2, 2, 2, 2, 2, 2]])) == []  # a slow step later is not warm-up
    # the slowest rank decides: ranks wait for each other
    assert d.warmup_steps(_steps([[2] * 8, [9] + [2] * 7])) == [0]
    assert d.warmup_steps(pd.DataFrame()) == []


def test_comm_overlap_splits_hidden_communication_out_of_compute() -> None:
    out = d.comm_overlap(_steps([[10, 10], [20, 20]], hidden=1.0))
    assert list(out["rank"]) == [0, 1] and list(out["steps"]) == [2, 2]
    r0 = out.iloc[0]
    assert r0["compute_ns"] == pytest.approx(3e6) and r0["hidden_comm_ns"] == pytest.approx(1e6)
    assert r0["exposed_comm_ns"] == pytest.approx(2e6) and r0["wait_ns"] == pytest.approx(2e6)
    parts = ["compute_ns", "hidden_comm_ns", "exposed_comm_ns", "wait_ns", "other_ns"]
    assert np.allclose(out[parts].sum(axis=1), out["wall_ns"])


def _coll(late_rank: int, late_ns: int, ops: int = 3, ranks: int = 3, step_ns: int = 100_000_000) -> pd.DataFrame:
    rows = []
    for op in range(ops):
        for r in range(ranks):
            start = op * step_ns + 10_000_000 + (late_ns if r == late_rank else 0)
            rows.append({"rank": r, "comm_id": "pg", "seq": op, "func": "AllReduce", "bytes": 1 << 20,
                         "nranks": ranks, "start_ns": start, "dur_ns": 50_000_000 - (start - op * step_ns - 10_000_000)})
    return analyze_collectives(pd.DataFrame(rows))


def test_caused_wait_charges_the_others_wait_to_the_late_rank_per_step() -> None:
    steps = _steps([[100, 100, 100]] * 3)
    out = d.caused_wait(_coll(late_rank=1, late_ns=5_000_000), steps)
    assert len(out) == 9
    late = out[out["rank"] == 1]
    assert list(late["caused_wait_ns"]) == [10_000_000] * 3  # two ranks waited 5 ms each, every step
    assert list(late["ops_last"]) == [1, 1, 1]
    assert (out[out["rank"] != 1]["caused_wait_ns"] == 0).all()


def test_caused_wait_is_empty_when_nothing_was_matched() -> None:
    one_rank = _coll(late_rank=0, late_ns=0, ranks=1)
    assert d.caused_wait(one_rank, _steps([[100, 100, 100]])).empty
    assert d.caused_wait(pd.DataFrame(), _steps([[100]])).empty


def test_collective_sizes_groups_by_op_and_size() -> None:
    c = _coll(late_rank=1, late_ns=5_000_000)
    c.loc[c["seq"] == 2, "bytes"] = pd.NA  # a size nobody knows stays its own group
    out = d.collective_sizes(c)
    assert set(zip(out["func"], out["bytes"].astype(object).where(out["bytes"].notna(), None))) == {
        ("AllReduce", 1 << 20), ("AllReduce", None)}
    known = out[out["bytes"].notna()].iloc[0]
    assert known["calls"] == 6 and known["ranks"] == 3 and known["busbw_gbps"] > 0
