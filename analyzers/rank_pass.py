"""One rank's pass of the analysis: read the rank, compute what needs no other rank, and
keep a small :class:`RankSummary`.

:func:`rank_summary` reads only the needed columns of kernels, memcpy, memset, sync, api,
markers, steps and host of one rank as arrays (``Run.arrays``: numpy columns, names as codes;
no DataFrame, see :mod:`.columns`), then classifies kernels once per distinct name
(:mod:`.classify`), looks each GPU event's launching call up once, builds step windows
(:mod:`.steps`), the HTA-style GPU summary row (:mod:`.gpu_summary`), the kernel and launch
tables (:mod:`.kernels`) and the copy summary, and sweeps the step windows into buckets
(:mod:`.breakdown`).  It needs nothing of the other ranks but :class:`RankInputs` (a few
arrays from the collectives table), opens nothing and keeps nothing, so the passes can run
in any order, in other processes or on other machines (:mod:`perfscope.distributed`).

What comes back is what the cross-rank steps of :func:`~.analysis.analyze_run` need, and no
more (:class:`RankSummary`): tables of a few rows per step, per kernel name and per copy kind,
and, for the collective waits that only matching across ranks finds, the rank's activity
*inside its collectives* (not its whole timeline).  Names are coded in the rank's own order
of first appearance; :func:`~.analysis.analyze_run` re-codes them over all ranks in rank
order, so the results are the same, to the bit, as one pass over every rank.
"""
from __future__ import annotations

import dataclasses
import pickle
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

# Every analysis builds ``str`` columns (kernel, step and copy names), which pandas makes
# through pyarrow; pyarrow's pandas bridge imports these modules on its first use (~1.5 ms,
# most of it compiling a version regex).  Imported here with pandas, as every analysis needs
# them whatever the run holds; the version module is pyarrow's private one, hence the guard.
try:
    import pyarrow.pandas_compat
    import pyarrow.vendored.version  # noqa: F401
except ImportError:  # another pyarrow layout: they are imported on first use instead
    pass

from perfscope.analyzers.api_calls import blocking_calls, blocking_sites, startup_calls
from perfscope.analyzers.breakdown import (
    EMPTY,
    LAYERS,
    Intervals,
    bucket_columns,
    post_sync_idle_columns,
    with_columns,
)
from perfscope.analyzers.classify import (
    COMMUNICATION,
    KINDS,
    MEMORY,
    codes_and_names,
    copy_is_pcie,
    hta_is_computation,
    kernel_kinds,
    name_matches,
    name_values,
)
from perfscope.analyzers.columns import Columns, bools, columns, interleave, is_null, n_rows, ordered, take
from perfscope.analyzers.config import AnalysisConfig
from perfscope.analyzers.gpu_summary import summary_row
from perfscope.analyzers.intervals import (
    I64,
    KeyIndex,
    as_i64,
    as_key,
    covered_ns,
    filled_i64,
    intersect,
    merge,
)
from perfscope.analyzers.kernels import launch_row, top_kernels
from perfscope.analyzers.operators import READ_COLUMNS, launch_operators, parents, rank_call_sites, rank_operators
from perfscope.analyzers.savings import LARGE_COPY_BYTES, copy_calls, large_pageable_copies, pageable_copy_columns, sync_removed
from perfscope.analyzers.steps import rank_windows
from perfscope.analyzers.uvm import migration_intervals, uvm_row

from perfscope.store.reader import Coded

