"""Scenario: a host synchronisation (``.item()``) after every small piece of work.

Each sync drains the GPU queue, so the GPU idles while the host waits and then launches.
Expected: first advice: remove per-iteration host syncs (.item(), torch.cuda.synchronize).
"""
from __future__ import annotations

import torch

import common


def main() -> None:
    dev = common.device()
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 512, device=dev)
    with common.profiled("host_sync") as step:
        for _ in range(common.total_iterations()):
            total = 0.0
            for _ in range(40):
                loss = model(x).square().mean()
                total += loss.item()  # a device-to-host sync every micro-iteration
            loss = model(x).square().mean()
            common.optimize(opt, loss)
            step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
