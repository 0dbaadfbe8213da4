"""The NCCL profiler plugin driven by a C harness that calls it the way NCCL does.

No NCCL and no GPU: tests/native/nccl_harness.c dlopens the plugin, drives its v4, v5 and
v6 function tables from an application thread and a proxy thread per communicator, with
synthetic descriptors whose every value is a function of (communicator, operation), and
these tests read the plugin's file back and check every event, field and count.  The
plugin and harness are compiled here with gcc (also under ASan and TSan).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "collectors" / "nccl"
HARNESS = REPO / "tests" / "native" / "nccl_harness.c"
from perfscope.collectors.nccl import reader as R

FUNCS = ["AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce"]
DTYPES = ["ncclFloat32", "ncclBfloat16", "ncclInt8"]
ALGOS = ["RING", "TREE", "COLLNET_DIRECT"]
PROTOS = ["SIMPLE", "LL", "LL128"]
LEVEL_TYPES = {
    1: {R.GROUP, R.COLL, R.P2P, R.KERNEL_CH, R.GROUP_API, R.COLL_API, R.P2P_API, R.KERNEL_LAUNCH},
}
LEVEL_TYPES[2] = LEVEL_TYPES[1] | {R.PROXY_OP}
LEVEL_TYPES[3] = LEVEL_TYPES[2] | {R.PROXY_STEP}

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not sys.platform.startswith("linux"), reason="needs gcc on Linux")


def _gcc(out: Path, sources: list[Path], *flags: str, shared: bool = False) -> Path:
    cmd = ["gcc", "-std=gnu11", "-g", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror", f"-I{SRC}", *flags]
    if shared:
        cmd += ["-shared", "-fPIC", "-fvisibility=hidden", "-Wl,-z,nodelete"]
    cmd += ["-o", str(out), *map(str, sources), "-pthread", "-ldl"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The plugin and the harness, built with -O2 (no sanitizer)."""
    d = tmp_path_factory.mktemp("nccl_build")
    lib = _gcc(d / "libperfscope_nccl.so", [SRC / "perfscope_nccl.c"], "-O2", shared=True)
    exe = _gcc(d / "harness", [HARNESS], "-O1")
    return {"lib": lib, "exe": exe}