COLUMNS: dict[str, list[str]] = {
    "kernels": ["rank", "start_ns", "dur_ns", "correlation", "name"],
    "memcpy": ["rank", "start_ns", "dur_ns", "correlation", "copy_kind", "bytes", "pageable"],
    "memset": ["rank", "start_ns", "dur_ns", "correlation"],
    "sync": ["rank", "start_ns", "dur_ns", "sync_kind", "stream", "correlation"],
    "api": ["rank", "start_ns", "dur_ns", "correlation", "name", "tid"],
    "markers": ["rank", "start_ns", "dur_ns", "name", "device"],
    "steps": ["rank", "step", "start_ns", "dur_ns", "name", "source"],
    "host": ["rank", "start_ns", "dur_ns", "kind", "name"],
    "operators": list(READ_COLUMNS),
    "uvm": ["rank", "start_ns", "dur_ns", "kind", "bytes", "faults"],
    "collectives": ["rank", "start_ns", "dur_ns", "enqueue_ns", "comm_id", "seq", "func", "bytes", "nranks", "correlation", "kernel_name", "peer"],
}
HOST_SYNC_KINDS = ("barrier", "collective_wait", "sync_wait")
DATALOADER_NAME_RE = re.compile(r"enumerate\((?:DataLoader|DataPipe)\)#.*__next__")
PCIE_MEMORY_KERNEL_RE = re.compile(r"(?i)HtoD|DtoH|HtoH|PtoP|H2D|D2H")
_PCIE_WORDS = ("htod", "dtoh", "htoh", "ptop", "h2d", "d2h")


def _is_pcie_memory_kernel(name: str) -> bool:
    """``PCIE_MEMORY_KERNEL_RE.search(name)``, decided without the regex for most names: a
    match is one of its words in some case, and no letter of them has a case-insensitive
    equivalent outside ASCII (the regex scans a long kernel name at every position)."""
    low = name.lower()
    return any(w in low for w in _PCIE_WORDS) and PCIE_MEMORY_KERNEL_RE.search(name) is not None


RANK_TABLES: tuple[str, ...] = ("kernels", "memcpy", "memset", "sync", "api", "markers", "steps", "host", "uvm")


def read_columns(run: Any, name: str, ranks: list[int] | None, coded: bool = True) -> Columns:
    """Table ``name`` of ``ranks`` as columns (:mod:`.columns`): those of :data:`COLUMNS`;
    rows without a start dropped, ``start_ns``/``dur_ns`` int64 (a missing or negative
    duration is 0).  Read with the run's ``arrays`` (no DataFrame is built; names as
    :class:`~perfscope.store.reader.Coded` when ``coded``, else categoricals), or its
    ``table`` when it has none (names as categoricals)."""
    cols = COLUMNS[name]
    t = run.arrays(name, ranks=ranks, columns=cols, coded=coded) if hasattr(run, "arrays") else \
        columns(run.table(name, ranks=ranks, columns=cols))
    if "start_ns" in t and n_rows(t) and not _plain_times(t):
        missing = is_null(t["start_ns"])
        if missing.any():
            t = take(t, ~missing)
        fixed = {"start_ns": as_i64(t["start_ns"])}
        if "dur_ns" in t:
            fixed["dur_ns"] = np.maximum(filled_i64(t["dur_ns"]), 0)
        t = {**t, **fixed}
    return t


def _plain_times(t: Columns) -> bool:
    """True when ``start_ns`` and ``dur_ns`` are int64 numpy columns (no nulls) and no
    duration is negative: what the store gives; the table needs no fixing then."""
    start, dur = t["start_ns"], t.get("dur_ns")
    i64 = np.dtype(np.int64)
    if not isinstance(start, np.ndarray) or not isinstance(dur, np.ndarray) or start.dtype != i64 or dur.dtype != i64:
        return False
    return int(dur.min()) >= 0


_RELEASE_BYTES = 64 << 20


def release_arrow_memory() -> None:
    """Hand the memory pyarrow's pool kept from decoding Parquet back to the system: the
    pool keeps it otherwise, and the numpy work that follows cannot use it."""
    try:
        import pyarrow as pa

        pool = pa.default_memory_pool()
        if pool.max_memory() >= _RELEASE_BYTES:  # a small run's few MiB are not worth the call
            pool.release_unused()
    except (ImportError, AttributeError):  # an old pyarrow: the memory is only kept longer
        pass


