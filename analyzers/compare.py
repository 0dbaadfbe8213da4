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

The interval
    A percentile bootstrap (``n_boot`` resamples of the steps of each side,
    independently, vectorised with numpy, seeded), at ``confidence`` (95 %); per rank the
    level is Bonferroni-corrected over the ranks so that eight ranks do not give eight
    chances of a false alarm.  When consecutive steps are correlated (lag-1 rank
    autocorrelation above ``2 / sqrt(n)``) the bootstrap spread is widened by the AR(1)
    factor ``sqrt((1 + r) / (1 - r))``, with a warning.

The verdict of one row (threshold ``t = max_regression``)
    * ``too_few_steps``: a side has fewer than ``min_steps`` steps; refuse to judge (pass).
    * ``regression``: the interval lies wholly above 0 (NEW is slower, beyond noise) and
      the estimate exceeds ``t`` (by more than the allowed amount).  Fails.
    * ``improvement``: the mirror image: wholly below 0 and the estimate below ``-t``.
    * ``slower`` / ``faster``: significant but within ``t``.  Passes.
    * ``inconclusive``: the estimate is beyond ``t`` but the interval includes 0: the
      runs are too noisy or too short to tell.  Passes with a warning.
    * ``unchanged``: otherwise.

    Requiring the *whole* interval above ``t`` instead would detect a true 10 % slowdown
    only about half the time at 30 steps with 8 % step-to-step spread; requiring only
    significance would fail on real but allowed 2 % drifts.  ``benchmarks/compare_noise.py``
    measures the false-alarm rate and the detection threshold of this rule.

Only the gating metric (``metric``, default ``step_time``) decides pass or fail; the other
rows explain where the time moved.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS, Analysis, Recommendation
from perfscope.errors import InputError, UsageError

STEP_TIME = "step_time"
METRICS: tuple[str, ...] = (STEP_TIME, *BUCKETS)
METRIC_COLUMNS: dict[str, str] = {STEP_TIME: "wall_ns", **{b: f"{b}_ns" for b in BUCKETS}}

# Verdicts, from the one that matters most to the one that matters least; the overall
# verdict of several gating rows (per rank) is the first of these that any row has.
VERDICTS: tuple[str, ...] = (
    "regression", "too_few_steps", "inconclusive", "slower", "unchanged", "faster", "improvement",
)
FAILING: frozenset[str] = frozenset({"regression"})

ROW_COLUMNS: tuple[str, ...] = (
    "metric", "rank", "gating", "n_base", "n_new", "base_median_ns", "new_median_ns",
    "delta_ns", "change", "ci_low", "ci_high", "rel_change", "verdict", "widening",
)

# Bootstrap index arrays are built in blocks of at most this many elements, so a run with
# tens of thousands of steps never needs gigabytes for ``n_boot x n`` indices.
_BLOCK_ELEMENTS = 4_000_000


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


# -- the statistics --------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeEstimate:
    """Change of one metric between two samples.

    Attributes:
        base_median, new_median: medians of the metric (ns).
        base_scale: median of the base step time (ns), the denominator of ``change``.
        change: (new_median - base_median) / base_scale.
        ci_low, ci_high: bootstrap percentile interval of ``change``.
        widening: the larger of the two sides' autocorrelation factors applied to the
            bootstrap spread (1.0: steps looked independent).
    """

    base_median: float
    new_median: float
    base_scale: float
    change: float
    ci_low: float
    ci_high: float
    widening: float = 1.0


