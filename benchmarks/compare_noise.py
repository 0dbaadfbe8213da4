"""False-alarm rate and detection threshold of ``perfscope compare``'s verdict.

Method
    Step times are drawn like a real training job's: lognormal around a 100 ms median with
    a step-to-step spread ``sigma`` (5-12 %), plus occasional outliers (3 % of steps
    1.3-3x slower: a checkpoint, a GC pause, a slow batch).

    * False-alarm rate: ``--pairs`` pairs of runs drawn from the *same* distribution (per
      pair: sigma uniform in [5 %, 12 %], each side 20-50 steps, drawn independently), each
      judged end to end by :func:`perfscope.analyzers.compare.compare_runs` at a 5 %
      threshold; a false alarm is a ``regression`` verdict.  The interval is Clopper-Pearson
      (exact binomial) 95 %.
    * Per (steps, sigma) cell: the false-alarm rate over ``--null-pairs`` noise-only pairs
      (1000: a 200-pair estimate of a 2 % rate is anywhere from 0.5 % to 5 %), and the
      detection threshold: the smallest true slowdown (1 % grid)
      that is judged ``regression`` in at least 95 % of ``--power-pairs`` pairs, with the
      same noise draws reused across slowdowns (common random numbers).
    * Both for the rule perfscope uses (interval wholly above 0 and estimate above the
      threshold) and, for comparison, the stricter "whole interval above the threshold".
    * Stress case: autocorrelated steps (AR(1), rho 0.5: thermal drift, a slow node
      warming up), which break the bootstrap's independence assumption.

Run:  python benchmarks/compare_noise.py            (about 2-3 minutes on 2 cores)
      python benchmarks/compare_noise.py --quick    (a smaller sample, seconds)
Prints Markdown (the tables in benchmarks/README.md).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.compare import bootstrap_change, classify, compare_runs
from perfscope.analyzers.result import BUCKET_COLUMNS, Analysis

MEDIAN_NS = 100e6
THRESHOLD = 0.05
OUTLIER_RATE = 0.03


def draw_steps(rng: np.random.Generator, n: int, sigma: float, slowdown: float = 0.0, rho: float = 0.0) -> np.ndarray:
    """Step times (ns): lognormal spread ``sigma``, AR(1) correlation ``rho``, 3 % outliers."""
    z = rng.standard_normal(n)
    if rho:
        # AR(1) with unit marginal variance, started in its stationary distribution.
        for i in range(1, n):
            z[i] = rho * z[i - 1] + math.sqrt(1 - rho * rho) * z[i]
    x = MEDIAN_NS * (1 + slowdown) * np.exp(sigma * z)
    hit = rng.random(n) < OUTLIER_RATE
    x[hit] *= rng.uniform(1.3, 3.0, int(hit.sum()))
    return x


def analysis_of(wall: np.ndarray) -> Analysis:
    """A one-rank Analysis whose steps have wall times ``wall`` (buckets split 60/20/5/5/5/5)."""
    w = np.round(wall).astype("int64")
    shares = (0.6, 0.2, 0.05, 0.05, 0.05)
    parts = {c: (w * s).astype("int64") for c, s in zip(BUCKET_COLUMNS[:-1], shares)}
    parts[BUCKET_COLUMNS[-1]] = w - sum(parts.values())
    steps = pd.DataFrame({"rank": 0, "step": np.arange(len(w)), "wall_ns": w, **parts})
    e = pd.DataFrame()
    return Analysis(steps=steps, gpu_summary=e, kernels=e, collectives=e, stragglers=e, recommendations=[])


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) binomial interval for k successes in n trials (numpy-free
    bisection on the binomial CDF, so the benchmark needs nothing beyond perfscope)."""

    def cdf(j: int, p: float) -> float:
        if j < 0:
            return 0.0
        if p <= 0:
            return 1.0
        if p >= 1:
            return 1.0 if j >= n else 0.0
        lp, lq = math.log(p), math.log1p(-p)
        return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
                            for i in range(j + 1)))

    def solve(f: Callable[[float], float]) -> float:
        lo, hi = 0.0, 1.0  # f decreases in p
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
        return (lo + hi) / 2

    a = (1 - level) / 2
    lower = 0.0 if k == 0 else solve(lambda p: a - (1 - cdf(k - 1, p)))
    upper = 1.0 if k == n else solve(lambda p: cdf(k, p) - a)
    return lower, upper


def false_alarms_end_to_end(pairs: int, seed: int) -> dict[str, Any]:
    """Judge ``pairs`` noise-only pairs with compare_runs; return counts and the interval."""
    rng = np.random.default_rng(seed)
    verdicts: dict[str, int] = {}
    strict = 0
    for i in range(pairs):
        sigma = rng.uniform(0.05, 0.12)
        nb, nn = int(rng.integers(20, 51)), int(rng.integers(20, 51))
        c = compare_runs(analysis_of(draw_steps(rng, nb, sigma)), analysis_of(draw_steps(rng, nn, sigma)),
                         max_regression=THRESHOLD, seed=i)
        verdicts[c.verdict] = verdicts.get(c.verdict, 0) + 1
        strict += bool(c.gating_rows.iloc[0]["ci_low"] > THRESHOLD)
    k = verdicts.get("regression", 0)
    return {"pairs": pairs, "alarms": k, "rate": k / pairs, "ci": clopper_pearson(k, pairs), "verdicts": verdicts,
            "strict_alarms": strict}


