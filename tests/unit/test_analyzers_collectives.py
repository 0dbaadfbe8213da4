"""Collectives bandwidth and matching; straggler ranking."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfscope.analyzers.collectives import analyze_collectives, bus_factor, collectives_from_kernels
from perfscope.analyzers.stragglers import rank_stragglers


def test_bus_factors_nccl_tests() -> None:
    f = bus_factor(pd.Series(["AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AllToAll", "Send", "Recv"]), pd.Series([4] * 8))
    assert f.tolist() == pytest.approx([1.5, 0.75, 0.75, 1, 1, 0.75, 1, 1])


def test_match_by_seq_skew_wait_and_bandwidth() -> None:
    # GIVEN three ranks; rank 2 arrives 200 ns late at op 1
    c = pd.DataFrame({"rank": [0, 1, 2], "start_ns": [100, 100, 300], "dur_ns": [400, 400, 200], "comm_id": "c", "seq": [1, 1, 1],
                      "func": "allreduce", "bytes": [1000] * 3, "nranks": 3})
    r = analyze_collectives(c).set_index("rank")
    assert r["arrival_skew_ns"].tolist() == [0, 0, 200]
    assert r["wait_ns"].tolist() == [200, 200, 0]
    assert r["transfer_ns"].tolist() == [200, 200, 200]
    assert r.loc[0, "algbw_gbps"] == pytest.approx(5.0)  # 1000 B / 200 ns
    assert r.loc[0, "busbw_gbps"] == pytest.approx(5.0 * 4 / 3)
    assert (r["last_rank"] == 2).all()


def test_allgather_size_is_bytes_times_n() -> None:
    c = pd.DataFrame({"rank": [0, 1], "start_ns": [0, 0], "dur_ns": [100, 100], "comm_id": "c", "seq": [0, 0], "func": "AllGather", "bytes": [100, 100], "nranks": 2})
    r = analyze_collectives(c)
    assert r["algbw_gbps"].tolist() == pytest.approx([2.0, 2.0])
    assert r["busbw_gbps"].tolist() == pytest.approx([1.0, 1.0])


def test_match_by_order_when_seq_missing() -> None:
    c = pd.DataFrame({"rank": [0, 0, 1, 1], "start_ns": [0, 1000, 50, 1000], "dur_ns": [100] * 4, "comm_id": None, "seq": None,
                      "func": "AllReduce", "bytes": 8, "nranks": 2})
    r = analyze_collectives(c)
    assert r.groupby("match_key")["rank"].nunique().tolist() == [2, 2]
    assert r.loc[(r["rank"] == 0) & (r["start_ns"] == 0), "wait_ns"].item() == 50


def test_stragglers_ranking() -> None:
    c = pd.DataFrame({"rank": [0, 1, 2, 0, 1, 2], "start_ns": [100, 100, 300, 1000, 1050, 1010], "dur_ns": [400, 400, 200, 100, 50, 90],
                      "comm_id": "c", "seq": [1, 1, 1, 2, 2, 2], "func": "AllReduce", "bytes": 1000, "nranks": 3})
    s = rank_stragglers(analyze_collectives(c)).set_index("rank")
    assert s.loc[2, "last_count"] == 1 and s.loc[1, "last_count"] == 1 and s.loc[0, "last_count"] == 0
    assert s.loc[2, "cost_to_others_ns"] == 400
    assert s.loc[1, "cost_to_others_ns"] == 90
    assert s.loc[2, "mean_lateness_ns"] == 105
    assert s.index[0] == 2


def test_single_rank_has_no_skew() -> None:
    c = pd.DataFrame({"rank": [0], "start_ns": [0], "dur_ns": [10], "comm_id": "c", "seq": [0], "func": "AllReduce", "bytes": 10, "nranks": 8})
    r = analyze_collectives(c)
    assert r["wait_ns"].tolist() == [0] and r["matched_ranks"].tolist() == [1]
    assert len(rank_stragglers(r)) == 0


def test_collectives_from_kernels() -> None:
    k = pd.DataFrame({"rank": [0, 1], "start_ns": [0, 5], "dur_ns": [10, 5], "name": ["ncclKernel_AllReduce_RING", "ncclDevKernel_Generic"]})
    c = collectives_from_kernels(k, np.array(["communication", "communication"]))
    assert c["func"].tolist() == ["AllReduce", "unknown"]


def test_end_aligned_skew_ignores_clock_offsets() -> None:
    # GIVEN rank 1's clock is 1 ms ahead, and rank 0 arrived 200 ns before rank 1
    c = pd.DataFrame({"rank": [0, 1], "start_ns": [1000, 1_001_200], "dur_ns": [500, 300], "comm_id": "c", "seq": [0, 0],
                      "func": "AllReduce", "bytes": 10, "nranks": 2})
    shared = analyze_collectives(c).set_index("rank")
    assert shared.loc[0, "wait_ns"] == 500  # the offset swamps the real 200 ns
    r = analyze_collectives(c, clock="end_aligned").set_index("rank")
    assert r["wait_ns"].tolist() == [200, 0]
    assert r["arrival_skew_ns"].tolist() == [0, 200]
    assert (r["last_rank"] == 1).all()
