"""Scenario: compute-bound large fp32 matrix products.

Expected: dominant bucket compute; first advice: lower precision / TF32 (tensor cores).
"""
from __future__ import annotations

import torch

import common


def main() -> None:
    dev = common.device()
    torch.backends.cuda.matmul.allow_tf32 = False
    layers = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, bias=False) for _ in range(4)]).to(dev)
    opt = torch.optim.SGD(layers.parameters(), lr=1e-4)
    x = torch.randn(8192, 8192, device=dev)
    with common.profiled("compute_bound") as step:
        for _ in range(common.total_iterations()):
            loss = layers(x).square().mean()
            common.optimize(opt, loss)
            step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