class GlobalCodes:
    """Codes of a dictionary-encoded column over all ranks while reading one rank at a time.

    Reading every rank at once gives categories in order of first appearance over the ranks
    (in rank order); that order decides ties in sorted tables (kernels with equal total time),
    so the per-rank frames are re-coded to it and results stay exactly the same.
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []
        self._dtype: pd.CategoricalDtype | None = None  # over ``names``, until a name is added

    def add(self, names: Sequence[str]) -> np.ndarray:
        """Add ``names`` (distinct, in order of first appearance) after those seen so far;
        returns their codes (int64; one per name)."""
        for name in names:
            if name not in self.index:
                self.index[name] = len(self.names)
                self.names.append(name)
                self._dtype = None
        return np.array([self.index[n] for n in names], dtype=np.int64)

    def recode(self, col: Any) -> Coded:
        """Return ``col`` (a column: a ``Coded``, a ``Categorical``, or any strings) coded over
        every name seen so far (:meth:`categorical` makes it a categorical)."""
        if isinstance(col, pd.Series) and isinstance(col.dtype, pd.CategoricalDtype):
            col = col.array
        if isinstance(col, Coded):
            codes, cats = col.codes, col.names
        elif isinstance(col, pd.Categorical):
            codes, cats = col.codes, col.categories
        else:
            codes, cats = pd.factorize(col)
        codes = np.asarray(codes)  # any integer dtype: -1 (null) indexes the mapping's last entry
        cat_names = [str(x) for x in np.asarray(cats, dtype=object)]
        present = pd.unique(codes)
        self.add([cat_names[c] for c in present[present >= 0]])  # in order of first appearance
        # int32 codes: a quarter of int64's memory on a rank's millions of kernels.
        mapping = np.full(len(cats) + 1, -1, dtype=np.int32)  # the last entry maps null (-1) to null
        mapping[: len(cats)] = [self.index.get(x, -1) for x in cat_names]
        return Coded(mapping[codes], np.array(self.names, dtype=object))

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """A categorical over every name seen, from global codes (-1 for null)."""
        if self._dtype is None:
            self._dtype = pd.CategoricalDtype(pd.Index(self.names, dtype=object))
        # The codes come from recode(): in range by construction, so no validation pass.
        return pd.Categorical.from_codes(codes, dtype=self._dtype, validate=False)


LAYER_COMPUTE, LAYER_COMM, LAYER_PCIE = 0, 1, 2


def _gpu_events(kernels: Columns, kinds: Coded, memcpy: Columns, memset: Columns,
                launch: list[tuple[np.ndarray, np.ndarray]] | None = None) -> dict[str, np.ndarray]:
    """All GPU activity (the tables as columns), ordered by rank: ``rank``, ``start_ns``,
    ``end_ns``, ``correlation`` (float64, NaN when unknown), ``layer`` (int8: 0 compute, 1
    communication, 2 pcie) and ``hta_compute`` (bool: HTA would count it as COMPUTATION).
    With ``launch`` (one rank: (found, launch call start) for kernels, memcpy and memset),
    ``launched`` (bool) and ``launch_ns`` (int64) instead of ``correlation``, ordered by
    ``start_ns`` (stable).

    Returns:
        the columns as numpy arrays of one length.
    """
    k_layer = np.where(kinds.codes == KINDS.index(COMMUNICATION), LAYER_COMM, LAYER_COMPUTE).astype(np.int8)
    mem_k = kinds.codes == KINDS.index(MEMORY)
    if mem_k.any():
        k_layer[mem_k & name_matches(kernels["name"], _is_pcie_memory_kernel)] = LAYER_PCIE

    def part(t: Columns, layer: np.ndarray | int, hta_compute: np.ndarray | bool) -> dict[str, Any]:
        st = as_i64(t["start_ns"])
        n = st.size
        p = {"rank": np.asarray(t["rank"], dtype=np.int64), "start_ns": st, "end_ns": st + as_i64(t["dur_ns"])}
        if launch is None:
            p["correlation"] = as_key(t["correlation"])
        p["layer"] = np.broadcast_to(np.asarray(layer, dtype=np.int8), (n,))
        p["hta_compute"] = np.broadcast_to(np.asarray(hta_compute, dtype=bool), (n,))
        return p

    has_memcpy, has_memset = n_rows(memcpy) > 0, n_rows(memset) > 0
    parts = [part(kernels, k_layer, hta_is_computation(kernels["name"]))]
    if has_memcpy:
        parts.append(part(memcpy, np.where(copy_is_pcie(memcpy["copy_kind"]), LAYER_PCIE, LAYER_COMPUTE), False))
    if has_memset:
        parts.append(part(memset, LAYER_COMPUTE, False))
    if launch is not None:
        used = [launch[0]] + [lk for lk, present in zip(launch[1:], (has_memcpy, has_memset)) if present]
        for p, (found, start) in zip(parts, used):
            # The launching call replaces the correlation id (all it was needed for).
            p["launched"], p["launch_ns"] = found, start
    key = "rank" if launch is None else "start_ns"
    if len(parts) == 1:
        cols = {c: np.ascontiguousarray(v) for c, v in parts[0].items()}  # materialises the broadcasts only
    elif all(ordered(p[key]) for p in parts):
        return interleave(parts, key)
    else:
        cols = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    del parts
    if not ordered(cols[key]):
        order = np.argsort(cols[key], kind="stable")  # nearly sorted in practice: fast
        for c in cols:  # one column at a time: the unsorted one is freed before the next
            cols[c] = cols[c][order]
    return cols


def _int_or_zero(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def _ivs(t: Columns | None, mask: np.ndarray | None = None, end_col: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the rows of ``t`` (one rank's columns) where ``mask`` holds."""
    if t is None or n_rows(t) == 0:
        return EMPTY
    s = as_i64(t["start_ns"])
    e = as_i64(t[end_col]) if end_col else s + as_i64(t["dur_ns"])
    if mask is not None and not mask.all():
        return s[mask], e[mask]
    return s, e


