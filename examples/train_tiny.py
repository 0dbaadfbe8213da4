"""A tiny training loop to try perfscope on (CPU or GPU, one process or torchrun).

No perfscope code is needed to record it::

    perfscope record -o runs/tiny -- python examples/train_tiny.py
    perfscope record -o runs/tiny2 -- torchrun --nproc-per-node 2 examples/train_tiny.py
    perfscope analyze runs/tiny

or record it in-process with ``--profile DIR`` (uses ``perfscope.profile`` and
``perfscope.annotate``).  The dataset sleeps a little per item (``--load-ms``) so that
data-loading waits show up in the breakdown; raise ``--workers`` to hide them.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SyntheticDataset(Dataset):
    """Random regression samples; each takes ``load_ms`` to "load"."""

    def __init__(self, n: int, dim: int, load_ms: float) -> None:
        self.n, self.dim, self.load_s = n, dim, load_ms / 1000.0
        g = torch.Generator().manual_seed(0)
        self.w = torch.randn(dim, 1, generator=g) / dim**0.5

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.load_s:
            time.sleep(self.load_s)
        x = torch.randn(self.dim, generator=torch.Generator().manual_seed(i))
        return x, x @ self.w


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per rank")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--load-ms", type=float, default=0.2, help="time to load one sample")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--profile", metavar="DIR", help="record in-process with perfscope.profile(DIR)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group("nccl" if use_cuda else "gloo")

    dataset = SyntheticDataset(args.steps * args.batch_size * (dist.get_world_size() if distributed else 1),
                               args.dim, args.load_ms)
    sampler = DistributedSampler(dataset, shuffle=False) if distributed else None
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        pin_memory=use_cuda, drop_last=True)
    model: nn.Module = nn.Sequential(nn.Linear(args.dim, 4 * args.dim), nn.GELU(), nn.Linear(4 * args.dim, 1)).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    recorder: Any = contextlib.nullcontext()
    annotate: Any = lambda name: contextlib.nullcontext()  # noqa: E731
    if args.profile:
        import perfscope

        recorder = perfscope.profile(args.profile, overwrite=True)
        annotate = perfscope.annotate

    with recorder as prof:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with annotate("forward"):
                loss = nn.functional.mse_loss(model(x), y)
            with annotate("backward"):
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if prof is not None:
                prof.step()
        final = loss.item()
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    if not distributed or int(os.environ.get("RANK", "0")) == 0:
        print(f"trained {args.steps} steps on {device}; final loss {final:.4f}")


if __name__ == "__main__":
    main()
