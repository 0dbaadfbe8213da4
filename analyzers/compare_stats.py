"""The statistics of ``perfscope compare``: the change of medians with a bootstrap interval,
and the verdict rule that judges it.

Pure numpy; :func:`perfscope.analyzers.compare.compare_runs` applies them to two analyses.

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
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfscope.errors import UsageError

# Verdicts, from the one that matters most to the one that matters least; the overall
# verdict of several gating rows (per rank) is the first of these that any row has.
VERDICTS: tuple[str, ...] = (
    "regression", "too_few_steps", "inconclusive", "slower", "unchanged", "faster", "improvement",
)
FAILING: frozenset[str] = frozenset({"regression"})

# Bootstrap index arrays are built in blocks of at most this many elements, so a run with
# tens of thousands of steps never needs gigabytes for ``n_boot x n`` indices.
_BLOCK_ELEMENTS = 4_000_000


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



__all__ = ["ChangeEstimate", "FAILING", "VERDICTS", "bootstrap_change", "classify", "overall_verdict"]
