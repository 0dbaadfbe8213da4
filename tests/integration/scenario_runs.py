"""Synthetic runs with one known bottleneck each, written through the real store API.

They mirror the GPU scenario suite (benchmarks/scenarios/) so the rules can be checked
before (and beside) the recorded runs: each builder returns the run path, and
``EXPECTED`` says which bucket must dominate and which recommendation must come first.
Times are ns; every kernel has a launching API call (same correlation id) on the host.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from perfscope.store import create_run, update_run, write_rank_meta, write_rank_tables

MS = 1_000_000
US = 1_000
T0 = 1_700_000_000_000_000_000


class RankTrace:
    """Accumulates one rank's rows for the store tables."""

    def __init__(self) -> None:
        self.kernels: list[dict] = []
        self.api: list[dict] = []
        self.memcpy: list[dict] = []
        self.sync: list[dict] = []
        self.host: list[dict] = []
        self.steps: list[dict] = []
        self.collectives: list[dict] = []
        self._corr = 0

    def _launch(self, t: int, dur: int, name: str) -> int:
        self._corr += 1
        self.api.append({"start_ns": t, "dur_ns": dur, "correlation": self._corr, "name": name, "kind": "runtime", "tid": 1, "pid": 1})
        return self._corr

    def kernel(self, launch_at: int, start: int, dur: int, name: str = "ampere_sgemm_128x64_nn", launch_dur: int = 5 * US) -> int:
        c = self._launch(launch_at, launch_dur, "cudaLaunchKernel")
        self.kernels.append({"start_ns": start, "dur_ns": dur, "correlation": c, "name": name, "device": 0, "stream": 7})
        return c

    def copy(self, launch_at: int, start: int, dur: int, kind: str = "H2D", pageable: bool = False, nbytes: int = 64 << 20, launch_dur: int | None = None) -> None:
        c = self._launch(launch_at, launch_dur if launch_dur is not None else 5 * US, "cudaMemcpyAsync")
        self.memcpy.append({"start_ns": start, "dur_ns": dur, "correlation": c, "copy_kind": kind, "bytes": nbytes,
                            "pageable": pageable, "src_kind": "pageable" if pageable else "pinned", "dst_kind": "device", "device": 0, "stream": 7})

    def write(self, run: Path, rank: int) -> None:
        tables = {k: v for k, v in {
            "kernels": self.kernels, "api": self.api, "memcpy": self.memcpy, "sync": self.sync,
            "host": self.host, "steps": self.steps, "collectives": self.collectives,
        }.items() if v}
        write_rank_tables(run, rank, {k: {c: [r.get(c) for r in v] for c in v[0]} for k, v in tables.items()})
        write_rank_meta(run, rank, {"status": "complete", "gpu": {"name": "H200", "capability": "9.0", "uuid": f"GPU-{rank}"}})


def _run(path: Path, world: int) -> Path:
    create_run(path, source="record", world_size=world, overwrite=True)
    return path


def _step(tr: RankTrace, i: int, start: int, end: int) -> None:
    tr.steps.append({"step": i, "start_ns": start, "dur_ns": end - start, "name": f"ProfilerStep#{i}", "source": "profiler_step"})


def slow_dataloader(path: Path, steps: int = 6) -> Path:
    """Each 10 ms step: the host waits 6 ms for the batch (GPU idle), then 4 ms of compute."""
    _run(path, 1)
    tr = RankTrace()
    for i in range(steps):
        t = T0 + i * 10 * MS
        _step(tr, i, t, t + 10 * MS)
        tr.host.append({"start_ns": t, "dur_ns": 6 * MS, "kind": "dataloader_wait", "name": "next(batch)", "tid": 1})
        tr.copy(t + 6 * MS, t + 6 * MS + 10 * US, 100 * US)
        for j in range(4):
            tr.kernel(t + 6 * MS + 20 * US + j * 10 * US, t + 6 * MS + 200 * US + j * 950 * US, 950 * US)
    tr.write(path, 0)
    return path


def pageable_copies(path: Path, steps: int = 6) -> Path:
    """Each 10 ms step: a 5 ms pageable H2D copy that blocks the host, then 4 ms of compute."""
    _run(path, 1)
    tr = RankTrace()
    for i in range(steps):
        t = T0 + i * 10 * MS
        _step(tr, i, t, t + 10 * MS)
        tr.copy(t, t + 50 * US, 5 * MS, pageable=True, launch_dur=5 * MS + 100 * US)
        for j in range(4):
            tr.kernel(t + 5200 * US + j * 10 * US, t + 5300 * US + j * 1000 * US, 1000 * US)
    tr.write(path, 0)
    return path


def host_sync(path: Path, steps: int = 6) -> Path:
    """Each 10 ms step: 6 ms of compute, the host synchronises (.item()) and then spends 4 ms
    in Python before it launches the next step's kernels: the GPU idles after every sync."""
    _run(path, 1)
    tr = RankTrace()
    for i in range(steps):
        t = T0 + i * 10 * MS
        _step(tr, i, t, t + 10 * MS)
        for j in range(6):
            tr.kernel(t + j * 20 * US, t + 100 * US + j * 1000 * US, 1000 * US)
        sync_start = t + 200 * US
        sync_end = t + 6100 * US + 20 * US
        tr.sync.append({"start_ns": sync_start, "dur_ns": sync_end - sync_start, "sync_kind": "stream", "device": 0, "stream": 7, "tid": 1})
        tr._launch(sync_start, sync_end - sync_start, "cudaStreamSynchronize")
    tr.write(path, 0)
    return path


