"""Compare two analysed runs and decide, allowing for noise, whether NEW regressed.

Pure: two :class:`~perfscope.analyzers.result.Analysis` objects in, one frozen
:class:`Comparison` out.  Nothing here prints, plots or writes files; renderers live in
:mod:`perfscope.reports.compare_render` and the command in :mod:`perfscope.cli.compare`.

The statistic
    For every metric (``step_time`` = ``wall_ns``, and each bucket ``compute_ns`` ...
    ``host_ns``) the change is ``(median_new - median_base) / median_base_step_time``:
    the change of the median, as a share of the base run's median step time.  For
    ``step_time`` that is the plain relative change of medians; for a bucket it says how
    much of the step that bucket gained or lost, which stays defined when the bucket is
    zero in the base run (a new data-loading stall) and adds up across buckets.

The samples
    Pooled: one value per step, each step's values averaged over the ranks that have it.
    Pooling raw (rank, step) rows would count one synchronous step ``world_size`` times
    and make the interval far too narrow.  Per rank: that rank's steps.

The interval and the verdict
    A bootstrap interval of each change, judged against ``max_regression`` by the rule
    in :mod:`perfscope.analyzers.compare_stats`; per rank the level is
    Bonferroni-corrected over the ranks.  The kernels and collectives that moved most
    come from :mod:`perfscope.analyzers.compare_changes`.

Only the gating metric (``metric``, default ``step_time``) decides pass or fail; the other
rows explain where the time moved.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.compare_changes import collective_changes, kernel_changes
from perfscope.analyzers.compare_stats import (
    FAILING, VERDICTS, ChangeEstimate, bootstrap_change, classify, overall_verdict,
)
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS, Analysis, Recommendation
from perfscope.errors import InputError, UsageError

STEP_TIME = "step_time"
METRICS: tuple[str, ...] = (STEP_TIME, *BUCKETS)
METRIC_COLUMNS: dict[str, str] = {STEP_TIME: "wall_ns", **{b: f"{b}_ns" for b in BUCKETS}}

ROW_COLUMNS: tuple[str, ...] = (
    "metric", "rank", "gating", "n_base", "n_new", "base_median_ns", "new_median_ns",
    "delta_ns", "change", "ci_low", "ci_high", "rel_change", "verdict", "widening",
)


class IncompatibleRunsError(InputError):
    """The two runs cannot be compared (no common ranks, no steps table, missing metric)."""


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare_runs`.

    Attributes:
        verdict: overall verdict of the gating metric (one of :data:`VERDICTS`).
        passed: False only for ``regression``; what the CLI turns into exit code 1.
        metric: the gating metric (``step_time`` or a bucket name).
        max_regression: the allowed slowdown (0.05 = 5 % of the base median step).
        confidence: level of the intervals (per-rank rows: Bonferroni-corrected).
        per_rank: whether the gate is evaluated per rank.
        min_steps, n_boot, seed: the settings used.
        rows: one row per metric (pooled, ``rank`` <NA>) and, with ``per_rank``, per
            (metric, rank).  Columns: ``metric``, ``rank`` (Int64, <NA> = pooled),
            ``gating`` (bool), ``n_base``, ``n_new`` (steps), ``base_median_ns``,
            ``new_median_ns``, ``delta_ns`` (new - base, ns), ``change`` (delta as a share
            of the base median step time), ``ci_low``, ``ci_high`` (interval of
            ``change``), ``rel_change`` (delta / base median of the metric itself; NaN
            when that is 0), ``verdict`` and ``widening`` (factor the interval was widened
            by because steps were autocorrelated; 1.0 when they looked independent).
        kernels: kernels whose time per step changed most, largest absolute change
            first.  Columns: ``name``, ``kind``, ``base_ns_per_step``, ``new_ns_per_step``,
            ``delta_ns_per_step``, ``rel_change`` (NaN for a kernel new in NEW),
            ``base_count_per_step``, ``new_count_per_step``, ``status`` (``changed``,
            ``new``, ``gone``).
        collectives: same for collectives, keyed by (``func``, ``bytes``); columns
            ``func``, ``bytes``, then as for kernels.
        new_recommendations: recommendations whose id fires in NEW but not in BASE.
        resolved_recommendations: ids that fired in BASE but no longer in NEW.
        samples: the pooled per-step values both sides were judged on: ``side``
            (``base``/``new``), ``step``, ``wall_ns`` and the bucket columns (ns).
        warnings: things to tell the user (too few steps, different GPUs, ...).
        base_label, new_label: how to name the two runs in a report.
        base_info, new_info: a few facts per run: ``run_id``, ``world_size``, ``gpu``,
            ``steps`` (rank-steps), ``ranks``.
    """

    verdict: str
    passed: bool
    metric: str
    max_regression: float
    confidence: float
    per_rank: bool
    min_steps: int
    n_boot: int
    seed: int
    rows: pd.DataFrame
    kernels: pd.DataFrame
    collectives: pd.DataFrame
    new_recommendations: tuple[Recommendation, ...] = ()
    resolved_recommendations: tuple[str, ...] = ()
    samples: pd.DataFrame = field(default_factory=pd.DataFrame)
    warnings: tuple[str, ...] = ()
    base_label: str = "base"
    new_label: str = "new"
    base_info: dict[str, Any] = field(default_factory=dict)
    new_info: dict[str, Any] = field(default_factory=dict)

    @property
    def gating_rows(self) -> pd.DataFrame:
        """The rows that decide the verdict (pooled, or per rank with ``per_rank``)."""
        return self.rows[self.rows["gating"]]