def run_harness(
    build: dict[str, Path], out: Path, abi: str, ncomms: int, nops: int, level: int = 3, **env: str
) -> dict[str, Any]:
    """Run the harness; returns its JSON summary plus ``stderr`` and ``files``."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("PERFSCOPE_") and k not in ("RANK",)}
    e.update({"PERFSCOPE_NCCL_DIR": str(out), "PERFSCOPE_NCCL_LEVEL": str(level), **env})
    p = subprocess.run([str(build["exe"]), str(build["lib"]), abi, str(ncomms), str(nops)], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    summary["stderr"] = p.stderr
    summary["files"] = R.find_files(out)
    return summary


def expected_calls(abi: int, nops: int) -> dict[int, int]:
    """startEvent calls per event type for one communicator of the harness."""
    ncoll = len(range(0, nops, 3))
    np2p = nops - ncoll
    nch = sum(1 + i % 4 for i in range(0, nops, 3)) + sum(1 + i % 2 for i in range(nops) if i % 3)
    calls = {R.GROUP: nops, R.COLL: ncoll, R.P2P: np2p, R.PROXY_OP: nch, R.PROXY_STEP: 2 * nch, R.KERNEL_CH: nch}
    if abi >= 5:
        calls.update({R.GROUP_API: nops, R.COLL_API: ncoll, R.P2P_API: np2p, R.KERNEL_LAUNCH: nops})
    return calls


def check_file(summary: dict[str, Any], level: int, nops: int) -> pd.DataFrame:
    """Check every record of the harness's one output file; returns its events."""
    assert len(summary["files"]) == 1
    f = R.read_file(summary["files"][0])
    assert f.truncated_bytes == 0
    assert f.header["level"] == level and f.header["version"] == 2
    ev = R.events(f)
    t0, t1 = summary["t0"], summary["t1"]
    kept = LEVEL_TYPES[level]
    abis = summary["abis"]

    # Communicators: one COMM and one COMM_END each, with what init was given.
    assert sorted(f.comms["comm_id"]) == sorted(f"0x{0x1000 + c:016x}" for c in range(len(abis)))
    comm_of_hash = {int(h, 16) - 0x1000: int(i) for h, i in zip(f.comms["comm_id"], f.comms["comm"])}
    for c, abi in enumerate(abis):
        row = f.comms[f.comms["comm"] == comm_of_hash[c]].iloc[0]
        assert (row["comm_name"], row["rank"], row["nranks"], row["nnodes"], row["abi"]) == (f"comm{c}", c % 4, 4, 2, abi)
        assert t0 <= row["init_ns"] <= row["end_ns"] <= t1

    # Counts: what the harness started, per type, minus what NCCL would not have sent.
    for c, abi in enumerate(abis):
        mine = ev[ev["comm"] == comm_of_hash[c]]
        got = mine["type"].value_counts().to_dict()
        want = {t: n for t, n in expected_calls(abi, nops).items() if t in kept}
        assert got == want, (c, abi, got, want)
        assert (mine["abi"] == abi).all()
    assert ev["id"].is_unique and (ev["id"] > 0).all()
    assert ((ev["start_ns"] >= t0) & (ev["start_ns"] <= ev["stop_ns"]) & (ev["stop_ns"] <= t1)).all()
    assert (ev["tid"] > 0).all()
    stats = f.stats
    assert stats["ring_drops"] == 0 and stats["slot_drops"] == 0 and stats["write_errors"] == 0
    assert stats["events_started"] == len(ev)
    assert stats["records_queued"] == len(ev) + 2 * len(abis)
    assert stats["bad_handles"] == 2  # the harness's deliberate bogus handle
    if level < 2:
        assert stats["foreign_proxy_ops"] == 0

    by_id = ev.set_index("id")
    hcomm = {v: k for k, v in comm_of_hash.items()}

    # Coll: every field.
    coll = ev[ev["type"] == R.COLL]
    for r in coll.itertuples():
        i, c = int(r.u0), hcomm[r.comm]
        assert (r.func, int(r.u1), r.dtype, r.i0) == (FUNCS[i % 5], 1000 + i, DTYPES[i % 3], i % 4)
        assert (r.nch, r.nwarps, r.algo, r.proto) == (1 + i % 4, 8 + i % 9, ALGOS[i % 3], PROTOS[i % 3])
        parent = by_id.loc[r.parent]
        if abis[c] >= 5:
            assert parent["type"] == R.COLL_API and parent["func"] == r.func and int(parent["u0"]) == 1000 + i
            assert parent["i0"] == i % 4 and int(parent["u1"]) == 0xABC0 + c and parent["dtype"] == r.dtype
            assert bool(parent["flags"] & R.FLAG_GRAPH_CAPTURED) == (i % 7 == 0)
            assert by_id.loc[r.aux, "type"] == R.GROUP
            gapi = by_id.loc[parent["parent"]]
            assert gapi["type"] == R.GROUP_API and gapi["i0"] == 1 + i % 2
            assert gapi["start_ns"] <= gapi["t0"] <= gapi["t1"] <= gapi["stop_ns"]
        else:
            assert parent["type"] == R.GROUP and r.aux == 0
    assert sorted(coll.groupby("comm")["u0"].apply(list).iloc[0]) == list(range(0, nops, 3))

    # P2p: every field.
    p2p = ev[ev["type"] == R.P2P]
    for r in p2p.itertuples():
        i, c = int(r.u1) - 2000, hcomm[r.comm]
        assert i % 3 in (1, 2)
        assert (r.func, r.dtype, r.i0, r.nch) == ("Send" if i % 3 == 1 else "Recv", DTYPES[i % 3], (c % 4 + 1) % 4, 1 + i % 2)
        parent = by_id.loc[r.parent]
        assert parent["type"] == (R.P2P_API if abis[c] >= 5 else R.GROUP)
        if abis[c] >= 5:
            assert parent["func"] == r.func and int(parent["u0"]) == 2000 + i

    kl = ev[ev["type"] == R.KERNEL_LAUNCH]
    assert (kl["parent"].map(by_id["type"]) == R.GROUP_API).all()
    assert (kl["u1"].astype("int64") == kl["comm"].map(hcomm) + 0xABC0).all()

    # KernelCh: GPU timer values and parents.
    kch = ev[ev["type"] == R.KERNEL_CH]
    ops = ev[ev["type"].isin([R.COLL, R.P2P])].set_index("id")
    for r in kch.itertuples():
        op = ops.loc[r.parent]
        i = int(op["u0"]) if op["type"] == R.COLL else int(op["u1"]) - 2000
        c = hcomm[r.comm]
        assert 0 <= r.i0 < op["nch"]
        assert int(r.u0) == 10**9 * (c + 1) + 1000 * i + 10 * r.i0 and int(r.u1) == int(r.u0) + 500
        assert r.start_ns <= r.t0 <= r.stop_ns
    assert len(kch) == int(ops["nch"].sum())

    if level >= 2:
        pop = ev[ev["type"] == R.PROXY_OP]
        foreign = (pop["flags"] & R.FLAG_FOREIGN_PID) > 0
        assert foreign.sum() == stats["foreign_proxy_ops"] > 0
        assert (pop.loc[foreign, "parent"] == 0).all() and (pop.loc[foreign, "u0"].astype("int64") == f.header["pid"] + 100000).all()
        pop = pop[~foreign]
        assert pop["parent"].isin(ops.index).all()
        assert (pop["i1x"] < pop["parent"].map(ops["nch"])).all()
        assert (pop["i2x"] == 2).all() and (pop["i3x"] == 4096 * (pop["i1x"] + 1)).all()
        assert (pop["i5x"] == pop["comm"].map(hcomm) % 4).all()
        assert (pop["u0"].astype("int64") == f.header["pid"]).all()
        assert ((pop["t3"] >= pop["start_ns"]) & (pop["t3"] <= pop["stop_ns"])).all()
        assert (((pop["flags"] & R.FLAG_IS_SEND) > 0) == (pop["i4x"] == 1)).all()
    if level >= 3:
        st = ev[ev["type"] == R.PROXY_STEP]
        parents = st["parent"].map(by_id["type"])
        assert (parents == R.PROXY_OP).all()
        assert sorted(st.groupby("parent")["i0"].apply(list).map(tuple).unique()) == [(0, 1)]
        assert (st["u1"].astype("int64") == 1024 * (st["i0"] + 1)).all()
        send = st["parent"].map(by_id["i4x"]) == 1
        assert ((st.loc[send, ["t0", "t1", "t2"]] > 0).all(axis=None)) and (st.loc[send, ["t3", "t4", "t5"]] == 0).all(axis=None)
        assert ((st.loc[~send, ["t3", "t4", "t5"]] > 0).all(axis=None)) and (st.loc[~send, ["t0", "t1", "t2"]] == 0).all(axis=None)
    return ev


