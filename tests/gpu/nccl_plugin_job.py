"""A multi-rank torch.distributed + NCCL job that exercises the perfscope NCCL plugin.

Runs N ranks on one GPU: each rank claims a host of its own (``NCCL_HOSTID=host<rank>``), so
NCCL treats every rank as a node and talks over sockets on loopback (without it NCCL stops
with "Duplicate GPU detected").  Used by tests/gpu/test_nccl_plugin_gpu.py and by hand:

    python tests/gpu/nccl_plugin_job.py --nranks 2 --mode workload --out /tmp/nccl2 \\
        --plugin collectors/nccl/libperfscope_nccl*.so --level 3
    python tests/gpu/nccl_plugin_job.py --nranks 2 --mode overhead --out /tmp/ovh --plugin ...
    perfscope record -o RUN -- torchrun --standalone --nproc-per-node 4 \
        tests/gpu/nccl_plugin_job.py --mode workload --out /tmp/nccl4   # the recorder sets the plugin

``workload`` makes every rank call all_reduce, all_gather, reduce_scatter, broadcast (two
roots), a send/recv ring and barrier at several sizes, and writes the calls it made to
``OUT/calls-rank<R>.json`` (func, count, dtype, root, peer) beside the plugin's files in
``OUT/nccl``.  ``overhead`` times blocks of small all_reduces with the plugin recording and
paused (interleaved, same processes) and writes ``OUT/overhead.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

SIZES_BYTES = (1 << 10, 64 << 10, 1 << 20)


def _rank_main(rank: int, args: argparse.Namespace, port: int | None) -> None:
    os.environ.update({
        "NCCL_HOSTID": f"host{rank}",
        "NCCL_SOCKET_IFNAME": "lo",
        "NCCL_IB_DISABLE": "1",
        "NCCL_NVLS_ENABLE": "0",
        "RANK": str(rank),
        "PERFSCOPE_RANK": str(rank),
    })
    if args.plugin:
        os.environ["NCCL_PROFILER_PLUGIN"] = args.plugin
        os.environ["PERFSCOPE_NCCL_DIR"] = str(Path(args.out) / "nccl")
        os.environ["PERFSCOPE_NCCL_LEVEL"] = str(args.level)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}" if port else "env://", rank=rank, world_size=args.nranks,
        device_id=torch.device("cuda", 0),
    )
    if args.mode == "workload":
        calls = _workload(rank, args.nranks, torch, dist)
        Path(args.out, f"calls-rank{rank}.json").write_text(json.dumps(calls))
    else:
        result = _overhead(rank, args, torch, dist)
        if rank == 0:
            Path(args.out, "overhead.json").write_text(json.dumps(result, indent=1))
    torch.cuda.synchronize()
    dist.destroy_process_group()


def _workload(rank: int, n: int, torch, dist) -> list[dict]:  # noqa: ANN001 - torch modules
    calls: list[dict] = []

    def log(func: str, count: int, dtype: str = "ncclFloat32", root: int | None = None, peer: int | None = None) -> None:
        calls.append({"func": func, "count": count, "dtype": dtype, "root": root, "peer": peer})

    dev = torch.device("cuda", 0)
    for size in SIZES_BYTES:
        count = size // 4
        x = torch.ones(count, device=dev)
        dist.all_reduce(x)
        log("AllReduce", count)
        out = torch.empty(count * n, device=dev)
        dist.all_gather_into_tensor(out, x)
        log("AllGather", count)
        big = torch.ones(count * n, device=dev)
        dist.reduce_scatter_tensor(x, big)
        log("ReduceScatter", count)
        for root in (0, n - 1):
            dist.broadcast(x, src=root)
            log("Broadcast", count, root=root)
        y = torch.empty_like(x)
        ops = [dist.P2POp(dist.isend, x, (rank + 1) % n), dist.P2POp(dist.irecv, y, (rank - 1) % n)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        log("Send", count, peer=(rank + 1) % n)
        log("Recv", count, peer=(rank - 1) % n)
        h = torch.ones(count, device=dev, dtype=torch.bfloat16)
        dist.all_reduce(h)
        log("AllReduce", count, dtype="ncclBfloat16")
    dist.barrier()
    log("Barrier", 1)
    torch.cuda.synchronize()
    return calls


def _overhead(rank: int, args: argparse.Namespace, torch, dist) -> dict:  # noqa: ANN001
    import ctypes

    lib = ctypes.CDLL(args.plugin) if args.plugin else None  # the same handle NCCL opened
    x = torch.ones(args.count, device=torch.device("cuda", 0))
    for _ in range(50):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    per_op: dict[str, list[float]] = {"on": [], "off": []}
    for block in range(args.blocks * 2):
        state = "on" if block % 2 == 0 else "off"
        if lib is not None:
            lib.perfscope_nccl_set_level(args.level if state == "on" else 0)
        # Both ranks switch at the same block; a barrier lines them up.
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        per_op[state].append((time.perf_counter() - t0) / args.iters * 1e6)
    if lib is not None:
        lib.perfscope_nccl_set_level(args.level)
    on, off = statistics.median(per_op["on"]), statistics.median(per_op["off"])
    return {
        "nranks": args.nranks, "count": args.count, "bytes": args.count * 4, "iters_per_block": args.iters,
        "blocks_each": args.blocks, "level": args.level, "median_us_on": on, "median_us_off": off,
        "ratio_on_over_off": on / off, "blocks_us_on": per_op["on"], "blocks_us_off": per_op["off"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--mode", choices=("workload", "overhead"), default="workload")
    p.add_argument("--out", required=True)
    p.add_argument("--plugin", default="", help="path of libperfscope_nccl*.so ('' = no plugin)")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--count", type=int, default=1024, help="overhead: float32 elements per all_reduce")
    p.add_argument("--iters", type=int, default=200, help="overhead: all_reduces per block")
    p.add_argument("--blocks", type=int, default=10, help="overhead: blocks per state")
    p.add_argument("--port", type=int, default=29555)
    args = p.parse_args(argv)
    if args.plugin:
        args.plugin = str(Path(args.plugin).resolve())
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ:  # one rank of torchrun's
        args.nranks = int(os.environ["WORLD_SIZE"])
        _rank_main(int(os.environ["RANK"]), args, None)
        return 0
    import torch.multiprocessing as mp

    mp.start_processes(_rank_main, args=(args, args.port), nprocs=args.nranks, start_method="spawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
