"""Unified Memory: CUPTI counter records decoded into the ``uvm`` table, the counters armed
once a context exists, migrations in the ``pcie`` bucket and the prefetch rule (synthetic
records and runs; no GPU)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from perfscope.analyzers import analyze_run
from perfscope.analyzers.uvm import UVM_COLUMNS, uvm_frame, uvm_row
from perfscope.collectors.cupti import decode, layouts, uvm
from perfscope.store import create_run, open_run, update_run, write_rank_meta, write_rank_tables
from tests.unit.test_cupti_sink import sink as sink  # the native sink fixture

MS = 1_000_000
EPOCH = 1_796_000_000_000_000_000


def records(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    """(counter kind, value, start, end, flags) -> raw CUpti_ActivityUnifiedMemoryCounter3 records."""
    r = np.zeros(len(rows), layouts.UVM)
    r["kind"] = layouts.KIND_UNIFIED_MEMORY_COUNTER
    for i, (ck, value, start, end, flags) in enumerate(rows):
        r[i]["counter_kind"], r[i]["value"], r[i]["start"], r[i]["end"], r[i]["flags"] = ck, value, start, end, flags
    r["address"] = 0x7F00_0000_0000
    return r


def test_decode_gives_bytes_faults_and_causes() -> None:
    raw = records([(1, 65536, 100, 150, 3), (2, 4096, 200, 260, 2), (3, 0x7F12_3456_789A, 300, 0, 2),
                   (4, 3, 400, 700, 1), (5, 0, 500, 0, 0), (1, 8192, 0, 0, 0)])  # the last: untimed
    t = decode.decode_all({"uvm": raw.tobytes()}, decode.StringTable(), offset_ns=10)["uvm"].to_pandas()
    assert list(t["kind"].astype(str)) == ["htod", "dtoh", "cpu_page_fault", "gpu_page_fault", "thrashing"]
    assert list(t["start_ns"]) == [110, 210, 310, 410, 510]
    assert list(t["dur_ns"]) == [50, 60, 0, 300, 0]  # a CPU fault is an instant
    assert t["bytes"].tolist()[:2] == [65536, 4096] and t["bytes"].isna().tolist()[2:] == [True] * 3
    assert t["faults"].tolist()[2:4] == [1, 3]  # the CPU fault's value is its program counter, not a count
    assert list(t["cause"].astype(object).fillna("-")) == ["prefetch", "coherence", "write", "read", "-"]
    assert (t["address"] == 0x7F00_0000_0000).all()


def test_layout_matches_the_struct_size_and_the_sink_keeps_it() -> None:
    assert layouts.UVM.itemsize == 104 and layouts.BY_NAME["uvm"].kind == 25
    from perfscope.collectors.cupti.collector import DEFAULT_KINDS, KINDS

    assert KINDS["uvm"] == (layouts.KIND_UNIFIED_MEMORY_COUNTER,) and "uvm" in DEFAULT_KINDS


def test_sink_copies_uvm_records(sink) -> None:
    s = sink
    s.reset()
    s.configure([layouts.KIND_UNIFIED_MEMORY_COUNTER])
    raw = records([(1, 65536, 100, 150, 3), (4, 2, 400, 700, 1)])
    s.feed_plain(raw.tobytes())
    got = decode.records(s.take(layouts.KIND_UNIFIED_MEMORY_COUNTER), layouts.BY_NAME["uvm"])
    assert got.tobytes() == raw.tobytes()


class FakeCupti:
    def __init__(self, refuse: int = 0) -> None:
        self.refuse, self.configured, self.enabled = refuse, [], []

    def activity_configure_unified_memory_counter(self, ptr: int, n: int) -> None:
        if self.refuse:
            self.refuse -= 1
            raise RuntimeError("CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED")
        cfg = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * (16 * n)).from_address(ptr)).view(layouts.UVM_CONFIG)
        self.configured.append(cfg.copy())

    def activity_enable(self, kind: int) -> None:
        self.enabled.append(kind)

    def activity_disable(self, kind: int) -> None:
        self.enabled.remove(kind)


def test_counters_arm_at_once_when_a_context_is_active() -> None:
    cupti, warnings = FakeCupti(), []
    c = uvm.UvmCounters(cupti, warnings.append, find_device=lambda: 1)
    c.start()
    assert c.enabled and cupti.enabled == [25] and c.device == 1
    cfg = cupti.configured[0]
    assert list(cfg["kind"]) == list(uvm.COUNTERS) and set(cfg["device_id"]) == {1} and set(cfg["enable"]) == {1}
    assert set(cfg["scope"]) == {layouts.UVM_SCOPE_SINGLE_DEVICE}
    c.stop()
    assert cupti.enabled == [] and not warnings


def test_counters_wait_for_the_first_context() -> None:
    cupti, device = FakeCupti(), [None]
    c = uvm.UvmCounters(cupti, lambda m: None, find_device=lambda: device[0])
    c.start()
    assert not c.enabled and c._thread is not None
    device[0] = 0
    c._thread.join(timeout=2)
    assert c.enabled and c.device == 0
    c.stop()


def test_refused_counters_fall_back_then_warn() -> None:
    cupti, warnings = FakeCupti(refuse=1), []
    c = uvm.UvmCounters(cupti, warnings.append, find_device=lambda: 0)
    c.start()
    assert c.enabled and c.counters == uvm.ESSENTIAL and not warnings
    cupti, warnings = FakeCupti(refuse=2), []
    c = uvm.UvmCounters(cupti, warnings.append, find_device=lambda: 0)
    c.start()
    assert not c.enabled and cupti.enabled == [] and "not recorded" in warnings[0]
    c.stop()  # nothing to disable


def _uvm_rows(start: int) -> dict[str, list]:
    """One step's Unified Memory traffic: a host-side fault that migrates 64 MiB back (GPU
    idle, 4 ms), then a kernel that faults 64 MiB in (3 ms of migration inside it)."""
    return {
        "start_ns": [start, start + 1 * MS, start + 6 * MS, start + 6 * MS],
        "dur_ns": [0, 4 * MS, 3 * MS, 3 * MS],
        "kind": ["cpu_page_fault", "dtoh", "gpu_page_fault", "htod"],
        "bytes": [None, 64 << 20, None, 64 << 20],
        "faults": [1, None, 500, None],
    }


def make_uvm_run(path: Path, steps: int = 4) -> Path:
    create_run(path, command=["uvm.py"], source="test", world_size=1)
    write_rank_meta(path, 0, {"status": "complete"})
    starts = [EPOCH + i * 10 * MS for i in range(steps + 1)]
    uvm_cols: dict[str, list] = {k: [] for k in _uvm_rows(0)}
    for s in starts[:steps]:
        for k, v in _uvm_rows(s).items():
            uvm_cols[k] += v
    write_rank_tables(path, 0, {
        "steps": {"step": list(range(steps)), "start_ns": starts[:steps], "dur_ns": [10 * MS] * steps,
                  "name": [f"step#{i}" for i in range(steps)], "source": ["explicit"] * steps},
        "kernels": {"start_ns": [s + 5 * MS for s in starts[:steps]], "dur_ns": [5 * MS] * steps, "name": ["scale"] * steps},
        "uvm": uvm_cols,
    })
    update_run(path, status="complete")
    return path


def test_migrations_are_pcie_and_the_rule_advises_prefetch(tmp_path: Path) -> None:
    a = analyze_run(open_run(make_uvm_run(tmp_path / "uvm.perfscope")))
    s = a.steps.iloc[0]
    # the host-side migration runs with the GPU idle: pcie; the one inside the kernel: compute, hidden
    assert s["pcie_ns"] == 4 * MS and s["compute_ns"] == 5 * MS and s["hidden_pcie_ns"] == 3 * MS
    row = a.uvm.iloc[0]
    assert list(a.uvm.columns) == list(UVM_COLUMNS)
    assert (row["steps"], row["htod_bytes"], row["dtoh_bytes"], row["migrations"]) == (4, 4 * (64 << 20), 4 * (64 << 20), 8)
    assert (row["cpu_faults"], row["gpu_faults"], row["migration_ns"], row["uvm_ns"]) == (4, 2000, 28 * MS, 28 * MS)
    rec = next(r for r in a.recommendations if r.id == "uvm.migrations")
    assert rec.bucket == "pcie" and rec.evidence["uvm_ns_per_step"] == 7 * MS
    assert rec.evidence["htod_bytes_per_step"] == 64 << 20 and rec.evidence["gpu_faults_per_step"] == 500
    # saving: the 7 ms less a bulk prefetch of the 128 MiB at 25 GB/s (5.37 ms)
    assert rec.saving_ns == 7 * MS - round(2 * (64 << 20) / 25.0)
    assert "cudaMemPrefetchAsync" in rec.change and "cudaMemAdvise" in rec.change


def test_no_uvm_rule_without_unified_memory(tmp_path: Path) -> None:
    path = make_uvm_run(tmp_path / "r.perfscope")
    a = analyze_run(open_run(path), None)
    assert len(a.uvm) == 1
    assert uvm_frame([]).empty and list(uvm_frame([]).columns) == list(UVM_COLUMNS)
    assert uvm_row(0, {"start_ns": np.zeros(0, np.int64)}, np.array([0]), np.array([1])) is None


def test_uvm_events_outside_the_steps_are_not_counted() -> None:
    cols = {k: (pd.array(v, dtype="Int64") if k in ("bytes", "faults") else np.asarray(v, dtype=object if k == "kind" else np.int64))
            for k, v in _uvm_rows(EPOCH).items()}
    assert uvm_row(0, cols, np.array([EPOCH + 50 * MS]), np.array([EPOCH + 60 * MS])) is None
    row = uvm_row(0, cols, np.array([EPOCH]), np.array([EPOCH + 2 * MS]))  # the fault and the migration start inside
    assert row is not None and row["dtoh_bytes"] == 64 << 20 and row["htod_bytes"] == 0 and row["migration_ns"] == 1 * MS


def test_auto_counters_wait_for_the_first_managed_allocation() -> None:
    """``auto``: turning the counters off again costs a detach 2 s (H200), so a job that never
    allocates managed memory never gets them; one that does gets them once the flag is up."""
    cupti, seen = FakeCupti(), [False]
    c = uvm.arm(cupti, lambda m: None, "auto", lambda: seen[0])
    assert c is not None
    try:
        c._try_arm()  # a context is active (the real find_device may say None: the flag is asked first)
        assert not c.enabled and cupti.enabled == [] and c._thread is not None
        seen[0] = True
        c._find = lambda: 0
        c._thread.join(timeout=2)
        assert c.enabled and cupti.enabled == [25]
    finally:
        c.stop()


def test_arm_modes() -> None:
    assert uvm.arm(FakeCupti(), lambda m: None, "off", lambda: True) is None
    cupti = FakeCupti()
    c = uvm.arm(cupti, lambda m: None, "always", lambda: False)
    assert c is not None and c._wanted is None  # at the first context, whatever the flag says
    c.stop()
    c = uvm.arm(FakeCupti(), lambda m: None, "auto", None)  # no callback to report allocations
    assert c is not None and c._wanted is None
    c.stop()


def test_sink_flags_a_managed_allocation_and_nothing_else(sink) -> None:
    """The API callback raises the sink's flag at cudaMallocManaged / cuMemAllocManaged (the
    ids of cbids.MANAGED_ALLOC, which sink.c spells out too) and at no other call.  In a
    fresh process (the ``sink`` fixture built the library): the flag is never lowered."""
    import subprocess
    import sys

    code = (
        "from perfscope.collectors.cupti import cbids, layouts, native\n"
        "s = native.Sink()\n"
        "s.reset(); s.configure([layouts.KIND_RUNTIME, layouts.KIND_DRIVER])\n"
        "s.test_api_call(2, 211, 1); s.test_api_call(1, 307, 2)\n"  # cudaLaunchKernel, cuLaunchKernel
        "a = s.managed_seen()\n"
        "rt, dr = cbids.MANAGED_ALLOC\n"
        "s.test_api_call(1, dr, 3)\n"
        "b = s.managed_seen()\n"
        "s.reset()\n"
        "print(a, b, s.managed_seen(), cbids.RUNTIME[rt], cbids.DRIVER[dr])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2], check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "True", "True", "cudaMallocManaged", "cuMemAllocManaged"]