def _cat(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The intervals of ``parts`` one after the other (a single non-empty part as it is)."""
    parts = [p for p in parts if len(p[0])] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@dataclasses.dataclass(frozen=True)
class RankInputs:
    """What one rank's pass needs from outside the rank (small and picklable).

    Attributes:
        config: the analysis options.
        comm_corr: correlation ids (:func:`~.intervals.as_key`) of the rank's operations in
            the NCCL collector's table (their kernels are communication); None without one.
        comm_names: kernel names that table recorded (communication on every rank).
        coll_spans: (starts, ends) int64 ns of the rank's operations in that table: a
            collective wait (found later, across ranks) lies inside one of them or inside a
            communication kernel.
        keep_comm_kernels: return the rank's communication kernels (:attr:`RankSummary.
            comm_kernels`): the run has no NCCL table and several ranks, so the collectives
            are rebuilt from them.
    """

    config: AnalysisConfig
    comm_corr: np.ndarray | None = None
    comm_names: frozenset[str] | None = None
    coll_spans: Intervals = EMPTY
    keep_comm_kernels: bool = False


@dataclasses.dataclass
class RankSummary:
    """What one rank's pass returns: all that the cross-rank steps need of the rank.

    Names are coded in the rank's order of first appearance (``kernel_names``,
    ``copy_kinds``); tables whose row order depends on name codes are put in the all-rank
    order by :func:`~.analysis.analyze_run`.

    Attributes:
        rank: the rank.
        steps: its rows of ``Analysis.steps`` before collective waits (``comm_wait`` empty);
            None when the rank has no step window.
        wait_layers: its activity layers (:data:`~.breakdown.LAYERS` but ``comm_wait``)
            clipped to its collectives and communication kernels: where a collective wait
            can re-bucket time (see :func:`with_collective_waits`).
        gpu_summary: its :func:`~.gpu_summary.summary_row` (None without GPU events).
        kernels: its :func:`~.kernels.top_kernels` rows that can be among its ``top_kernels``
            whatever the name order (ties at the cut included); None without kernels.
        kernel_names: its kernel names in order of first appearance.
        launch: its :func:`~.kernels.launch_row` (None without kernels).
        comm_kernels: (rank, start_ns, dur_ns, name code) arrays of its communication kernels
            when :attr:`RankInputs.keep_comm_kernels`, else None.
        copies: its copy summary (:func:`copy_summary`) with ``kind_code`` (the row's code in
            ``copy_kinds``; ``len(copy_kinds)`` for a null kind); None without copies.
        copy_kinds: its copy kinds in order of first appearance.
        step_warnings: what finding its steps has to tell the user.
        sync_sites: where its blocking calls come from (:func:`~.api_calls.blocking_sites`:
            per call and call site, count and time); None without blocking calls.
        operators: its operators and frames in its steps, every name
            (:func:`~.operators.rank_operators`); None when it has no operators table.
        operator_sites: its call sites (:func:`~.operators.rank_call_sites`), or None.
        launch_operators: the operators behind its launch time
            (:func:`~.operators.launch_operators`), or None.
        what_if: per row of ``steps`` (same order), what the saving models of
            :mod:`.savings` need beyond the buckets (:func:`what_if_rows`); None without steps.
        uvm: its Unified Memory activity in its steps (:func:`~.uvm.uvm_row`); None without.
    """

    rank: int
    steps: pd.DataFrame | None
    wait_layers: dict[str, Intervals]
    gpu_summary: dict | None
    kernels: pd.DataFrame | None
    kernel_names: list[str]
    launch: dict | None
    comm_kernels: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None
    copies: pd.DataFrame | None
    copy_kinds: list[str]
    step_warnings: list[str]
    sync_sites: pd.DataFrame | None = None
    operators: pd.DataFrame | None = None
    operator_sites: pd.DataFrame | None = None
    launch_operators: pd.DataFrame | None = None
    what_if: pd.DataFrame | None = None
    uvm: dict[str, int] | None = None

    def nbytes(self) -> int:
        """Size of the summary pickled (what crosses from a worker to the client), bytes."""
        return len(pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL))


def rank_summary(run: Any, r: int, inputs: RankInputs) -> RankSummary:
    """Read rank ``r`` of ``run`` and compute everything that needs no other rank.

    The rank's tables stay columns (numpy arrays; names as codes) throughout: no DataFrame
    is built here but the small per-rank result tables.

    Returns:
        the rank's :class:`RankSummary`.
    """
    cfg = inputs.config
    meta_r = run.rank_meta(r) if hasattr(run, "rank_meta") else {}
    # The importer stores a Kineto trace's baseTimeNanoseconds as base_time_ns.
    base_ns = _int_or_zero(meta_r.get("base_time_ns", meta_r.get("time_base_ns")))
    t = {name: read_columns(run, name, [r]) for name in RANK_TABLES}
    release_arrow_memory()
    api = t["api"]
    names, copy_kinds = GlobalCodes(), GlobalCodes()  # this rank's codes, in order of first appearance
    k = {**t["kernels"], "name": names.recode(t["kernels"]["name"])}
    n_k, n_api = n_rows(k), n_rows(api)
    kinds = kernel_kinds(k["name"], k["correlation"], inputs.comm_corr, set(inputs.comm_names) if inputs.comm_names is not None else None)
    # Each GPU event's launching call, looked up once: the API calls are sorted by correlation
    # once, and steps, the GPU summary and the launch statistics all use the result.
    index = KeyIndex(as_key(api["correlation"]))
    api_start = as_i64(api["start_ns"])
    k_found, k_pos = index.find(as_key(k["correlation"]))
    launch = [(k_found, api_start[k_pos] if api_start.size else np.zeros(n_k, I64))]
    for name in ("memcpy", "memset"):
        found, pos = index.find(as_key(t[name]["correlation"]))
        launch.append((found, api_start[pos] if api_start.size else np.zeros(n_rows(t[name]), I64)))
    del index
    gpu = _gpu_events(k, kinds, t["memcpy"], t["memset"], launch)
    del launch
    step_warnings: list[str] = []
    win = rank_windows(r, t["steps"], t["markers"], t["host"], api, gpu, step_warnings,
                       step_pattern=cfg.step_pattern, extend_to_gpu=cfg.extend_steps_to_gpu)
    row = summary_row(r, gpu, api, t["steps"], cfg.hta_compat, cfg.hta_compat, base_ns, t["sync"]) if gpu["start_ns"].size else None
    kern = launch_stats = comm_kernels = copies = None
    if n_k:
        kern = _top_candidates(top_kernels(k, kinds, top_n=None), cfg.top_kernels)
        launch_stats = launch_row(r, k, api, gpu, cfg.launch, (k_found, k_pos),
                                  (win["start_ns"], win["end_ns"]) if win is not None else None)
        comm = kinds.codes == KINDS.index(COMMUNICATION)
        if inputs.keep_comm_kernels and comm.any():
            comm_kernels = (k["rank"][comm], k["start_ns"][comm], k["dur_ns"][comm], k["name"].codes[comm])
    if n_rows(t["memcpy"]):
        copies = copy_summary(t["memcpy"], copy_kinds.recode(t["memcpy"]["copy_kind"]), with_codes=True)
    a_sync = blocking_calls(api, t["memcpy"]) if n_api else None
    # Only imported traces have operators (a run without the table has no part file to read).
    ops = read_columns(run, "operators", [r])
    if n_rows(ops):
        ops = {**ops, "parent": parents(ops)}  # (once for every function that reads it)
    sync_sites = (blocking_sites(r, api, a_sync, t["markers"], ops) if a_sync is not None and a_sync.any() else None)
    op_view = _operator_view(r, ops, api, a_sync, win) if n_rows(ops) else {}
    big_pageable, copies_what_if = large_pageable_copies(t["memcpy"])
    layers = _layers(t, gpu, a_sync, copy_calls(api, t["memcpy"], big_pageable))
    uvm = uvm_row(r, t["uvm"], win["start_ns"], win["end_ns"]) if win is not None else None
    del t, gpu, k, api
    steps, wait_layers, what_if = None, {}, None
    if win is not None:
        steps = _steps_rows(win, layers)
        what_if = what_if_rows(steps, layers, copies_what_if)
        spans = merge(*_cat([layers["comm"], inputs.coll_spans]))
        if spans[0].size:
            wait_layers = {name: intersect(merge(*iv), spans) for name, iv in layers.items() if name in LAYERS}
    return RankSummary(rank=int(r), steps=steps, wait_layers=wait_layers, gpu_summary=row, kernels=kern,
                       kernel_names=list(names.names), launch=launch_stats, comm_kernels=comm_kernels, copies=copies,
                       copy_kinds=list(copy_kinds.names), step_warnings=step_warnings, sync_sites=sync_sites, what_if=what_if, uvm=uvm,
                       **op_view)


def _operator_view(r: int, ops: Columns, api: Columns, a_sync: np.ndarray | None, win: Any) -> dict[str, pd.DataFrame]:
    """The :class:`RankSummary` fields of the operator view (``operators``,
    ``operator_sites``, ``launch_operators``) of rank ``r``'s operators table ``ops``."""
    windows = merge(win["start_ns"], win["end_ns"]) if win is not None else None
    view = {"operators": rank_operators(r, ops, windows), "operator_sites": rank_call_sites(r, ops, windows)}
    if n_rows(api):
        launch = ~startup_calls(api) & (~a_sync if a_sync is not None else True)
        view["launch_operators"] = launch_operators(r, ops, api, launch, windows)
    return view


def what_if_rows(steps: pd.DataFrame, layers: dict[str, Intervals], pageable: dict[str, np.ndarray] | None) -> pd.DataFrame:
    """Per row of one rank's ``steps``: ``rank``, ``step``, ``sync_removed_ns`` (the
    :func:`~.savings.sync_removed` model over the blocking calls that are not large pageable
    copies: those are the ``pinned_copies`` model's) and the :func:`~.savings.pageable_copy_columns`
    of its large pageable copies ``pageable`` (``start_ns``, ``dur_ns``, ``bytes``; None: none);
    ``layers`` as :func:`_layers` gives them (``gpu_busy`` and ``blocking`` are used)."""
    ws, we = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    empty = {"start_ns": np.zeros(0, I64), "dur_ns": np.zeros(0, I64), "bytes": np.zeros(0, I64)}
    return pd.DataFrame({"rank": steps["rank"].to_numpy(), "step": steps["step"].to_numpy(),
                         "sync_removed_ns": sync_removed(ws, we, layers["gpu_busy"], layers["blocking"]),
                         **pageable_copy_columns(ws, we, pageable or empty)})


def _layers(t: dict[str, Columns], gpu: dict[str, np.ndarray], a_sync: np.ndarray | None,
            copy_calls: np.ndarray) -> dict[str, Intervals]:
    """One rank's activity layers (:data:`~.breakdown.LAYERS` but ``comm_wait``) from its
    tables ``t``, GPU events ``gpu`` (:func:`_gpu_events`) and blocking API calls ``a_sync``
    (:func:`~.api_calls.blocking_calls`; None without API calls), and three that are not sweep
    layers: ``startup``, its start-up calls (``startup_api_ns``), ``blocking``,
    ``host_sync`` without the calls ``copy_calls`` marks (large pageable copies: the
    ``sync_removed`` saving model's syncs), and ``gpu_busy``, the union of ``compute``,
    ``comm`` and ``pcie`` (merged once for the measures that take it)."""
    # Host spans that block on others (syncs, barriers) and data-loader waits: the host
    # hook's dataloader_wait spans, and (imported traces) "enumerate(DataLoader)#...__next__".
    host, markers, api = t["host"], t["markers"], t["api"]
    h_sync = h_dl = None
    if n_rows(host):
        h_kind = name_values(host["kind"])
        h_dl = (h_kind == "dataloader_wait") | name_matches(host["name"], DATALOADER_NAME_RE)
        h_sync = np.isin(h_kind, HOST_SYNC_KINDS)
    m_dl = name_matches(markers["name"], DATALOADER_NAME_RE) if n_rows(markers) else None
    glayer = gpu["layer"]
    g = gpu if gpu["start_ns"].size else None
    migrations = migration_intervals(t["uvm"])
    return {
        # Only each layer's union matters to the sweep: keep it merged (bounded memory).
        "compute": merge(*_ivs(g, glayer == LAYER_COMPUTE, "end_ns")),
        "comm": merge(*_ivs(g, glayer == LAYER_COMM, "end_ns")),
        # Unified Memory migrations cross the same link as copies.
        "pcie": merge(*_cat([_ivs(g, glayer == LAYER_PCIE, "end_ns"), migrations])),
        # All GPU events at once: they are ordered by start, so merging them needs no sort.
        "gpu_busy": merge(*_cat([_ivs(g, None, "end_ns"), migrations])),
        "host_sync": _cat([_ivs(t["sync"]), _ivs(host, h_sync), _ivs(api, a_sync)]),
        "blocking": merge(*_cat([_ivs(t["sync"]), _ivs(host, h_sync),
                                 _ivs(api, a_sync & ~copy_calls if a_sync is not None else None)])),
        "dataloader": _cat([_ivs(host, h_dl), _ivs(markers, m_dl)]),
        "startup": merge(*_ivs(api, startup_calls(api) if n_rows(api) else None)),
    }


def _top_candidates(kern: pd.DataFrame, top_n: int | None) -> pd.DataFrame:
    """The rows of ``kern`` (one rank's :func:`~.kernels.top_kernels`, every name) that can be
    among its ``top_n`` whatever order ties between equal totals take: those with at least
    the ``top_n``-th largest total (all rows for ``top_n`` None or negative)."""
    if top_n is None or top_n < 0 or len(kern) <= top_n:
        return kern
    if top_n == 0:
        return kern.iloc[:0]
    total = kern["total_ns"].to_numpy()
    cut = np.partition(total, total.size - top_n)[total.size - top_n]
    return kern[total >= cut].reset_index(drop=True)


def with_collective_waits(summary: RankSummary, wait: Intervals) -> pd.DataFrame | None:
    """The rank's rows of ``Analysis.steps`` once its collective waits ``wait`` (a
    ``comm_wait`` layer, inside its collectives) are known.

    A wait changes the bucket only of the instants it covers, so the sweep over the layers
    clipped to the collectives (:attr:`RankSummary.wait_layers`) with and without the wait
    differs from the whole-timeline sweep by exactly what the wait changes: the difference is
    added to the rows swept without waits (int64 ns, exact)."""
    steps = summary.steps
    if steps is None or len(wait[0]) == 0:
        return steps
    ws, we = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    with_wait = bucket_columns(ws, we, {**summary.wait_layers, "comm_wait": wait})
    without = bucket_columns(ws, we, summary.wait_layers)
    return with_columns(steps, {c: steps[c].to_numpy() + (with_wait[c] - without[c]) for c in with_wait if c != "wall_ns"})


def _steps_rows(w: dict[str, np.ndarray], layers: dict[str, tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """One rank's rows of ``Analysis.steps``: its windows ``w`` (ordered by ``start_ns`` as
    :func:`~.breakdown.by_rank_sorted` orders them) with the bucket columns of its
    ``layers`` (plus ``comm_wait``), ``sync_calls``, ``post_sync_idle_ns`` and
    ``startup_api_ns`` (time under start-up calls)."""
    order = w["start_ns"].argsort(kind="quicksort")  # numpy's default sort, as sort_values: ties alike
    if (order != np.arange(order.size)).any():
        w = {c: v[order] for c, v in w.items()}
    ws, we = w["start_ns"], w["end_ns"]
    # One sync is often seen twice (CUPTI's sync record and the runtime call): merge.
    calls, idle = post_sync_idle_columns(ws, we, layers["gpu_busy"], merge(*layers["host_sync"]))
    return pd.DataFrame({**w, **bucket_columns(ws, we, layers), "sync_calls": calls, "post_sync_idle_ns": idle,
                         "startup_api_ns": covered_ns(ws, we, *layers.get("startup", EMPTY))})


def copy_summary(memcpy: pd.DataFrame | Columns, copy_kind: Any = None, with_codes: bool = False) -> pd.DataFrame:
    """Per (rank, copy_kind, pageable, large): count, bytes, total_ns; ``large`` is a copy of
    at least 64 KiB (4-byte ``.item()`` reads are pageable too but pinning them gains nothing).
    ``memcpy`` is a DataFrame or columns (:mod:`.columns`); ``copy_kind`` (a column)
    replaces its column of that name when given; ``with_codes`` adds ``kind_code``, the code
    of each row's kind in ``copy_kind`` (the number of its names for a null kind)."""
    cols = ["rank", "copy_kind", "pageable", "large", "count", "bytes", "total_ns"]
    if n_rows(memcpy) == 0:
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in cols})
    memcpy = columns(memcpy)
    codes, kinds = codes_and_names(memcpy["copy_kind"] if copy_kind is None else copy_kind)
    kinds = np.where(kinds == "", "other", kinds)
    b = memcpy["bytes"]
    # Through float64 like pd.to_numeric(errors="coerce") (nulls and text as 0).
    nbytes = (b.astype(np.float64) if isinstance(b, np.ndarray) and b.dtype == np.dtype(np.int64)
              else pd.to_numeric(pd.Series(b, copy=False), errors="coerce").to_numpy(dtype="float64", na_value=0)).astype(np.int64)
    rank = np.asarray(memcpy["rank"], dtype=np.int64)
    pageable = bools(memcpy["pageable"])
    large = nbytes >= LARGE_COPY_BYTES
    # One integer key per (rank, kind, pageable, large); np.unique + bincount, no groupby.
    key = ((rank * (len(kinds) + 1) + codes) * 2 + pageable) * 2 + large
    uk, inv = np.unique(key, return_inverse=True)
    first = np.zeros(uk.size, dtype=np.int64)
    first[inv[::-1]] = np.arange(key.size)[::-1]  # a representative row per key
    dur = as_i64(memcpy["dur_ns"])
    return pd.DataFrame({
        "rank": rank[first], "copy_kind": kinds[codes[first]], "pageable": pageable[first], "large": large[first],
        "count": np.bincount(inv, minlength=uk.size).astype(np.int64),
        "bytes": np.bincount(inv, weights=nbytes, minlength=uk.size).astype(np.int64),
        "total_ns": np.bincount(inv, weights=dur, minlength=uk.size).astype(np.int64),
        **({"kind_code": codes[first]} if with_codes else {}),
    })


__all__ = ["COLUMNS", "GlobalCodes", "RankInputs", "RankSummary", "copy_summary", "intersect", "rank_summary", "what_if_rows",
           "read_columns", "release_arrow_memory", "with_collective_waits"]
