"""Canonical spellings of names that several sources write differently.

The collectives table spells functions as NCCL does (``AllReduce``); torch, Kineto and
c10d write ``all_reduce``, ``allreduce``, ``_allgather_base``, ``nccl:all_reduce``...
The importer normalises at ingest and the analyzers normalise tables from other sources;
both use this one table.
"""
from __future__ import annotations

from typing import Any

# lower-case alias (without a ``nccl:``/``c10d::`` prefix) -> NCCL's spelling
COLLECTIVE_ALIASES: dict[str, str] = {
    "allreduce": "AllReduce", "all_reduce": "AllReduce", "allreduce_coalesced": "AllReduce",
    "allgather": "AllGather", "all_gather": "AllGather", "_allgather_base": "AllGather",
    "allgather_base": "AllGather", "allgather_into_tensor_coalesced": "AllGather",
    "allgather_coalesced": "AllGather", "all_gather_into_tensor": "AllGather",
    "allgather_into_tensor": "AllGather",
    "reducescatter": "ReduceScatter", "reduce_scatter": "ReduceScatter",
    "_reduce_scatter_base": "ReduceScatter", "reduce_scatter_base": "ReduceScatter",
    "reduce_scatter_tensor": "ReduceScatter", "reduce_scatter_tensor_coalesced": "ReduceScatter",
    "broadcast": "Broadcast", "reduce": "Reduce",
    "alltoall": "AllToAll", "all_to_all": "AllToAll", "alltoall_base": "AllToAll",
    "all_to_all_single": "AllToAll",
    "send": "Send", "recv": "Recv", "recvanysource": "Recv", "sendrecv": "SendRecv",
    "barrier": "Barrier", "gather": "Gather", "scatter": "Scatter",
}


def normalize_collective(name: Any) -> str | None:
    """Return NCCL's spelling of a collective name (``"all_reduce"`` -> ``"AllReduce"``).

    Unknown names come back unchanged; a missing or empty name gives None.
    """
    if not isinstance(name, str) or not name:
        return None
    key = name.strip().lower().removeprefix("nccl:").removeprefix("c10d::").rstrip("_")
    return COLLECTIVE_ALIASES.get(key) or COLLECTIVE_ALIASES.get(key.replace("_", "")) or name
