"""Plugin files recorded on an H200 (NCCL 2.28.9, torch 2.11, ABI v5) turned into a run.

tests/data/nccl_2rank (level 3) and nccl_4rank (level 1) hold the raw plugin files of
tests/gpu/nccl_plugin_job.py --mode workload (2 and 4 ranks on one GPU over loopback
sockets) and each rank's log of the torch.distributed calls it made (calls-rank<R>.json).
The collectives table must list exactly those calls, in order, on every rank.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from perfscope.collectors.nccl import ingest_dir, summarize_dir
from perfscope.store import create_run, open_run

DATA = Path(__file__).resolve().parents[1] / "data"


def expected_ops(calls: list[dict]) -> list[tuple]:
    """(func, bytes, root, peer) per call, as NCCL sees them.

    torch sends all_gather and broadcast as int8 (so compare bytes, not counts), and
    barrier is an all_reduce of one float32.
    """
    size = {"ncclFloat32": 4, "ncclBfloat16": 2}
    out = []
    for c in calls:
        if c["func"] == "Barrier":
            out.append(("AllReduce", 4, None, None))
        else:
            out.append((c["func"], c["count"] * size[c["dtype"]], c["root"], c["peer"]))
    return out


@pytest.fixture(scope="module", params=["nccl_2rank", "nccl_4rank"])
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    src = DATA / request.param
    run = tmp_path_factory.mktemp(request.param) / "run"
    nranks = len(list(src.glob("calls-rank*.json")))
    create_run(run, world_size=nranks, collectors=["nccl_plugin"])
    written = ingest_dir(src, run)
    assert sorted(written) == list(range(nranks)) and all(n > 0 for n in written.values())
    return src, open_run(run)


def test_collectives_match_the_calls_each_rank_made(recorded: tuple[Path, object]) -> None:
    src, run = recorded
    coll = run.table("collectives")
    nranks = len(run.ranks)
    for rank in run.ranks:
        calls = json.loads((src / f"calls-rank{rank}.json").read_text())
        mine = coll[coll["rank"] == rank].sort_values(["enqueue_ns", "func"], kind="stable")
        got = [
            (r.func, int(r.bytes), None if pd.isna(r.root) else int(r.root), None if pd.isna(r.peer) else int(r.peer))
            for r in mine.itertuples()
        ]
        # Send and Recv of one batch_isend_irecv are enqueued in one group: order them as logged.
        assert sorted(got, key=str) == sorted(expected_ops(calls), key=str)
        assert [g[0] for g in got if g[0] not in ("Send", "Recv")] == [e[0] for e in expected_ops(calls) if e[0] not in ("Send", "Recv")]
        assert (mine["nranks"] == nranks).all() and (mine["source"] == "nccl_plugin").all()


def test_fields_are_complete_and_consistent(recorded: tuple[Path, object]) -> None:
    _, run = recorded
    coll = run.table("collectives")
    colls = coll[~coll["func"].isin(["Send", "Recv"])]
    assert colls["algorithm"].notna().all() and set(colls["protocol"]) <= {"SIMPLE", "LL", "LL128"}
    assert colls["nwarps"].notna().all() and (coll["nchannels"] >= 1).all()
    assert (coll["dur_ns"] > 0).all() and (coll["enqueue_ns"] <= coll["start_ns"]).all()
    # One communicator, the same id on every rank; seq counts each function from 0.
    assert coll["comm_id"].nunique() == 1
    for (_, func), g in colls.groupby(["rank", "func"], observed=True):
        assert sorted(g["seq"]) == list(range(len(g))), func
    # Every rank saw the same operations (comm_id, func, seq).
    keys = {r: set(map(tuple, g[["comm_id", "func", "seq"]].astype(str).to_numpy())) for r, g in coll.groupby("rank")}
    assert len({frozenset(k) for k in keys.values()}) == 1
    # GPU timing came from KernelCh on every operation.
    ch = run.table("nccl_channels")
    assert ch["gpu_timed"].all()
    assert len(ch.groupby(["rank", "func", "seq"], observed=True)) == len(coll)
    joined = coll.merge(ch.groupby(["rank", "func", "seq"], observed=True)["start_ns"].min().rename("ch_start").reset_index(),
                        on=["rank", "func", "seq"])
    assert (joined["start_ns"] == joined["ch_start"]).all()


def test_gpu_clock_offset_is_small_and_reported(recorded: tuple[Path, object]) -> None:
    src, _ = recorded
    for rank, info in summarize_dir(src).items():
        assert info["dropped_events"] == {"nccl_plugin": 0}
        (offset,) = info["nccl_plugin"]["gpu_clock_offset_ns"].values()
        # %globaltimer runs within a millisecond of CLOCK_REALTIME on this machine.
        assert offset is not None and abs(offset) < 1_000_000
        (f,) = info["nccl_plugin"]["files"]
        assert f["comms"][0]["abi"] == 5 and f["stats"]["bad_handles"] == 0


def test_level3_proxy_steps(recorded: tuple[Path, object]) -> None:
    src, run = recorded
    proxy = run.table("proxy")
    if src.name != "nccl_2rank":
        assert proxy.empty  # level 1 records no proxy events
        return
    assert set(proxy["kind"]) == {"op", "step"}
    steps = proxy[proxy["kind"] == "step"]
    assert steps["func"].notna().all() and steps["trans_bytes"].notna().all()
    send, recv = steps[steps["is_send"]], steps[~steps["is_send"]]
    assert send["send_wait_ns"].notna().all() and recv["recv_wait_ns"].notna().all()
    assert (steps["peer"] == 1 - steps["rank"]).all()


def test_bandwidth_from_the_analyzer(recorded: tuple[Path, object]) -> None:
    _, run = recorded
    collectives = pytest.importorskip("perfscope.analyzers.collectives")
    out = collectives.analyze_collectives(run.table("collectives"), world_size=len(run.ranks))
    big = out[(out["func"] == "AllReduce") & (out["bytes"] == 1 << 20)]
    assert len(big) == len(run.ranks) and (big["busbw_gbps"] > 0).all()
    # Every operation was matched across all ranks on (comm_id, func, seq).
    assert (out["matched_ranks"] == len(run.ranks)).all()


RECORD_RUN = DATA / "h200" / "nccl_record_2rank.perfscope"


def test_run_recorded_through_perfscope_record_lists_every_call() -> None:
    """`perfscope record -- torchrun --nproc-per-node 2 tests/gpu/nccl_plugin_job.py --mode
    workload` on the H200 (the recorder set NCCL_PROFILER_PLUGIN itself; CUPTI, host hooks
    and NVML ran beside it): every call of every rank is a collectives row, each with its
    channel rows and its NCCL kernel from CUPTI, and the analysis matches them across ranks."""
    run = open_run(RECORD_RUN)
    assert run.meta["source"] == "record" and run.meta["status"] == "complete" and run.ranks == [0, 1]
    coll = run.table("collectives")
    for rank in run.ranks:
        calls = json.loads((RECORD_RUN / f"calls-rank{rank}.json").read_text())
        mine = coll[coll["rank"] == rank]
        got = [(r.func, int(r.bytes), None if pd.isna(r.root) else int(r.root), None if pd.isna(r.peer) else int(r.peer))
               for r in mine.itertuples()]
        assert sorted(got, key=str) == sorted(expected_ops(calls), key=str)
    assert (coll["source"] == "nccl_plugin").all() and (coll["dur_ns"] > 0).all()
    ch = run.table("nccl_channels")
    assert len(ch.groupby(["rank", "func", "seq"], observed=True)) == len(coll)
    # CUPTI saw one NCCL kernel per collective call (Send and Recv of a group share one).
    kernels = run.table("kernels")
    nccl = kernels[kernels["name"].str.startswith("ncclDevKernel")]
    for rank in run.ranks:
        mine = coll[coll["rank"] == rank]
        calls_launched = len(mine[~mine["func"].isin(["Send", "Recv"])]) + len(mine[mine["func"] == "Send"])
        assert len(nccl[nccl["rank"] == rank]) == calls_launched
    collectives = pytest.importorskip("perfscope.analyzers.collectives")
    out = collectives.analyze_collectives(coll, world_size=2)
    assert (out["matched_ranks"] == 2).all()
