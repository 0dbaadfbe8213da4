"""Which collectives a run's communication is, by family, and the advice for each family.

The family decides the advice of the ``comm.exposed`` rule (:mod:`.rules`): DDP bucket
options only fit exposed all-reduce; sharded data parallel (FSDP, ZeRO) spends its time in
all-gather and reduce-scatter; expert and embedding parallelism (TorchRec, MoE) and pipeline
stages in all-to-all and send/receive; per-step broadcasts usually come from DDP re-sending
module buffers.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

# Advice per family of collectives: (what the time is, what to do, the change).  The
# family is the one holding at least half of the communication time (COMM_FAMILY_SHARE).
COMM_ADVICE: dict[str, tuple[str, str, str]] = {
    "all_reduce": (
        "mostly all-reduce (data parallel gradient synchronisation)",
        "Overlap gradient all-reduce with the backward pass with bigger or better-ordered DDP buckets, reduce the bytes "
        "sent (bf16 compression hook), or communicate less often (gradient accumulation with no_sync()).",
        "DistributedDataParallel(model, bucket_cap_mb=100, gradient_as_bucket_view=True, static_graph=True); "
        "model.register_comm_hook(None, torch.distributed.algorithms.ddp_comm_hooks.default_hooks.bf16_compress_hook)"),
    "sharded": (
        "mostly all-gather and reduce-scatter (sharded data parallel: FSDP, ZeRO)",
        "Prefetch the next unit's all-gather while this one computes, keep parameters gathered between forward and "
        "backward where memory allows, and shard within a node only (hybrid sharding) so the slow link carries less.",
        "FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, "
        "sharding_strategy=ShardingStrategy.HYBRID_SHARD)  # FSDP2: fully_shard(m, reshard_after_forward=False)"),
    "all_to_all": (
        "mostly all-to-all and send/receive (expert or embedding parallelism, pipeline stages)",
        "Overlap the exchange with compute (pipeline the next batch's input distribution, as TorchRec's "
        "TrainPipelineSparseDist does), send fewer bytes (quantised communication, a lower MoE capacity factor), "
        "and balance the tokens or ids each rank receives.",
        "torchrec.distributed.train_pipeline.TrainPipelineSparseDist(model, optimizer, device); "
        "qcomms_config=QCommsConfig(forward_precision=CommType.FP16, backward_precision=CommType.BF16)"),
    "broadcast": (
        "mostly broadcast",
        "Broadcasts every step usually come from DDP re-sending module buffers (batch-norm statistics) in each "
        "forward: turn that off, or sync the buffers less often.",
        "DistributedDataParallel(model, broadcast_buffers=False)"),
}
COMM_FAMILIES: dict[str, str] = {
    "AllReduce": "all_reduce", "AllGather": "sharded", "ReduceScatter": "sharded", "AllToAll": "all_to_all",
    "SendRecv": "all_to_all", "Send": "all_to_all", "Recv": "all_to_all", "Broadcast": "broadcast",
}
COMM_FAMILY_SHARE = 0.5
# NCCL kernel names carry the function: ncclKernel_AllReduce_..., ncclDevKernel_SendRecv...
_KERNEL_FUNC_RE = re.compile(r"(AllReduce|AllGather|ReduceScatter|AllToAll|SendRecv|Broadcast|Send|Recv)")


def comm_mix(collectives: pd.DataFrame | None, kernels: pd.DataFrame | None) -> dict[str, float]:
    """Share of communication time per collective family (:data:`COMM_FAMILIES`; ``other``
    for the rest), from the collectives table's durations (``func``, ``dur_ns``), else from
    the communication kernels' names in the kernel table (``name``, ``kind``, ``total_ns``);
    empty when neither says."""
    c = collectives
    if c is not None and len(c) and "func" in c.columns:
        func, dur = c["func"].astype(object).to_numpy(), c["dur_ns"].to_numpy(float)
    else:
        k = kernels
        if k is None or len(k) == 0:
            return {}
        comm = k["kind"].to_numpy(object) == "communication"
        names = k["name"].to_numpy(object)[comm]
        func = np.array([(m.group(1) if (m := _KERNEL_FUNC_RE.search(str(n))) else "") for n in names], dtype=object)
        dur = k["total_ns"].to_numpy(float)[comm]
    total = float(dur.sum())
    if total <= 0:
        return {}
    fam = np.array([COMM_FAMILIES.get(str(f), "other") for f in func], dtype=object)
    return {f: float(dur[fam == f].sum() / total) for f in sorted(set(fam.tolist()))}


# NCCL kernel names carry the element type: ncclDevKernel_AllReduce_Sum_f32_RING_LL (2.19+),
# ncclKernel_AllReduce_RING_LL_Sum_float(...) (older; not _float16 or a bfloat).
_FP32_KERNEL_RE = re.compile(r"_f32_|_float(?![0-9])\b|(?i:float32)")


def fp32_comm_share(kernels: pd.DataFrame | None) -> float:
    """Share of communication kernel time (kernel table: ``name``, ``kind``, ``total_ns``)
    whose kernel name says it moves 32-bit floats; 0 when no name says (send/receive
    kernels name no type)."""
    if kernels is None or len(kernels) == 0:
        return 0.0
    comm = kernels["kind"].to_numpy(object) == "communication"
    dur = kernels["total_ns"].to_numpy(float)[comm]
    fp32 = np.array([bool(_FP32_KERNEL_RE.search(str(n))) for n in kernels["name"].to_numpy(object)[comm]], dtype=bool)
    return float(dur[fp32].sum() / dur.sum()) if dur.sum() > 0 else 0.0


__all__ = ["COMM_ADVICE", "COMM_FAMILIES", "COMM_FAMILY_SHARE", "comm_mix", "fp32_comm_share"]
