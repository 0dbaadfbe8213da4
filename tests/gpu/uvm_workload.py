"""A training loop over Unified Memory for tests/gpu/test_uvm_gpu.py.

A managed buffer (``cudaMallocManaged`` through cuda-bindings, 128 MiB) is viewed as a torch
tensor (``__cuda_array_interface__``) and as a NumPy array.  Each step the host writes it
(pages migrate to the CPU: CPU page faults, device-to-host migrations), a kernel scales it
(GPU page faults, host-to-device migrations), the host reads part of it back, and an
optimizer step of a tiny model marks the step.  Writes ``{"steps", "bytes"}`` to ``--summary``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import time

import numpy as np
import torch
from cuda.bindings import runtime as rt

NBYTES = 128 << 20


class _Managed:
    """A managed allocation as ``__cuda_array_interface__`` (float32)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--summary", required=True)
    a = ap.parse_args()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    time.sleep(0.2)  # perfscope arms CUPTI's Unified Memory counters once the context exists (polled every 10 ms)
    err, ptr = rt.cudaMallocManaged(NBYTES, rt.cudaMemAttachGlobal)
    assert int(err) == 0, err
    n = NBYTES // 4
    dev = torch.as_tensor(_Managed(int(ptr), n), device="cuda")
    host = np.ctypeslib.as_array((ctypes.c_float * n).from_address(int(ptr)))
    model = torch.nn.Linear(16, 16).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(a.warmup + a.steps):
        host[:] = float(i)
        dev.mul_(2.0)
        torch.cuda.synchronize()
        float(host[:: 1 << 14].sum())
        model(torch.ones(4, 16, device="cuda")).square().mean().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    rt.cudaFree(ptr)
    with open(a.summary, "w") as f:
        json.dump({"steps": a.steps, "bytes": NBYTES}, f)


if __name__ == "__main__":
    main()
