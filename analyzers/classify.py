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
from collections.abc import Callable

import numpy as np
import pandas as pd

from perfscope.analyzers.intervals import KeyIndex
from perfscope.store.names import normalize_collective
from perfscope.store.reader import Coded

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


Names = pd.Series | pd.Categorical | Coded | pd.api.extensions.ExtensionArray | list[str] | np.ndarray


def codes_and_names(names: Names) -> tuple[np.ndarray, np.ndarray]:
    """Return (codes, distinct names) of a string column, null as ``""``.

    Dictionary-encoded columns (the store's names: a :class:`~perfscope.store.reader.Coded`,
    a ``Categorical`` or a categorical Series) are used as they are, so no per-row string
    is touched; other columns are factorised once.
    """
    if isinstance(names, Coded):
        codes, cats = names.codes, names.names
    elif isinstance(names, pd.Categorical):
        codes, cats = names.codes, names.categories
    else:
        s = _names(names)
        # The Categorical itself: no accessor and no codes Series built per call.
        codes, cats = (s.array.codes, s.array.categories) if isinstance(s.dtype, pd.CategoricalDtype) else (None, None)
    if codes is not None:
        cats = np.asarray(cats, dtype=object)
        if not all(c.__class__ is str for c in cats):
            cats = np.array([str(c) for c in cats], dtype=object)
        if codes.size and codes.min() < 0:
            cats = np.append(cats, "")
            codes = np.where(codes < 0, len(cats) - 1, codes)
        return codes.astype(np.int64, copy=False), cats
    codes, uniques = pd.factorize(s, use_na_sentinel=False)
    u = np.array(["" if (v is None or v is pd.NA or (isinstance(v, float) and v != v)) else str(v) for v in uniques], dtype=object)
    return codes.astype(np.int64, copy=False), u


def _names(names: Names) -> pd.Series | pd.Categorical | Coded:
    """``names`` as a Series, or the ``Categorical`` or ``Coded`` itself (:func:`codes_and_names`
    reads its codes); a pandas array keeps its dtype, a list or numpy array becomes ``object``."""
    if isinstance(names, (pd.Series, pd.Categorical, Coded)):
        return names
    if isinstance(names, pd.api.extensions.ExtensionArray):
        return pd.Series(names, copy=False)
    return pd.Series(names, dtype=object)


