"""Per-call cost of perfscope's host hooks (CPU; no GPU needed).

    python benchmarks/host_hooks.py [--n 200000] [--repeats 7]

Method: each case times ``n`` calls of the same operation with and without the hook,
interleaved ``repeats`` times (hooked and plain alternate, so machine noise hits both),
and reports the median of the per-call difference.  Cases:

* ``wrapper``: a torch.distributed / torch.cuda.synchronize style wrapper around a no-op
  function (the cost added to every barrier, collective or synchronize call);
* ``dataloader``: ``next()`` on a DataLoader iterator over an in-memory dataset of
  pre-built batches (the cost added per batch; a real batch takes milliseconds);
* ``optimizer``: ``SGD.step()`` on one 1-element parameter with the global pre/post hooks
  (span + step boundary);
* ``annotate``: ``with perfscope.annotate(...)`` while a profiler records (NVTX push/pop
  plus the markers row) against an empty ``with`` block.

The profiled cases run with the periodic flush off, so they show the cost on the
training thread; the last row is what the background flusher then spends per recorded
row (drain, Arrow conversion, Parquet write), measured by one explicit flush.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _time(fn: Callable[[], None], n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def _compare(plain: Callable[[], None], hooked: Callable[[], None], n: int, repeats: int) -> tuple[float, float]:
    diffs, base = [], []
    for _ in range(repeats):
        a = _time(plain, n)
        b = _time(hooked, n)
        diffs.append(b - a)
        base.append(a)
    return statistics.median(base), statistics.median(diffs)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    import torch
    from torch.utils.data import DataLoader

    import perfscope
    from perfscope.collectors.host.distributed import _wrap
    from perfscope.collectors.host.patching import is_compiling
    from perfscope.collectors.host.spans import HostSpans

    rows: list[tuple[str, float, float]] = []
    spans = HostSpans()

    def noop() -> None:
        return None

    wrapped = _wrap(noop, spans, "barrier", "noop", is_compiling())

    def hooked_wrapper() -> None:
        wrapped()
        if len(spans) > 100_000:
            spans.clear()

    rows.append(("wrapper (barrier/collective/synchronize)", *_compare(noop, hooked_wrapper, args.n, args.repeats)))

    batches = [torch.zeros(1)] * 1000

    def loader_case() -> Callable[[], None]:
        state = {"it": iter(DataLoader(batches, batch_size=None))}

        def nxt() -> None:
            try:
                next(state["it"])
            except StopIteration:
                state["it"] = iter(DataLoader(batches, batch_size=None))

        return nxt

    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.zeros(1)
    opt = torch.optim.SGD([param], lr=0.0)

    def opt_step() -> None:
        opt.step()

    def empty_with() -> None:
        with contextlib.nullcontext():
            pass

    def annotated() -> None:
        with perfscope.annotate("bench"):
            pass

    n_small = max(1000, args.n // 20)
    cases = [("dataloader next()", n_small), ("optimizer step (SGD, 1 param)", n_small), ("annotate (NVTX + markers row)", args.n)]
    base: dict[str, list[float]] = {c: [] for c, _ in cases}
    added: dict[str, list[float]] = {c: [] for c, _ in cases}
    flush_ns_per_row: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            # plain, then hooked, in every repeat: noise on this shared machine hits both
            plain = {cases[0][0]: loader_case(), cases[1][0]: opt_step, cases[2][0]: empty_with}
            t_plain = {c: _time(plain[c], n) for c, n in cases}
            # no periodic flush while timing: the flusher's work is measured separately below
            with perfscope.profile(Path(tmp) / f"bench{r}", cupti=False, nccl=False, nvml=False,
                                   flush_interval_s=3600) as prof:
                hooked = {cases[0][0]: loader_case(), cases[1][0]: opt_step, cases[2][0]: annotated}
                t_hooked = {c: _time(hooked[c], n) for c, n in cases}
                rows_buffered = len(prof._spans) + len(prof._markers._rows)
                t0 = time.perf_counter_ns()
                prof.flush()
                flush_ns_per_row.append((time.perf_counter_ns() - t0) / max(1, rows_buffered))
            for c, _ in cases:
                base[c].append(t_plain[c])
                added[c].append(t_hooked[c] - t_plain[c])
    for c, _ in cases:
        rows.append((c, statistics.median(base[c]), statistics.median(added[c])))
    rows.append(("flusher: Arrow + Parquet per row (background thread)", 0.0, statistics.median(flush_ns_per_row)))

    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, n={args.n}, repeats={args.repeats}")
    print("| hook | plain call | added per call |")
    print("| --- | --- | --- |")
    for name, base, added in rows:
        print(f"| {name} | {base / 1000:.2f} us | {added / 1000:+.2f} us |")


if __name__ == "__main__":
    main()