# -- the comparison --------------------------------------------------------------------


def compare_runs(
    base: Analysis,
    new: Analysis,
    *,
    metric: str = STEP_TIME,
    max_regression: float = 0.05,
    per_rank: bool = False,
    min_steps: int = 5,
    n_boot: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    top: int = 10,
    base_label: str | None = None,
    new_label: str | None = None,
) -> Comparison:
    """Compare two analysed runs and decide whether NEW regressed.

    Args:
        base, new: the analyses of the reference run and of the candidate run.
        metric: the gating metric: ``step_time`` or a bucket (``compute``, ``network``,
            ``sync``, ``pcie``, ``data_loading``, ``host``; a trailing ``_ns`` is accepted).
        max_regression: allowed slowdown as a share of the base median step time (0.05).
        per_rank: judge each rank separately (any rank's regression fails); otherwise
            judge the per-step values averaged over ranks.
        min_steps: fewer steps than this on either side gives ``too_few_steps`` (a pass
            with a warning).
        n_boot: bootstrap resamples; seed: their seed (same inputs, same result).
        confidence: two-sided level of the intervals.
        top: how many kernels and collectives to list.
        base_label, new_label: names for the report (default: the runs' ids).

    Returns:
        a :class:`Comparison`.

    Raises:
        UsageError: unknown metric, negative threshold, bad ``min_steps``/``n_boot``.
        IncompatibleRunsError: a steps table lacks the gating metric's column, or
            ``per_rank`` and the runs share no rank.
    """
    metric = normalize_metric(metric)
    _check_settings(max_regression, min_steps, n_boot, confidence)
    gate = _Gate(metric, max_regression, min_steps, n_boot, confidence, seed)
    base_steps, new_steps = _usable_steps(base.steps, "base"), _usable_steps(new.steps, "new")
    metrics, warnings = _metrics_compared(metric, base_steps, new_steps)
    cols = [METRIC_COLUMNS[m] for m in metrics]
    common = _common_ranks(base_steps, new_steps, warnings) if per_rank else []
    pooled_b, pooled_n = _pooled(base_steps, cols), _pooled(new_steps, cols)
    table = _row_table(gate, metrics, base_steps, new_steps, pooled_b, pooled_n, common)

    gating = table[table["gating"]]
    verdict = overall_verdict(list(gating["verdict"]))
    warnings += _verdict_warnings(gating, metric, min_steps, max_regression)
    warnings += _compatibility_warnings(base, new, base_steps, new_steps)

    added, resolved = _recommendation_changes(base, new)
    samples = pd.concat(
        [pooled_b.assign(side="base"), pooled_n.assign(side="new")], ignore_index=True
    )[["side", "step", *cols]]
    return Comparison(
        verdict=verdict,
        passed=verdict not in FAILING,
        metric=metric,
        max_regression=float(max_regression),
        confidence=float(confidence),
        per_rank=per_rank,
        min_steps=int(min_steps),
        n_boot=int(n_boot),
        seed=int(seed),
        rows=table,
        kernels=kernel_changes(base.kernels, new.kernels, _rank_steps(base_steps), _rank_steps(new_steps), top=top),
        collectives=collective_changes(base.collectives, new.collectives, _rank_steps(base_steps), _rank_steps(new_steps), top=top),
        new_recommendations=added,
        resolved_recommendations=resolved,
        samples=samples,
        warnings=tuple(dict.fromkeys(warnings)),
        base_label=base_label or str(base.meta.get("run_id") or "base"),
        new_label=new_label or str(new.meta.get("run_id") or "new"),
        base_info=_run_info(base, base_steps),
        new_info=_run_info(new, new_steps),
    )


