"""``analyze_run``: read the columns an analysis needs from a run and compute everything.

The pipeline, per run:

1. read the collectives table (small: one row per NCCL operation; it spans ranks);
2. one pass per rank (:func:`.rank_pass.rank_summary`): read only that rank's columns,
   compute everything that needs no other rank (steps swept into buckets, GPU summary,
   kernel, launch and copy tables) and keep a small :class:`~.rank_pass.RankSummary`.
   The passes run in order here, or as tasks anywhere (``rank_map``; see
   :mod:`perfscope.distributed`); memory is bounded by one rank's columns plus the
   summaries, not by the run;
3. re-code the ranks' names over all ranks (in rank order, as one read of every rank would
   number them: their order breaks ties in sorted tables), match collectives across ranks
   and compute their skew and bandwidth (:mod:`.collectives`), rank stragglers
   (:mod:`.stragglers`);
4. move each rank's collective waits into ``sync`` (:func:`.rank_pass.with_collective_waits`);
5. run the rules (:mod:`.rules`).

Results are the same, to the bit, whatever runs the passes and in whatever order.

The JSON document of an analysis is written by the reports
(:func:`perfscope.reports.jsondoc.analysis_to_json`): analyzers return data only.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from perfscope.analyzers.breakdown import EMPTY, breakdown, median_steps
from perfscope.analyzers.classify import COMMUNICATION, codes_and_names
from perfscope.analyzers.collectives import (
    analyze_collectives,
    collectives_from_kernels,
)
from perfscope.analyzers.columns import n_rows
from perfscope.analyzers.config import AnalysisConfig
from perfscope.analyzers.gpu_summary import summary_frame
from perfscope.analyzers.intervals import as_i64, as_key, split_by_rank
from perfscope.analyzers.kernels import LAUNCH_COLUMNS, top_kernels
from perfscope.analyzers.operators import overall_operators, top_per_rank
from perfscope.analyzers.rank_pass import (
    COLUMNS,
    GlobalCodes,
    RankInputs,
    RankSummary,
    copy_summary,
    rank_summary,
    read_columns,
    release_arrow_memory,
    with_collective_waits,
)
from perfscope.analyzers.result import Analysis
from perfscope.analyzers.rules import RuleContext, evaluate_rules
from perfscope.analyzers.sources import RunLike
from perfscope.analyzers.steps import WINDOW_COLUMNS
from perfscope.analyzers.stragglers import rank_stragglers, reliable_matches

from perfscope.errors import UsageError

Progress = Callable[[str], None]
# Runs the passes of ``ranks`` (each with its inputs) and yields their summaries, in any order.
RankMap = Callable[[Sequence[int], Mapping[int, RankInputs], Progress], Iterable[RankSummary]]


def analyze_run(run: RunLike, config: AnalysisConfig | None = None, progress: Progress | None = None, *,
                rank_map: RankMap | None = None) -> Analysis:
    """Analyse a run: step breakdown, GPU summary, kernels, collectives, stragglers, advice.

    The run is read one rank at a time (only the columns the analysis needs), and of each
    rank only a small summary is kept, so memory is bounded by the largest rank's columns
    plus the summaries, not by the run.

    Args:
        run: a :class:`perfscope.store.Run` (from ``open_run``).
        config: options (defaults: :class:`AnalysisConfig`).
        progress: called with a short message before each stage (the CLI shows it).
        rank_map: runs the per-rank passes (:data:`RankMap`), e.g. as Dask tasks
            (:mod:`perfscope.distributed`); default: one after the other in this process.

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
    if (status := meta.get("status")) and status != "complete":
        warnings.append(f"the run's status is {status!r}: it may end early (a rank stopped before its last flush)")
    warnings.extend(getattr(run, "integrity_warnings", ()))  # store checks that did not stop reading
    coll_raw = _read_collectives(run, ranks)
    inputs = _rank_inputs(coll_raw, ranks, cfg)
    mapper = rank_map or (lambda rs, inp, s: _in_process(run, rs, inp, s))
    by_rank = {s.rank: s for s in mapper(ranks, inputs, say)}
    summaries = [by_rank[r] for r in ranks]  # rank order: names are numbered in it
    del by_rank
    names, copy_kinds = GlobalCodes(), GlobalCodes()
    kern, launch, copies, comm_kernels = _combine(summaries, names, copy_kinds, cfg.top_kernels)
    for s in summaries:
        warnings.extend(s.step_warnings)
    if all(s.steps is None for s in summaries):
        warnings.append("the run holds no GPU or host activity to analyse (no kernels, copies, API calls, steps or host spans); "
                        "check `perfscope info RUN` for its row counts")

    say("matching collectives")
    coll = _match_collectives(coll_raw, comm_kernels, names, ranks, meta, cfg, world_size, warnings)
    stragglers = rank_stragglers(coll, min_skew_ns=cfg.min_skew_ns)

    say("breaking steps into buckets")
    steps = _bucket_steps(summaries, coll, warnings)

    say("summarising GPU time")
    summary = summary_frame([s.gpu_summary for s in summaries if s.gpu_summary is not None])

    say("running rules")
    sync_sites = [s.sync_sites for s in summaries if s.sync_sites is not None]
    ctx = RuleContext(
        steps=steps, gpu_summary=summary, kernels=kern, launch=launch, collectives=coll,
        stragglers=stragglers, copies=copies, meta=meta, world_size=world_size or len(all_ranks),
        thresholds=dict(cfg.rule_thresholds), sync_sites=_concat(sync_sites) if sync_sites else None,
    )
    recs = evaluate_rules(ctx)
    return Analysis(
        steps=steps, gpu_summary=summary, kernels=kern, collectives=coll, stragglers=stragglers,
        recommendations=recs, warnings=warnings, meta=meta, launch=launch, copies=copies,
        **_operator_view(summaries, cfg.top_operators),
    )


