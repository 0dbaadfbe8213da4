"""CUPTI 13.0 activity-record layouts as NumPy structured dtypes, and the enums decoding needs.

The native sink (``sink.c``) copies whole records out of CUPTI's buffers; these dtypes
read them in bulk.  Each dtype names only the fields perfscope uses, at the offsets and
with the item size of the CUPTI 13.0 struct (``CUPTI_API_VERSION`` 130001), checked
against ``cupti-python`` 13.0.1's own ``activity_*_dtype`` (tests/unit/test_cupti_layouts.py)
and against the CUDA 13.0 headers (``sizeof``/``offsetof``).  They are written out here
rather than taken from ``cupti.cupti`` so that decoding works without cupti-python (CI,
analysis machines).  Unions are flattened to the member perfscope reads.

String fields (kernel ``name``, marker ``name`` and ``domain``) hold, after the sink has
copied a record, the id + 1 of the string in the sink's string table (0 = NULL), not a
pointer.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: CUPTI API version these layouts were taken from.
CUPTI_API_VERSION = 130001

# CUpti_ActivityKind values.
KIND_MEMCPY = 1
KIND_MEMSET = 2
KIND_DRIVER = 4
KIND_RUNTIME = 5
KIND_CONCURRENT_KERNEL = 10
KIND_MARKER = 12
KIND_OVERHEAD = 17
KIND_MEMCPY2 = 22
KIND_UNIFIED_MEMORY_COUNTER = 25
KIND_SYNCHRONIZATION = 38


def _dtype(itemsize: int, fields: list[tuple[str, str, int]]) -> np.dtype:
    return np.dtype({
        "names": [f[0] for f in fields],
        "formats": [f[1] for f in fields],
        "offsets": [f[2] for f in fields],
        "itemsize": itemsize,
    })


#: CUpti_ActivityKernel10 (216 bytes); ``name`` is a string id after the sink.
KERNEL = _dtype(216, [
    ("kind", "<i4", 0), ("registers_per_thread", "<u2", 6),
    ("start", "<u8", 16), ("end", "<u8", 24),
    ("device_id", "<u4", 40), ("context_id", "<u4", 44), ("stream_id", "<u4", 48),
    ("grid_x", "<i4", 52), ("grid_y", "<i4", 56), ("grid_z", "<i4", 60),
    ("block_x", "<i4", 64), ("block_y", "<i4", 68), ("block_z", "<i4", 72),
    ("static_shared_memory", "<i4", 76), ("dynamic_shared_memory", "<i4", 80),
    ("correlation_id", "<u4", 92), ("name", "<u8", 104),
    ("graph_node_id", "<u8", 144), ("graph_id", "<u4", 156),
])

#: CUpti_ActivityMemcpy6 (96 bytes).
MEMCPY = _dtype(96, [
    ("kind", "<i4", 0), ("copy_kind", "u1", 4), ("src_kind", "u1", 5), ("dst_kind", "u1", 6),
    ("flags", "u1", 7), ("bytes", "<u8", 8), ("start", "<u8", 16), ("end", "<u8", 24),
    ("device_id", "<u4", 32), ("context_id", "<u4", 36), ("stream_id", "<u4", 40),
    ("correlation_id", "<u4", 44), ("graph_id", "<u4", 72),
])

#: CUpti_ActivityMemcpyPtoP4 (96 bytes): peer copies (kind MEMCPY2).
MEMCPY2 = _dtype(96, [
    ("kind", "<i4", 0), ("copy_kind", "u1", 4), ("src_kind", "u1", 5), ("dst_kind", "u1", 6),
    ("flags", "u1", 7), ("bytes", "<u8", 8), ("start", "<u8", 16), ("end", "<u8", 24),
    ("device_id", "<u4", 32), ("context_id", "<u4", 36), ("stream_id", "<u4", 40),
    ("src_device_id", "<u4", 44), ("dst_device_id", "<u4", 52),
    ("correlation_id", "<u4", 60), ("graph_id", "<u4", 80),
])

#: CUpti_ActivityMemset4 (88 bytes).
MEMSET = _dtype(88, [
    ("kind", "<i4", 0), ("value", "<u4", 4), ("bytes", "<u8", 8),
    ("start", "<u8", 16), ("end", "<u8", 24),
    ("device_id", "<u4", 32), ("context_id", "<u4", 36), ("stream_id", "<u4", 40),
    ("correlation_id", "<u4", 44), ("memory_kind", "<u2", 50), ("graph_id", "<u4", 72),
])

#: CUpti_ActivitySynchronization2 (56 bytes).
SYNC = _dtype(56, [
    ("kind", "<i4", 0), ("type", "<i4", 4), ("start", "<u8", 8), ("end", "<u8", 16),
    ("correlation_id", "<u4", 24), ("context_id", "<u4", 28), ("stream_id", "<u4", 32),
    ("cuda_event_id", "<u4", 36),
])

#: CUpti_ActivityAPI (40 bytes): kinds RUNTIME and DRIVER.
API = _dtype(40, [
    ("kind", "<i4", 0), ("cbid", "<u4", 4), ("start", "<u8", 8), ("end", "<u8", 16),
    ("process_id", "<u4", 24), ("thread_id", "<u4", 28), ("correlation_id", "<u4", 32),
    ("return_value", "<u4", 36),
])

#: CUpti_ActivityMarker2 (56 bytes); objectId flattened to its thread member.
MARKER = _dtype(56, [
    ("kind", "<i4", 0), ("flags", "<i4", 4), ("timestamp", "<u8", 8), ("id", "<u4", 16),
    ("object_kind", "<i4", 20), ("process_id", "<u4", 24), ("thread_id", "<u4", 28),
    ("name", "<u8", 40), ("domain", "<u8", 48),
])

#: CUpti_ActivityOverhead3 (56 bytes).
OVERHEAD = _dtype(56, [
    ("kind", "<i4", 0), ("overhead_kind", "<i4", 4), ("object_kind", "<i4", 8),
    ("start", "<u8", 24), ("end", "<u8", 32), ("correlation_id", "<u4", 40),
])

#: CUpti_ActivityUnifiedMemoryCounter3 (104 bytes).  ``value`` is bytes for transfers, the
#: fault count of a GPU fault group, and the faulting program counter for a CPU page
#: fault (whose ``end`` is 0); ``flags`` is the migration cause of a transfer and the
#: access type of a fault.
UVM = _dtype(104, [
    ("kind", "<i4", 0), ("counter_kind", "<i4", 4), ("value", "<u8", 8),
    ("start", "<u8", 16), ("end", "<u8", 24), ("address", "<u8", 32),
    ("src_id", "<u4", 40), ("dst_id", "<u4", 44), ("stream_id", "<u4", 48),
    ("process_id", "<u4", 52), ("flags", "<u4", 56),
])


@dataclass(frozen=True)
class RecordLayout:
    """How the sink copies one CUPTI kind: record dtype and string-pointer field offsets."""

    kind: int
    name: str
    dtype: np.dtype
    string_fields: tuple[str, ...] = ()

    @property
    def string_offsets(self) -> tuple[int, ...]:
        """Byte offsets of the string fields inside one record."""
        fields: Mapping[str, Any] = self.dtype.fields or {}
        return tuple(fields[f][1] for f in self.string_fields)


#: every kind the sink can keep, by CUPTI kind value
LAYOUTS: dict[int, RecordLayout] = {
    KIND_CONCURRENT_KERNEL: RecordLayout(KIND_CONCURRENT_KERNEL, "kernel", KERNEL, ("name",)),
    KIND_MEMCPY: RecordLayout(KIND_MEMCPY, "memcpy", MEMCPY),
    KIND_MEMCPY2: RecordLayout(KIND_MEMCPY2, "memcpy2", MEMCPY2),
    KIND_MEMSET: RecordLayout(KIND_MEMSET, "memset", MEMSET),
    KIND_SYNCHRONIZATION: RecordLayout(KIND_SYNCHRONIZATION, "sync", SYNC),
    KIND_RUNTIME: RecordLayout(KIND_RUNTIME, "runtime", API),
    KIND_DRIVER: RecordLayout(KIND_DRIVER, "driver", API),
    KIND_MARKER: RecordLayout(KIND_MARKER, "marker", MARKER, ("name", "domain")),
    KIND_OVERHEAD: RecordLayout(KIND_OVERHEAD, "overhead", OVERHEAD),
    KIND_UNIFIED_MEMORY_COUNTER: RecordLayout(KIND_UNIFIED_MEMORY_COUNTER, "uvm", UVM),
}

#: layout by short name (``kernel``, ``memcpy``, ...)
BY_NAME: dict[str, RecordLayout] = {lay.name: lay for lay in LAYOUTS.values()}

# CUpti_ActivityMemcpyKind -> store vocabulary (copy_kind column).
COPY_KINDS = {0: "other", 1: "H2D", 2: "D2H", 3: "other", 4: "other", 5: "other", 6: "other",
              7: "other", 8: "D2D", 9: "H2H", 10: "P2P"}
# CUpti_ActivityMemoryKind -> store vocabulary (src_kind, dst_kind, mem_kind columns).
MEMORY_KINDS = {0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array",
                5: "managed", 6: "device", 7: "managed"}
MEMORY_KIND_PAGEABLE = 1
# CUpti_ActivitySynchronizationType -> store vocabulary (sync_kind column).
SYNC_KINDS = {0: "unknown", 1: "event", 2: "stream_wait_event", 3: "stream", 4: "context"}
#: CUPTI_SYNCHRONIZATION_INVALID_VALUE: "not applicable" in sync records
SYNC_INVALID = 0xFFFFFFFF
# CUpti_ActivityFlag marker bits.
MARKER_INSTANTANEOUS, MARKER_START, MARKER_END = 1, 2, 4
# CUpti_ActivityObjectKind
OBJECT_THREAD = 2
# CUpti_ActivityOverheadKind -> short name (stop() statistics)
OVERHEAD_KINDS = {0: "unknown", 1: "driver_compiler", 1 << 16: "cupti_buffer_flush",
                  2 << 16: "cupti_instrumentation", 3 << 16: "cupti_resource",
                  4 << 16: "runtime_triggered_module_loading", 5 << 16: "lazy_function_loading",
                  6 << 16: "command_buffer_full", 7 << 16: "activity_buffer_request",
                  8 << 16: "uvm_activity_init"}
# CUpti_ActivityUnifiedMemoryCounterKind -> store vocabulary (uvm.kind column).
UVM_COUNTER_KINDS = {0: "unknown", 1: "htod", 2: "dtoh", 3: "cpu_page_fault", 4: "gpu_page_fault",
                     5: "thrashing", 6: "throttling", 7: "remote_map", 8: "dtod"}
#: counter kinds that move bytes between processors (``value`` is bytes): migrations
UVM_TRANSFER_KINDS = (1, 2, 8)
UVM_CPU_PAGE_FAULT, UVM_GPU_PAGE_FAULT = 3, 4
# CUpti_ActivityUnifiedMemoryMigrationCause (flags of a transfer) and
# CUpti_ActivityUnifiedMemoryAccessType (flags of a fault) -> uvm.cause column.
UVM_MIGRATION_CAUSES = {0: "unknown", 1: "user", 2: "coherence", 3: "prefetch", 4: "eviction", 5: "access_counters"}
UVM_ACCESS_TYPES = {0: "unknown", 1: "read", 2: "write", 3: "atomic", 4: "prefetch"}
#: CUpti_ActivityUnifiedMemoryCounterScope PROCESS_SINGLE_DEVICE
UVM_SCOPE_SINGLE_DEVICE = 1
#: CUpti_ActivityUnifiedMemoryCounterConfig {scope, kind, deviceId, enable} (16 bytes)
UVM_CONFIG = np.dtype([("scope", "<i4"), ("kind", "<i4"), ("device_id", "<u4"), ("enable", "<u4")])