def _recommendation_changes(base: Analysis, new: Analysis) -> tuple[tuple[Recommendation, ...], tuple[str, ...]]:
    """Return (NEW's recommendations whose rule did not fire on BASE, the ids of BASE's
    recommendations that NEW no longer has, sorted)."""
    base_ids = {r.id for r in base.recommendations}
    new_ids = {r.id for r in new.recommendations}
    return tuple(r for r in new.recommendations if r.id not in base_ids), tuple(sorted(base_ids - new_ids))


@dataclass(frozen=True)
class _Gate:
    """The settings every row of one comparison is judged with (see :func:`compare_runs`)."""

    metric: str
    max_regression: float
    min_steps: int
    n_boot: int
    confidence: float
    seed: int


def _check_settings(max_regression: float, min_steps: int, n_boot: int, confidence: float) -> None:
    """Raises:
        UsageError: a setting of :func:`compare_runs` out of range.
    """
    if not (max_regression >= 0 and math.isfinite(max_regression)):
        raise UsageError(f"--max-regression must be a non-negative share such as 0.05 or 5%, got {max_regression!r}")
    if min_steps < 1:
        raise UsageError(f"--min-steps must be at least 1, got {min_steps}")
    if n_boot < 100:
        raise UsageError(f"n_boot must be at least 100 for a usable interval, got {n_boot}")
    if not 0.5 <= confidence < 1:
        raise UsageError(f"confidence must be in [0.5, 1), got {confidence}")


