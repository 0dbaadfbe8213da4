"""``analyze_run``: read the columns an analysis needs from a run and compute everything.

The pipeline, per run:

1. read only the needed columns of kernels, memcpy, memset, sync, api, markers, steps, host
   and collectives (memory is bounded by those columns, not by the trace size);
2. classify kernels (:mod:`.classify`), build step windows (:mod:`.steps`);
3. match collectives across ranks and compute their skew and bandwidth (:mod:`.collectives`),
   rank stragglers (:mod:`.stragglers`);
4. sweep each rank's activity layers into the six buckets per step (:mod:`.breakdown`);
5. HTA-style GPU summary (:mod:`.gpu_summary`), kernel and launch tables (:mod:`.kernels`);
6. run the rules (:mod:`.rules`).

:func:`analysis_to_json` turns the result into the JSON document of ``perfscope analyze
--format json`` and ``perfscope report --format json``.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.breakdown import EMPTY, breakdown, post_sync_idle
from perfscope.analyzers.classify import COMMUNICATION, MEMORY, codes_and_names, copy_is_pcie, hta_kernel_type, kernel_kind, name_matches, name_values
from perfscope.analyzers.collectives import analyze_collectives, collectives_from_kernels
from perfscope.analyzers.config import AnalysisConfig
from perfscope.analyzers.gpu_summary import gpu_summary
from perfscope.analyzers.intervals import as_i64, as_key, merge, split_by_rank
from perfscope.analyzers.kernels import launch_stats, top_kernels
from perfscope.analyzers.result import BUCKET_COLUMNS, Analysis, Recommendation
from perfscope.analyzers.rules import RuleContext, evaluate_rules
from perfscope.analyzers.steps import step_windows
from perfscope.analyzers.stragglers import rank_stragglers
from perfscope.errors import UsageError

Progress = Callable[[str], None]

COLUMNS: dict[str, list[str]] = {
    "kernels": ["rank", "start_ns", "dur_ns", "correlation", "name", "stream"],
    "memcpy": ["rank", "start_ns", "dur_ns", "correlation", "copy_kind", "bytes", "pageable"],
    "memset": ["rank", "start_ns", "dur_ns", "correlation"],
    "sync": ["rank", "start_ns", "dur_ns", "sync_kind"],
    "api": ["rank", "start_ns", "dur_ns", "correlation", "name"],
    "markers": ["rank", "start_ns", "dur_ns", "name", "device"],
    "steps": ["rank", "step", "start_ns", "dur_ns", "name", "source"],
    "host": ["rank", "start_ns", "dur_ns", "kind", "name"],
    "collectives": ["rank", "start_ns", "dur_ns", "enqueue_ns", "comm_id", "seq", "func", "bytes", "nranks", "correlation", "kernel_name"],
}
HOST_SYNC_KINDS = ("barrier", "collective_wait", "sync_wait")
SYNC_API_RE = re.compile(r"(?i)synchronize")
DATALOADER_NAME_RE = re.compile(r"enumerate\((?:DataLoader|DataPipe)\)#.*__next__")
PCIE_MEMORY_KERNEL_RE = r"(?i)HtoD|DtoH|HtoH|PtoP|H2D|D2H"


def _read(run: Any, name: str, ranks: list[int] | None) -> pd.DataFrame:
    df = run.table(name, ranks=ranks, columns=COLUMNS[name])
    if "start_ns" in df.columns and len(df):
        df = df[df["start_ns"].notna()]
        if "dur_ns" in df.columns:
            df = df.assign(dur_ns=df["dur_ns"].fillna(0))
        df = df.assign(start_ns=as_i64(df["start_ns"]), dur_ns=np.maximum(as_i64(df["dur_ns"]), 0) if "dur_ns" in df.columns else 0)
    return df.reset_index(drop=True)


LAYER_COMPUTE, LAYER_COMM, LAYER_PCIE = 0, 1, 2


def _gpu_events(kernels: pd.DataFrame, kinds: np.ndarray, memcpy: pd.DataFrame, memset: pd.DataFrame) -> pd.DataFrame:
    """All GPU activity, ordered by rank: ``rank``, ``start_ns``, ``end_ns``, ``correlation``
    (float64, NaN when unknown), ``layer`` (int8: 0 compute, 1 communication, 2 pcie) and
    ``hta_compute`` (bool: HTA would count it as COMPUTATION)."""
    k_layer = np.where(kinds == COMMUNICATION, LAYER_COMM, LAYER_COMPUTE).astype(np.int8)
    mem_k = kinds == MEMORY
    if mem_k.any():
        k_layer[mem_k & name_matches(kernels["name"], PCIE_MEMORY_KERNEL_RE)] = LAYER_PCIE

    def part(df: pd.DataFrame, layer: np.ndarray | int, hta_compute: np.ndarray | bool) -> dict[str, Any]:
        st = as_i64(df["start_ns"])
        n = len(df)
        return {
            "rank": df["rank"].to_numpy(dtype=np.int64), "start_ns": st, "end_ns": st + as_i64(df["dur_ns"]),
            "correlation": as_key(df["correlation"]),
            "layer": np.broadcast_to(np.asarray(layer, dtype=np.int8), (n,)),
            "hta_compute": np.broadcast_to(np.asarray(hta_compute, dtype=bool), (n,)),
        }

    parts = [part(kernels, k_layer, hta_kernel_type(kernels["name"]) == "COMPUTATION")]
    if len(memcpy):
        parts.append(part(memcpy, np.where(copy_is_pcie(memcpy["copy_kind"]), LAYER_PCIE, LAYER_COMPUTE), False))
    if len(memset):
        parts.append(part(memset, LAYER_COMPUTE, False))
    cols = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    order = np.argsort(cols["rank"], kind="stable")
    if (order != np.arange(order.size)).any():
        cols = {c: v[order] for c, v in cols.items()}
    return pd.DataFrame(cols)


def _int_or_zero(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def _ivs(df: pd.DataFrame | None, mask: np.ndarray | None = None, end_col: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the rows of ``df`` (one rank) where ``mask`` holds."""
    if df is None or len(df) == 0:
        return EMPTY
    s = as_i64(df["start_ns"].to_numpy())
    e = as_i64(df[end_col].to_numpy()) if end_col else s + as_i64(df["dur_ns"].to_numpy())
    if mask is not None:
        return s[mask], e[mask]
    return s, e