@pytest.mark.parametrize("abi", ["4", "5", "6"])
def test_each_abi_level1(build: dict[str, Path], tmp_path: Path, abi: str) -> None:
    s = run_harness(build, tmp_path / "out", abi, ncomms=3, nops=60, level=1)
    assert s["masks"] == [0xF47] * 3
    assert s["calls"][str(R.PROXY_OP)][1] == s["calls"][str(R.PROXY_OP)][0]  # not asked for: NULL handles
    check_file(s, level=1, nops=60)


def test_mixed_abis_threads_level3(build: dict[str, Path], tmp_path: Path) -> None:
    s = run_harness(build, tmp_path / "out", "mix", ncomms=6, nops=150, level=3)
    assert s["masks"] == [0xF5F] * 6
    assert all(z == 0 for _, z in s["calls"].values())
    check_file(s, level=3, nops=150)


def test_level2_and_tables(build: dict[str, Path], tmp_path: Path) -> None:
    s = run_harness(build, tmp_path / "out", "5", ncomms=2, nops=30, level=2)
    ev = check_file(s, level=2, nops=30)
    built = R.build_rank_tables([R.read_file(s["files"][0])])
    assert built.rank == 0 and built.dropped_events == 0
    coll = built.tables["collectives"]
    assert len(coll) == len(ev[ev["type"].isin([R.COLL, R.P2P])])
    # GPU time of an op = first channel start .. last channel stop: (nch-1)*10 + 500 ns.
    assert (coll["dur_ns"] == (coll["nchannels"].astype(int) - 1) * 10 + 500).all()
    assert (coll["source"] == "nccl_plugin").all()
    assert set(coll["comm_id"]) == {"0x0000000000001000", "0x0000000000001001"}
    c = coll[coll["func"] == "AllReduce"]
    assert (c["bytes"] == c["count"] * 4).all() or (c["datatype"] != "ncclFloat32").any()
    assert c["root"].isna().all() and coll.loc[coll["func"] == "Broadcast", "root"].notna().all()
    sends = coll[coll["func"] == "Send"]
    assert sends["peer"].notna().all() and sends["algorithm"].isna().all()
    assert list(sends.sort_values("enqueue_ns").groupby("comm_id")["seq"].apply(list).iloc[0]) == list(range(len(sends) // 2))
    assert (coll["enqueue_ns"] <= coll["start_ns"] + 10**12).all()
    assert len(built.tables["nccl_channels"]) == int(coll["nchannels"].sum())
    proxy = built.tables["proxy"]
    assert (proxy["kind"] == "op").all() and proxy["comm_id"].notna().all()
    # ProxyOps from another process (PXN, every 11th op here) cannot be tied to an operation.
    assert proxy["func"].isna().sum() == 2 * sum(1 + i % (4 if i % 3 == 0 else 2) for i in range(30) if i % 11 == 5)


def test_overflow_drops_counted_memory_bounded(build: dict[str, Path], tmp_path: Path) -> None:
    s = run_harness(build, tmp_path / "out", "mix", ncomms=4, nops=3000, level=3,
                    PERFSCOPE_NCCL_SLOTS="64", PERFSCOPE_NCCL_RING="64", PERFSCOPE_NCCL_FLUSH_MS="3600000")
    f = R.read_file(s["files"][0])
    assert (f.header["nslots"], f.header["nring"]) == (64, 64)
    st = f.stats
    calls = sum(n for t, (n, _) in s["calls"].items() if int(t) in LEVEL_TYPES[3])
    nulls = sum(z for t, (_, z) in s["calls"].items() if int(t) in LEVEL_TYPES[3])
    assert st["ring_drops"] > 0, st
    assert st["slot_drops"] == nulls
    assert st["events_started"] + st["slot_drops"] == calls
    ev = R.events(f)
    comm_recs = int(np.isin(f.records["type"], [R.REC_COMM, R.REC_COMM_END]).sum())
    assert st["records_queued"] + st["ring_drops"] == st["events_started"] + 2 * 4
    assert len(ev) + comm_recs == st["records_queued"]
    # ~170k events went through 64 slots and a 64-record ring: memory stays flat.
    assert s["rss1_kb"] - s["rss0_kb"] < 16 * 1024
    built = R.build_rank_tables([f])
    assert built.dropped_events == st["ring_drops"] + st["slot_drops"]


def test_level0_writes_nothing(build: dict[str, Path], tmp_path: Path) -> None:
    s = run_harness(build, tmp_path / "out", "mix", ncomms=3, nops=10, level=0)
    assert s["masks"] == [0, 0, 0] and s["files"] == []


def test_init_failure_is_reported(build: dict[str, Path], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    e = {k: v for k, v in os.environ.items() if not k.startswith("PERFSCOPE_")}
    e["PERFSCOPE_NCCL_DIR"] = str(blocker / "sub")
    p = subprocess.run([str(build["exe"]), str(build["lib"]), "5", "1", "1"], env=e, capture_output=True, text=True)
    assert p.returncode == 3 and "init failed: 2" in p.stderr  # ncclSystemError: NCCL goes on without us


def test_truncated_file_keeps_whole_records(build: dict[str, Path], tmp_path: Path) -> None:
    s = run_harness(build, tmp_path / "out", "5", ncomms=1, nops=9, level=1)
    path = s["files"][0]
    data = path.read_bytes()
    cut = tmp_path / "cut.psnccl"
    cut.write_bytes(data[: len(data) - 200])
    f = R.read_file(cut)
    assert f.truncated_bytes == 56 and len(f.records) == (len(data) - 128) // 128 - 2
    bad = tmp_path / "bad.psnccl"
    bad.write_bytes(b"x" * 300)
    with pytest.raises(R.InputError, match="not a perfscope NCCL plugin file"):
        R.read_file(bad)
    newer = bytearray(data)
    newer[8] = 99
    (tmp_path / "newer.psnccl").write_bytes(bytes(newer))
    with pytest.raises(R.InputError, match="upgrade perfscope"):
        R.read_file(tmp_path / "newer.psnccl")


def _sanitizer_build(tmp: Path, flag: str) -> dict[str, Path] | None:
    try:
        lib = _gcc(tmp / "lib.so", [SRC / "perfscope_nccl.c"], "-O1", f"-fsanitize={flag}", "-fno-omit-frame-pointer", shared=True)
        exe = _gcc(tmp / "harness", [HARNESS], "-O1", f"-fsanitize={flag}", "-fno-omit-frame-pointer")
    except subprocess.CalledProcessError as e:
        pytest.skip(f"gcc cannot build with -fsanitize={flag}: {e.stderr[-300:]}")
    probe = subprocess.run([str(exe)], capture_output=True, text=True)
    if probe.returncode != 2:  # the sanitizer runtime itself failed to start (e.g. memory layout)
        pytest.skip(f"-fsanitize={flag} runtime does not start here: {probe.stderr[-300:]}")
    return {"lib": lib, "exe": exe}


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["address", "thread"])
def test_sanitizers_clean(tmp_path: Path, flag: str) -> None:
    b = _sanitizer_build(tmp_path, flag)
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:halt_on_error=1", "TSAN_OPTIONS": "halt_on_error=1:report_signal_unsafe=0"}
    s = run_harness(b, tmp_path / "a", "mix", ncomms=4, nops=120, level=3, **env)
    assert "Sanitizer" not in s["stderr"], s["stderr"][-3000:]
    check_file(s, level=3, nops=120)
    # Overflow: 2 slots (a v5 operation alone needs 3 at once), so slots are recycled while
    # the proxy thread still holds stale parent handles.
    s = run_harness(b, tmp_path / "b", "mix", ncomms=4, nops=400, level=3, PERFSCOPE_NCCL_SLOTS="2",
                    PERFSCOPE_NCCL_RING="64", PERFSCOPE_NCCL_FLUSH_MS="10", **env)
    assert "Sanitizer" not in s["stderr"], s["stderr"][-3000:]
    assert R.read_file(s["files"][0]).stats["slot_drops"] > 0


def test_forked_child_never_hangs_on_the_flush_lock(build: dict[str, Path], tmp_path: Path) -> None:
    # A thread flushes nonstop, so the file lock is often held at the fork; each child then
    # flushes and exits through exit() (the plugin's destructor flushes too).  A child that
    # inherited the lock held would wait forever: alarm() kills it and the harness counts it.
    s = run_harness(build, tmp_path / "out", "fork", 1, 200, level=1, PERFSCOPE_NCCL_FLUSH_MS="3600000")
    assert s["hung"] == 0 and s["forks"] == 200, s
    f = R.read_file(s["files"][0])  # the children wrote nothing into the parent's file
    assert len(s["files"]) == 1 and f.truncated_bytes == 0
    assert len(R.events(f)) == f.stats["events_started"] == 4


def test_set_level_raises_records_and_pause_holds_for_new_comms(build: dict[str, Path], tmp_path: Path) -> None:
    s = run_harness(build, tmp_path / "out", "setlevel", 1, 1, level=1)
    assert s["mask0"] == 0xF47 and s["handle_level1"] == 0  # ProxyOp not asked for at level 1
    assert s["old"] == 1 and s["mask3"] == 0xF5F
    assert s["handle_level3"] == 1  # asked for now: must be recorded, not dropped
    assert s["old3"] == 3
    assert s["mask_new_paused"] == 0  # a communicator created while paused stays paused
    ev = R.events(R.read_file(s["files"][0]))
    assert list(ev["type"]) == [R.PROXY_OP]


def _paused_run_events(s: dict[str, Any]) -> pd.DataFrame:
    """The Coll and KernelCh events of a ``pause`` harness run, each KernelCh with its Coll's seq."""
    ev = R.events(R.read_file(s["files"][0]))
    coll = ev[ev["type"] == R.COLL].set_index("id")
    kch = ev[ev["type"] == R.KERNEL_CH]
    assert kch["parent"].isin(coll.index).all(), "a KernelCh without its recorded Coll"
    return pd.concat([coll.reset_index()[["type", "u0", "start_ns"]],
                      kch.assign(u0=coll.loc[kch["parent"], "u0"].to_numpy())[["type", "u0", "start_ns"]]])


def test_paused_plugin_records_nothing_started_while_paused_and_records_again_after(
        build: dict[str, Path], tmp_path: Path) -> None:
    # GIVEN a plugin paused by set_level(0) between two runs of operations, and an NCCL that
    # starts events whatever the mask (it sampled the mask before the pause)
    s = run_harness(build, tmp_path / "out", "pause", 1, 5, level=1)
    assert (s["mask_at_init"], s["level"], s["mask_paused"], s["mask_resumed"]) == (0xF47, 1, 0, 0xF47)
    ev = _paused_run_events(s)
    seqs = sorted(ev.loc[ev["type"] == R.COLL, "u0"].astype(int))
    # THEN the operations started while paused (seq 2000..) left nothing, those before and
    # after are whole, and the one begun before the pause kept its KernelCh started during it
    assert seqs == [0, 1, 2, 3, 4, 1000, 3000, 3001, 3002, 3003, 3004]
    assert sorted(ev.loc[ev["type"] == R.KERNEL_CH, "u0"].astype(int)) == seqs
    during = ev[(ev["start_ns"] >= s["t_pause"]) & (ev["start_ns"] < s["t_resume"])]
    assert list(during["u0"].astype(int)) == [1000] and list(during["type"]) == [R.KERNEL_CH]


def test_plugin_loaded_paused_waits_for_set_level(build: dict[str, Path], tmp_path: Path) -> None:
    # GIVEN NCCL loads the plugin between two windows (the recorder's gate sets PERFSCOPE_NCCL_PAUSED)
    s = run_harness(build, tmp_path / "out", "pause", 1, 5, level=2, PERFSCOPE_NCCL_PAUSED="1")
    # THEN its communicators start with no event asked for, and set_level starts recording
    assert (s["mask_at_init"], s["level"], s["mask_paused"], s["mask_resumed"]) == (0, 0, 0, 0xF47)
    ev = _paused_run_events(s)
    assert sorted(ev.loc[ev["type"] == R.COLL, "u0"].astype(int)) == [3000, 3001, 3002, 3003, 3004]
    assert (ev["start_ns"] >= s["t_resume"]).all()


def test_ingest_leaves_out_the_operations_of_a_warmup(build: dict[str, Path], tmp_path: Path) -> None:
    # GIVEN a run whose rank file says everything before the pause was a warm-up
    from perfscope.collectors.nccl.env import ingest_dir
    from perfscope.store import create_run, open_run, write_rank_meta

    s = run_harness(build, tmp_path / "out", "pause", 1, 5, level=1)
    run = tmp_path / "run"
    create_run(run, source="profile")
    write_rank_meta(run, 0, {"rank": 0, "status": "complete", "windows": [
        {"first_step": 3, "last_step": 4, "warmup_start_ns": 0, "start_ns": s["t_pause"], "end_ns": None, "request": None}]})
    ingest_dir(tmp_path / "out", run)
    # THEN only the operations enqueued after it are tables, with their channels
    r = open_run(run)
    after = [3000, 3001, 3002, 3003, 3004]
    assert sorted(r.table("collectives")["seq"]) == after
    assert sorted(r.table("nccl_channels")["seq"]) == after


def test_write_cut_short_keeps_later_records_aligned(build: dict[str, Path], tmp_path: Path) -> None:
    # RLIMIT_FSIZE cuts a flush in the middle of a record (as a full disk does); records
    # flushed after the limit is lifted must still start on a 128-byte boundary.
    s = run_harness(build, tmp_path / "out", "fsize", 1, 10, level=1, PERFSCOPE_NCCL_FLUSH_MS="3600000")
    path = s["files"][0]
    assert (path.stat().st_size - 128) % 128 == 0
    f = R.read_file(path)
    assert f.truncated_bytes == 0
    ev = R.events(f)
    assert (ev["type"] == R.COLL).all() and (ev["func"] == "AllReduce").all()
    seqs = sorted(ev["u0"].astype(int))
    k = sum(q < 1000 for q in seqs)  # what fitted under the limit: whole records only
    assert 0 < k < 10 and seqs == list(range(k)) + list(range(1000, 1010))
    assert f.stats["write_errors"] >= 1 and list(f.comms["comm_name"]) == ["fsize"]
