"""Scenario: communication-heavy step (2 ranks, large all-reduces, little compute, no overlap).

Run with torchrun --nproc-per-node 2.  Expected: dominant bucket network; first advice:
overlap/reduce communication (DDP bucket_cap_mb, gradient_as_bucket_view, compression hooks).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

import common


def main() -> None:
    common.init_distributed()
    dev = common.device()
    model = torch.nn.Linear(1024, 1024).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    grads = [torch.randn(16 * 1024 * 1024, device=dev) for _ in range(2)]  # 2 x 64 MiB
    x = torch.randn(256, 1024, device=dev)
    with common.profiled("comm_heavy") as step:
        for _ in range(common.total_iterations()):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            for g in grads:
                dist.all_reduce(g)  # exposed: nothing to overlap with
            opt.step()
            step()
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
