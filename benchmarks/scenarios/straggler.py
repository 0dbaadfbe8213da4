"""Scenario: 4 ranks, rank 2 is slow every step (a sleep before the gradient all-reduce).

Run with torchrun --nproc-per-node 4.  Expected: the straggler analysis names rank 2 and
the other ranks' wait lands in sync; first advice: the straggler.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

import common

SLOW_RANK = 2


def main() -> None:
    common.init_distributed()
    dev = common.device()
    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(512, 2048, device=dev)
    flat = torch.zeros(1024 * 1024, device=dev)
    with common.profiled("straggler") as step:
        for _ in range(common.total_iterations()):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            if dist.get_rank() == SLOW_RANK:
                torch.cuda.synchronize()
                time.sleep(0.03)  # e.g. a slow host, a noisy neighbour, thermal throttling
            dist.all_reduce(flat)
            opt.step()
            step()
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
