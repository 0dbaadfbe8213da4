"""A small CUDA training script for tests/gpu/test_record_gpu.py.

    python tests/gpu/record_workload.py --mode plain   --summary S.json            # run under `perfscope record`
    python tests/gpu/record_workload.py --mode profile --run DIR --summary S.json  # perfscope.profile around the steps
    python tests/gpu/record_workload.py --mode torch   --summary S.json            # torch.profiler around the steps

Every mode runs the same ``--warmup`` steps unrecorded (``plain`` records everything),
then ``--steps`` steps, each with a pageable and a pinned H2D copy, a forward/backward in
``perfscope.annotate`` ranges, an AdamW step and a ``loss.item()`` (D2H copy + sync).
The summary JSON holds the step count and, for ``torch``, the number of GPU kernels
torch.profiler saw in the recorded steps.
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn


def step(model: nn.Module, opt: torch.optim.Optimizer, x_pageable: torch.Tensor, x_pinned: torch.Tensor,
         annotate: Any) -> float:
    a = x_pageable.to("cuda")
    b = x_pinned.to("cuda", non_blocking=True)
    with annotate("forward"):
        loss = model(a + b).float().pow(2).mean()
    with annotate("backward"):
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["plain", "profile", "torch"], required=True)
    p.add_argument("--run", help="run directory (profile mode)")
    p.add_argument("--summary", required=True)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x_pageable = torch.randn(64, 256)
    x_pinned = torch.randn(64, 256).pin_memory()

    import perfscope

    annotate = perfscope.annotate
    for _ in range(args.warmup):
        step(model, opt, x_pageable, x_pinned, annotate)
    torch.cuda.synchronize()

    summary: dict[str, Any] = {"mode": args.mode, "warmup": args.warmup, "steps": args.steps}
    if args.mode == "profile":
        with perfscope.profile(args.run, overwrite=True) as prof:
            for _ in range(args.steps):
                step(model, opt, x_pageable, x_pinned, annotate)
                prof.step()
            torch.cuda.synchronize()
    elif args.mode == "torch":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as tp:
            for _ in range(args.steps):
                step(model, opt, x_pageable, x_pinned, _null)
            torch.cuda.synchronize()
        trace = Path(args.summary).with_suffix(".trace.json")
        tp.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
        summary["kernels"] = sum(1 for e in events if e.get("cat") == "kernel")
        summary["memcpy"] = sum(1 for e in events if e.get("cat") == "gpu_memcpy")
    else:
        for _ in range(args.steps):
            step(model, opt, x_pageable, x_pinned, annotate)
        torch.cuda.synchronize()
    Path(args.summary).write_text(json.dumps(summary))


def _null(_name: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


if __name__ == "__main__":
    main()