def _operator_view(summaries: list[RankSummary], top: int) -> dict[str, pd.DataFrame]:
    """The ``Analysis`` fields of the operator view from the ranks' summaries (rank order):
    each rank's first ``top`` rows, and the operators summed over ranks (first ``top``)."""
    out: dict[str, pd.DataFrame] = {}
    for field in ("operators", "operator_sites", "launch_operators"):
        frames = [getattr(s, field) for s in summaries if getattr(s, field) is not None]
        if frames:
            out[field] = _concat(frames)
    if "operators" in out:
        out["operators_overall"] = overall_operators(out["operators"]).head(top)
    return {name: top_per_rank(df, top) if name != "operators_overall" else df for name, df in out.items()}


def _in_process(run: Any, ranks: Sequence[int], inputs: Mapping[int, RankInputs], say: Progress) -> Iterable[RankSummary]:
    """The :data:`RankMap` of one process: the passes one after the other."""
    for i, r in enumerate(ranks):
        say(f"rank {r} ({i + 1}/{len(ranks)}): reading, classifying kernels, finding steps, summarising")
        yield rank_summary(run, r, inputs[r])
        release_arrow_memory()  # the rank's columns (Arrow buffers) are free now


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
    coll_cols = read_columns(run, "collectives", ranks, coded=False)
    return pd.DataFrame(coll_cols, copy=False) if n_rows(coll_cols) else None


def _rank_inputs(coll_raw: pd.DataFrame | None, ranks: list[int], cfg: AnalysisConfig) -> dict[int, RankInputs]:
    """What each rank's pass needs of the collectives table (:class:`~.rank_pass.RankInputs`)."""
    if coll_raw is None:
        return {r: RankInputs(cfg, keep_comm_kernels=len(ranks) > 1) for r in ranks}
    # Correlation ids are per process: each rank's kernels are matched against its own ids.
    comm_names = frozenset(codes_and_names(coll_raw["kernel_name"])[1]) - {""}
    by_rank = split_by_rank(coll_raw)
    out = {}
    for r in ranks:
        g = by_rank.get(int(r))
        if g is None:
            out[r] = RankInputs(cfg, comm_names=comm_names)
            continue
        start = as_i64(g["start_ns"])
        out[r] = RankInputs(cfg, comm_corr=as_key(g["correlation"]), comm_names=comm_names,
                            coll_spans=(start, start + as_i64(g["dur_ns"])))
    return out