def analyze_run(run: Any, config: AnalysisConfig | None = None, progress: Progress | None = None) -> Analysis:
    """Analyse a run: step breakdown, GPU summary, kernels, collectives, stragglers, advice.

    Args:
        run: a :class:`perfscope.store.Run` (from ``open_run``).
        config: options (defaults: :class:`AnalysisConfig`).
        progress: called with a short message before each stage (the CLI shows it).

    Returns:
        an :class:`~perfscope.analyzers.result.Analysis` (see its docstring for every table).

    Raises:
        UsageError: an invalid step pattern or a rank the run does not have.
    """
    cfg = config or AnalysisConfig()
    say = progress or (lambda _m: None)
    if cfg.step_pattern:
        try:
            re.compile(cfg.step_pattern)
        except re.error as e:
            raise UsageError(f"--step-pattern {cfg.step_pattern!r} is not a valid regular expression ({e})") from None
    all_ranks = list(run.ranks)
    if cfg.ranks is not None:
        missing = sorted(set(cfg.ranks) - set(all_ranks))
        if missing:
            raise UsageError(f"the run has no rank(s) {missing}; it has {all_ranks}")
        ranks: list[int] = sorted(set(cfg.ranks))
    else:
        ranks = all_ranks
    meta = dict(run.meta)
    world = meta.get("world_size")
    try:
        world_size = int(world) if world is not None else None
    except (TypeError, ValueError):
        world_size = None

    say("reading tables")
    t = {name: _read(run, name, ranks) for name in COLUMNS}
    warnings: list[str] = []
    if status := meta.get("status"):
        if status != "complete":
            warnings.append(f"the run's status is {status!r}: it may end early (a rank stopped before its last flush)")

    say("classifying kernels")
    coll_raw = t["collectives"]
    comm_corr = as_key(coll_raw["correlation"]) if len(coll_raw) else None
    comm_names = set(codes_and_names(coll_raw["kernel_name"])[1]) - {""} if len(coll_raw) else None
    kinds = kernel_kind(t["kernels"]["name"], t["kernels"]["correlation"], comm_corr, comm_names)
    gpu = _gpu_events(t["kernels"], kinds, t["memcpy"], t["memset"])

    say("finding steps")
    sr = step_windows(t["steps"], t["markers"], t["host"], t["api"], gpu, ranks,
                      step_pattern=cfg.step_pattern, extend_to_gpu=cfg.extend_steps_to_gpu)
    warnings.extend(sr.warnings)
    if len(sr.windows) == 0:
        warnings.append("the run holds no GPU or host activity to analyse (no kernels, copies, API calls, steps or host spans); "
                        "check `perfscope info RUN` for its row counts")

    say("matching collectives")
    coll_src = coll_raw
    if len(coll_src) == 0 and len(ranks) > 1:
        coll_src = collectives_from_kernels(t["kernels"], kinds)
        if len(coll_src):
            warnings.append("no NCCL collector data: collectives were reconstructed from NCCL kernels (no sizes, matched by order)")
    clock = cfg.collective_clock
    if clock == "auto":
        hosts = {r.get("host") for r in meta.get("ranks", []) if r.get("rank") in ranks and r.get("host")}
        clock = "end_aligned" if len(hosts) > 1 else "shared"
        if clock == "end_aligned" and len(coll_src):
            warnings.append(f"ranks ran on {len(hosts)} hosts: collective skew is estimated from operation durations "
                            "(immune to clock offsets between hosts), not from start times")
    coll = analyze_collectives(coll_src, world_size=world_size, clock=clock)
    stragglers = rank_stragglers(coll, min_skew_ns=cfg.min_skew_ns)

    say("breaking steps into buckets")
    # Host spans that block on others (syncs, barriers) and data-loader waits: the host
    # hook's dataloader_wait spans, and (imported traces) "enumerate(DataLoader)#...__next__".
    host = t["host"].assign(_kind=name_values(t["host"]["kind"])) if len(t["host"]) else t["host"]
    if len(host):
        host = host.assign(_dl=(host["_kind"].to_numpy() == "dataloader_wait") | name_matches(host["name"], DATALOADER_NAME_RE),
                           _sync=np.isin(host["_kind"].to_numpy(), HOST_SYNC_KINDS))
    api = t["api"].assign(_sync=name_matches(t["api"]["name"], SYNC_API_RE)) if len(t["api"]) else t["api"]
    markers = t["markers"].assign(_dl=name_matches(t["markers"]["name"], DATALOADER_NAME_RE)) if len(t["markers"]) else t["markers"]
    cw = coll[coll["wait_ns"] > 0] if len(coll) else coll
    by = {name: split_by_rank(df) for name, df in (("gpu", gpu), ("host", host), ("api", api), ("markers", markers), ("sync", t["sync"]), ("cw", cw))}
    layers_by_rank: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for r in ranks:
        g, h, a, m, sy, w = (by[k].get(r) for k in ("gpu", "host", "api", "markers", "sync", "cw"))
        glayer = g["layer"].to_numpy() if g is not None else None
        hs_parts = [_ivs(sy), _ivs(h, h["_sync"].to_numpy() if h is not None else None),
                    _ivs(a, a["_sync"].to_numpy() if a is not None else None)]
        dl_parts = [_ivs(h, h["_dl"].to_numpy() if h is not None else None), _ivs(m, m["_dl"].to_numpy() if m is not None else None)]
        wait = EMPTY
        if w is not None:
            ws = as_i64(w["start_ns"])
            wait = (ws, ws + as_i64(w["wait_ns"]))
        layers_by_rank[r] = {
            "compute": _ivs(g, glayer == LAYER_COMPUTE if g is not None else None, "end_ns"),
            "comm": _ivs(g, glayer == LAYER_COMM if g is not None else None, "end_ns"),
            "comm_wait": wait,
            "pcie": _ivs(g, glayer == LAYER_PCIE if g is not None else None, "end_ns"),
            "host_sync": (np.concatenate([p[0] for p in hs_parts]), np.concatenate([p[1] for p in hs_parts])),
            "dataloader": (np.concatenate([p[0] for p in dl_parts]), np.concatenate([p[1] for p in dl_parts])),
        }
    steps = breakdown(sr.windows, layers_by_rank)
    drains = []
    for r, w in steps.groupby("rank", sort=False):
        L = layers_by_rank[int(r)]
        busy = tuple(np.concatenate([L[k][i] for k in ("compute", "comm", "pcie")]) for i in (0, 1))
        # One sync is often seen twice (CUPTI's sync record and the runtime call): merge.
        drains.append(post_sync_idle(w, busy, merge(*L["host_sync"])))
    if drains:
        steps = steps.join(pd.concat(drains))
    else:
        steps["sync_calls"] = pd.Series(dtype="int64")
        steps["post_sync_idle_ns"] = pd.Series(dtype="int64")

    say("summarising GPU time")
    base = {r: _int_or_zero(run.rank_meta(r).get("time_base_ns")) for r in ranks} if hasattr(run, "rank_meta") else None
    summary = gpu_summary(gpu, t["api"], t["steps"], hta_compat=cfg.hta_compat, time_base_ns=base)
    kern = top_kernels(t["kernels"], kinds, top_n=cfg.top_kernels)
    launch = launch_stats(t["kernels"], t["api"], gpu, cfg.launch)
    copies = _copy_summary(t["memcpy"])

    say("running rules")
    ctx = RuleContext(
        steps=steps, gpu_summary=summary, kernels=kern, launch=launch, collectives=coll,
        stragglers=stragglers, copies=copies, meta=meta, world_size=world_size or len(all_ranks),
        thresholds=dict(cfg.rule_thresholds),
    )
    recs = evaluate_rules(ctx)
    return Analysis(
        steps=steps, gpu_summary=summary, kernels=kern, collectives=coll, stragglers=stragglers,
        recommendations=recs, warnings=warnings, meta=meta, launch=launch, copies=copies,
    )


