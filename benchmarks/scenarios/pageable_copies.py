"""Scenario: large host-to-device copies from pageable memory every step.

Expected: dominant bucket pcie; first advice: pin_memory=True + non_blocking=True.
"""
from __future__ import annotations

import torch

import common


def main() -> None:
    dev = common.device()
    model = torch.nn.Linear(4096, 64).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    host_batch = torch.randn(8, 4096, 4096)  # 512 MiB of pageable memory
    with common.profiled("pageable_copies") as step:
        for _ in range(common.total_iterations()):
            x = host_batch.to(dev)  # pageable: staged through a bounce buffer, blocks the host
            loss = model(x[:, 0, :]).square().mean()
            common.optimize(opt, loss)
            step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
