"""The canonical names every layer shares (``perfscope.store.names``): one normaliser for
collective functions and one table of element sizes, for the Kineto importer, the NCCL
plugin's reader and the analyzers alike."""
from __future__ import annotations

import pytest

from perfscope.store.names import dtype_size, normalize_collective


@pytest.mark.parametrize(("name", "expected"), [
    ("allreduce", "AllReduce"), ("all_reduce", "AllReduce"), ("nccl:all_reduce", "AllReduce"),
    ("c10d::allreduce_", "AllReduce"), ("c10d_broadcast", "Broadcast"), ("gloo:_allgather_base", "AllGather"),
    ("_reduce_scatter_base", "ReduceScatter"), ("Send_Recv", "SendRecv"), (" AllToAll ", "AllToAll"),
    # An upper-case prefix is not a library's: the name stays as it is.
    ("NCCL_AllGather", "NCCL_AllGather"), ("weird_op", "weird_op"),
])
def test_collective_names(name: str, expected: str) -> None:
    assert normalize_collective(name) == expected


def test_missing_collective_names_are_none() -> None:
    assert normalize_collective(None) is None and normalize_collective("") is None and normalize_collective(3) is None


@pytest.mark.parametrize(("dtype", "size"), [
    # PyTorch's spellings (Kineto)
    ("Float", 4), ("c10::BFloat16", 2), ("torch.float16", 2), ("Long", 8), ("unsigned char", 1), ("ComplexDouble", 16),
    # NCCL's, with and without the prefix (the profiler plugin's records)
    ("ncclFloat32", 4), ("Float32", 4), ("ncclInt8", 1), ("Uint64", 8), ("Float8e4m3", 1), ("Bfloat16", 2),
])
def test_dtype_sizes(dtype: str, size: int) -> None:
    assert dtype_size(dtype) == size


def test_unknown_dtypes_have_no_size() -> None:
    assert dtype_size("NoSuchType") is None and dtype_size(None) is None and dtype_size(4) is None
