"""The step breakdown: exact hand-made cases and a property test against a brute-force oracle."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from perfscope.analyzers.breakdown import LAYERS, breakdown, breakdown_rank, post_sync_idle
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS


def iv(*pairs: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64)


def test_hand_made_two_steps_exact() -> None:
    # GIVEN one rank, two 100 ns steps and one interval per layer
    w = pd.DataFrame({"step": [0, 1], "start_ns": [0, 100], "end_ns": [100, 200]})
    layers = {
        "compute": iv((0, 30), (150, 160)), "comm": iv((20, 60)), "comm_wait": iv((40, 50)),
        "pcie": iv((55, 70), (110, 120)), "host_sync": iv((65, 90)), "dataloader": iv((95, 130)),
    }
    # WHEN it is broken down
    out = breakdown_rank(w, layers).set_index("step")
    # THEN every bucket has the exact expected nanoseconds
    assert out.loc[0, list(BUCKET_COLUMNS)].tolist() == [30, 20, 30, 10, 5, 5]
    assert out.loc[1, list(BUCKET_COLUMNS)].tolist() == [10, 0, 0, 10, 20, 60]
    assert out.loc[0, "hidden_network_ns"] == 10  # comm 20..30 under compute
    assert out.loc[0, "hidden_pcie_ns"] == 5  # copy 55..60 under comm
    assert out.loc[0, "collective_wait_ns"] == 10
    assert (out["wall_ns"] == out[list(BUCKET_COLUMNS)].sum(axis=1)).all()


def test_empty_window_and_no_layers() -> None:
    w = pd.DataFrame({"step": [0, 1], "start_ns": [10, 20], "end_ns": [10, 50]})
    out = breakdown_rank(w, {})
    assert out["wall_ns"].tolist() == [0, 30]
    assert out["host_ns"].tolist() == [0, 30]


def test_breakdown_many_ranks_keeps_rows() -> None:
    w = pd.DataFrame({"rank": [1, 0], "step": [0, 0], "start_ns": [0, 0], "end_ns": [10, 20]})
    out = breakdown(w, {0: {"compute": iv((0, 5))}, 1: {"comm": iv((0, 10))}})
    assert out["rank"].tolist() == [0, 1]
    assert out["compute_ns"].tolist() == [5, 0]
    assert out["network_ns"].tolist() == [0, 10]


def test_post_sync_idle_counts_each_gap_once() -> None:
    w = pd.DataFrame({"start_ns": [0, 100], "end_ns": [100, 200]})
    out = post_sync_idle(w, iv((0, 40), (50, 60), (120, 180)), iv((30, 45), (35, 48), (110, 115)))
    assert out["sync_calls"].tolist() == [2, 1]
    assert out["post_sync_idle_ns"].tolist() == [5, 5]


# ---------------------------------------------------------------- property test
PRIORITY = ["compute", "comm_wait", "comm", "pcie", "host_sync", "dataloader"]
LABEL = {"compute": "compute", "comm_wait": "sync", "comm": "network", "pcie": "pcie", "host_sync": "sync", "dataloader": "data_loading"}


def oracle(t: np.ndarray, layers: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Label every integer instant by checking each interval directly (no sweep)."""
    label = np.full(t.size, "host", dtype=object)
    for name in reversed(PRIORITY):
        s, e = layers[name]
        if s.size:
            active = ((s[None, :] <= t[:, None]) & (t[:, None] < e[None, :])).any(axis=1)
            label[active] = LABEL[name]
    return label


intervals = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60)), max_size=8).map(
    lambda xs: (np.array([a for a, _ in xs], dtype=np.int64), np.array([a + d for a, d in xs], dtype=np.int64)))


@settings(max_examples=150, deadline=None)
@given(layers=st.fixed_dictionaries({name: intervals for name in LAYERS}),
       cuts=st.lists(st.integers(0, 330), min_size=1, max_size=5, unique=True))
def test_buckets_partition_every_instant_by_priority(layers, cuts) -> None:
    cuts = sorted(cuts)
    starts, ends = cuts[:-1] or [0], cuts[1:] or [cuts[0] + 7]
    w = pd.DataFrame({"step": range(len(starts)), "start_ns": starts, "end_ns": ends})
    out = breakdown_rank(w, layers)
    # Sums are exact to the nanosecond.
    assert (out[list(BUCKET_COLUMNS)].sum(axis=1) == out["wall_ns"]).all()
    assert (out[list(BUCKET_COLUMNS)] >= 0).all().all()
    # Each instant's bucket is the first rule that holds (oracle over integer instants).
    for _, row in out.iterrows():
        t = np.arange(row["start_ns"], row["end_ns"], dtype=np.int64)
        lab = oracle(t, layers)
        for b, col in zip(BUCKETS, BUCKET_COLUMNS):
            assert row[col] == int((lab == b).sum()), (b, row.to_dict())
        # Priority facts stated directly:
        comp = oracle(t, {**{k: (np.zeros(0, np.int64),) * 2 for k in LAYERS}, "compute": layers["compute"]}) == "compute"
        assert not ((lab == "network") & comp).any()  # an instant with compute is never network
        comm_only = oracle(t, {**{k: (np.zeros(0, np.int64),) * 2 for k in LAYERS}, "comm": layers["comm"]}) == "network"
        waiting = oracle(t, {**{k: (np.zeros(0, np.int64),) * 2 for k in LAYERS}, "comm_wait": layers["comm_wait"]}) == "sync"
        assert ((lab == "network") == (comm_only & ~comp & ~waiting)).all()  # exposed comm is network


@settings(max_examples=150, deadline=None)
@given(layers=st.fixed_dictionaries({name: intervals for name in LAYERS}),
       windows=st.lists(st.tuples(st.integers(0, 320), st.integers(0, 80)), min_size=1, max_size=5))
def test_overlapping_windows_and_extra_columns_match_the_oracle(layers, windows) -> None:
    # GIVEN windows that may overlap or nest (the sweep sums pieces between window bounds)
    w = pd.DataFrame({"step": range(len(windows)), "start_ns": [a for a, _ in windows],
                      "end_ns": [a + d for a, d in windows]})
    # WHEN it is broken down
    out = breakdown_rank(w, layers)
    # THEN every column equals a count of integer instants, checked interval by interval
    on = {name: (lambda s, e: lambda t: ((s[None, :] <= t[:, None]) & (t[:, None] < e[None, :])).any(axis=1))(*layers[name])
          for name in LAYERS}
    for _, row in out.iterrows():
        t = np.arange(row["start_ns"], row["end_ns"], dtype=np.int64)
        lab = oracle(t, layers)
        for b, col in zip(BUCKETS, BUCKET_COLUMNS):
            assert row[col] == int((lab == b).sum()), (b, row.to_dict())
        comp, comm, pcie, wait = (on[k](t) for k in ("compute", "comm", "pcie", "comm_wait"))
        assert row["hidden_network_ns"] == int((comm & comp).sum())
        assert row["hidden_pcie_ns"] == int((pcie & (lab != "pcie")).sum())
        assert row["collective_wait_ns"] == int((wait & ~comp).sum())
        assert row["gpu_idle_ns"] == int((~(comp | comm | pcie)).sum())
