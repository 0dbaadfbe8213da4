"""Plotly figures of the dashboard: pure functions, analyzer tables in, ``go.Figure`` out.

Nothing here reads a run, talks to Dash or keeps state, so each function is tested by
calling it on a small DataFrame.  Figures stay light: one ``go.Bar`` trace per bucket,
``go.Heatmap`` for rank x step grids, never one trace per event.  The Timeline's figure is
in :mod:`perfscope.dashboards.timeline_figure`.

Every name that comes from a trace (kernel, marker, host span, collective) is untrusted.
Plotly renders a small HTML subset in tick labels and hover text, so such names go through
:func:`safe_text` (HTML-escaped; plotly shows entities as the literal characters).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from perfscope.analyzers.result import BUCKETS
# One colour and label per bucket, the same as the HTML reports' (perfscope.reports.style).
from perfscope.reports.style import BUCKET_COLORS, BUCKET_LABELS, escape_html

_NS_PER_MS = 1e6
_TEMPLATE = "plotly_white"
_MARGIN = dict(l=60, r=20, t=50, b=40)


# plotly shows entities as the literal characters: the reports' escaper makes names plain text.
safe_text = escape_html


def _ms(ns: pd.Series | np.ndarray) -> np.ndarray:
    return np.asarray(ns, dtype="float64") / _NS_PER_MS


def _base_layout(fig: go.Figure, title: str, **kw: object) -> go.Figure:
    kw.setdefault("margin", _MARGIN)
    fig.update_layout(title=dict(text=title, x=0.01), template=_TEMPLATE, **kw)
    return fig


def empty_figure(message: str) -> go.Figure:
    """Return a blank figure that shows ``message`` (for missing data)."""
    fig = go.Figure()
    fig.add_annotation(text=safe_text(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _base_layout(fig, "", height=250)


def _bucket_frame(steps: pd.DataFrame) -> list[str]:
    """The bucket columns present in ``steps`` (``compute_ns`` ... ``host_ns``), in priority order."""
    return [b for b in BUCKETS if f"{b}_ns" in steps.columns]


def bucket_bars_by_step(steps: pd.DataFrame, rank: int | None = None) -> go.Figure:
    """Stacked bars of the six buckets per step.

    Args:
        steps: ``Analysis.steps`` (``rank``, ``step``, ``*_ns`` bucket columns).
        rank: one rank, or None for the mean over ranks of each step.

    Returns:
        one ``go.Bar`` per bucket, x = step, y = milliseconds; ``customdata`` holds the step
        so a click selects it.
    """
    if steps.empty:
        return empty_figure("no steps found in this run")
    df = steps if rank is None else steps[steps["rank"] == rank]
    buckets = _bucket_frame(df)
    per_step = df.groupby("step", sort=True)[[f"{b}_ns" for b in buckets]].mean()
    fig = go.Figure()
    x = per_step.index.to_numpy()
    for b in buckets:
        fig.add_trace(go.Bar(
            name=BUCKET_LABELS[b], x=x, y=_ms(per_step[f"{b}_ns"]), marker_color=BUCKET_COLORS[b],
            customdata=x, hovertemplate=f"step %{{x}}<br>{BUCKET_LABELS[b]}: %{{y:.3f}} ms<extra></extra>",
        ))
    who = "mean over ranks" if rank is None else f"rank {rank}"
    return _base_layout(
        fig, f"Where each step's time went ({who})", barmode="stack", height=360,
        xaxis_title="step", yaxis_title="ms", legend_title_text="bucket", xaxis_type="category",
    )


def bucket_bars_by_rank(steps: pd.DataFrame) -> go.Figure:
    """Stacked bars of the six buckets per rank (mean per step).

    Returns:
        one ``go.Bar`` per bucket, x = ``rank N``, y = milliseconds per step; ``customdata``
        holds the rank so a click selects it.
    """
    if steps.empty:
        return empty_figure("no steps found in this run")
    buckets = _bucket_frame(steps)
    per_rank = steps.groupby("rank", sort=True)[[f"{b}_ns" for b in buckets]].mean()
    ranks = per_rank.index.to_numpy()
    labels = [f"rank {r}" for r in ranks]
    fig = go.Figure()
    for b in buckets:
        fig.add_trace(go.Bar(
            name=BUCKET_LABELS[b], x=labels, y=_ms(per_rank[f"{b}_ns"]), marker_color=BUCKET_COLORS[b],
            customdata=ranks, hovertemplate=f"%{{x}}<br>{BUCKET_LABELS[b]}: %{{y:.3f}} ms/step<extra></extra>",
        ))
    return _base_layout(
        fig, "Mean step breakdown per rank", barmode="stack", height=360,
        xaxis_title="", yaxis_title="ms per step", legend_title_text="bucket",
    )


def rank_step_heatmap(steps: pd.DataFrame, value: str = "wall_ns", title: str | None = None) -> go.Figure:
    """A rank x step heatmap of one ``Analysis.steps`` column (milliseconds).

    Args:
        steps: ``Analysis.steps``.
        value: the column to show, e.g. ``wall_ns`` or ``sync_ns``.
        title: figure title (default: derived from ``value``).

    Returns:
        one ``go.Heatmap``: x = step, y = rank, z = ms (gaps where a rank lacks a step).
    """
    if steps.empty or value not in steps.columns:
        return empty_figure(f"no {value} per step in this run")
    grid = steps.pivot_table(index="rank", columns="step", values=value, aggfunc="mean").sort_index()
    z = grid.to_numpy(dtype="float64") / _NS_PER_MS
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(s) for s in grid.columns], y=[f"rank {r}" for r in grid.index],
        colorscale="Viridis", colorbar=dict(title="ms"), xgap=1, ygap=1,
        # Step time: the colour range spans min..max so a straggler stands out.  Other columns
        # (waits) run from 0 to at least a tenth of the median step, so microseconds of wait
        # stay dark instead of being stretched over the whole colour scale.
        zmin=None if value == "wall_ns" else 0.0,
        zmax=None if value == "wall_ns" else _wait_zmax(z, steps),
        hovertemplate="%{y}, step %{x}: %{z:.3f} ms<extra></extra>",
    ))
    name = title or {"wall_ns": "Step time per rank", "sync_ns": "Sync / wait time per rank"}.get(value, value)
    return _base_layout(
        fig, f"{name} (click a cell to open its timeline)", height=min(900, max(260, 60 + 28 * len(grid.index))),
        xaxis_title="step", yaxis_title="", yaxis_autorange="reversed", xaxis_type="category",
    )


def _wait_zmax(z: np.ndarray, steps: pd.DataFrame) -> float:
    top = float(np.nanmax(z)) if np.isfinite(z).any() else 0.0
    floor = 0.1 * float(steps["wall_ns"].median()) / _NS_PER_MS if "wall_ns" in steps.columns else 0.0
    return max(top, floor, 1e-9)


def straggler_bar(stragglers: pd.DataFrame, top: int = 30) -> go.Figure:
    """Ranking of ranks by how often they arrived last at a collective (the ``top`` worst).

    Args:
        stragglers: ``Analysis.stragglers`` (``rank``, ``last_count``, ``last_share``,
            ``mean_lateness_ns``, ``cost_to_others_ns``).

    Returns:
        horizontal bars, worst rank on top, x = share of collectives where it was last (%).
    """
    if stragglers.empty:
        return empty_figure("no cross-rank collectives to rank stragglers by")
    df = stragglers.sort_values(["last_share", "cost_to_others_ns"], ascending=[True, True]).tail(top)
    lateness = _ms(df["mean_lateness_ns"]) if "mean_lateness_ns" in df else np.zeros(len(df))
    cost = _ms(df["cost_to_others_ns"]) if "cost_to_others_ns" in df else np.zeros(len(df))
    fig = go.Figure(go.Bar(
        orientation="h", x=100.0 * df["last_share"].to_numpy(dtype="float64"), y=[f"rank {r}" for r in df["rank"]],
        marker_color=BUCKET_COLORS["sync"], customdata=np.stack([df["rank"].to_numpy(), lateness, cost], axis=1),
        hovertemplate=("rank %{customdata[0]}: last in %{x:.1f}% of collectives<br>"
                       "mean lateness %{customdata[1]:.3f} ms<br>cost to others %{customdata[2]:.3f} ms<extra></extra>"),
    ))
    return _base_layout(
        fig, "Straggler ranking (share of collectives where the rank arrived last)",
        height=max(240, 60 + 26 * len(df)), xaxis_title="% of collectives last", xaxis_range=[0, 100],
    )


# -- compare -------------------------------------------------------------------------------

def compare_buckets(steps_a: pd.DataFrame, steps_b: pd.DataFrame, label_a: str, label_b: str) -> go.Figure:
    """Median per-step time of each bucket in two runs, side by side, with the change.

    Args:
        steps_a, steps_b: ``Analysis.steps`` of the base and the new run.
        label_a, label_b: names shown for the runs (escaped here).

    Returns:
        grouped bars (x = bucket, y = ms per step, median over steps of the mean over ranks);
        the text above the new run's bars is the change in ms and percent.
    """
    if steps_a.empty or steps_b.empty:
        return empty_figure("both runs need steps to compare")
    med_a, med_b = _bucket_medians(steps_a), _bucket_medians(steps_b)
    labels = [BUCKET_LABELS[b] for b in BUCKETS]
    delta = med_b - med_a
    pct = np.where(med_a > 0, 100.0 * delta / np.where(med_a > 0, med_a, 1.0), np.nan)
    text = [f"{d:+.2f} ms" + ("" if np.isnan(p) else f" ({p:+.0f}%)") for d, p in zip(delta, pct)]
    fig = go.Figure([
        go.Bar(name=safe_text(label_a), x=labels, y=med_a, marker_color="#9ecae1",
               hovertemplate="%{x}: %{y:.3f} ms/step<extra>" + safe_text(label_a) + "</extra>"),
        go.Bar(name=safe_text(label_b), x=labels, y=med_b, marker_color="#08519c", text=text, textposition="outside",
               hovertemplate="%{x}: %{y:.3f} ms/step<extra>" + safe_text(label_b) + "</extra>"),
    ])
    return _base_layout(fig, "Median time per step by bucket (change: new - base)", barmode="group",
                        height=380, yaxis_title="ms per step")


def compare_step_deltas(steps_a: pd.DataFrame, steps_b: pd.DataFrame) -> go.Figure:
    """Per-step bucket deltas (new - base), steps matched by position (1st with 1st, ...).

    Returns:
        relative-stacked bars, one trace per bucket, x = step position, y = ms (positive:
        the new run spends more time in that bucket on that step).
    """
    if steps_a.empty or steps_b.empty:
        return empty_figure("both runs need steps to compare")
    cols = [f"{b}_ns" for b in BUCKETS]
    a = steps_a.groupby("step", sort=True)[cols].mean().reset_index(drop=True)
    b = steps_b.groupby("step", sort=True)[cols].mean().reset_index(drop=True)
    n = min(len(a), len(b))
    d = (b.iloc[:n] - a.iloc[:n]) / _NS_PER_MS
    fig = go.Figure()
    for bucket in BUCKETS:
        fig.add_trace(go.Bar(name=BUCKET_LABELS[bucket], x=np.arange(n), y=d[f"{bucket}_ns"],
                             marker_color=BUCKET_COLORS[bucket],
                             hovertemplate=f"step #%{{x}}<br>{BUCKET_LABELS[bucket]}: %{{y:+.3f}} ms<extra></extra>"))
    return _base_layout(fig, "Bucket change per step (new - base, steps matched in order)", barmode="relative",
                        height=360, xaxis_title="step position", yaxis_title="ms")


def _bucket_medians(steps: pd.DataFrame) -> np.ndarray:
    """Median over steps of the mean over ranks, per bucket (ms), in BUCKETS order."""
    cols = [f"{b}_ns" for b in BUCKETS]
    per_step = steps.groupby("step")[[c for c in cols if c in steps.columns]].mean().reindex(columns=cols).fillna(0)
    return per_step.median().to_numpy(dtype="float64") / _NS_PER_MS


__all__ = [
    "BUCKET_COLORS", "BUCKET_LABELS", "safe_text", "empty_figure", "bucket_bars_by_step", "bucket_bars_by_rank",
    "rank_step_heatmap", "straggler_bar", "compare_buckets",
    "compare_step_deltas",
]
