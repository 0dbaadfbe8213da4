"""``analyze_run``: read the columns an analysis needs from a run and compute everything.

The pipeline, per run:

1. read the collectives table (small: one row per NCCL operation; it spans ranks);
2. one rank at a time, read only the needed columns of kernels, memcpy, memset, sync, api,
   markers, steps and host as arrays (``Run.arrays``: numpy columns, names as codes; no
   DataFrame, see :mod:`.columns`), then: classify kernels once per distinct name
   (:mod:`.classify`), look each GPU event's launching call up once, build step windows
   (:mod:`.steps`), the HTA-style GPU summary row (:mod:`.gpu_summary`), the kernel and
   launch tables (:mod:`.kernels`) and the copy summary, and keep only the rank's step
   windows and merged activity layers (disjoint intervals).  Memory is bounded by one
   rank's columns, not by the run;
3. match collectives across ranks and compute their skew and bandwidth (:mod:`.collectives`),
   rank stragglers (:mod:`.stragglers`);
4. sweep each rank's layers, plus its collective waits, into the six buckets per step
   (:mod:`.breakdown`);
5. run the rules (:mod:`.rules`).

Results are the same, to the bit, as reading every rank at once: string columns are
re-coded to the categories an all-rank read would give (:class:`_GlobalCodes`), and every
per-rank table is concatenated in rank order.

The JSON document of an analysis is written by the reports
(:func:`perfscope.reports.jsondoc.analysis_to_json`): analyzers return data only.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
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
from perfscope.analyzers.breakdown import EMPTY, breakdown, bucket_columns, median_steps, post_sync_idle_columns
from perfscope.analyzers.classify import COMMUNICATION, MEMORY, codes_and_names, copy_is_pcie, hta_is_computation, kernel_kind, name_matches, name_values
from perfscope.analyzers.collectives import analyze_collectives, collectives_from_kernels
from perfscope.analyzers.columns import Columns, bools, columns, is_null, n_rows, take
from perfscope.analyzers.config import AnalysisConfig
from perfscope.analyzers.gpu_summary import summary_frame, summary_row
from perfscope.analyzers.intervals import I64, KeyIndex, as_i64, as_key, covered_ns, filled_i64, merge, split_by_rank
from perfscope.analyzers.kernels import LAUNCH_COLUMNS, launch_row, top_kernels
from perfscope.analyzers.result import Analysis
from perfscope.analyzers.rules import RuleContext, evaluate_rules
from perfscope.analyzers.sources import ArrayRunLike, RunLike
from perfscope.analyzers.steps import WINDOW_COLUMNS, rank_windows
from perfscope.analyzers.stragglers import rank_stragglers, reliable_matches
from perfscope.errors import UsageError
from perfscope.store.reader import Coded

Progress = Callable[[str], None]

COLUMNS: dict[str, list[str]] = {
    "kernels": ["rank", "start_ns", "dur_ns", "correlation", "name"],
    "memcpy": ["rank", "start_ns", "dur_ns", "correlation", "copy_kind", "bytes", "pageable"],
    "memset": ["rank", "start_ns", "dur_ns", "correlation"],
    "sync": ["rank", "start_ns", "dur_ns", "sync_kind", "stream", "correlation"],
    "api": ["rank", "start_ns", "dur_ns", "correlation", "name"],
    "markers": ["rank", "start_ns", "dur_ns", "name", "device"],
    "steps": ["rank", "step", "start_ns", "dur_ns", "name", "source"],
    "host": ["rank", "start_ns", "dur_ns", "kind", "name"],
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


RANK_TABLES: tuple[str, ...] = ("kernels", "memcpy", "memset", "sync", "api", "markers", "steps", "host")


def _read(run: RunLike, name: str, ranks: list[int] | None, coded: bool = True) -> Columns:
    """Table ``name`` of ``ranks`` as columns (:mod:`.columns`): those of :data:`COLUMNS`;
    rows without a start dropped, ``start_ns``/``dur_ns`` int64 (a missing or negative
    duration is 0).  Read with the run's ``arrays`` (no DataFrame is built; names as
    :class:`~perfscope.store.reader.Coded` when ``coded``, else categoricals), or its
    ``table`` when it has none (names as categoricals)."""
    cols = COLUMNS[name]
    t = run.arrays(name, ranks=ranks, columns=cols, coded=coded) if isinstance(run, ArrayRunLike) else \
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


def _release_arrow_memory() -> None:
    """Hand the memory pyarrow's pool kept from decoding Parquet back to the system: the
    pool keeps it otherwise, and the numpy work that follows cannot use it."""
    try:
        import pyarrow as pa

        pool = pa.default_memory_pool()
        if pool.max_memory() >= _RELEASE_BYTES:  # a small run's few MiB are not worth the call
            pool.release_unused()
    except (ImportError, AttributeError):  # an old pyarrow: the memory is only kept longer
        pass


class _GlobalCodes:
    """Codes of a dictionary-encoded column over all ranks while reading one rank at a time.

    Reading every rank at once gives categories in order of first appearance over the ranks
    (in rank order); that order decides ties in sorted tables (kernels with equal total time),
    so the per-rank frames are re-coded to it and results stay exactly the same.
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []
        self._dtype: pd.CategoricalDtype | None = None  # over ``names``, until a name is added

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
        for c in present[present >= 0]:  # in order of first appearance
            name = cat_names[c]
            if name not in self.index:
                self.index[name] = len(self.names)
                self.names.append(name)
                self._dtype = None
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


