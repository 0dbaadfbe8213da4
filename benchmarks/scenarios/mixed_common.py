"""Shared harness of the mixed-cause ground-truth workloads (``mixed_*.py``).

Each workload injects two or three bottlenecks of known size into a tiny training step and
measures what each one costs, in the script itself, while ``perfscope record`` watches:

* ``loader``: ``time.sleep`` in the Dataset's ``__getitem__`` (num_workers=0); the cost is
  ``perf_counter`` around ``next(loader)``, the call perfscope's loader hook times.
  Bucket ``data_loading``; finding ``dataloader.workers``.
* ``h2d`` / ``d2h``: one blocking copy between pageable host memory and the GPU
  (``host.to(device)``; ``host_dst.copy_(device_tensor)`` into a preallocated tensor); the cost
  is ``perf_counter`` around the call (the host blocks until the copy is done).  The copy record
  is ``pcie``, staging through the driver's bounce buffer with no copy running is a blocking
  copy, ``sync``: buckets ``pcie`` + ``sync``; finding ``copies.pageable``.
* ``matmul``: float32 matrix products of known size then ``torch.cuda.synchronize()``; the
  cost is CUDA events around the products (the wait in the sync overlaps them, GPU busy).
  Bucket ``compute``; no finding below the compute-bound rule's 85 %.
* ``host``: a pure-Python busy loop of known length with the GPU idle; the cost is
  ``perf_counter`` around it.  Bucket ``host``; finding ``host.overhead``.

Step windows are the times between consecutive ``optimizer.step()`` returns (perfscope's
step hook); the script writes every window's wall time and injected costs to
``$MIXED_TRUTH`` (JSON), from which the injected share of each bucket group is
``sum(cost) / sum(wall)`` over all windows.
"""
from __future__ import annotations

import time

import common
import mixed_truth
import torch
from torch.utils.data import DataLoader, Dataset

# component kind -> (buckets perfscope should put its time in, the finding it should raise)
KINDS: dict[str, tuple[list[str], str | None]] = {
    "loader": (["data_loading"], "dataloader.workers"),
    "h2d": (["pcie", "sync"], "copies.pageable"),
    "d2h": (["pcie", "sync"], "copies.pageable"),
    "matmul": (["compute"], None),
    "host": (["host"], "host.overhead"),
}


class SleepyDataset(Dataset):
    """Samples that each take ``sleep_s`` of (sleeping) CPU time to produce."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.ones(256)


class Workload:
    """One mixed workload: a tiny model plus the injections named in ``spec``.

    ``spec`` maps a component kind to its size: ``loader``: ms of sleep per batch (4
    samples); ``h2d``/``d2h``: MiB copied; ``matmul``: number of 4096^3 float32 products;
    ``host``: ms of Python busy loop.  Components run in the order given.
    """

    def __init__(self, name: str, spec: dict[str, float]) -> None:
        self.name, self.spec = name, spec
        self.dev = common.device()
        self.model = torch.nn.Linear(256, 256).to(self.dev)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.loader = iter(DataLoader(SleepyDataset(spec.get("loader", 0.0) / 4e3), batch_size=4, num_workers=0))
        n = int(spec.get("h2d", spec.get("d2h", 0)) * 2**20 / 4)
        self.host_buf = torch.randn(max(n, 1))  # pageable
        self.dev_buf = torch.randn(max(n, 1), device=self.dev)
        # d2h copies into this: a fresh 128 MiB host tensor per step would add allocation
        # and page faults (host work, measured ~4 ms) to what the copy is said to cost
        self.host_dst = torch.empty_like(self.host_buf)
        self.a = torch.randn(4096, 4096, device=self.dev)
        self.b = torch.randn(4096, 4096, device=self.dev)

    def _loader(self) -> tuple[float, torch.Tensor]:
        t = time.perf_counter()
        x = next(self.loader)
        return time.perf_counter() - t, x

    def _copy(self, kind: str) -> float:
        t = time.perf_counter()
        if kind == "h2d":
            self.host_buf.to(self.dev)
        else:
            self.host_dst.copy_(self.dev_buf)
        return time.perf_counter() - t

    def _matmul(self, count: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(count):
            torch.mm(self.a, self.b)
        end.record()
        torch.cuda.synchronize()  # the injected explicit sync: keeps the next cost from overlapping
        return start.elapsed_time(end) / 1e3

    @staticmethod
    def _host(ms: float) -> float:
        t = time.perf_counter()
        stop = t + ms / 1e3
        acc = 0
        while time.perf_counter() < stop:
            acc += sum(i * i for i in range(100))
        return time.perf_counter() - t

    def step(self) -> dict[str, float]:
        """Run one training step with every injection; returns each injection's cost (s)."""
        costs: dict[str, float] = {}
        x = torch.ones(4, 256, device=self.dev)
        for kind, size in self.spec.items():
            if kind == "loader":
                costs[kind], batch = self._loader()
                x = batch.to(self.dev)
            elif kind in ("h2d", "d2h"):
                costs[kind] = self._copy(kind)
            elif kind == "matmul":
                costs[kind] = self._matmul(int(size))
            elif kind == "host":
                costs[kind] = self._host(size)
        common.optimize(self.opt, self.model(x).square().mean())
        return costs

    def run(self) -> None:
        """All iterations; writes the windows between step ends to ``$MIXED_TRUTH``."""
        ends, costs = [], []
        for _ in range(common.total_iterations()):
            costs.append(self.step())
            ends.append(time.perf_counter())
        torch.cuda.synchronize()
        windows = [
            {"wall_ms": (ends[i] - ends[i - 1]) * 1e3, "costs_ms": {k: v * 1e3 for k, v in costs[i].items()}}
            for i in range(1, len(ends))
        ]
        write_truth(self.name, self.spec, windows)


def write_truth(name: str, spec: dict[str, float], windows: list[dict]) -> None:
    """Write the measured costs and the injected share of each bucket group as JSON."""
    mixed_truth.write_truth(name, spec, windows, KINDS, {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__})


def main(name: str, spec: dict[str, float]) -> None:
    """Build and run the workload ``name`` with the injections of ``spec``."""
    Workload(name, spec).run()