def bootstrap_change(
    base: np.ndarray,
    new: np.ndarray,
    *,
    base_scale: np.ndarray | None = None,
    n_boot: int = 2000,
    confidence: float = 0.95,
    rng: np.random.Generator | None = None,
    autocorrelation: bool = True,
) -> list[ChangeEstimate]:
    """Estimate the change of medians of several metrics with one bootstrap.

    Args:
        base: base samples, shape ``(n_base,)`` or ``(n_base, k)`` (k metrics, one row per
            step).
        new: new samples, shape ``(n_new,)`` or ``(n_new, k)``.
        base_scale: the base denominator per step, shape ``(n_base,)`` (step time); when
            None, each metric is scaled by its own base median (plain relative change).
        n_boot: bootstrap resamples.
        confidence: two-sided level of the interval.
        rng: random generator (seed it for reproducible intervals).
        autocorrelation: widen each side's bootstrap spread by the AR(1) factor
            ``sqrt((1 + r) / (1 - r))`` when that side's lag-1 rank autocorrelation ``r``
            is significant (``r > 2 / sqrt(n)``; rows must be in step order).  The bootstrap
            treats steps as independent; drifting step times (thermal throttling, a cache
            warming up) would otherwise give too narrow an interval and false alarms.

    Returns:
        one :class:`ChangeEstimate` per metric.  Each resample draws whole steps, the same
        draw for every metric of a side, so a bucket and the step time it is scaled by stay
        paired.  ``change`` is NaN (and so is its interval) when the scale's median is not
        positive.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    b = np.asarray(base, dtype=np.float64)
    n = np.asarray(new, dtype=np.float64)
    b = b[:, None] if b.ndim == 1 else b
    n = n[:, None] if n.ndim == 1 else n
    if b.shape[0] == 0 or n.shape[0] == 0:
        raise UsageError("bootstrap_change needs at least one sample on each side")
    own_scale = base_scale is None
    s = None if own_scale else np.asarray(base_scale, dtype=np.float64).reshape(-1, 1)

    med_b = np.median(b, axis=0)
    med_n = np.median(n, axis=0)
    scale = med_b if own_scale else np.repeat(np.median(s), b.shape[1])  # type: ignore[arg-type]
    with np.errstate(divide="ignore", invalid="ignore"):
        point = np.where(scale > 0, (med_n - med_b) / scale, np.nan)

    bs = b if own_scale else np.hstack([b, s])  # type: ignore[list-item]
    boot_b = _bootstrap_medians(bs, n_boot, rng)
    boot_n = _bootstrap_medians(n, n_boot, rng)
    wb = _ar1_widening(bs) if autocorrelation else np.ones(bs.shape[1])
    wn = _ar1_widening(n) if autocorrelation else np.ones(n.shape[1])
    boot_b = np.median(bs, axis=0) + wb * (boot_b - np.median(bs, axis=0))
    boot_n = med_n + wn * (boot_n - med_n)
    boot_scale = boot_b[:, : b.shape[1]] if own_scale else boot_b[:, -1:]
    boot_b = boot_b[:, : b.shape[1]]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(boot_scale > 0, (boot_n - boot_b) / boot_scale, np.nan)
    alpha = 1.0 - confidence
    out: list[ChangeEstimate] = []
    for j in range(b.shape[1]):
        col = ratio[:, j]
        col = col[np.isfinite(col)]
        if not np.isfinite(point[j]) or col.size == 0:
            lo = hi = math.nan
        else:
            lo, hi = (float(v) for v in np.quantile(col, [alpha / 2, 1 - alpha / 2]))
        widening = float(max(wb[j], wn[j], 1.0 if own_scale else wb[-1]))
        out.append(ChangeEstimate(float(med_b[j]), float(med_n[j]), float(scale[j]), float(point[j]), lo, hi, widening))
    return out


def _ar1_widening(x: np.ndarray) -> np.ndarray:
    """Per column of ``x`` (rows in step order): ``sqrt((1 + r) / (1 - r))`` where ``r`` is the
    lag-1 autocorrelation of the column's ranks when it exceeds ``2 / sqrt(n)``, else 1.

    Ranks keep one outlier step from faking (or hiding) a trend; ``r`` is capped at 0.8
    (a factor of 3).  A constant column (a bucket that is always 0) gets 1.
    """
    rows = x.shape[0]
    out = np.ones(x.shape[1])
    if rows < 8:
        return out
    ranks = pd.DataFrame(x).rank(method="average").to_numpy() - (rows + 1) / 2.0
    num = (ranks[1:] * ranks[:-1]).sum(axis=0)
    den = (ranks * ranks).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(den > 0, num / den, 0.0)
    hit = r > 2.0 / math.sqrt(rows)
    rc = np.minimum(r, 0.8)
    out[hit] = np.sqrt((1 + rc[hit]) / (1 - rc[hit]))
    return out


def _bootstrap_medians(x: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Return the column medians of ``n_boot`` resamples of the rows of ``x``: ``(n_boot, k)``."""
    rows = x.shape[0]
    block = max(1, _BLOCK_ELEMENTS // max(rows * x.shape[1], 1))
    out = np.empty((n_boot, x.shape[1]))
    for start in range(0, n_boot, block):
        stop = min(n_boot, start + block)
        idx = rng.integers(0, rows, size=(stop - start, rows))
        out[start:stop] = np.median(x[idx], axis=1)
    return out


def classify(change: float, ci_low: float, ci_high: float, max_regression: float) -> str:
    """Return the verdict of one row (see the module docstring for the rule).

    ``too_few_steps`` is decided before this is called; a NaN estimate is ``unchanged``.
    """
    if not (math.isfinite(change) and math.isfinite(ci_low) and math.isfinite(ci_high)):
        return "unchanged"
    if ci_low > 0 and change > max_regression:
        return "regression"
    if ci_high < 0 and change < -max_regression:
        return "improvement"
    if ci_low > 0:
        return "slower"
    if ci_high < 0:
        return "faster"
    if abs(change) > max_regression:
        return "inconclusive"
    return "unchanged"


def overall_verdict(verdicts: Sequence[str]) -> str:
    """Return the verdict that matters most among ``verdicts`` (``unchanged`` if none)."""
    present = set(verdicts)
    for v in VERDICTS:
        if v in present:
            return v
    return "unchanged"


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
    if not (max_regression >= 0 and math.isfinite(max_regression)):
        raise UsageError(f"--max-regression must be a non-negative share such as 0.05 or 5%, got {max_regression!r}")
    if min_steps < 1:
        raise UsageError(f"--min-steps must be at least 1, got {min_steps}")
    if n_boot < 100:
        raise UsageError(f"n_boot must be at least 100 for a usable interval, got {n_boot}")
    if not 0.5 <= confidence < 1:
        raise UsageError(f"confidence must be in [0.5, 1), got {confidence}")

    warnings: list[str] = []
    base_steps = _usable_steps(base.steps, "base")
    new_steps = _usable_steps(new.steps, "new")
    gate_col = METRIC_COLUMNS[metric]
    metrics = [m for m in METRICS if METRIC_COLUMNS[m] in base_steps.columns and METRIC_COLUMNS[m] in new_steps.columns]
    if metric not in metrics:
        raise IncompatibleRunsError(
            f"cannot compare {metric!r}: column {gate_col} is missing from the steps of "
            f"{'the base' if gate_col not in base_steps.columns else 'the new'} run; re-analyse both runs with this perfscope version"
        )
    missing = [m for m in METRICS if m not in metrics]
    if missing:
        warnings.append(f"not compared (missing from one run's breakdown): {', '.join(missing)}")
    cols = [METRIC_COLUMNS[m] for m in metrics]

    rows: list[dict[str, Any]] = []
    common: list[int] = []
    if per_rank:
        ranks_b, ranks_n = set(base_steps["rank"].unique()), set(new_steps["rank"].unique())
        common = sorted(int(r) for r in ranks_b & ranks_n)
        if not common and len(base_steps) and len(new_steps):
            raise IncompatibleRunsError(
                f"--per-rank: the runs share no rank (base has {sorted(map(int, ranks_b))}, new has "
                f"{sorted(map(int, ranks_n))}); compare pooled (without --per-rank) instead"
            )
        if ranks_b != ranks_n and common:
            warnings.append(f"ranks differ (base {sorted(map(int, ranks_b))}, new {sorted(map(int, ranks_n))}); only ranks in both are compared per rank")
    pooled_b, pooled_n = _pooled(base_steps, cols), _pooled(new_steps, cols)
    # The pooled rows gate unless per-rank rows exist (a side with no steps leaves none, and
    # the pooled "too few steps" row must then speak, not an empty gate that passes).
    rows += _rows_for(metrics, pooled_b, pooled_n, None, metric, not common, max_regression, min_steps,
                      n_boot, confidence, np.random.default_rng([seed, 0]))
    # Bonferroni: every rank is another chance of a false alarm.
    level = 1 - (1 - confidence) / max(len(common), 1)
    for r in common:
        rb = _pooled(base_steps[base_steps["rank"] == r], cols)
        rn = _pooled(new_steps[new_steps["rank"] == r], cols)
        rows += _rows_for(metrics, rb, rn, r, metric, True, max_regression, min_steps, n_boot, level,
                          np.random.default_rng([seed, r + 1]))
    table = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    table["rank"] = table["rank"].astype("Int64")
    table["gating"] = table["gating"].astype(bool)

    gating = table[table["gating"]]
    verdict = overall_verdict(list(gating["verdict"]))
    warnings += _verdict_warnings(gating, metric, min_steps, max_regression)
    warnings += _compatibility_warnings(base, new, base_steps, new_steps)

    base_ids = {r.id for r in base.recommendations}
    new_ids = {r.id for r in new.recommendations}
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
        new_recommendations=tuple(r for r in new.recommendations if r.id not in base_ids),
        resolved_recommendations=tuple(sorted(base_ids - new_ids)),
        samples=samples,
        warnings=tuple(dict.fromkeys(warnings)),
        base_label=base_label or str(base.meta.get("run_id") or "base"),
        new_label=new_label or str(new.meta.get("run_id") or "new"),
        base_info=_run_info(base, base_steps),
        new_info=_run_info(new, new_steps),
    )


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
    gate: str,
    gate_here: bool,
    max_regression: float,
    min_steps: int,
    n_boot: int,
    confidence: float,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    cols = [METRIC_COLUMNS[m] for m in metrics]
    nb, nn = len(b), len(n)
    if nb and nn:
        est = bootstrap_change(b[cols].to_numpy(), n[cols].to_numpy(), base_scale=b["wall_ns"].to_numpy(),
                               n_boot=n_boot, confidence=confidence, rng=rng)
    else:
        est = [ChangeEstimate(_median(b, c), _median(n, c), _median(b, "wall_ns"), math.nan, math.nan, math.nan) for c in cols]
    rows = []
    for m, e in zip(metrics, est):
        if nb < min_steps or nn < min_steps:
            verdict = "too_few_steps"
        else:
            verdict = classify(e.change, e.ci_low, e.ci_high, max_regression)
        delta = e.new_median - e.base_median
        rows.append({
            "metric": m, "rank": rank, "gating": gate_here and m == gate, "n_base": nb, "n_new": nn,
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


# -- kernels and collectives -----------------------------------------------------------


def kernel_changes(base: pd.DataFrame, new: pd.DataFrame, base_rank_steps: int, new_rank_steps: int, *, top: int = 10) -> pd.DataFrame:
    """Return the kernels whose time per step changed most.

    Args:
        base, new: ``Analysis.kernels`` (``rank``, ``name``, ``kind``, ``count``, ``total_ns``).
        base_rank_steps, new_rank_steps: (rank, step) rows of each run: a kernel's total
            over all ranks divided by this is its time per step per rank, which stays
            comparable when the runs recorded different numbers of steps or ranks.
        top: rows to return.

    Returns:
        columns ``name``, ``kind``, ``base_ns_per_step``, ``new_ns_per_step``,
        ``delta_ns_per_step``, ``rel_change``, ``base_count_per_step``,
        ``new_count_per_step``, ``status``; largest absolute delta first.
    """
    return _top_changes(base, new, ["name"], "total_ns", base_rank_steps, new_rank_steps, top, extra="kind")


def collective_changes(base: pd.DataFrame, new: pd.DataFrame, base_rank_steps: int, new_rank_steps: int, *, top: int = 10) -> pd.DataFrame:
    """Return the collectives, keyed by (``func``, ``bytes``), whose time per step changed most.

    Communicator ids differ from run to run, so an operation is identified by what it does
    and how much it moves.  Columns: ``func``, ``bytes``, then as :func:`kernel_changes`
    (without ``kind``).
    """
    return _top_changes(base, new, ["func", "bytes"], "dur_ns", base_rank_steps, new_rank_steps, top)


def _top_changes(
    base: pd.DataFrame,
    new: pd.DataFrame,
    keys: list[str],
    value: str,
    base_rank_steps: int,
    new_rank_steps: int,
    top: int,
    extra: str | None = None,
) -> pd.DataFrame:
    out_cols = [*keys, *([extra] if extra else []), "base_ns_per_step", "new_ns_per_step", "delta_ns_per_step",
                "rel_change", "base_count_per_step", "new_count_per_step", "status"]

    def per_step(df: pd.DataFrame, rank_steps: int) -> pd.DataFrame:
        if df is None or df.empty or any(k not in df.columns for k in [*keys, value]) or rank_steps <= 0:
            return pd.DataFrame(columns=[*keys, "ns", "count", *([extra] if extra else [])]).set_index(keys)
        d = df.copy()
        for k in keys:
            d[k] = d[k].astype(str) if k != "bytes" else pd.to_numeric(d[k], errors="coerce").fillna(-1).astype("int64")
        d["_count"] = pd.to_numeric(d["count"], errors="coerce").fillna(0) if "count" in d.columns else 1
        d["_v"] = pd.to_numeric(d[value], errors="coerce").fillna(0).astype("float64")
        agg: dict[str, Any] = {"ns": ("_v", "sum"), "count": ("_count", "sum")}
        if extra and extra in d.columns:
            d[extra] = d[extra].astype(str)
            agg[extra] = (extra, "first")
        g = d.groupby(keys, sort=False, observed=True).agg(**agg)
        g["ns"] /= rank_steps
        g["count"] /= rank_steps
        return g

    b, n = per_step(base, base_rank_steps), per_step(new, new_rank_steps)
    if b.empty and n.empty:
        return pd.DataFrame(columns=out_cols)
    j = pd.merge(b, n, how="outer", left_index=True, right_index=True, suffixes=("_b", "_n"))
    res = pd.DataFrame(index=j.index)
    if extra:
        eb = j.get(f"{extra}_b", pd.Series(index=j.index, dtype=object))
        en = j.get(f"{extra}_n", pd.Series(index=j.index, dtype=object))
        res[extra] = en.where(en.notna(), eb)
    in_b = j["ns_b"].notna()
    in_n = j["ns_n"].notna()
    res["base_ns_per_step"] = j["ns_b"].fillna(0.0).astype(float)
    res["new_ns_per_step"] = j["ns_n"].fillna(0.0).astype(float)
    res["delta_ns_per_step"] = res["new_ns_per_step"] - res["base_ns_per_step"]
    with np.errstate(divide="ignore", invalid="ignore"):
        res["rel_change"] = np.where(res["base_ns_per_step"] > 0, res["delta_ns_per_step"] / res["base_ns_per_step"], np.nan)
    res["base_count_per_step"] = j["count_b"].fillna(0.0).astype(float)
    res["new_count_per_step"] = j["count_n"].fillna(0.0).astype(float)
    res["status"] = np.where(in_b & in_n, "changed", np.where(in_n, "new", "gone"))
    res = res.reset_index()
    # Stable order: largest |delta| first, ties by name so reports do not shuffle.
    res["_abs"] = res["delta_ns_per_step"].abs()
    res = res.sort_values(["_abs", *keys], ascending=[False, *([True] * len(keys))], kind="mergesort")
    return res.drop(columns="_abs").head(top).reset_index(drop=True)[out_cols]


__all__ = [
    "Comparison", "ChangeEstimate", "IncompatibleRunsError", "compare_runs", "bootstrap_change", "classify",
    "overall_verdict", "normalize_metric", "kernel_changes", "collective_changes",
    "METRICS", "METRIC_COLUMNS", "VERDICTS", "STEP_TIME",
]