def _combine(summaries: list[RankSummary], names: GlobalCodes, copy_kinds: GlobalCodes, top_n: int | None
             ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[tuple[np.ndarray, ...]]]:
    """The kernel, launch and copy tables of all ranks, and their communication kernels
    (name codes over ``names``), from the summaries in rank order; ``names`` and
    ``copy_kinds`` get every rank's names, numbered in that order."""
    kern: list[pd.DataFrame] = []
    launch: list = []
    copies: list[pd.DataFrame] = []
    comm: list[tuple[np.ndarray, ...]] = []
    for s in summaries:
        k_codes = names.add(s.kernel_names)
        c_codes = np.append(copy_kinds.add(s.copy_kinds), np.iinfo(np.int64).max)  # a null kind sorts last
        if s.kernels is not None:
            # Rank ascending, total time descending, ties in name order (as top_kernels orders them).
            order = np.lexsort((_codes_of(s.kernels["name"], names), -s.kernels["total_ns"].to_numpy()))
            if top_n is not None:
                order = order[:top_n] if top_n >= 0 else order[: max(order.size + top_n, 0)]
            kern.append(s.kernels.take(order).reset_index(drop=True))
        if s.launch is not None:
            launch.append(s.launch)
        if s.copies is not None:
            c = s.copies
            order = np.lexsort((c["large"].to_numpy(), c["pageable"].to_numpy(), c_codes[c["kind_code"].to_numpy()]))
            copies.append(c.drop(columns="kind_code").take(order).reset_index(drop=True))
        if s.comm_kernels is not None:
            comm.append((*s.comm_kernels[:3], k_codes[s.comm_kernels[3]]))
    return (_concat(kern) if kern else top_kernels({}, np.zeros(0, object)),
            pd.DataFrame(launch, columns=list(LAUNCH_COLUMNS)),
            _concat(copies) if copies else copy_summary({}), comm)


def _codes_of(values: pd.Series, names: GlobalCodes) -> np.ndarray:
    """Codes of ``values`` over ``names``; a name it lacks (a null name, shown as "") after
    every other."""
    return np.array([names.index.get(v, len(names.names)) for v in values], dtype=np.int64)


def _match_collectives(coll_raw: pd.DataFrame | None, comm_kernels: list, names: GlobalCodes, ranks: list[int],
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


def _bucket_steps(summaries: list[RankSummary], coll: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """``Analysis.steps``: every rank's swept windows, with the rank's exposed collective
    waits (``wait_ns``) moved into ``sync`` (:func:`~.rank_pass.with_collective_waits`);
    waits of point-to-point matches that cannot be trusted are left out (a note in ``warnings``)."""
    # An unreliable point-to-point match (by order, peers unknown) says nothing about waiting.
    reliable = reliable_matches(coll)
    doubtful = ~reliable & (coll["matched_ranks"] > 1).to_numpy(bool) if len(coll) else reliable
    if doubtful.any():
        warnings.append(f"{int(doubtful.sum())} point-to-point operations (Send/Recv/SendRecv) have no sequence number "
                        "and peer that line up across ranks: who waits for whom there is unknown (no straggler claim, "
                        "their time stays network)")
    cw = split_by_rank(coll[(coll["wait_ns"] > 0).to_numpy(bool) & reliable]) if len(coll) else {}
    parts = []
    for s in summaries:  # ranks ascending, as breakdown() orders them
        c = cw.get(s.rank)
        wait = EMPTY
        if c is not None:
            cs = as_i64(c["start_ns"])
            wait = (cs, cs + as_i64(c["wait_ns"]))
        rows = with_collective_waits(s, wait)
        if rows is not None:
            parts.append(rows)
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


def step_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Median step per rank, with its own breakdown: :func:`~.breakdown.median_steps`."""
    return median_steps(steps)


__all__ = ["COLUMNS", "RankMap", "analyze_run", "step_summary"]
