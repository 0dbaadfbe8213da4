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

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from perfscope.analyzers.result import BUCKETS
# One colour and label per bucket, the same as the HTML reports' (perfscope.reports.style).
from perfscope.reports.style import (
    BASE_COLOR,
    BUCKET_COLORS,
    BUCKET_LABELS,
    NEW_COLOR,
    TIME_COLORSCALE,
    WAIT_COLORSCALE,
    escape_html,
    fmt_change,
)

_NS_PER_MS = 1e6
_TEMPLATE = "plotly_white"
_MARGIN = dict(l=60, r=20, t=50, b=40)


# plotly shows entities as the literal characters: the reports' escaper makes names plain text.
safe_text = escape_html


def _ms(ns: pd.Series | np.ndarray) -> np.ndarray:
    return np.asarray(ns, dtype="float64") / _NS_PER_MS


def _base_layout(fig: go.Figure, title: str, **kw: object) -> go.Figure:
    kw.setdefault("margin", _MARGIN)
    # Trace names in hover labels are cut (long names go through style.hover_text).
    kw.setdefault("hoverlabel", dict(namelength=40, align="left"))
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


def bucket_bars_by_step(steps: pd.DataFrame, rank: int | None = None, warmup: Sequence[int] = ()) -> go.Figure:
    """Stacked bars of the six buckets per step.

    Args:
        steps: ``Analysis.steps`` (``rank``, ``step``, ``*_ns`` bucket columns).
        rank: one rank, or None for the mean over ranks of each step.
        warmup: warm-up step numbers: where ``steps`` still holds them, their bars are
            hatched and the title names them.

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
    warm = np.isin(x, list(warmup))
    pattern = dict(shape=np.where(warm, "/", "").tolist(), fgcolor="white") if warm.any() else None
    for b in buckets:
        fig.add_trace(go.Bar(
            name=BUCKET_LABELS[b], x=x, y=_ms(per_step[f"{b}_ns"]), marker_color=BUCKET_COLORS[b],
            marker_pattern=pattern, customdata=x,
            hovertemplate=f"step %{{x}}<br>{BUCKET_LABELS[b]}: %{{y:.2f}} ms<extra></extra>",
        ))
    who = "mean over ranks" if rank is None else f"rank {rank}"
    shown = [int(w) for w in x[warm]]
    note = f"; warm-up step{'s' if len(shown) > 1 else ''} {', '.join(map(str, shown))} hatched" if shown else ""
    return _base_layout(
        fig, f"Where each step's time went ({who}{note})", barmode="stack", height=360,
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
            customdata=ranks, hovertemplate=f"%{{x}}<br>{BUCKET_LABELS[b]}: %{{y:.2f}} ms per step<extra></extra>",
        ))
    return _base_layout(
        fig, "Mean step breakdown per rank", barmode="stack", height=360,
        xaxis_title="", yaxis_title="ms per step", legend_title_text="bucket",
    )


def rank_step_heatmap(steps: pd.DataFrame, value: str = "wall_ns", title: str | None = None,
                      warmup: Sequence[int] = ()) -> go.Figure:
    """A rank x step heatmap of one ``Analysis.steps`` column (milliseconds).

    Args:
        steps: ``Analysis.steps``.
        value: the column to show, e.g. ``wall_ns`` or ``sync_ns``.
        title: figure title (default: derived from ``value``).
        warmup: warm-up step numbers: their columns are labelled and left out of the colour
            range, so a 200 ms first step does not wash out the differences between ranks.

    Returns:
        one ``go.Heatmap``: x = step, y = rank, z = ms (gaps where a rank lacks a step);
        darker is longer.
    """
    if steps.empty or value not in steps.columns:
        return empty_figure(f"no {value} per step in this run")
    grid = steps.pivot_table(index="rank", columns="step", values=value, aggfunc="mean").sort_index()
    z = grid.to_numpy(dtype="float64") / _NS_PER_MS
    warm = np.isin(grid.columns.to_numpy(), list(warmup))
    if value == "wall_ns":
        # Step time: the colour range spans min..max of the steady steps so a straggler stands out.
        steady = z[:, ~warm] if (~warm).any() else z
        finite = np.isfinite(steady).any()
        zmin = float(np.nanmin(steady)) if warm.any() and finite else None
        zmax = float(np.nanmax(steady)) if warm.any() and finite else None
    else:
        # Waits run from 0 to at least a tenth of the median step, so microseconds of wait
        # stay light instead of being stretched over the whole colour scale.
        zmin, zmax = 0.0, _wait_zmax(z, steps)
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(s) for s in grid.columns], y=[f"rank {r}" for r in grid.index],
        colorscale=TIME_COLORSCALE if value == "wall_ns" else WAIT_COLORSCALE, colorbar=dict(title="ms"),
        xgap=1, ygap=1, zmin=zmin, zmax=zmax, hovertemplate="%{y}, step %{x}: %{z:.2f} ms<extra></extra>",
    ))
    name = title or {"wall_ns": "Step time per rank", "sync_ns": "Sync / wait time per rank"}.get(value, value)
    fig = _base_layout(
        fig, f"{name} (click a cell to open its timeline)", height=min(900, max(260, 60 + 28 * len(grid.index))),
        xaxis_title="step", yaxis_title="", yaxis_autorange="reversed", xaxis_type="category",
    )
    mark_warmup_columns(fig, [str(s) for s in grid.columns[warm]])
    return fig


def mark_warmup_columns(fig: go.Figure, columns: Sequence[str]) -> None:
    """Label the heatmap columns ``columns`` (x categories) "warm-up" above the plot."""
    for col in columns:
        fig.add_annotation(x=col, y=1.0, yref="paper", yanchor="bottom", text="warm-up", showarrow=False,
                           font=dict(size=10, color="#667085"))


def _wait_zmax(z: np.ndarray, steps: pd.DataFrame) -> float:
    top = float(np.nanmax(z)) if np.isfinite(z).any() else 0.0
    floor = 0.1 * float(steps["wall_ns"].median()) / _NS_PER_MS if "wall_ns" in steps.columns else 0.0
    return max(top, floor, 1e-9)


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
    text = [fmt_change(d * _NS_PER_MS, a * _NS_PER_MS if a > 0 else None) for d, a in zip(delta, med_a)]
    fig = go.Figure([
        go.Bar(name=safe_text(label_a), x=labels, y=med_a, marker_color=BASE_COLOR,
               hovertemplate="%{x}: %{y:.2f} ms per step<extra>" + safe_text(label_a, 40) + "</extra>"),
        go.Bar(name=safe_text(label_b), x=labels, y=med_b, marker_color=NEW_COLOR, text=text, textposition="outside",
               hovertemplate="%{x}: %{y:.2f} ms per step<extra>" + safe_text(label_b, 40) + "</extra>"),
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
    "rank_step_heatmap", "mark_warmup_columns", "compare_buckets",
    "compare_step_deltas",
]