LARGE_COPY_BYTES = 64 << 10


def _copy_summary(memcpy: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, copy_kind, pageable, large): count, bytes, total_ns; ``large`` is a copy of
    at least 64 KiB (4-byte ``.item()`` reads are pageable too but pinning them gains nothing)."""
    cols = ["rank", "copy_kind", "pageable", "large", "count", "bytes", "total_ns"]
    if len(memcpy) == 0:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    codes, kinds = codes_and_names(memcpy["copy_kind"])
    kinds = np.where(kinds == "", "other", kinds)
    nbytes = pd.to_numeric(memcpy["bytes"], errors="coerce").to_numpy(dtype="float64", na_value=0).astype(np.int64)
    rank = memcpy["rank"].to_numpy(dtype=np.int64)
    pageable = memcpy["pageable"].to_numpy(dtype=bool, na_value=False)
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
    })[cols]


# ------------------------------------------------------------------------------------
# JSON


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame -> list of JSON-safe dicts (ints stay ints, NaN/NA become null)."""
    if df is None or len(df) == 0:
        return []
    out = []
    cols = list(df.columns)
    arrays = []
    for c in cols:
        s = df[c]
        if pd.api.types.is_bool_dtype(s.dtype):
            arrays.append([None if pd.isna(v) else bool(v) for v in s.to_numpy(object)])
        elif pd.api.types.is_integer_dtype(s.dtype):
            arrays.append([None if pd.isna(v) else int(v) for v in s.to_numpy(object)])
        elif pd.api.types.is_float_dtype(s.dtype):
            arrays.append([None if (v is None or (isinstance(v, float) and math.isnan(v))) else float(v) for v in s.to_numpy(object)])
        else:
            arrays.append([None if (v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))) else (v if isinstance(v, (str, int, float, bool)) else str(v)) for v in s.to_numpy(object)])
    for i in range(len(df)):
        out.append({c: arrays[j][i] for j, c in enumerate(cols)})
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        f = float(v)
        return None if math.isnan(f) else f
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def recommendation_to_json(r: Recommendation) -> dict[str, Any]:
    """One recommendation as a JSON-safe dict (every dataclass field)."""
    return _jsonable(dataclasses.asdict(r))


