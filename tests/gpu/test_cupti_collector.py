"""GPU tests of the CUPTI collector: record tests/gpu/cupti_workload.py and check the tables.

Each recording runs in its own process (one CUPTI client per process; NVTX picks its
tool at the first NVTX call), once with perfscope and once with torch.profiler.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
WORKLOAD = Path(__file__).resolve().parent / "cupti_workload.py"


def _run(mode: str, out: Path, *extra: str) -> dict:
    proc = subprocess.run([sys.executable, str(WORKLOAD), "--mode", mode, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("cupti")
    return {"perfscope": _run("perfscope", base / "p"), "torch": _run("torch", base / "t"), "dir": base}


def test_kernel_counts_equal_torch_profiler(recorded: dict) -> None:
    ours, theirs = recorded["perfscope"], recorded["torch"]
    assert ours["kernels"] > 0
    assert ours["kernels"] == theirs["kernels"], (ours["kernel_names"], theirs["kernel_names"])
    assert sorted(ours["kernel_names"].values()) == sorted(theirs["kernel_names"].values())


def test_kernel_names_match_torch_profiler(recorded: dict) -> None:
    assert set(recorded["perfscope"]["kernel_names"]) == set(recorded["torch"]["kernel_names"])


def test_tables_have_copies_memsets_syncs_api_and_nvtx(recorded: dict) -> None:
    from perfscope.store import open_run

    run = open_run(recorded["dir"] / "p" / "run")
    steps = recorded["perfscope"]["steps"]
    mc = run.table("memcpy")
    h2d = mc[mc["copy_kind"] == "H2D"]
    assert (h2d["bytes"] == 64 * 256 * 4).sum() == 2 * steps
    assert h2d["pageable"].sum() == steps  # one pageable, one pinned per step
    assert set(h2d["src_kind"].astype(str)) == {"pageable", "pinned"}
    d2h = mc[mc["copy_kind"] == "D2H"]
    assert len(d2h) >= steps and (d2h["bytes"] > 0).all()
    if recorded["perfscope"]["memset"]:
        ms = run.table("memset")
        assert (ms["bytes"] == 1 << 20).sum() == steps
    sync = run.table("sync")
    assert {"event", "context"} <= set(sync["sync_kind"].astype(str))
    api = run.table("api")
    assert "cudaLaunchKernel" in set(api["name"].astype(str))
    assert not api["name"].astype(str).str.contains("GetDevice").any()  # filtered out
    k = run.table("kernels")
    # Every kernel links to the call that launched it: cuBLAS launches its GEMMs through the
    # driver API (cuLaunchKernelEx), so the driver records are what links those.
    linked = k["correlation"].isin(api["correlation"])
    assert linked.all(), k.loc[~linked, "name"].astype(str).value_counts().head().to_dict()
    assert {"runtime", "driver"} <= set(api["kind"].astype(str))
    # A runtime call and the driver call the runtime makes inside it are one record, not two:
    # one launch call per kernel.
    assert not api["correlation"].duplicated().any()
    launches = api[api["name"].astype(str).str.contains("Launch")]
    assert len(launches) == len(k), launches["name"].astype(str).value_counts().to_dict()
    markers = run.table("markers")
    names = set(markers["name"].astype(str))
    assert {f"step {i}" for i in range(steps)} <= names
    assert (markers["dur_ns"] > 0).all()


def test_timestamps_are_epoch_and_ordered(recorded: dict) -> None:
    import time

    from perfscope.store import open_run

    stats = recorded["perfscope"]["stats"]
    run = open_run(recorded["dir"] / "p" / "run")
    k = run.table("kernels")
    now = time.time_ns()
    assert (k["start_ns"] > now - 3600 * 10**9).all() and (k["start_ns"] < now).all()
    assert (k["dur_ns"] > 0).all()
    assert stats["clock"]["epoch"] is True and stats["clock"]["offset_ns"] == 0
    for _, g in k.groupby("stream"):
        assert g["start_ns"].is_monotonic_increasing or g["start_ns"].sort_values().is_monotonic_increasing


def test_stop_statistics(recorded: dict) -> None:
    stats = recorded["perfscope"]["stats"]
    assert stats["dropped"]["cupti"] == 0 and stats["dropped"]["sink"] == 0
    assert stats["rows"]["kernels"] == recorded["perfscope"]["kernels"]
    assert stats["records"]["kernel"]["kept"] == stats["rows"]["kernels"]
    assert stats["overhead"]["buffers"] >= 1
    assert stats["cupti_version"] // 100 == 1300


def test_start_refuses_while_torch_profiler_records(tmp_path: Path) -> None:
    code = (
        "import torch, sys\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "from perfscope.collectors.cupti import CuptiCollector, CuptiUnavailableError\n"
        "class W:\n    def append(self, *a): pass\n"
        "x = torch.ones(4, device='cuda')\n"
        "with profile(activities=[ProfilerActivity.CUDA]):\n"
        "    x.add_(1)\n"
        "    try:\n        CuptiCollector(W()).start()\n    except CuptiUnavailableError as e:\n"
        "        print('REFUSED', e); sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "REFUSED" in proc.stdout, proc.stdout + proc.stderr


def test_records_again_after_torch_profiler(tmp_path: Path) -> None:
    """torch.profiler first, perfscope second, in one process: perfscope still records."""
    code = (
        "import torch, sys\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "from perfscope.collectors.cupti import CuptiCollector\n"
        "class W:\n    n = 0\n    def append(self, t, b):\n        W.n += b.num_rows if t == 'kernels' else 0\n"
        "x = torch.ones(4, device='cuda')\n"
        "with profile(activities=[ProfilerActivity.CUDA]):\n    x.add_(1)\n"
        "c = CuptiCollector(W()); c.start()\n"
        "for _ in range(10): x.add_(1)\n"
        "s = c.stop(); print('KERNELS', W.n, s['warnings'])\n"
        "sys.exit(0 if W.n == 10 else 1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_nothing_is_traced_after_stop() -> None:
    """stop() leaves no kind and no API id enabled (nothing reaches the sink afterwards)."""
    code = (
        "import torch, sys\n"
        "from perfscope.collectors.cupti import CuptiCollector\n"
        "from perfscope.collectors.cupti.native import Sink\n"
        "class W:\n    def append(self, *a): pass\n"
        "x = torch.ones(4, device='cuda')\n"
        "c = CuptiCollector(W()); c.start()\n"
        "for _ in range(10): x.add_(1)\n"
        "s = c.stop()\n"
        "sink = Sink(); before = sink.stats()['seen']\n"
        "for _ in range(50): x.add_(1); x.cpu(); torch.cuda.synchronize()\n"
        "sink.flush(forced=True); after = sink.stats()['seen']\n"
        "print('BEFORE', before, 'AFTER', after, s['records'])\n"
        "sys.exit(0 if before == after and s['records']['runtime']['kept'] >= 10 else 1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
