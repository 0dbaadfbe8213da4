"""A 2-rank NCCL loop for tests/gpu/test_schedule_gpu.py, run by torchrun under `perfscope record`.

    perfscope record --schedule ... -- torchrun --standalone --nproc-per-node 2 \\
        tests/gpu/schedule_nccl_workload.py --steps 20

Both ranks share GPU 0 (each claims a host of its own, ``NCCL_HOSTID``, so NCCL talks over
loopback sockets).  Each step runs one all_reduce and a small matmul, synchronises, sleeps
``--gap-ms`` on the host and marks the step with ``prof.step()`` (a ``perfscope.profile``
that joins the `record` run), so the collective of step k is enqueued between the host
boundaries of step k.  The first all_reduce (step 0, between windows under a schedule with
``wait``) creates the communicator: NCCL then loads the plugin paused.
"""
from __future__ import annotations

import argparse
import os
import time

import perfscope


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--gap-ms", type=float, default=5.0)
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    os.environ.update({"NCCL_HOSTID": f"host{rank}", "NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1",
                       "NCCL_NVLS_ENABLE": "0"})
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    x = torch.ones(1 << 18, device="cuda")
    a = torch.randn(512, 512, device="cuda")
    with perfscope.profile("unused") as prof:  # joins the record run: its step() marks steps
        for _ in range(args.steps):
            dist.all_reduce(x)
            a = (a @ a).tanh()
            torch.cuda.synchronize()
            time.sleep(args.gap_ms / 1e3)
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
