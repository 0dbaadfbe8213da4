"""Kernel classification: NCCL names old and new, HTA's regexes, copy kinds."""
from __future__ import annotations

import numpy as np

from perfscope.analyzers.classify import copy_is_pcie, hta_kernel_type, kernel_kind, normalize_func


def test_nccl_names_old_and_new_are_communication() -> None:
    names = [
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
        "ncclDevKernel_Generic",
        "void ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        "nccl:all_reduce",
        "rcclGenericKernel",
    ]
    assert (kernel_kind(names) == "communication").all()


def test_compute_and_memory_names() -> None:
    names = ["ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4>", "cancel_kernel",
             "Memcpy DtoD (Device -> Device)", "Memset (Device)"]
    assert kernel_kind(names).tolist() == ["compute", "compute", "compute", "memory", "memory"]


def test_collectives_table_marks_renamed_kernels() -> None:
    kinds = kernel_kind(["my_allreduce", "sgemm", "x"], correlation=[1, 2, 3],
                        comm_correlations=np.array([1.0]), comm_kernel_names={"x"})
    assert kinds.tolist() == ["communication", "compute", "communication"]


def test_hta_regexes_as_hta_050() -> None:
    names = ["ncclKernel_AllReduce", "ncclDevKernel_Generic", "Memcpy HtoD", "Memset (Device)", "sgemm", "cudaStreamSync", "nccl:all_reduce"]
    assert hta_kernel_type(names).tolist() == [
        "COMMUNICATION", "COMMUNICATION", "MEMORY", "MEMORY", "COMPUTATION", "OTHER", "COMPUTATION"]


def test_copy_kinds_and_funcs() -> None:
    assert copy_is_pcie(["H2D", "D2H", "D2D", "P2P", None]).tolist() == [True, True, False, True, True]
    assert normalize_func(["allreduce", "nccl:all_reduce", "_allgather_base", "AllToAll", "odd"]).tolist() == [
        "AllReduce", "AllReduce", "AllGather", "AllToAll", "odd"]