def _per_unique(names: pd.Series, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Apply ``fn`` (from an object array of distinct names to one value each) once per
    distinct name, then map back: kernel tables repeat a few thousand names millions of times."""
    codes, uniques = codes_and_names(names)
    out = np.asarray(fn(uniques))
    return out[codes] if len(codes) else out[:0]


def _searcher(pattern: str | re.Pattern[str] | Callable[[str], object]) -> Callable[[str], object]:
    if callable(pattern):  # a predicate over one name (a regex behind a cheaper test)
        return pattern
    # re.compile returns a compiled pattern as it is; str patterns hit re's cache.
    return re.compile(pattern).search


def _is_comm_name(name: str) -> bool:
    """``COMM_NAME_RE.search(name)``, decided without the regex for most names."""
    # Every match holds a library name, and each of them holds "ccl"; only c/C and l/L
    # match those letters case-insensitively (re.IGNORECASE's extra equivalences are s/ſ
    # and k/K), so a name without "ccl" in some case cannot match.  The regex costs several
    # microseconds on a long demangled kernel name; the test a fraction of one.
    return "ccl" in name.lower() and COMM_NAME_RE.search(name) is not None


def _each(names: np.ndarray, test: Callable[[str], object]) -> np.ndarray:
    """A bool array: ``bool(test(name))`` per name (a few thousand distinct names at most:
    a Python loop is cheaper than pandas' string methods' fixed costs)."""
    return np.fromiter((bool(test(n)) for n in names), dtype=bool, count=len(names))


def name_matches(names: Names, pattern: str | re.Pattern[str] | Callable[[str], object]) -> np.ndarray:
    """Return a bool array: ``re.search(pattern, name)`` per row (or ``pattern(name)`` for a
    predicate), evaluated once per distinct name (nulls never match)."""
    s = _names(names)
    if len(s) == 0:
        return np.zeros(0, dtype=bool)
    search = _searcher(pattern)
    return _per_unique(s, lambda u: _each(u, search))


def name_values(names: pd.Series | list[str] | np.ndarray) -> np.ndarray:
    """Return the names as an object array of ``str`` (null as ``""``), built per distinct name."""
    codes, u = codes_and_names(_names(names))
    return u[codes] if len(codes) else np.zeros(0, dtype=object)


def is_comm_name(names: pd.Series | list[str] | np.ndarray) -> np.ndarray:
    """Return a bool array: True where the kernel name is a communication library kernel."""
    return _per_unique(_names(names), lambda u: _each(u, _is_comm_name))


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
        an object array of kind strings, one per kernel (:func:`kernel_kinds` as strings).
    """
    kinds = kernel_kinds(names, correlation, comm_correlations, comm_kernel_names)
    return kinds.names[kinds.codes]


def kernel_kinds(
    names: pd.Series | list[str] | np.ndarray,
    correlation: pd.Series | np.ndarray | None = None,
    comm_correlations: np.ndarray | None = None,
    comm_kernel_names: set[str] | frozenset[str] | None = None,
) -> Coded:
    """:func:`kernel_kind` (same arguments) as codes: a :class:`Coded` whose ``codes`` (int8,
    one per kernel) index ``names`` = :data:`KINDS`.  Comparing codes costs a fraction of
    comparing the strings of an object array, per kernel."""
    s = _names(names)

    def classify(u: np.ndarray) -> np.ndarray:
        kind = np.full(len(u), _KIND_CODE[COMPUTE], dtype=np.int8)
        kind[_each(u, MEMORY_NAME_RE.search)] = _KIND_CODE[MEMORY]
        comm = _each(u, _is_comm_name)
        if comm_kernel_names:
            comm |= _each(u, comm_kernel_names.__contains__)
        kind[comm] = _KIND_CODE[COMMUNICATION]
        return kind

    kind = _per_unique(s, classify)
    if correlation is not None and comm_correlations is not None and len(comm_correlations):
        corr = correlation.astype("float64", copy=False) if isinstance(correlation, np.ndarray) \
            else pd.Series(correlation).to_numpy(dtype="float64", na_value=np.nan)
        ids = np.asarray(comm_correlations, dtype="float64")
        # np.isin compares every kernel with each id in turn while there are a few dozen ids
        # (a pass per id), then sorts kernels and ids together; a binary search per kernel
        # costs about as much as fifty passes, whatever the number of ids (thousands of
        # collectives in a real run).
        hit = np.isin(corr, ids) if ids.size <= 48 else KeyIndex(ids).find(corr)[0]
        kind[hit] = _KIND_CODE[COMMUNICATION]
    return Coded(kind, _KIND_NAMES)


_KIND_CODE = {k: i for i, k in enumerate(KINDS)}
_KIND_NAMES = np.array(KINDS, dtype=object)


_HTA_COMM = re.compile(HTA_COMM_RE).match
_HTA_MEMORY = re.compile(HTA_MEMORY_RE).match
_HTA_NOT_COMPUTE = re.compile(HTA_NOT_COMPUTE_RE).match


def _hta_type(name: str) -> str:
    # The regexes are anchored at the start (re.match) and case-sensitive, and each
    # alternative needs a literal: "nccl" first, or "Memcpy"/"Sync" anywhere, or "Memset"
    # first.  A name holding none of these cannot match, and the literal tests cost far less
    # than the regexes' ".*" scans of a long kernel name.
    nccl = name.startswith("nccl")
    if nccl and _HTA_COMM(name):
        return "COMMUNICATION"
    if _HTA_MEMORY(name):
        return "MEMORY"
    maybe_not_compute = nccl or "Memcpy" in name or name.startswith("Memset") or "Sync" in name
    return "OTHER" if maybe_not_compute and _HTA_NOT_COMPUTE(name) else "COMPUTATION"


def hta_kernel_type(names: pd.Series | list[str] | np.ndarray) -> np.ndarray:
    """Return HTA 0.5.0's kernel type per name: ``COMMUNICATION``, ``MEMORY``,
    ``COMPUTATION`` or ``OTHER`` (checked in that order, with ``re.match`` semantics)."""
    return _per_unique(_names(names), lambda u: np.array([_hta_type(n) for n in u], dtype="<U13"))


def hta_is_computation(names: pd.Series | list[str] | np.ndarray) -> np.ndarray:
    """Return a bool array: True where :func:`hta_kernel_type` is ``COMPUTATION`` (decided
    once per distinct name, no per-row strings)."""
    return _per_unique(_names(names), lambda u: _each(u, lambda n: _hta_type(n) == "COMPUTATION"))


def copy_is_pcie(copy_kind: pd.Series | np.ndarray) -> np.ndarray:
    """Return a bool array: True for copies that cross the host link or go between devices
    (H2D, D2H, P2P, H2H, other or unknown); False for on-device D2D copies."""
    return ~_per_unique(_names(copy_kind), lambda u: _each(u, D2D_COPY_KINDS.__contains__))


# Collective function names as the collectives table writes them, from the names NCCL,
# torch and Kineto use.


def normalize_func(func: pd.Series | list[str]) -> pd.Series:
    """Map collective names (``allreduce``, ``nccl:all_reduce``, ``AllReduce``) to NCCL's
    spelling (``AllReduce``); unknown names pass through unchanged."""
    s = _names(func)
    codes, u = codes_and_names(s)
    mapped = np.array([normalize_collective(n) or n for n in u], dtype=object)
    cats, inv = np.unique(mapped.astype(str), return_inverse=True)
    # Categorical: millions of rows share a handful of names (no per-row strings).
    return pd.Series(pd.Categorical.from_codes(inv[codes] if len(codes) else np.zeros(0, np.int64), categories=cats), index=s.index)


__all__ = [
    "COMPUTE", "COMMUNICATION", "MEMORY", "KINDS", "COMM_NAME_RE", "MEMORY_NAME_RE",
    "HTA_COMM_RE", "HTA_MEMORY_RE", "HTA_NOT_COMPUTE_RE",
    "codes_and_names", "name_matches", "name_values", "is_comm_name", "kernel_kind", "kernel_kinds", "hta_kernel_type", "hta_is_computation", "copy_is_pcie", "normalize_func",
]
