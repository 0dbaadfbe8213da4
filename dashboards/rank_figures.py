"""Figures of the distributed view (Ranks and Collectives tabs): pure functions from the
tables of :mod:`perfscope.analyzers.distributed` and ``Analysis`` to ``go.Figure``.

Like TensorBoard's profiler plugin's Distributed view: per rank, computation / hidden and
exposed communication / waiting / other; collectives' bus bandwidth against message size;
arrival skew over time; the straggler ranked by what it costs the others, in ms.  Colours,
labels and units come from :mod:`perfscope.reports.style`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from perfscope.dashboards.figures import _base_layout, empty_figure, mark_warmup_columns
from perfscope.reports.style import (
    COMM_COLORS,
    COMM_LABELS,
    OTHER_RANK_COLOR,
    STRAGGLER_COLOR,
    WAIT_COLORSCALE,
    fmt_duration,
    fmt_share,
)

_NS_PER_MS = 1e6
# Other ranks' points in the skew plot: muted, distinct from each other and from the straggler.
# Points per trace at most (plotly's SVG scatter; its WebGL one compiles code at run time,
# which the page's Content-Security-Policy forbids): longer series are thinned evenly.
MAX_POINTS = 5000
_RANK_COLORS = ("#0072B2", "#009E73", "#56B4E9", "#E69F00", "#999999", "#000000", "#F0E442", "#CC79A7")


def comm_overlap_bars(overlap: pd.DataFrame, straggler: int | None = None) -> go.Figure:
    """Per rank, the mean step split into computation, hidden and exposed communication,
    waiting and other time (TensorBoard's computation / overlapping / communication / other).

    Args:
        overlap: :func:`perfscope.analyzers.distributed.comm_overlap`.
        straggler: the rank to mark (its tick label says so), or None.

    Returns:
        stacked bars, x = ``rank N``, y = ms per step;
        ``customdata`` holds the rank so a click opens it on the Timeline.
    """
    if overlap.empty:
        return empty_figure("no steps to split per rank")
    ranks = overlap["rank"].to_numpy(dtype="int64")
    labels = [f"rank {r}" for r in ranks]
    fig = go.Figure()
    for part in ("compute", "hidden_comm", "exposed_comm", "wait", "other"):
        y = overlap[f"{part}_ns"].to_numpy(dtype="float64") / _NS_PER_MS
        share = overlap[f"{part}_ns"].to_numpy(dtype="float64") / overlap["wall_ns"].where(
            overlap["wall_ns"] > 0).to_numpy(dtype="float64")
        fig.add_trace(go.Bar(
            name=COMM_LABELS[part], x=labels, y=y, marker_color=COMM_COLORS[part],
            customdata=np.stack([ranks, 100 * np.nan_to_num(share)], axis=1),
            hovertemplate=f"%{{x}}: {COMM_LABELS[part]} %{{y:.2f}} ms per step (%{{customdata[1]:.1f}}%)<extra></extra>",
        ))
    title = "Per rank: computation, communication (hidden / exposed), waiting, other (mean step)"
    fig = _base_layout(fig, title, barmode="stack", height=360, yaxis_title="ms per step",
                       legend=dict(orientation="h", y=-0.15), xaxis_type="category")
    if straggler is not None and straggler in set(ranks.tolist()):
        fig.add_annotation(x=f"rank {straggler}", y=1.0, yref="paper", yanchor="bottom", text="straggler",
                           showarrow=False, font=dict(color=STRAGGLER_COLOR))
    return fig


def straggler_cost_bar(stragglers: pd.DataFrame, top: int = 30) -> go.Figure:
    """Ranks ranked by how long the other ranks waited for them (cost to others, ms).

    A rank 34 ms late at every collective costs far more than one 2 ms late at as many,
    although both arrive last as often; so the cost, not the share of collectives where a
    rank is last, orders the ranking (the share and mean lateness are in the hover).

    Args:
        stragglers: ``Analysis.stragglers`` (``rank``, ``ops``, ``last_count``,
            ``last_share``, ``mean_lateness_ns``, ``cost_to_others_ns``).

    Returns:
        one horizontal bar trace, worst rank on top (last in ``y``), x = ms; the worst
        rank, when it cost anything, in the straggler colour and the others muted.
    """
    if stragglers.empty:
        return empty_figure("no collective was matched across ranks, so no rank can be called late")
    df = stragglers.sort_values(["cost_to_others_ns", "last_count"], ascending=True, kind="stable").tail(top)
    cost = df["cost_to_others_ns"].to_numpy(dtype="float64")
    worst = len(df) - 1 if cost.size and cost[-1] > 0 else -1
    colors = [STRAGGLER_COLOR if i == worst else OTHER_RANK_COLOR for i in range(len(df))]
    text = [fmt_duration(c) if c > 0 else "" for c in cost]
    hover = [f"rank {int(r.rank)}: others waited {fmt_duration(r.cost_to_others_ns)} for it<br>"
             f"arrived last at {int(r.last_count)} of {int(r.ops)} collectives ({fmt_share(r.last_share)}), "
             f"{fmt_duration(r.mean_lateness_ns)} late on average" for r in df.itertuples()]
    fig = go.Figure(go.Bar(
        orientation="h", x=cost / _NS_PER_MS, y=[f"rank {r}" for r in df["rank"]], marker_color=colors,
        text=text, textposition="auto", customdata=df["rank"].to_numpy(), hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>",
    ))
    return _base_layout(
        fig, "Straggler ranking: how long the other ranks waited for each rank (click a bar for its timeline)",
        height=max(240, 60 + 26 * len(df)), xaxis_title="time the other ranks waited for this rank (ms, all steps)",
        yaxis_type="category",
    )


def caused_wait_heatmap(caused: pd.DataFrame, warmup: tuple[int, ...] | list[int] = ()) -> go.Figure:
    """A rank x step heatmap of how long the other ranks waited for each rank (ms).

    The darkest row is the rank the others waited for longest: the straggler, for the right
    reason (a late rank's own sync time is the shortest, so a heatmap of sync time would
    make it the odd row out at the wrong end of the scale).

    Args:
        caused: :func:`perfscope.analyzers.distributed.caused_wait`.
        warmup: warm-up step numbers (labelled above their columns).

    Returns:
        one ``go.Heatmap``: x = step, y = ``rank N``, z = ms, white for no wait.
    """
    if caused.empty:
        return empty_figure("no collective was matched across ranks: who waited for whom is unknown")
    grid = caused.pivot_table(index="rank", columns="step", values="caused_wait_ns", aggfunc="sum").sort_index()
    z = grid.to_numpy(dtype="float64") / _NS_PER_MS
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(s) for s in grid.columns], y=[f"rank {r}" for r in grid.index],
        colorscale=WAIT_COLORSCALE, zmin=0.0, zmax=max(float(np.nanmax(z)) if np.isfinite(z).any() else 0.0, 1e-6),
        colorbar=dict(title="ms"), xgap=1, ygap=1,
        hovertemplate="others waited %{z:.2f} ms for %{y} in step %{x}<extra></extra>",
    ))
    fig = _base_layout(
        fig, "Time the other ranks waited for each rank (darkest: the straggler; click a cell for its timeline)",
        height=min(900, max(260, 60 + 28 * len(grid.index))), xaxis_title="step", yaxis_autorange="reversed",
        xaxis_type="category",
    )
    mark_warmup_columns(fig, [str(s) for s in grid.columns if s in set(warmup)])
    return fig


def _thin(frame: pd.DataFrame) -> pd.DataFrame:
    """At most :data:`MAX_POINTS` rows of ``frame``, evenly spaced (all when fewer)."""
    return frame if len(frame) <= MAX_POINTS else frame.iloc[np.linspace(0, len(frame) - 1, MAX_POINTS).astype(int)]


def _rank_color(rank: int, i: int, straggler: int | None) -> str:
    return STRAGGLER_COLOR if rank == straggler else _RANK_COLORS[i % len(_RANK_COLORS)]


def arrival_skew_over_time(coll: pd.DataFrame, straggler: int | None = None) -> go.Figure:
    """How late each rank arrives at each collective over the run (ms after the first
    rank), one series per rank; operations seen on one rank only have an unknown skew and
    are left out (the title counts them), never drawn as 0.

    Args:
        coll: ``Analysis.collectives`` (``rank``, ``start_ns``, ``arrival_skew_ns``,
            ``matched_ranks``, ``func``).
        straggler: the rank drawn in the straggler colour.

    Returns:
        one ``go.Scatter`` per rank (at most :data:`MAX_POINTS` points each): x = seconds
        since the run's first collective, y = arrival skew in ms.
    """
    if coll.empty:
        return empty_figure("no collectives in this run")
    known = (coll["matched_ranks"] > 1).to_numpy(bool) if "matched_ranks" in coll.columns else np.ones(len(coll), bool)
    unknown = int((~known).sum())
    if not known.any():
        return empty_figure(f"arrival skew unknown: none of the {len(coll):,} collectives was matched across ranks "
                            "(each was seen on one rank only)")
    c = coll[known]
    t0 = int(c["start_ns"].min())
    fig = go.Figure()
    for i, (rank, g) in enumerate(c.groupby("rank", sort=True)):
        g = _thin(g.sort_values("start_ns"))
        fig.add_trace(go.Scatter(
            x=(g["start_ns"].to_numpy(dtype="int64") - t0) / 1e9, y=g["arrival_skew_ns"].to_numpy(dtype="float64") / 1e6,
            mode="markers", name=f"rank {int(rank)}" + (" (straggler)" if rank == straggler else ""),
            marker=dict(color=_rank_color(int(rank), i, straggler), size=9 if rank == straggler else 6),
            hovertemplate=f"rank {int(rank)} at %{{x:.3f}} s: %{{y:.2f}} ms after the first rank<extra></extra>",
        ))
    note = f" ({unknown:,} seen on one rank only: skew unknown, not drawn)" if unknown else ""
    return _base_layout(fig, f"Arrival skew at each collective over time{note}", height=340,
                        xaxis_title="time since the first collective (s)", yaxis_title="arrived after the first rank (ms)",
                        yaxis_rangemode="tozero")


def busbw_by_size(coll: pd.DataFrame, sizes: pd.DataFrame) -> go.Figure:
    """Bus bandwidth against message size, per operation (nccl-tests' busbw, GB/s).

    Args:
        coll: ``Analysis.collectives`` (``func``, ``bytes``, ``busbw_gbps``, ``rank``).
        sizes: :func:`perfscope.analyzers.distributed.collective_sizes` (the medians).

    Returns:
        per operation a ``go.Scatter`` of the ranks' operations (faint; at most
        :data:`MAX_POINTS`) and a line of the median per size; x = message size (bytes, log
        axis), y = GB/s.
    """
    if coll.empty:
        return empty_figure("no collectives in this run")
    b = pd.to_numeric(coll["bytes"], errors="coerce").to_numpy(dtype="float64")
    bw = pd.to_numeric(coll.get("busbw_gbps"), errors="coerce").to_numpy(dtype="float64") \
        if "busbw_gbps" in coll.columns else np.full(len(coll), np.nan)
    ok = np.isfinite(b) & np.isfinite(bw) & (b > 0)
    if not ok.any():
        return empty_figure("message sizes unknown (collectives taken from kernel names): no bandwidth to plot")
    fig = go.Figure()
    funcs = coll["func"].astype(str).to_numpy()
    for i, func in enumerate(sorted(set(funcs[ok]))):
        m = np.flatnonzero(ok & (funcs == func))
        m = m if m.size <= MAX_POINTS else m[np.linspace(0, m.size - 1, MAX_POINTS).astype(int)]
        color = _RANK_COLORS[i % len(_RANK_COLORS)]
        fig.add_trace(go.Scatter(
            x=b[m], y=bw[m], mode="markers", name=f"{func} (each call)", legendgroup=func,
            marker=dict(color=color, size=5, opacity=0.35),
            hovertemplate=f"{func}, %{{x:.3s}}B: %{{y:.2f}} GB/s<extra></extra>",
        ))
        med = sizes[(sizes["func"].astype(str) == func) & sizes["bytes"].notna()].sort_values("bytes")
        if len(med):
            fig.add_trace(go.Scatter(
                x=med["bytes"].astype("float64"), y=med["busbw_gbps"], mode="lines+markers", name=f"{func} (median)",
                legendgroup=func, line=dict(color=color, width=2), marker=dict(size=9),
                hovertemplate=f"{func}, %{{x:.3s}}B: median %{{y:.2f}} GB/s<extra></extra>",
            ))
    return _base_layout(fig, "Bus bandwidth against message size (nccl-tests busbw)", height=360,
                        xaxis_title="message size (bytes)", yaxis_title="bus bandwidth (GB/s)", xaxis_type="log",
                        yaxis_rangemode="tozero")


__all__ = ["arrival_skew_over_time", "busbw_by_size", "caused_wait_heatmap", "comm_overlap_bars", "straggler_cost_bar"]
