"""The per-rank pass's pieces: interval intersection, collective waits applied after the
sweep, and the kernel rows a rank keeps for its top-N."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfscope.analyzers.breakdown import bucket_columns
from perfscope.analyzers.intervals import merge
from perfscope.analyzers.rank_pass import RankSummary, _top_candidates, intersect, with_collective_waits


def _random_intervals(rng: np.random.Generator, n: int, span: int = 10_000, longest: int = 300) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, span, n)
    return s, s + rng.integers(0, longest, n)


def _covered(iv: tuple[np.ndarray, np.ndarray], span: int) -> np.ndarray:
    t = np.zeros(span + 400, bool)
    for s, e in zip(*iv):
        t[s:e] = True
    return t


@pytest.mark.parametrize("seed", range(5))
def test_intersect_covers_exactly_the_instants_in_both(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = merge(*_random_intervals(rng, 40)), merge(*_random_intervals(rng, 25))
    got = intersect(a, b)
    assert np.array_equal(_covered(got, 10_000), _covered(a, 10_000) & _covered(b, 10_000))
    assert np.all(got[0][1:] >= got[1][:-1])  # disjoint and sorted
    assert intersect(a, (np.zeros(0, np.int64), np.zeros(0, np.int64)))[0].size == 0


@pytest.mark.parametrize("seed", range(5))
def test_waits_applied_after_the_sweep_equal_sweeping_with_them(seed: int) -> None:
    rng = np.random.default_rng(seed)
    layers = {name: _random_intervals(rng, 60) for name in ("compute", "comm", "pcie", "host_sync", "dataloader")}
    spans = merge(*_random_intervals(rng, 12, longest=900))
    ws = np.array([0, 2_500, 5_000, 7_500], np.int64)
    we = ws + 2_500
    # Waits lie inside the collectives (each starts a span, at most its length).
    wait = (spans[0], spans[0] + (spans[1] - spans[0]) // 2)
    base = pd.DataFrame({"rank": 0, "start_ns": ws, "end_ns": we, **bucket_columns(ws, we, layers)})
    summary = RankSummary(rank=0, steps=base, wait_layers={k: intersect(merge(*v), spans) for k, v in layers.items()},
                          gpu_summary=None, kernels=None, kernel_names=[], launch=None, comm_kernels=None, copies=None,
                          copy_kinds=[], step_warnings=[])
    got = with_collective_waits(summary, wait)
    want = bucket_columns(ws, we, {**layers, "comm_wait": wait})
    assert got is not None
    for c, v in want.items():
        assert np.array_equal(got[c].to_numpy(), v), c
    assert not np.array_equal(got["sync_ns"].to_numpy(), base["sync_ns"].to_numpy())  # the waits moved time
    assert with_collective_waits(summary, (np.zeros(0, np.int64), np.zeros(0, np.int64))) is base


def test_top_candidates_keep_every_row_tied_at_the_cut() -> None:
    kern = pd.DataFrame({"name": list("abcde"), "total_ns": [5, 9, 5, 1, 5]})
    assert list(_top_candidates(kern, 2)["name"]) == ["a", "b", "c", "e"]  # b, then any of the three 5s
    assert list(_top_candidates(kern, 1)["name"]) == ["b"]
    assert len(_top_candidates(kern, 0)) == 0 and list(_top_candidates(kern, 0).columns) == ["name", "total_ns"]
    assert _top_candidates(kern, None) is kern and _top_candidates(kern, -1) is kern and _top_candidates(kern, 9) is kern
