"""Canonical spellings of names that several sources write differently.

* **Collective functions.**  The collectives table spells them as NCCL does
  (``AllReduce``); torch, Kineto and c10d write ``all_reduce``, ``allreduce``,
  ``_allgather_base``, ``nccl:all_reduce``, ``c10d_broadcast``...  The Kineto importer
  normalises at ingest and the analyzers normalise tables from other sources, both with
  :func:`normalize_collective`.
* **Element types.**  PyTorch (``Float``, ``c10::BFloat16``), NCCL (``ncclFloat32``, or
  ``Float32`` in the profiler plugin's records) and short forms (``f32``) name the same
  types; :func:`dtype_size` gives their size for the ``bytes`` column.
"""
from __future__ import annotations

import re
from typing import Any

# lower-case alias (without a ``nccl:``/``c10d::``/``gloo`` prefix) -> NCCL's spelling
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

# The library prefixes torch's names carry (``nccl:all_reduce``, ``c10d::broadcast_``,
# ``gloo:_allgather_base``).  Lower-case only: an upper-case ``NCCL_...`` is some other name.
_LIBRARY_PREFIX = re.compile(r"^(?:nccl|c10d|gloo)[:_]*")


def normalize_collective(name: Any) -> str | None:
    """Return NCCL's spelling of a collective name (``"all_reduce"`` -> ``"AllReduce"``).

    The name loses a library prefix (:data:`_LIBRARY_PREFIX`) and trailing underscores,
    and is looked up lower-cased in :data:`COLLECTIVE_ALIASES`, then without underscores.

    Returns:
        the canonical name; an unknown name unchanged; None for a missing or empty name.
    """
    if not isinstance(name, str) or not name:
        return None
    key = _LIBRARY_PREFIX.sub("", name.strip()).lower().rstrip("_")
    return COLLECTIVE_ALIASES.get(key) or COLLECTIVE_ALIASES.get(key.replace("_", "")) or name


# Bytes per element, by lower-case name without a ``c10::``/``torch.``/``at::`` prefix.
DTYPE_SIZES: dict[str, int] = {
    "float": 4, "float32": 4, "f32": 4, "ncclfloat": 4, "ncclfloat32": 4,
    "double": 8, "float64": 8, "f64": 8, "ncclfloat64": 8, "nccldouble": 8,
    "half": 2, "float16": 2, "f16": 2, "ncclfloat16": 2, "ncclhalf": 2,
    "bfloat16": 2, "bf16": 2, "ncclbfloat16": 2,
    "int": 4, "int32": 4, "i32": 4, "ncclint32": 4, "ncclint": 4, "uint32": 4, "u32": 4, "nccluint32": 4,
    "long": 8, "int64": 8, "i64": 8, "ncclint64": 8, "uint64": 8, "u64": 8, "nccluint64": 8,
    "short": 2, "int16": 2, "uint16": 2,
    "char": 1, "int8": 1, "int8_t": 1, "i8": 1, "ncclint8": 1, "ncclchar": 1,
    "byte": 1, "uint8": 1, "u8": 1, "unsigned char": 1, "nccluint8": 1, "bool": 1,
    "complexhalf": 4, "complexfloat": 8, "complexdouble": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "ncclfloat8e4m3": 1, "ncclfloat8e5m2": 1,
    # As some NCCL versions' ncclDatatypeToString spells them.
    "ncluint8": 1, "ncluint64": 8,
}


def dtype_size(dtype: Any) -> int | None:
    """Bytes per element of a PyTorch or NCCL dtype name (``Float``, ``c10::BFloat16``,
    ``ncclFloat32``, ``Float8e4m3``...), or None when unknown or not text.

    A name not found as it is is tried as NCCL's (with an ``nccl`` prefix), as the
    profiler plugin's records may leave the prefix out."""
    if not isinstance(dtype, str):
        return None
    key = dtype.strip().lower().removeprefix("c10::").removeprefix("torch.").removeprefix("at::")
    size = DTYPE_SIZES.get(key)
    if size is None and not key.startswith("nccl"):
        size = DTYPE_SIZES.get("nccl" + key)
    return size


__all__ = ["COLLECTIVE_ALIASES", "DTYPE_SIZES", "dtype_size", "normalize_collective"]
