"""A small CUDA training script recorded by the GPU tests, by perfscope or by torch.profiler.

    python tests/gpu/cupti_workload.py --mode perfscope --out DIR [--samples DIR]
    python tests/gpu/cupti_workload.py --mode torch --out DIR

Both modes run the same warm-up unrecorded, then record the same steps, and write
``DIR/summary.json``: kernel count and names, plus (perfscope) the collector's stop()
statistics and the run directory ``DIR/run``.  With ``--samples`` the perfscope mode also
saves the raw records the native sink produced (tests/data/cupti/ holds such samples).
Each step has pageable and pinned H2D copies, a D2H copy (``loss.item()``), a cudaMemset,
an event and a device synchronisation and an NVTX range.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path


def _cudart_memset() -> object | None:
    """cudaMemsetAsync from the libcudart torch loaded (None where not found)."""
    for line in open("/proc/self/maps"):
        if "libcudart.so" in line:
            lib = ctypes.CDLL(line.split(None, 5)[-1].strip())
            fn = lib.cudaMemsetAsync
            fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
            return fn
    return None


def build(torch: object) -> tuple:
    import torch.nn as nn  # noqa: PLC0415

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x_pageable = torch.randn(64, 256)
    x_pinned = torch.randn(64, 256).pin_memory()
    scratch = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    return model, opt, x_pageable, x_pinned, scratch


def step(torch: object, state: tuple, i: int, memset: object | None) -> float:
    model, opt, x_pageable, x_pinned, scratch = state
    torch.cuda.nvtx.range_push(f"step {i}")
    xa = x_pageable.cuda()
    xb = x_pinned.cuda(non_blocking=True)
    if memset is not None:
        memset(scratch.data_ptr(), 0, scratch.numel(), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    loss = (model(xa) - model(xb)).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ev = torch.cuda.Event()
    ev.record()
    ev.synchronize()
    value = loss.item()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["perfscope", "torch", "none"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--samples", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.mode == "perfscope":
        # NVTX picks its tool at the process's first NVTX call (the warm-up below).
        from perfscope.collectors.cupti import nvtx_injection_env

        os.environ.update(nvtx_injection_env())
    import torch

    memset = _cudart_memset()
    state = build(torch)
    for i in range(2):
        step(torch, state, -1 - i, memset)
    torch.cuda.synchronize()
    summary: dict = {"mode": args.mode, "steps": args.steps, "memset": memset is not None}
    if args.mode == "perfscope":
        from perfscope.collectors.cupti import CuptiCollector
        from perfscope.store import RankWriter, create_run, open_run

        run = out / "run"
        create_run(run, command=sys.argv, source="record", overwrite=True)
        writer = RankWriter(run, 0)
        coll = CuptiCollector(writer)
        if args.samples:
            coll._raw_log = []
        coll.start()
        t0 = time.perf_counter()
        for i in range(args.steps):
            step(torch, state, i, memset)
            if i == args.steps // 2:
                coll.flush()  # one mid-run drain, as a periodic flush would do
        summary["wall_s"] = time.perf_counter() - t0
        stats = coll.stop()
        writer.close()
        summary["stats"] = stats
        r = open_run(run)
        k = r.table("kernels")
        summary["kernels"] = len(k)
        summary["kernel_names"] = dict(Counter(map(str, k["name"])))
        summary["rows"] = r.row_counts()
        if args.samples:
            from perfscope.collectors.cupti import samples

            samples.save(Path(args.samples), coll._raw_log, coll, note="tests/gpu/cupti_workload.py --mode perfscope")
    elif args.mode == "torch":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(args.steps):
                step(torch, state, i, memset)
        trace = out / "torch_trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
        kern = [e for e in events if e.get("cat") == "kernel"]
        summary["kernels"] = len(kern)
        summary["kernel_names"] = dict(Counter(e["name"] for e in kern))
        summary["memcpy"] = sum(1 for e in events if e.get("cat") == "gpu_memcpy")
        summary["memset_events"] = sum(1 for e in events if e.get("cat") == "gpu_memset")
    else:
        for i in range(args.steps):
            step(torch, state, i, memset)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