def host_sync_micro(path: Path, steps: int = 4, micro: int = 40) -> Path:
    """Like benchmarks/scenarios/host_sync.py: each step runs ``micro`` small forwards of six
    4 us kernels launched 15 us apart, each followed by ``.item()`` (a D2H copy and a stream
    sync); the host takes 25 us after each sync before the next launch."""
    _run(path, 1)
    tr = RankTrace()
    cycle = 6 * 15 * US + 10 * US + 25 * US
    step_len = micro * cycle + 100 * US
    for i in range(steps):
        t = T0 + i * step_len
        _step(tr, i, t, t + step_len)
        for m in range(micro):
            c0 = t + m * cycle
            for j in range(6):
                la = c0 + j * 15 * US
                tr.kernel(la, la + 8 * US, 4 * US, name="void at::native::vectorized_elementwise_kernel<4, mul>", launch_dur=7 * US)
            s0 = c0 + 6 * 15 * US
            tr.copy(s0, s0 + 2 * US, 2 * US, kind="D2H", pageable=True, nbytes=4)
            tr.sync.append({"start_ns": s0 + 1 * US, "dur_ns": 9 * US, "sync_kind": "stream", "device": 0, "stream": 7, "tid": 1})
            tr._launch(s0 + 1 * US, 9 * US, "cudaStreamSynchronize")
    tr.write(path, 0)
    return path


def launch_bound(path: Path, steps: int = 4, n: int = 400) -> Path:
    """Each step: ``n`` 2 us kernels, each launch taking 8 us on the CPU: the GPU waits."""
    _run(path, 1)
    tr = RankTrace()
    step_len = n * 10 * US + 200 * US
    for i in range(steps):
        t = T0 + i * step_len
        _step(tr, i, t, t + step_len)
        la = t + np.arange(n) * 10 * US
        for j in range(n):
            tr.kernel(int(la[j]), int(la[j]) + 12 * US, 2 * US, name="void at::native::vectorized_elementwise_kernel<4, add>", launch_dur=8 * US)
    tr.write(path, 0)
    return path


def compute_bound(path: Path, steps: int = 6) -> Path:
    """Each 10 ms step: back-to-back FP32 GEMMs fill 9.8 ms."""
    _run(path, 1)
    tr = RankTrace()
    for i in range(steps):
        t = T0 + i * 10 * MS
        _step(tr, i, t, t + 10 * MS)
        for j in range(7):
            tr.kernel(t + j * 10 * US, t + 100 * US + j * 1400 * US, 1400 * US, name="ampere_sgemm_128x64_nn")
    tr.write(path, 0)
    return path


def _allreduce(tr: RankTrace, rank: int, seq: int, launch: int, start: int, dur: int, world: int, nbytes: int = 256 << 20) -> None:
    c = tr.kernel(launch, start, dur, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    tr.collectives.append({"start_ns": start, "dur_ns": dur, "enqueue_ns": launch, "comm_id": "0xabc", "seq": seq, "func": "AllReduce",
                           "count": nbytes // 4, "datatype": "ncclFloat32", "bytes": nbytes, "nranks": world, "correlation": c,
                           "source": "nccl_plugin", "device": 0, "stream": 20})


def comm_heavy(path: Path, steps: int = 6, world: int = 2) -> Path:
    """Each 10 ms step on 2 ranks: 3 ms compute, then a 6 ms all-reduce with nothing to overlap."""
    _run(path, world)
    for r in range(world):
        tr = RankTrace()
        for i in range(steps):
            t = T0 + i * 10 * MS
            _step(tr, i, t, t + 10 * MS)
            for j in range(3):
                tr.kernel(t + j * 10 * US, t + 100 * US + j * 1000 * US, 1000 * US)
            _allreduce(tr, r, i, t + 40 * US, t + 3100 * US, 6 * MS, world)
        tr.write(path, r)
    return path


def straggler(path: Path, steps: int = 6, world: int = 4, slow: int = 2) -> Path:
    """4 ranks; each 12 ms step: 4 ms compute then an all-reduce.  Rank ``slow`` spends 5 ms
    more on the host before launching its all-reduce, so the others' NCCL kernels wait."""
    _run(path, world)
    for r in range(world):
        tr = RankTrace()
        for i in range(steps):
            t = T0 + i * 12 * MS
            _step(tr, i, t, t + 12 * MS)
            for j in range(4):
                tr.kernel(t + j * 10 * US, t + 100 * US + j * 1000 * US, 1000 * US)
            arrive = t + 4100 * US + (5 * MS if r == slow else 0)
            end = t + 4100 * US + 5 * MS + 1 * MS
            _allreduce(tr, r, i, arrive - 20 * US, arrive, end - arrive, world)
        tr.write(path, r)
    return path


# name -> (builder, dominant bucket (on the ranks that matter), first recommendation id)
EXPECTED: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "slow_dataloader": (slow_dataloader, "data_loading", "dataloader.workers"),
    "pageable_copies": (pageable_copies, "pcie", "copies.pageable"),
    "host_sync": (host_sync, "compute", "sync.host"),
    "host_sync_micro": (host_sync_micro, "host", "sync.host"),
    "launch_bound": (launch_bound, "host", "launch.bound"),
    "compute_bound": (compute_bound, "compute", "compute.bound"),
    "comm_heavy": (comm_heavy, "network", "comm.exposed"),
    "straggler": (straggler, "sync", "comm.straggler"),
}


def finish(path: Path) -> None:
    """Mark a synthetic run complete."""
    update_run(path, status="complete")
