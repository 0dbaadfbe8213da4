"""Scenario: launch-bound loop of thousands of tiny kernels per step.

Expected: dominant bucket host (GPU idle between launches); first advice: CUDA graphs /
torch.compile(mode="reduce-overhead").
"""
from __future__ import annotations

import torch

import common


def main() -> None:
    dev = common.device()
    w = torch.nn.Parameter(torch.randn(64, device=dev))
    opt = torch.optim.SGD([w], lr=0.01)
    with common.profiled("launch_bound") as step:
        for _ in range(common.total_iterations()):
            x = w
            for _ in range(300):
                x = x * 1.0001 + 0.0001  # two tiny elementwise kernels
            loss = x.sum()
            common.optimize(opt, loss)
            step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
