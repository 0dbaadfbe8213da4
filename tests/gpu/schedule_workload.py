"""A CUDA loop for tests/gpu/test_schedule_gpu.py, run under `perfscope record`.

    python tests/gpu/schedule_workload.py --steps 20 [--ready FILE --stop FILE]

Each step launches a small forward/backward and an AdamW step, synchronises, sleeps
``--gap-ms`` on the host and then marks the step with ``prof.step()`` (a
``perfscope.profile`` that joins the `record` run), so every kernel of step k runs
between the host boundaries of step k and a kernel recorded outside a window would lie at
least the gap away from it.  With ``--stop FILE`` it loops (up to ``--steps``) until that
file exists; ``--ready FILE`` is written once the loop runs.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import perfscope


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--gap-ms", type=float, default=5.0)
    p.add_argument("--ready")
    p.add_argument("--stop")
    args = p.parse_args()
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(64, 256, device="cuda")
    with perfscope.profile("unused") as prof:  # joins the record run: its step() marks steps
        for i in range(args.steps):
            if args.stop and Path(args.stop).exists():
                break
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            time.sleep(args.gap_ms / 1e3)
            prof.step()
            if i == 2 and args.ready:
                Path(args.ready).write_text("ready")


if __name__ == "__main__":
    main()
