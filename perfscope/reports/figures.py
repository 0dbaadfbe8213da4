"""Plotly figures of an analysis, as pure functions (Analysis tables in, Figure out).

Every name that comes from a trace (kernel names, ranks' host names) is untrusted: it is
HTML-escaped (:func:`~perfscope.reports.style.escape_html`) before it reaches a figure,
because plotly renders a subset of HTML in labels.  Colours come from
:mod:`perfscope.reports.style`, as the dashboard's do.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS
from perfscope.reports.style import (
    BUCKET_COLORS,
    BUCKET_LABELS,
    IDLE_COLOR,
    escape_html,
)


def _layout(fig: go.Figure, title: str, y_title: str) -> go.Figure:
    fig.update_layout(
        title=title, barmode="stack", template="plotly_white", yaxis_title=y_title,
        legend_title="bucket", margin={"l": 60, "r": 20, "t": 50, "b": 50}, height=380,
    )
    return fig


def step_buckets_figure(steps: pd.DataFrame) -> go.Figure:
    """Stacked bars: the six buckets (ms) of every step, x = ``rank/step``."""
    fig = go.Figure()
    if steps is None or len(steps) == 0:
        return _layout(fig, "Step time by bucket (no steps)", "ms")
    x = [f"r{int(r)}/s{int(s)}" for r, s in zip(steps["rank"], steps["step"])]
    for b, col in zip(BUCKETS, BUCKET_COLUMNS):
        fig.add_bar(name=BUCKET_LABELS[b], x=x, y=steps[col] / 1e6, marker_color=BUCKET_COLORS[b],
                    hovertemplate=f"{BUCKET_LABELS[b]}: %{{y:.3f}} ms<extra>%{{x}}</extra>")
    fig = _layout(fig, "Step time by bucket", "ms")
    fig.update_xaxes(title="rank / step", type="category")
    return fig


def rank_shares_figure(summary: pd.DataFrame) -> go.Figure:
    """Stacked bars: each rank's median step split into bucket shares (%)."""
    fig = go.Figure()
    if summary is None or len(summary) == 0:
        return _layout(fig, "Median step by rank (no steps)", "% of step")
    x = [f"rank {int(r)}" for r in summary["rank"]]
    wall = summary["wall_ns"].where(summary["wall_ns"] > 0)
    for b, col in zip(BUCKETS, BUCKET_COLUMNS):
        fig.add_bar(name=BUCKET_LABELS[b], x=x, y=(100 * summary[col] / wall).fillna(0), marker_color=BUCKET_COLORS[b],
                    hovertemplate=f"{BUCKET_LABELS[b]}: %{{y:.1f}}%<extra>%{{x}}</extra>")
    fig = _layout(fig, "Median step by rank", "% of step")
    fig.update_xaxes(type="category")
    return fig


def gpu_summary_figure(gpu_summary: pd.DataFrame) -> go.Figure:
    """Stacked bars per rank: HTA-style idle / compute / non-compute over the GPU span (ms)."""
    fig = go.Figure()
    if gpu_summary is None or len(gpu_summary) == 0:
        return _layout(fig, "GPU time over the traced span (no GPU events)", "ms")
    x = [f"rank {int(r)}" for r in gpu_summary["rank"]]
    for name, col, color in (("compute", "compute_ns", BUCKET_COLORS["compute"]),
                             ("non-compute", "non_compute_ns", BUCKET_COLORS["network"]),
                             ("idle", "idle_ns", IDLE_COLOR)):
        fig.add_bar(name=name, x=x, y=gpu_summary[col] / 1e6, marker_color=color,
                    hovertemplate=f"{name}: %{{y:.3f}} ms<extra>%{{x}}</extra>")
    fig = _layout(fig, "GPU time over the traced span (HTA temporal breakdown)", "ms")
    fig.update_xaxes(type="category")
    return fig


def top_kernels_figure(kernels: pd.DataFrame, n: int = 15) -> go.Figure:
    """Horizontal bars: the ``n`` kernels with the most total time (all ranks summed, ms)."""
    fig = go.Figure()
    if kernels is None or len(kernels) == 0:
        return _layout(fig, "Top kernels (none)", "")
    k = kernels.groupby(["name", "kind"], sort=False, observed=True)["total_ns"].sum().reset_index()
    k = k.sort_values("total_ns", ascending=False).head(n).iloc[::-1]
    labels = [escape_html(nm, 70) for nm in k["name"]]
    colors = [BUCKET_COLORS["network"] if kd == "communication" else BUCKET_COLORS["pcie"] if kd == "memory" else BUCKET_COLORS["compute"] for kd in k["kind"]]
    fig.add_bar(x=k["total_ns"] / 1e6, y=labels, orientation="h", marker_color=colors,
                hovertemplate="%{y}: %{x:.3f} ms<extra></extra>")
    fig.update_layout(title="Top kernels by total time", template="plotly_white", xaxis_title="ms",
                      height=max(300, 24 * len(k) + 100), margin={"l": 20, "r": 20, "t": 50, "b": 50})
    fig.update_yaxes(automargin=True)
    return fig


def arrival_skew_figure(collectives: pd.DataFrame) -> go.Figure:
    """Scatter: each matched collective's arrival skew (ms) per rank over time."""
    fig = go.Figure()
    if collectives is None or len(collectives) == 0 or not (collectives["matched_ranks"] > 1).any():
        fig.update_layout(title="Collective arrival skew (single rank or no collectives)", template="plotly_white", height=300)
        return fig
    c = collectives[collectives["matched_ranks"] > 1]
    t0 = c["start_ns"].min()
    for r, g in c.groupby("rank", sort=True):
        fig.add_scatter(x=(g["start_ns"] - t0) / 1e6, y=g["arrival_skew_ns"] / 1e6, mode="markers", name=f"rank {int(r)}",
                        hovertemplate="t=%{x:.1f} ms, late by %{y:.3f} ms<extra></extra>")
    fig.update_layout(title="Collective arrival skew (how late each rank arrives)", template="plotly_white",
                      xaxis_title="time since first collective (ms)", yaxis_title="lateness (ms)", height=360)
    return fig


__all__ = [
    "arrival_skew_figure",
    "gpu_summary_figure",
    "rank_shares_figure",
    "step_buckets_figure",
    "top_kernels_figure",
]
