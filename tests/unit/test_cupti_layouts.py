"""Record layouts and callback-id tables of the CUPTI collector."""
from __future__ import annotations

import numpy as np
import pytest

from perfscope.collectors.cupti import cbids, layouts

CUPTI_DTYPES = {
    "kernel": "activity_kernel10_dtype", "memcpy": "activity_memcpy6_dtype",
    "memcpy2": "activity_memcpy_pto_p4_dtype", "memset": "activity_memset4_dtype",
    "sync": "activity_synchronization2_dtype", "runtime": "activity_api_dtype",
    "driver": "activity_api_dtype", "marker": "activity_marker2_dtype", "overhead": "activity_overhead3_dtype",
    "uvm": "activity_unified_memory_counter3_dtype",
}
RENAMED = {"flags": "flags_"}
FLATTENED = {("marker", "process_id"): ("object_id", 0), ("marker", "thread_id"): ("object_id", 4)}


@pytest.mark.parametrize("name", sorted(CUPTI_DTYPES))
def test_layout_matches_cupti_python(name: str) -> None:
    cupti = pytest.importorskip("cupti.cupti")
    theirs = getattr(cupti, CUPTI_DTYPES[name])
    ours = layouts.BY_NAME[name].dtype
    assert ours.itemsize == theirs.itemsize
    for field, (dt, off) in ours.fields.items():
        if (name, field) in FLATTENED:
            parent, delta = FLATTENED[(name, field)]
            assert theirs.fields[parent][1] + delta == off
            continue
        t_dt, t_off = theirs.fields[RENAMED.get(field, field)][:2]
        assert t_off == off, field
        # string fields are pointers (int64 there, string ids as uint64 here)
        assert t_dt.itemsize == dt.itemsize, field


def test_sizes_are_multiples_of_eight() -> None:
    for lay in layouts.LAYOUTS.values():
        assert lay.dtype.itemsize % 8 == 0
        for off in lay.string_offsets:
            assert off % 8 == 0


def test_cbid_tables() -> None:
    assert cbids.RUNTIME[211] == "cudaLaunchKernel"
    assert cbids.DRIVER[307] == "cuLaunchKernel"
    names = set(cbids.RUNTIME.values()) | set(cbids.DRIVER.values())
    assert {"cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaStreamWaitEvent",
            "cudaEventSynchronize", "cudaMemsetAsync", "cudaGraphLaunch", "cuLaunchKernelEx"} <= names
    assert not any("GetDevice" in n or "GraphAdd" in n or "EventRecord" in n for n in names)
    assert max(cbids.RUNTIME) < cbids.RUNTIME_CBID_SIZE and max(cbids.DRIVER) < cbids.DRIVER_CBID_SIZE


def test_cupti_python_kind_values() -> None:
    cupti = pytest.importorskip("cupti.cupti")
    K = cupti.ActivityKind
    assert (K.CONCURRENT_KERNEL, K.MEMCPY, K.MEMCPY2, K.MEMSET, K.SYNCHRONIZATION, K.RUNTIME, K.DRIVER, K.MARKER,
            K.OVERHEAD) == (10, 1, 22, 2, 38, 5, 4, 12, 17)
    assert np.dtype(layouts.KERNEL).fields["name"][1] == 104
