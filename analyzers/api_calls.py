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
import pandas as pd

from perfscope.analyzers.classify import codes_and_names, name_matches, name_values
from perfscope.analyzers.columns import Columns, bools, is_null, n_rows
from perfscope.analyzers.intervals import KeyIndex, as_i64, as_key, filled_i64
from perfscope.analyzers.operators import enclosing_operators, parents

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


SITE_COLUMNS: tuple[str, ...] = ("rank", "call", "site", "calls", "total_ns")
#: Operators that wait for the GPU to hand a value to the host, and what the user wrote.
SYNC_OPERATORS: dict[str, str] = {
    "aten::item": ".item()", "aten::_local_scalar_dense": ".item()", "aten::is_nonzero": "bool(tensor)",
    "aten::to": ".to()/.cpu()", "aten::_to_copy": ".to()/.cpu()", "aten::copy_": ".copy_()",
    "aten::nonzero": ".nonzero()", "aten::masked_select": "masked_select()", "aten::unique": "unique()",
    "aten::_unique2": "unique()", "aten::equal": "torch.equal()", "aten::allclose": "torch.allclose()",
    "aten::repeat_interleave": "repeat_interleave()",
}
# Step marks enclose every call: they name no call site.
_STEP_MARK_RE = re.compile(r"^ProfilerStep|^perfscope[.:]step")
_SITE_LOOKBACK = 16  # markers looked at before each call (nesting deeper than this is rare)


def blocking_sites(rank: int, api: Columns, blocking: np.ndarray, markers: Columns,
                   operators: Columns | None = None) -> pd.DataFrame:
    """Where one rank's blocking calls come from: per (call name, call site), how many and how
    long.  The call site is, for a call inside an operator that hands a GPU value to the host
    (:data:`SYNC_OPERATORS`, in ``operators``, the rank's operators table), what the user
    wrote and where: ``"`.item()` at train.py(42): step"`` (the call site when the trace has
    Python frames, see :func:`sync_operator_sites`); otherwise the innermost host marker (NVTX
    range, ``record_function``, Kineto user annotation; not a step mark) enclosing the call,
    ``""`` where none does.

    Returns:
        columns of :data:`SITE_COLUMNS`: ``calls`` and ``total_ns`` (int64 ns) summed over the
        run, one row per (call, site).
    """
    rows = np.flatnonzero(blocking)
    if rows.size == 0:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("rank", "calls", "total_ns") else object) for c in SITE_COLUMNS})
    start, dur = as_i64(api["start_ns"])[rows], as_i64(api["dur_ns"])[rows]
    site = np.full(rows.size, "", dtype=object)
    if n_rows(markers):
        keep = ~name_matches(markers["name"], _STEP_MARK_RE)
        if "device" in markers:
            keep &= is_null(markers["device"])
        ms, md = as_i64(markers["start_ns"])[keep], as_i64(markers["dur_ns"])[keep]
        names = name_values(markers["name"])[keep]
        order = np.argsort(ms, kind="stable")
        ms, me, names = ms[order], ms[order] + md[order], names[order]
        # The innermost enclosing marker is the latest-starting one that covers the call:
        # look back from the last marker starting before each call, a few markers at most.
        last = np.searchsorted(ms, start, side="right") - 1
        found = np.zeros(rows.size, dtype=bool)
        for back in range(_SITE_LOOKBACK):
            j = last - back
            hit = ~found & (j >= 0)
            jj = np.clip(j, 0, None)
            hit &= (me[jj] >= start + dur) if ms.size else hit
            site[hit] = names[jj[hit]]
            found |= hit
    if operators is not None and n_rows(operators) and "tid" in api:
        tid = np.where(is_null(api["tid"]), np.iinfo(np.int64).min, filled_i64(api["tid"]))[rows]
        by_op = sync_operator_sites(operators, tid, start, start + dur)
        site = np.where(by_op != "", by_op, site)
    df = pd.DataFrame({"call": name_values(api["name"])[rows], "site": site, "dur": dur})
    g = df.groupby(["call", "site"], sort=True)["dur"].agg(["size", "sum"]).reset_index()
    return pd.DataFrame({"rank": np.full(len(g), rank, np.int64), "call": g["call"].astype(object), "site": g["site"].astype(object),
                         "calls": g["size"].astype("int64"), "total_ns": g["sum"].astype("int64")})


def sync_operator_sites(operators: Columns, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each call (``tid``, ``start``, ``end``), ``"`.item()` at train.py(42): step"``
    when an operator of :data:`SYNC_OPERATORS` encloses it (the outermost of a chain of them,
    e.g. ``aten::item`` over ``aten::_local_scalar_dense``; ``at ...`` only when the
    operator has a call site), else ``""``.

    Args:
        operators: the rank's operators table (columns ``start_ns``, ``dur_ns``, ``tid``,
            ``name``, ``kind``, ``parent``, ``call_site``).
    """
    out = np.full(start.size, "", dtype=object)
    row = enclosing_operators(operators, tid, start, end)
    codes, names = codes_and_names(operators["name"])
    is_sync = np.array([n in SYNC_OPERATORS for n in names], dtype=bool)[codes] if codes.size else np.zeros(0, bool)
    parent = parents(operators)
    # Up to the nearest enclosing sync operator, then on up while the parent is one too.
    found = np.full(row.size, -1, dtype=np.int64)
    j = row.copy()
    while (live := j >= 0).any():
        jj = np.clip(j, 0, None)
        hit = live & is_sync[jj]
        found = np.where(hit, j, found)
        j = np.where(live & (hit | (found < 0)), parent[jj], -1)
    has = found >= 0
    if has.any():
        sites = name_values(operators["call_site"])
        labels = np.array([SYNC_OPERATORS.get(n, "") for n in names], dtype=object)
        for i in np.flatnonzero(has):
            k = found[i]
            out[i] = f"`{labels[codes[k]]}`" + (f" at {sites[k]}" if sites[k] else "")
    return out


def startup_calls(api: Columns) -> np.ndarray:
    """A bool array over ``api``'s rows: True for start-up calls (context creation, allocation,
    device queries; see the module docstring)."""
    return name_matches(api["name"], STARTUP_API_RE) if n_rows(api) else np.zeros(0, dtype=bool)


__all__ = ["SITE_COLUMNS", "SYNC_OPERATORS", "blocking_sites", "sync_operator_sites", "ASYNC_COPY_API_RE", "STARTUP_API_RE", "SYNC_API_RE", "SYNC_COPY_API_RE", "blocking_calls", "startup_calls"]
