"""Scenario: the data loader is the bottleneck (slow __getitem__, num_workers=0).

Expected: dominant bucket data_loading; first advice: DataLoader num_workers.
"""
from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, Dataset

import common


class SlowDataset(Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.0015)  # decoding / augmentation on the CPU
        return torch.randn(256), torch.randint(0, 10, ())


def main() -> None:
    dev = common.device()
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=16, num_workers=0)
    it = iter(loader)
    with common.profiled("slow_dataloader") as step:
        for _ in range(common.total_iterations()):
            x, y = next(it)
            x, y = x.to(dev), y.to(dev)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            common.optimize(opt, loss)
            step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