def _metrics_compared(metric: str, base_steps: pd.DataFrame, new_steps: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the metrics both steps tables have, in :data:`METRICS` order; warnings so far).

    Raises:
        IncompatibleRunsError: a side lacks the gating metric's column.
    """
    gate_col = METRIC_COLUMNS[metric]
    metrics = [m for m in METRICS if METRIC_COLUMNS[m] in base_steps.columns and METRIC_COLUMNS[m] in new_steps.columns]
    if metric not in metrics:
        raise IncompatibleRunsError(
            f"cannot compare {metric!r}: column {gate_col} is missing from the steps of "
            f"{'the base' if gate_col not in base_steps.columns else 'the new'} run; re-analyse both runs with this perfscope version"
        )
    missing = [m for m in METRICS if m not in metrics]
    warnings = [f"not compared (missing from one run's breakdown): {', '.join(missing)}"] if missing else []
    return metrics, warnings


def _common_ranks(base_steps: pd.DataFrame, new_steps: pd.DataFrame, warnings: list[str]) -> list[int]:
    """The ranks both runs have, sorted (appends a warning to ``warnings`` when the rank
    sets differ).

    Raises:
        IncompatibleRunsError: both runs have steps but share no rank.
    """
    ranks_b, ranks_n = set(base_steps["rank"].unique()), set(new_steps["rank"].unique())
    common = sorted(int(r) for r in ranks_b & ranks_n)
    if not common and len(base_steps) and len(new_steps):
        raise IncompatibleRunsError(
            f"--per-rank: the runs share no rank (base has {sorted(map(int, ranks_b))}, new has "
            f"{sorted(map(int, ranks_n))}); compare pooled (without --per-rank) instead"
        )
    if ranks_b != ranks_n and common:
        warnings.append(f"ranks differ (base {sorted(map(int, ranks_b))}, new {sorted(map(int, ranks_n))}); only ranks in both are compared per rank")
    return common


def _row_table(gate: _Gate, metrics: list[str], base_steps: pd.DataFrame, new_steps: pd.DataFrame,
               pooled_b: pd.DataFrame, pooled_n: pd.DataFrame, common: list[int]) -> pd.DataFrame:
    """:attr:`Comparison.rows`: the pooled rows of ``metrics``, then those of each rank in
    ``common``."""
    cols = [METRIC_COLUMNS[m] for m in metrics]
    # The pooled rows gate unless per-rank rows exist (a side with no steps leaves none, and
    # the pooled "too few steps" row must then speak, not an empty gate that passes).
    rows = _rows_for(metrics, pooled_b, pooled_n, None, gate, not common, gate.confidence,
                     np.random.default_rng([gate.seed, 0]))
    # Bonferroni: every rank is another chance of a false alarm.
    level = 1 - (1 - gate.confidence) / max(len(common), 1)
    for r in common:
        rb = _pooled(base_steps[base_steps["rank"] == r], cols)
        rn = _pooled(new_steps[new_steps["rank"] == r], cols)
        rows += _rows_for(metrics, rb, rn, r, gate, True, level, np.random.default_rng([gate.seed, r + 1]))
    table = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    table["rank"] = table["rank"].astype("Int64")
    table["gating"] = table["gating"].astype(bool)
    return table


def normalize_metric(metric: str) -> str:
    """Return the canonical metric name for ``metric`` (``wall``/``wall_ns`` -> ``step_time``).

    Raises:
        UsageError: not ``step_time`` nor a bucket.
    """
    m = metric.strip().lower().replace("-", "_")
    if m in ("wall", "wall_ns", "step", "steps", "step_time_ns"):
        m = STEP_TIME
    if m.endswith("_ns") and m[:-3] in BUCKETS:
        m = m[:-3]
    if m not in METRICS:
        raise UsageError(f"unknown metric {metric!r}; use one of: {', '.join(METRICS)}")
    return m


def _usable_steps(steps: pd.DataFrame, side: str) -> pd.DataFrame:
    """Return the steps with ``rank``, ``step`` and float64 metric columns (rows with a
    missing or non-positive wall time dropped)."""
    if steps is None or (len(steps) == 0 and "wall_ns" not in steps.columns):
        # An analysis that found no steps: zero samples, judged as "too few steps".
        return pd.DataFrame({"rank": pd.Series([], dtype="int64"), "step": pd.Series([], dtype="int64"),
                             **{c: pd.Series([], dtype="float64") for c in ("wall_ns", *BUCKET_COLUMNS)}})
    if "wall_ns" not in steps.columns:
        raise IncompatibleRunsError(
            f"the {side} run's analysis has no per-step wall times (steps.wall_ns); "
            "check that it recorded step markers (`perfscope analyze` says why)"
        )
    df = steps.copy()
    if "rank" not in df.columns:
        df["rank"] = 0
    if "step" not in df.columns:
        df["step"] = df.groupby("rank").cumcount()
    for c in ("wall_ns", *BUCKET_COLUMNS):
        if c in df.columns:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    df = df[np.isfinite(df["wall_ns"]) & (df["wall_ns"] > 0)]
    return df


def _pooled(steps: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """One row per step: ``step`` and each of ``cols`` averaged over the ranks that have it."""
    if steps.empty:
        return pd.DataFrame({"step": pd.Series([], dtype="int64"), **{c: pd.Series([], dtype="float64") for c in cols}})
    return steps.groupby("step", sort=True)[cols].mean().reset_index()


def _rows_for(
    metrics: list[str],
    b: pd.DataFrame,
    n: pd.DataFrame,
    rank: int | None,
    gate: _Gate,
    gate_here: bool,
    confidence: float,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """The rows of ``metrics`` judged on pooled samples ``b`` and ``n`` (see
    :attr:`Comparison.rows`); ``gating`` on the gate's metric when ``gate_here``."""
    cols = [METRIC_COLUMNS[m] for m in metrics]
    nb, nn = len(b), len(n)
    if nb and nn:
        est = bootstrap_change(b[cols].to_numpy(), n[cols].to_numpy(), base_scale=b["wall_ns"].to_numpy(),
                               n_boot=gate.n_boot, confidence=confidence, rng=rng)
    else:
        est = [ChangeEstimate(_median(b, c), _median(n, c), _median(b, "wall_ns"), math.nan, math.nan, math.nan) for c in cols]
    rows = []
    for m, e in zip(metrics, est):
        if nb < gate.min_steps or nn < gate.min_steps:
            verdict = "too_few_steps"
        else:
            verdict = classify(e.change, e.ci_low, e.ci_high, gate.max_regression)
        delta = e.new_median - e.base_median
        rows.append({
            "metric": m, "rank": rank, "gating": gate_here and m == gate.metric, "n_base": nb, "n_new": nn,
            "base_median_ns": e.base_median, "new_median_ns": e.new_median, "delta_ns": delta,
            "change": e.change, "ci_low": e.ci_low, "ci_high": e.ci_high,
            "rel_change": delta / e.base_median if e.base_median > 0 else math.nan,
            "verdict": verdict, "widening": e.widening,
        })
    return rows