def analysis_to_json(a: Analysis) -> dict[str, Any]:
    """The JSON document of an analysis.

    Returns:
        a dict with ``schema`` (1), ``run`` (id, source, world_size, status), ``buckets``,
        ``steps`` (rows: rank, step, start_ns, end_ns, wall_ns, the six ``*_ns`` buckets,
        hidden_network_ns, hidden_pcie_ns, ...), ``summary`` (per rank medians),
        ``gpu_summary`` (rank, span_ns, idle_ns, compute_ns, non_compute_ns, ...),
        ``recommendations`` (id, bucket, title, message, evidence, saving_ns, saving_share,
        change, ranks), ``kernels``, ``launch``, ``collectives``, ``stragglers``, ``copies``
        and ``warnings``. Times in ns, bandwidths in GB/s.
    """
    from perfscope.analyzers.result import BUCKETS

    meta = a.meta or {}
    return {
        "schema": 1,
        "run": {k: _jsonable(meta.get(k)) for k in ("run_id", "source", "world_size", "status")},
        "buckets": list(BUCKETS),
        "steps": _records(a.steps),
        "summary": _records(step_summary(a.steps)),
        "gpu_summary": _records(a.gpu_summary),
        "recommendations": [recommendation_to_json(r) for r in a.recommendations],
        "kernels": _records(a.kernels),
        "launch": _records(a.launch),
        "collectives": _records(a.collectives),
        "stragglers": _records(a.stragglers),
        "copies": _records(a.copies),
        "warnings": list(a.warnings),
    }


def step_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Median step per rank: ``rank``, ``steps``, ``wall_ns`` and the six bucket columns
    (medians over the rank's steps, int ns), plus ``*_share`` of the median wall time."""
    cols = ["wall_ns", *BUCKET_COLUMNS]
    if steps is None or len(steps) == 0:
        return pd.DataFrame(columns=["rank", "steps", *cols])
    g = steps.groupby("rank", sort=True)
    out = g[cols].median().round().astype("int64")
    out.insert(0, "steps", g.size().astype("int64"))
    out = out.reset_index()
    for c in BUCKET_COLUMNS:
        out[c.replace("_ns", "_share")] = (out[c] / out["wall_ns"].where(out["wall_ns"] > 0)).fillna(0.0)
    return out


__all__ = ["analyze_run", "analysis_to_json", "recommendation_to_json", "step_summary", "COLUMNS"]
