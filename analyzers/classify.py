"""Classify GPU work: what kind each kernel is (compute / communication / memory).

Two classifications live here:

* :func:`kernel_kind` is perfscope's own, used by the step breakdown.  It recognises NCCL
  (and RCCL/MSCCL/HCCL) kernels by name whatever the NCCL version calls them
  (``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_RING_LL``,
  ``ncclDevKernel_Generic_4``, ``void ncclDevKernel_...``, ``nccl:all_reduce``), and
  additionally marks as communication any kernel whose correlation id or name the
  ``collectives`` table names, so a renamed NCCL kernel is still caught when the NCCL
  collector ran.
* :func:`hta_kernel_type` reproduces Holistic Trace Analysis 0.5.0's regexes
  (``hta/utils/utils.py``) so that :mod:`perfscope.analyzers.gpu_summary` agrees with HTA's
  temporal breakdown.  HTA's communication regex ``^nccl.*Kernel`` misses names that do not
  start with ``nccl`` or lack ``Kernel``; that is HTA's behaviour and is kept on purpose there.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfscope.store.names import COLLECTIVE_ALIASES

COMPUTE, COMMUNICATION, MEMORY = "compute", "communication", "memory"
KINDS: tuple[str, ...] = (COMPUTE, COMMUNICATION, MEMORY)

# Communication libraries' kernels: NCCL (all versions), RCCL, MSCCL(++), HCCL, and the
# "nccl:<op>" names some tools give GPU annotations.  Case-insensitive, anywhere in the
# name, because demangled names often start with "void ".
COMM_NAME_RE = re.compile(r"(?i)(?:^|[^a-z])(?:nccl|rccl|msccl|mscclpp|hccl)(?:[A-Z_:]|dev|kernel)", re.IGNORECASE)
# Copies and memsets that a source reports as kernels (Kineto names, HIP names, MTIA dma).
MEMORY_NAME_RE = re.compile(r"^(?:hip)?(?:Memcpy|Memset)|^dma|^\[?memcpy|^\[?memset", re.IGNORECASE)

# HTA 0.5.0 (hta/utils/utils.py), copied verbatim.
HTA_COMM_RE = r"^nccl.*Kernel"
HTA_MEMORY_RE = r"(^Memcpy)|(^Memset)|(^dma)"
HTA_NOT_COMPUTE_RE = r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)"

# Copy kinds that cross PCIe/NVLink between host and device or between devices (pcie
# bucket); device-to-device copies inside one GPU count as compute.
PCIE_COPY_KINDS = frozenset({"H2D", "D2H", "P2P", "H2H", "other", "HtoD", "DtoH", "PtoP"})
D2D_COPY_KINDS = frozenset({"D2D", "DtoD"})


def codes_and_names(names: pd.Series | list[str] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (codes, distinct names) of a string column, null as ``""``.

    Categorical columns (the store's dictionary-encoded names) are used as they are, so no
    per-row string is touched; other columns are factorised once.
    """
    s = names if isinstance(names, pd.Series) else pd.Series(names, dtype=object)
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes = s.cat.codes.to_numpy()
        cats = np.asarray(s.cat.categories.astype(str), dtype=object)
        if (codes < 0).any():
            cats = np.append(cats, "")
            codes = np.where(codes < 0, len(cats) - 1, codes)
        return codes.astype(np.int64, copy=False), cats
    codes, uniques = pd.factorize(s, use_na_sentinel=False)
    u = np.array(["" if (v is None or v is pd.NA or (isinstance(v, float) and v != v)) else str(v) for v in uniques], dtype=object)
    return codes.astype(np.int64, copy=False), u


def _names(names: pd.Series | list[str] | np.ndarray) -> pd.Series:
    return names if isinstance(names, pd.Series) else pd.Series(names, dtype=object)


def _per_unique(names: pd.Series, fn) -> np.ndarray:
    """Apply ``fn`` (vectorised over a string Series) once per distinct name, then map back:
    kernel tables repeat a few thousand names millions of times."""
    codes, uniques = codes_and_names(names)
    out = np.asarray(fn(pd.Series(uniques, dtype=object)))
    return out[codes] if len(codes) else out[:0]


def name_matches(names: pd.Series | list[str] | np.ndarray, pattern: str | re.Pattern[str]) -> np.ndarray:
    """Return a bool array: ``re.search(pattern, name)`` per row, evaluated once per distinct
    name (nulls never match)."""
    s = _names(names)
    if len(s) == 0:
        return np.zeros(0, dtype=bool)
    return _per_unique(s, lambda u: u.str.contains(pattern, regex=True).to_numpy(bool)).astype(bool)


def name_values(names: pd.Series | list[str] | np.ndarray) -> np.ndarray:
    """Return the names as an object array of ``str`` (null as ``""``), built per distinct name."""
    codes, u = codes_and_names(_names(names))
    return u[codes] if len(codes) else np.zeros(0, dtype=object)