def _median(df: pd.DataFrame, col: str) -> float:
    return float(df[col].median()) if len(df) else math.nan


def _rank_steps(steps: pd.DataFrame) -> int:
    """Number of (rank, step) rows: the denominator of per-step kernel and collective time."""
    return int(len(steps))


def _verdict_warnings(gating: pd.DataFrame, metric: str, min_steps: int, max_regression: float) -> list[str]:
    out = []
    for _, r in gating.iterrows():
        where = "" if pd.isna(r["rank"]) else f" on rank {int(r['rank'])}"
        if r["verdict"] == "too_few_steps":
            out.append(
                f"not judged{where}: {metric} needs at least {min_steps} steps on each side "
                f"(base has {int(r['n_base'])}, new has {int(r['n_new'])}); record more steps, or lower --min-steps"
            )
        if r["widening"] > 1.0 and r["verdict"] != "too_few_steps":
            out.append(
                f"{metric}{where}: consecutive steps are correlated (drift, throttling, a periodic stall), so the "
                f"interval was widened x{r['widening']:.2f}; record more steps or find the drift"
            )
        if r["verdict"] == "inconclusive":
            out.append(
                f"inconclusive{where}: {metric} moved {r['change']:+.1%} (beyond the {max_regression:.1%} threshold) "
                f"but the {int(r['n_base'])} vs {int(r['n_new'])} steps are too noisy to tell "
                f"(interval {r['ci_low']:+.1%} .. {r['ci_high']:+.1%}); record more steps"
            )
    return out


def _compatibility_warnings(base: Analysis, new: Analysis, bs: pd.DataFrame, ns: pd.DataFrame) -> list[str]:
    out = []
    wb, wn = base.meta.get("world_size"), new.meta.get("world_size")
    if wb and wn and wb != wn:
        out.append(f"world sizes differ (base {wb}, new {wn}); per-step values are averaged over ranks")
    gb, gn = _gpus(base.meta), _gpus(new.meta)
    if gb and gn and gb != gn:
        out.append(f"GPUs differ (base {', '.join(gb)}; new {', '.join(gn)}); the change may be the hardware's")
    for side, a in (("base", base), ("new", new)):
        for w in a.warnings:
            out.append(f"{side}: {w}")
    return out


def _gpus(meta: dict[str, Any]) -> list[str]:
    names = set()
    for r in meta.get("ranks", []) or []:
        g = r.get("gpu") if isinstance(r, dict) else None
        name = g.get("name") if isinstance(g, dict) else g
        if name:
            names.add(str(name))
    return sorted(names)


def _run_info(a: Analysis, steps: pd.DataFrame) -> dict[str, Any]:
    return {
        "run_id": a.meta.get("run_id"),
        "world_size": a.meta.get("world_size"),
        "gpu": ", ".join(_gpus(a.meta)) or None,
        "steps": int(len(steps)),
        "ranks": sorted(int(r) for r in steps["rank"].unique()) if len(steps) else [],
    }


__all__ = [
    "Comparison", "ChangeEstimate", "IncompatibleRunsError", "compare_runs", "bootstrap_change", "classify",
    "overall_verdict", "normalize_metric", "kernel_changes", "collective_changes",
    "METRICS", "METRIC_COLUMNS", "VERDICTS", "STEP_TIME",
]
