"""Which runtime/driver API calls block the host or belong to start-up, from their names
(and, for copies, the copy each call launched).

* A **blocking call** holds the calling thread until the GPU has finished earlier work, so
  the GPU idle time under it is ``sync``, not host overhead (Nsight Systems' ``cuda_api_sync``,
  ``cuda_memcpy_sync`` and ``cuda_memcpy_async`` rules): every ``*Synchronize`` call
  (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ``cudaEventSynchronize``,
  ``cuCtxSynchronize``...), synchronous copies (``cudaMemcpy``, ``cudaMemcpy2D``,
  ``cudaMemcpyFromSymbol``, ``cuMemcpyDtoH``...: the copy APIs without ``Async``), and an
  asynchronous copy whose copy is device-to-host into **pageable** memory (the driver must
  finish it before the call returns: what ``.item()``, ``.cpu()`` and ``.tolist()`` do when
  the tensor is not pinned).  ``cudaStreamWaitEvent`` and ``cudaEventQuery`` do not block the
  host and are not counted.
* A **start-up call** creates the context, allocates memory or queries the device:
  ``cudaFree`` (the idiom that forces context creation), ``cudaDeviceGetStreamPriorityRange``
  (often the first call, which pays for lazy context creation), allocation, stream creation,
  module loading.  A window mostly covered by such calls is start-up, not a training step.
"""
from __future__ import annotations

import re

import numpy as np

from perfscope.analyzers.classify import name_matches, name_values
from perfscope.analyzers.columns import Columns, bools, n_rows
from perfscope.analyzers.intervals import KeyIndex, as_key

SYNC_API_RE = re.compile(r"(?i)synchronize")
# Copy calls without "Async" (runtime and driver spellings; "_v2" suffixes allowed).
SYNC_COPY_API_RE = re.compile(r"^(?:cudaMemcpy(?:2D|3D)?(?:ToArray|FromArray|ToSymbol|FromSymbol|Peer)?"
                              r"|cuMemcpy(?:DtoH|HtoD|DtoD|AtoH|HtoA|2D|3D|Peer)?)(?:_v\d+)?$")
ASYNC_COPY_API_RE = re.compile(r"(?i)memcpy.*async")
STARTUP_API_RE = re.compile(
    r"^(?:cudaFree|cudaFreeHost|cudaMalloc\w*|cudaHostAlloc|cudaHostRegister|cudaDeviceGetStreamPriorityRange"
    r"|cudaGetDeviceProperties\w*|cudaGetDeviceCount|cudaSetDevice|cudaDeviceGetAttribute|cudaStreamCreate\w*"
    r"|cudaFuncGetAttributes|cuInit|cuCtxCreate\w*|cuDevicePrimaryCtxRetain|cuModuleLoad\w*|cuLibraryLoad\w*"
    r"|cuMemAlloc\w*|cuMemFree\w*)(?:_v\d+)?$")


def blocking_calls(api: Columns, memcpy: Columns) -> np.ndarray:
    """A bool array over ``api``'s rows (columns ``name``, ``correlation``): True for calls
    that block the host until the GPU catches up (see the module docstring); ``memcpy``
    (columns ``correlation``, ``copy_kind``, ``pageable``) tells which asynchronous copies
    went device-to-host into pageable memory."""
    if n_rows(api) == 0:
        return np.zeros(0, dtype=bool)
    names = api["name"]
    out = name_matches(names, SYNC_API_RE) | name_matches(names, SYNC_COPY_API_RE)
    if n_rows(memcpy) and "pageable" in memcpy:
        d2h = np.isin(name_values(memcpy["copy_kind"]), ("D2H", "DtoH")) & bools(memcpy["pageable"])
        if d2h.any():
            async_copy = name_matches(names, ASYNC_COPY_API_RE)
            found, _ = KeyIndex(as_key(memcpy["correlation"])[d2h]).find(as_key(api["correlation"]))
            out |= async_copy & found
    return out


def startup_calls(api: Columns) -> np.ndarray:
    """A bool array over ``api``'s rows: True for start-up calls (context creation, allocation,
    device queries; see the module docstring)."""
    return name_matches(api["name"], STARTUP_API_RE) if n_rows(api) else np.zeros(0, dtype=bool)


__all__ = ["ASYNC_COPY_API_RE", "STARTUP_API_RE", "SYNC_API_RE", "SYNC_COPY_API_RE", "blocking_calls", "startup_calls"]