def is_comm_name(names: pd.Series | list[str] | np.ndarray) -> np.ndarray:
    """Return a bool array: True where the kernel name is a communication library kernel."""
    s = _names(names)
    return _per_unique(s, lambda u: u.str.contains(COMM_NAME_RE, regex=True).to_numpy(bool)).astype(bool)


def kernel_kind(
    names: pd.Series | list[str] | np.ndarray,
    correlation: pd.Series | np.ndarray | None = None,
    comm_correlations: np.ndarray | None = None,
    comm_kernel_names: set[str] | frozenset[str] | None = None,
) -> np.ndarray:
    """Classify kernels as ``compute``, ``communication`` or ``memory``.

    Args:
        names: kernel names.
        correlation: the kernels' correlation ids (aligned with ``names``), optional.
        comm_correlations: correlation ids the collectives table attributes to NCCL work.
        comm_kernel_names: kernel names the collectives table reports (``kernel_name``).

    Returns:
        an object array of kind strings, one per kernel.
    """
    s = _names(names)

    def classify(u: pd.Series) -> np.ndarray:
        kind = np.full(len(u), COMPUTE, dtype=object)
        kind[u.str.contains(MEMORY_NAME_RE, regex=True).to_numpy(bool)] = MEMORY
        comm = u.str.contains(COMM_NAME_RE, regex=True).to_numpy(bool, copy=True)
        if comm_kernel_names:
            comm = comm | u.isin(list(comm_kernel_names)).to_numpy(bool)
        kind[comm] = COMMUNICATION
        return kind

    kind = _per_unique(s, classify).astype(object)
    if correlation is not None and comm_correlations is not None and len(comm_correlations):
        corr = pd.Series(correlation).to_numpy(dtype="float64", na_value=np.nan)
        hit = np.isin(corr, np.asarray(comm_correlations, dtype="float64"))
        kind[hit] = COMMUNICATION
    return kind


def hta_kernel_type(names: pd.Series | list[str] | np.ndarray) -> np.ndarray:
    """Return HTA 0.5.0's kernel type per name: ``COMMUNICATION``, ``MEMORY``,
    ``COMPUTATION`` or ``OTHER`` (checked in that order, with ``re.match`` semantics)."""
    s = _names(names)

    def classify(u: pd.Series) -> np.ndarray:
        comm = u.str.match(HTA_COMM_RE).to_numpy(bool)
        mem = u.str.match(HTA_MEMORY_RE).to_numpy(bool)
        not_compute = u.str.match(HTA_NOT_COMPUTE_RE).to_numpy(bool)
        return np.select([comm, mem, ~not_compute], ["COMMUNICATION", "MEMORY", "COMPUTATION"], "OTHER")

    return _per_unique(s, classify)


def hta_is_computation(names: pd.Series | list[str] | np.ndarray) -> np.ndarray:
    """Return a bool array: True where :func:`hta_kernel_type` is ``COMPUTATION`` (decided
    once per distinct name, no per-row strings)."""
    return _per_unique(_names(names), lambda u: hta_kernel_type(u) == "COMPUTATION").astype(bool)


def copy_is_pcie(copy_kind: pd.Series | np.ndarray) -> np.ndarray:
    """Return a bool array: True for copies that cross the host link or go between devices
    (H2D, D2H, P2P, H2H, other or unknown); False for on-device D2D copies."""
    return ~_per_unique(_names(copy_kind), lambda u: u.isin(list(D2D_COPY_KINDS)).to_numpy(bool)).astype(bool)


# Collective function names as the collectives table writes them, from the names NCCL,
# torch and Kineto use.


def normalize_func(func: pd.Series | list[str]) -> pd.Series:
    """Map collective names (``allreduce``, ``nccl:all_reduce``, ``AllReduce``) to NCCL's
    spelling (``AllReduce``); unknown names pass through unchanged."""
    s = _names(func)

    def norm(u: pd.Series) -> np.ndarray:
        key = u.str.replace(r"^(?:nccl|c10d|gloo)[:_]*", "", regex=True).str.lower()
        mapped = key.map(lambda k: COLLECTIVE_ALIASES.get(k))
        return np.where(mapped.isna(), u.to_numpy(object), mapped.to_numpy(object))

    codes, u = codes_and_names(s)
    mapped = np.asarray(norm(pd.Series(u, dtype=object)), dtype=object)
    cats, inv = np.unique(mapped.astype(str), return_inverse=True)
    # Categorical: millions of rows share a handful of names (no per-row strings).
    return pd.Series(pd.Categorical.from_codes(inv[codes] if len(codes) else np.zeros(0, np.int64), categories=cats), index=s.index)



__all__ = [
    "COMPUTE", "COMMUNICATION", "MEMORY", "KINDS", "COMM_NAME_RE", "MEMORY_NAME_RE",
    "HTA_COMM_RE", "HTA_MEMORY_RE", "HTA_NOT_COMPUTE_RE",
    "codes_and_names", "name_matches", "name_values", "is_comm_name", "kernel_kind", "hta_kernel_type", "hta_is_computation", "copy_is_pcie", "normalize_func",
]