def _gpu_events(kernels: Columns, kinds: np.ndarray, memcpy: Columns, memset: Columns,
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
    k_layer = np.where(kinds == COMMUNICATION, LAYER_COMM, LAYER_COMPUTE).astype(np.int8)
    mem_k = kinds == MEMORY
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
    if len(parts) == 1:
        cols = {c: np.ascontiguousarray(v) for c, v in parts[0].items()}  # materialises the broadcasts only
    else:
        cols = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    del parts
    key = cols["rank"] if launch is None else cols["start_ns"]
    if key.size > 1 and (key[1:] < key[:-1]).any():
        order = np.argsort(key, kind="stable")  # nearly sorted in practice: fast
        del key
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
    if mask is not None:
        return s[mask], e[mask]
    return s, e


def _cat(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@dataclasses.dataclass
class _RankPass:
    """What the first pass keeps of one rank once its tables are dropped: its step windows
    and the merged activity layers (disjoint intervals, far fewer than the events)."""

    windows: dict[str, np.ndarray] | None  # the WINDOW_COLUMNS as arrays; None: no window
    layers: dict[str, tuple[np.ndarray, np.ndarray]]


def _rank_pass(run: RunLike, r: int, cfg: AnalysisConfig, comm_corr: np.ndarray | None, comm_names: set[str] | None,
               names: _GlobalCodes, copy_kinds: _GlobalCodes, base_ns: int, out: dict[str, list]) -> _RankPass:
    """Read one rank and compute everything that needs no other rank (appended to ``out``).

    The rank's tables stay columns (numpy arrays; names as codes) throughout: no DataFrame
    is built here but the per-rank result tables."""
    t = {name: _read(run, name, [r]) for name in RANK_TABLES}
    _release_arrow_memory()
    api = t["api"]
    k = {**t["kernels"], "name": names.recode(t["kernels"]["name"])}
    n_k, n_api = n_rows(k), n_rows(api)
    kinds = kernel_kind(k["name"], k["correlation"], comm_corr, comm_names)
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
    n_gpu = gpu["start_ns"].size
    del launch

    win = rank_windows(r, t["steps"], t["markers"], t["host"], api, gpu, out["step_warnings"],
                       step_pattern=cfg.step_pattern, extend_to_gpu=cfg.extend_steps_to_gpu)

    row = summary_row(r, gpu, api, t["steps"], cfg.hta_compat, cfg.hta_compat, base_ns, t["sync"]) if n_gpu else None
    if row is not None:
        out["summary"].append(row)
    if n_k:
        out["kernels"].append(top_kernels(k, kinds, top_n=cfg.top_kernels))
        out["launch"].append(launch_row(r, k, api, gpu, cfg.launch, (k_found, k_pos),
                                        (win["start_ns"], win["end_ns"]) if win is not None else None))
        comm = kinds == COMMUNICATION
        if comm.any():
            out["comm_kernels"].append((k["rank"][comm], k["start_ns"][comm], k["dur_ns"][comm], k["name"].codes[comm]))
    memcpy = t["memcpy"]
    if n_rows(memcpy):
        out["copies"].append(_copy_summary(memcpy, copy_kinds.recode(memcpy["copy_kind"])))

    # Host spans that block on others (syncs, barriers) and data-loader waits: the host
    # hook's dataloader_wait spans, and (imported traces) "enumerate(DataLoader)#...__next__".
    host, markers = t["host"], t["markers"]
    h_sync = h_dl = None
    if n_rows(host):
        h_kind = name_values(host["kind"])
        h_dl = (h_kind == "dataloader_wait") | name_matches(host["name"], DATALOADER_NAME_RE)
        h_sync = np.isin(h_kind, HOST_SYNC_KINDS)
    a_sync = blocking_calls(api, t["memcpy"]) if n_api else None
    if a_sync is not None and a_sync.any():
        out["sync_sites"].append(blocking_sites(r, api, a_sync, markers))
    m_dl = name_matches(markers["name"], DATALOADER_NAME_RE) if n_rows(markers) else None
    glayer = gpu["layer"]
    g = gpu if n_gpu else None
    layers = {
        # Only each layer's union matters to the sweep: keep it merged (bounded memory).
        "compute": merge(*_ivs(g, glayer == LAYER_COMPUTE, "end_ns")),
        "comm": merge(*_ivs(g, glayer == LAYER_COMM, "end_ns")),
        "pcie": merge(*_ivs(g, glayer == LAYER_PCIE, "end_ns")),
        "host_sync": _cat([_ivs(t["sync"]), _ivs(host, h_sync), _ivs(api, a_sync)]),
        "dataloader": _cat([_ivs(host, h_dl), _ivs(markers, m_dl)]),
        "startup": merge(*_ivs(api, startup_calls(api) if n_api else None)),  # not a sweep layer: startup_api_ns
    }
    return _RankPass(windows=win, layers=layers)


def _steps_rows(w: dict[str, np.ndarray], layers: dict[str, tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """One rank's rows of ``Analysis.steps``: its windows ``w`` (ordered by ``start_ns`` as
    :func:`~.breakdown.by_rank_sorted` orders them) with the bucket columns of its
    ``layers`` (plus ``comm_wait``), ``sync_calls`` and ``post_sync_idle_ns``."""
    order = w["start_ns"].argsort(kind="quicksort")  # numpy's default sort, as sort_values: ties alike
    if (order != np.arange(order.size)).any():
        w = {c: v[order] for c, v in w.items()}
    ws, we = w["start_ns"], w["end_ns"]
    busy = merge(*_cat([layers["compute"], layers["comm"], layers["pcie"]]))
    # One sync is often seen twice (CUPTI's sync record and the runtime call): merge.
    calls, idle = post_sync_idle_columns(ws, we, busy, merge(*layers["host_sync"]))
    return pd.DataFrame({**w, **bucket_columns(ws, we, layers), "sync_calls": calls, "post_sync_idle_ns": idle,
                         "startup_api_ns": covered_ns(ws, we, *layers.get("startup", EMPTY))})


def analyze_run(run: RunLike, config: AnalysisConfig | None = None, progress: Progress | None = None) -> Analysis:
    """Analyse a run: step breakdown, GPU summary, kernels, collectives, stragglers, advice.

    The run is read one rank at a time (only the columns the analysis needs), so memory is
    bounded by the largest rank's columns plus small per-rank results, not by the run.

    Args:
        run: any :class:`~perfscope.analyzers.sources.RunLike`: ``open_run``'s result, the
            :class:`~perfscope.store.MemoryRun` an import holds, or an object with the same members.
        config: options (defaults: :class:`AnalysisConfig`).
        progress: called with a short message before each stage (the CLI shows it).

    Returns:
        an :class:`~perfscope.analyzers.result.Analysis` (see its docstring for every table).

    Raises:
        UsageError: an invalid step pattern or a rank the run does not have.
    """
    cfg = config or AnalysisConfig()
    say = progress or (lambda _m: None)
    cfg.check()
    all_ranks = list(run.ranks)
    ranks = _selected_ranks(cfg, all_ranks)
    meta = dict(run.meta)
    world_size = _world_size(meta)

    say("reading collectives")
    warnings: list[str] = []
    if status := meta.get("status"):
        if status != "complete":
            warnings.append(f"the run's status is {status!r}: it may end early (a rank stopped before its last flush)")
    warnings.extend(getattr(run, "integrity_warnings", ()))  # store checks that did not stop reading
    coll_raw = _read_collectives(run, ranks)
    names, copy_kinds = _GlobalCodes(), _GlobalCodes()
    out: dict[str, list] = {k: [] for k in ("step_warnings", "summary", "kernels", "launch", "comm_kernels", "copies",
                                            "sync_sites")}
    passes = _rank_passes(run, ranks, cfg, coll_raw, names, copy_kinds, out, say)
    warnings.extend(out["step_warnings"])
    if all(p.windows is None for p in passes.values()):
        warnings.append("the run holds no GPU or host activity to analyse (no kernels, copies, API calls, steps or host spans); "
                        "check `perfscope info RUN` for its row counts")

    say("matching collectives")
    coll = _match_collectives(coll_raw, out["comm_kernels"], names, ranks, meta, cfg, world_size, warnings)
    stragglers = rank_stragglers(coll, min_skew_ns=cfg.min_skew_ns)

    say("breaking steps into buckets")
    steps = _bucket_steps(passes, coll, warnings)

    say("summarising GPU time")
    summary = summary_frame(out["summary"])
    kern = _concat(out["kernels"]) if out["kernels"] else top_kernels({}, np.zeros(0, object))
    launch = pd.DataFrame(out["launch"], columns=list(LAUNCH_COLUMNS))
    copies = _concat(out["copies"]) if out["copies"] else _copy_summary({})

    say("running rules")
    ctx = RuleContext(
        steps=steps, gpu_summary=summary, kernels=kern, launch=launch, collectives=coll,
        stragglers=stragglers, copies=copies, meta=meta, world_size=world_size or len(all_ranks),
        thresholds=dict(cfg.rule_thresholds), sync_sites=_concat(out["sync_sites"]) if out["sync_sites"] else None,
    )
    recs = evaluate_rules(ctx)
    return Analysis(
        steps=steps, gpu_summary=summary, kernels=kern, collectives=coll, stragglers=stragglers,
        recommendations=recs, warnings=warnings, meta=meta, launch=launch, copies=copies,
    )


def _selected_ranks(cfg: AnalysisConfig, all_ranks: list[int]) -> list[int]:
    """The ranks ``cfg`` asks for, sorted (all of the run's when it names none).

    Raises:
        UsageError: a rank the run does not have.
    """
    if cfg.ranks is None:
        return all_ranks
    missing = sorted(set(cfg.ranks) - set(all_ranks))
    if missing:
        raise UsageError(f"the run has no rank(s) {missing}; it has {all_ranks}")
    return sorted(set(cfg.ranks))


def _world_size(meta: dict[str, Any]) -> int | None:
    """The run's ``world_size`` as an int, None when missing or not a number."""
    world = meta.get("world_size")
    try:
        return int(world) if world is not None else None
    except (TypeError, ValueError):
        return None


def _read_collectives(run: RunLike, ranks: list[int]) -> pd.DataFrame | None:
    """The collectives table of ``ranks`` (categorical names, as analyze_collectives takes
    them), None when it has no rows.  It is small (one row per NCCL operation) and spans
    ranks: read whole."""
    coll_cols = _read(run, "collectives", ranks, coded=False)
    return pd.DataFrame(coll_cols, copy=False) if n_rows(coll_cols) else None


def _rank_passes(run: RunLike, ranks: list[int], cfg: AnalysisConfig, coll_raw: pd.DataFrame | None, names: _GlobalCodes,
                 copy_kinds: _GlobalCodes, out: dict[str, list], say: Progress) -> dict[int, _RankPass]:
    """:func:`_rank_pass` of every rank in ``ranks``, in order (results appended to ``out``)."""
    # Correlation ids are per process: each rank's kernels are matched against its own ids.
    comm_corr = (
        {r: as_key(g["correlation"]) for r, g in split_by_rank(coll_raw).items()} if coll_raw is not None else {}
    )
    comm_names = set(codes_and_names(coll_raw["kernel_name"])[1]) - {""} if coll_raw is not None else None
    passes: dict[int, _RankPass] = {}
    for i, r in enumerate(ranks):
        say(f"rank {r} ({i + 1}/{len(ranks)}): reading, classifying kernels, finding steps, summarising")
        # The importer stores a Kineto trace's baseTimeNanoseconds as base_time_ns.
        meta_r = run.rank_meta(r)
        base = _int_or_zero(meta_r.get("base_time_ns", meta_r.get("time_base_ns")))
        passes[r] = _rank_pass(run, r, cfg, comm_corr.get(int(r)), comm_names, names, copy_kinds, base, out)
        _release_arrow_memory()  # the rank's columns (Arrow buffers) are free now
    return passes


def _match_collectives(coll_raw: pd.DataFrame | None, comm_kernels: list, names: _GlobalCodes, ranks: list[int],
                       meta: dict[str, Any], cfg: AnalysisConfig, world_size: int | None, warnings: list[str]) -> pd.DataFrame:
    """Match collectives across ranks (:func:`~.collectives.analyze_collectives`), from the
    NCCL collector's table or, without one, rebuilt from the ranks' NCCL kernels
    (``comm_kernels``); notes on how they were matched are appended to ``warnings``."""
    coll_src = coll_raw
    if coll_src is None and len(ranks) > 1:
        if comm_kernels:
            kcomm = pd.DataFrame({"rank": np.concatenate([c[0] for c in comm_kernels]),
                                  "start_ns": np.concatenate([c[1] for c in comm_kernels]),
                                  "dur_ns": np.concatenate([c[2] for c in comm_kernels]),
                                  "name": names.categorical(np.concatenate([c[3] for c in comm_kernels]).astype(np.int64))})
            coll_src = collectives_from_kernels(kcomm, np.full(len(kcomm), COMMUNICATION, dtype=object))
        if n_rows(coll_src):
            warnings.append("no NCCL collector data: collectives were reconstructed from NCCL kernels (no sizes, matched by order)")
    clock = cfg.collective_clock
    if clock == "auto":
        hosts = {r.get("host") for r in meta.get("ranks", []) if r.get("rank") in ranks and r.get("host")}
        clock = "end_aligned" if len(hosts) > 1 else "shared"
        if clock == "end_aligned" and n_rows(coll_src):
            warnings.append(f"ranks ran on {len(hosts)} hosts: collective skew is estimated from operation durations "
                            "(immune to clock offsets between hosts), not from start times")
    return analyze_collectives(coll_src, world_size=world_size, clock=clock)


def _bucket_steps(passes: dict[int, _RankPass], coll: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """``Analysis.steps``: every rank's windows swept into the buckets, with the rank's
    exposed collective waits (``wait_ns``) as its ``comm_wait`` layer; waits of
    point-to-point matches that cannot be trusted are left out (a note in ``warnings``)."""
    # An unreliable point-to-point match (by order, peers unknown) says nothing about waiting.
    reliable = reliable_matches(coll)
    doubtful = ~reliable & (coll["matched_ranks"] > 1).to_numpy(bool) if len(coll) else reliable
    if doubtful.any():
        warnings.append(f"{int(doubtful.sum())} point-to-point operations (Send/Recv/SendRecv) have no sequence number "
                        "and peer that line up across ranks: who waits for whom there is unknown (no straggler claim, "
                        "their time stays network)")
    cw = split_by_rank(coll[(coll["wait_ns"] > 0).to_numpy(bool) & reliable]) if len(coll) else {}
    parts = []
    for r, p in passes.items():  # ranks ascending, as breakdown() orders them
        if p.windows is None:
            continue
        c = cw.get(r)
        wait = EMPTY
        if c is not None:
            cs = as_i64(c["start_ns"])
            wait = (cs, cs + as_i64(c["wait_ns"]))
        parts.append(_steps_rows(p.windows, {**p.layers, "comm_wait": wait}))
    if parts:
        return _concat(parts)
    from perfscope.analyzers.steps import _empty

    steps = breakdown(_empty()[list(WINDOW_COLUMNS)], {})
    for col in ("sync_calls", "post_sync_idle_ns", "startup_api_ns"):
        steps[col] = pd.Series(dtype="int64")
    return steps


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The per-rank frames one below the other (RangeIndex); one frame as it is (the
    per-rank tables already have a RangeIndex)."""
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


LARGE_COPY_BYTES = 64 << 10


def _copy_summary(memcpy: pd.DataFrame | Columns, copy_kind: Any = None) -> pd.DataFrame:
    """Per (rank, copy_kind, pageable, large): count, bytes, total_ns; ``large`` is a copy of
    at least 64 KiB (4-byte ``.item()`` reads are pageable too but pinning them gains nothing).
    ``memcpy`` is a DataFrame or columns (:mod:`.columns`); ``copy_kind`` (a column)
    replaces its column of that name when given."""
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
    })


def step_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Median step per rank, with its own breakdown: :func:`~.breakdown.median_steps`."""
    return median_steps(steps)


__all__ = ["analyze_run", "step_summary", "COLUMNS"]