def judge(base: np.ndarray, new: np.ndarray, seed: int, n_boot: int) -> tuple[bool, bool]:
    """(perfscope's rule says regression, the strict whole-interval rule says regression)."""
    (e,) = bootstrap_change(base, new, n_boot=n_boot, rng=np.random.default_rng(seed))
    return classify(e.change, e.ci_low, e.ci_high, THRESHOLD) == "regression", e.ci_low > THRESHOLD


def power_curve(n: int, sigma: float, slowdowns: list[float], pairs: int, seed: int, n_boot: int,
                rho: float = 0.0) -> dict[float, tuple[float, float]]:
    """Detection rate of both rules at each slowdown: {slowdown: (rule, strict)}."""
    rng = np.random.default_rng(seed)
    draws = [(draw_steps(rng, n, sigma, rho=rho), draw_steps(rng, n, sigma, rho=rho)) for _ in range(pairs)]
    out: dict[float, tuple[float, float]] = {}
    for s in slowdowns:
        hits = [judge(b, nw * (1 + s), i, n_boot) for i, (b, nw) in enumerate(draws)]
        out[s] = (float(np.mean([h[0] for h in hits])), float(np.mean([h[1] for h in hits])))
    return out


def threshold_of(curve: dict[float, tuple[float, float]], which: int, target: float = 0.95) -> float | None:
    """Smallest slowdown whose detection rate (and every larger one's) is >= target."""
    levels = sorted(curve)
    best = None
    for s in reversed(levels):
        if curve[s][which] >= target:
            best = s
        else:
            break
    return best


def fmt_pct(x: float | None) -> str:
    return "> 30 %" if x is None else f"{x * 100:.0f} %"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=500, help="noise-only pairs judged end to end")
    ap.add_argument("--power-pairs", type=int, default=200, help="pairs per (steps, sigma, slowdown) cell")
    ap.add_argument("--null-pairs", type=int, default=1000, help="noise-only pairs per (steps, sigma) cell")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--quick", action="store_true", help="100 pairs, 60 per power cell, 1000 resamples")
    args = ap.parse_args(argv)
    if args.quick:
        args.pairs, args.power_pairs, args.null_pairs, args.n_boot = 100, 60, 100, 1000
    say: Callable[[str], None] = lambda s: print(s, flush=True)  # noqa: E731 - a benchmark prints
    t0 = time.perf_counter()

    fa = false_alarms_end_to_end(args.pairs, args.seed)
    lo, hi = fa["ci"]
    say(f"### False alarms: {args.pairs} pairs of noise-only runs (sigma 5-12 %, 20-50 steps each, 3 % outliers), threshold 5 %\n")
    say(f"* regression verdicts: **{fa['alarms']} / {fa['pairs']} = {fa['rate']:.1%}** (95 % CI {lo:.1%} - {hi:.1%})")
    say(f"* with the strict rule (whole interval above 5 %): {fa['strict_alarms']} / {fa['pairs']}")
    say("* all verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(fa["verdicts"].items(), key=lambda kv: -kv[1])))
    say("")

    slowdowns = [i / 100 for i in range(0, 31)]
    say(f"### Per cell: false alarms over {args.null_pairs} noise-only pairs; detection over {args.power_pairs} pairs per slowdown (threshold 5 %)\n")
    say("| steps per run | spread (sigma) | false alarms (95 % CI) | detected >= 95 % from | detection at 10 % | strict rule: detected from | strict: detection at 10 % |")
    say("|---:|---:|---:|---:|---:|---:|---:|")
    cell = 0
    for n in (20, 30, 50):
        for sigma in (0.05, 0.08, 0.12):
            cell += 1
            curve = power_curve(n, sigma, slowdowns, args.power_pairs, args.seed + cell, args.n_boot)
            null = power_curve(n, sigma, [0.0], args.null_pairs, args.seed + 100 + cell, args.n_boot)[0.0][0]
            k = round(null * args.null_pairs)
            nlo, nhi = clopper_pearson(k, args.null_pairs)
            say(f"| {n} | {sigma:.0%} | {null:.1%} ({nlo:.1%} - {nhi:.1%}) | {fmt_pct(threshold_of(curve, 0))} | {curve[0.10][0]:.0%} | "
                f"{fmt_pct(threshold_of(curve, 1))} | {curve[0.10][1]:.0%} |")
    say("")
    say(f"### Stress: autocorrelated steps (AR(1), rho = 0.5): {args.null_pairs} noise-only pairs, {args.power_pairs} at 10 %\n")
    say("| steps per run | spread (sigma) | false alarms (95 % CI) | detection at 10 % |")
    say("|---:|---:|---:|---:|")
    for n, sigma in ((30, 0.08), (50, 0.08)):
        cell += 1
        null = power_curve(n, sigma, [0.0], args.null_pairs, args.seed + cell, args.n_boot, rho=0.5)[0.0][0]
        nlo, nhi = clopper_pearson(round(null * args.null_pairs), args.null_pairs)
        curve = power_curve(n, sigma, [0.10], args.power_pairs, args.seed + 200 + cell, args.n_boot, rho=0.5)
        say(f"| {n} | {sigma:.0%} | {null:.1%} ({nlo:.1%} - {nhi:.1%}) | {curve[0.10][0]:.0%} |")
    say("")
    say(f"_{time.perf_counter() - t0:.0f} s; `python benchmarks/compare_noise.py"
        + (" --quick" if args.quick else f" --pairs {args.pairs} --power-pairs {args.power_pairs} --null-pairs {args.null_pairs}") + f"`, seed {args.seed}, "
        f"{args.n_boot} bootstrap resamples, numpy {np.__version__}._")
    return 0


if __name__ == "__main__":
    sys.exit(main())
