"""Plotly figures of the dashboard: pure functions, analyzer tables in, ``go.Figure`` out.

Nothing here reads a run, talks to Dash or keeps state, so each function is tested by
calling it on a small DataFrame.  Figures stay light: one ``go.Bar`` trace per bucket or
per timeline lane, ``go.Heatmap`` for rank x step grids, never one trace per event.

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

# Timeline lanes take the colour of the bucket their events feed.
LANE_COLORS: dict[str, str] = {
    "host": BUCKET_COLORS["host"],
    "marker": "#56B4E9",
    "stream": BUCKET_COLORS["compute"],
    "cop": BUCKET_COLORS["pcie"],
    "collective": BUCKET_COLORS["network"],
    "sync": BUCKET_COLORS["sync"],
}
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


# -- timeline ------------------------------------------------------------------------------

def aggregate_events(
    start_ns: np.ndarray,
    dur_ns: np.ndarray,
    names: Sequence[object] | np.ndarray,
    t0_ns: int,
    t1_ns: int,
    width_px: int = 1200,
    max_boxes: int = 2000,
) -> pd.DataFrame:
    """Reduce one lane's events to at most ``max_boxes + width_px`` boxes for drawing.

    Events at least one pixel wide (``(t1 - t0) / width_px`` ns) are kept as they are (the
    ``max_boxes`` longest if there are more); the rest are merged per pixel column into one
    box labelled ``k events``, spanning the first start to the last end of the merged events.
    So a step with a million kernels still sends the browser a few thousand rectangles.

    Returns:
        DataFrame with ``start_ns``, ``dur_ns`` (int64 ns), ``label`` (str, the event name or
        ``k events (e.g. NAME)``; raw, not escaped), ``count`` (events in the box) and
        ``busy`` (0..1: summed event time over the box's span, at least one pixel, so a box
        of sparse tiny kernels is not drawn as solid work), sorted by ``start_ns``.
    """
    start = np.asarray(start_ns, dtype="int64")
    dur = np.maximum(np.asarray(dur_ns, dtype="int64"), 0)
    labels = np.asarray(names, dtype=object)
    if start.size == 0:
        return pd.DataFrame({"start_ns": np.zeros(0, "int64"), "dur_ns": np.zeros(0, "int64"),
                             "label": np.zeros(0, object), "count": np.zeros(0, "int64"),
                             "busy": np.zeros(0, "float64")})
    px_ns = max((int(t1_ns) - int(t0_ns)) / max(width_px, 1), 1.0)
    big = dur >= px_ns
    if big.sum() > max_boxes:
        # Keep the longest ones whole; the rest join the per-pixel boxes.
        cut = np.partition(dur[big], -max_boxes)[-max_boxes]
        big = dur >= max(cut, px_ns)
        if big.sum() > max_boxes:
            idx = np.flatnonzero(big)
            big[idx[np.argsort(dur[idx], kind="stable")[:-max_boxes]]] = False
    kept = pd.DataFrame({"start_ns": start[big], "dur_ns": dur[big], "label": labels[big], "count": 1, "busy": 1.0})
    small = ~big
    if small.any():
        s, d, n = start[small], dur[small], labels[small]
        bins = np.floor((s - int(t0_ns)) / px_ns).astype("int64")
        order = np.argsort(bins, kind="stable")
        bins, s, e, n = bins[order], s[order], (s + d)[order], n[order]
        # One box per occupied pixel column: reduceat over the runs of equal bins.
        _, first_idx, counts = np.unique(bins, return_index=True, return_counts=True)
        box_start = np.minimum.reduceat(s, first_idx)
        box_end = np.maximum.reduceat(e, first_idx)
        busy = np.add.reduceat(d[order], first_idx) / np.maximum(box_end - box_start, px_ns)
        first = n[first_idx]
        label = np.array([str(f) if c == 1 else f"{c} events (e.g. {f})" for f, c in zip(first, counts)], dtype=object)
        merged = pd.DataFrame({"start_ns": box_start, "dur_ns": box_end - box_start, "label": label, "count": counts,
                               "busy": np.minimum(busy, 1.0)})
        kept = pd.concat([kept, merged], ignore_index=True) if len(kept) else merged
    return kept.sort_values("start_ns", kind="stable").reset_index(drop=True).astype(
        {"start_ns": "int64", "dur_ns": "int64", "count": "int64"})


def _lane_color(lane: str) -> str:
    for prefix, color in LANE_COLORS.items():
        if lane.startswith(prefix):
            return color
    return "#444444"


def timeline_figure(
    events: pd.DataFrame,
    t0_ns: int,
    t1_ns: int,
    title: str = "",
    width_px: int = 1200,
    max_boxes: int = 2000,
    origin_ns: int | None = None,
) -> go.Figure:
    """Timeline lanes of one step of one rank.

    Args:
        events: one row per event: ``lane`` (e.g. ``host: dataloader_wait``, ``markers``,
            ``stream 7``, ``copies``, ``collectives``, ``sync``), ``start_ns``, ``dur_ns``,
            ``name`` (untrusted text).  Lanes are drawn in order of first appearance.
        t0_ns, t1_ns: the window shown (the step, or the part zoomed into).
        width_px, max_boxes: passed to :func:`aggregate_events` per lane.
        origin_ns: x = 0 (default ``t0_ns``); x is milliseconds since it.

    Returns:
        one horizontal ``go.Bar`` trace per lane (base = start, x = duration; at least one
        pixel wide so short events stay visible: sub-pixel boxes fill their pixel column with
        an opacity that grows with how busy it is), hover shows the name, the true start and
        duration.
    """
    if events.empty:
        return empty_figure("no events in this step on this rank")
    origin = int(t0_ns if origin_ns is None else origin_ns)
    fig = go.Figure()
    lanes = list(dict.fromkeys(events["lane"].astype(str)))
    px_ms = max((t1_ns - t0_ns) / max(width_px, 1), 1.0) / _NS_PER_MS
    origin_ms = (t0_ns - origin) / _NS_PER_MS  # pixel columns start at the window's left edge
    shown = 0
    for lane in lanes:
        ev = events[events["lane"].astype(str) == lane]
        boxes = aggregate_events(ev["start_ns"].to_numpy(), ev["dur_ns"].to_numpy(), ev["name"].to_numpy(),
                                 t0_ns, t1_ns, width_px=width_px, max_boxes=max_boxes)
        shown += len(boxes)
        base = (boxes["start_ns"].to_numpy() - origin) / _NS_PER_MS
        dur = boxes["dur_ns"].to_numpy() / _NS_PER_MS
        # Sub-pixel boxes are drawn as exactly their pixel column (snapped, so neighbours
        # never overlap), shaded by how busy it is: density, not a solid block.
        thin = dur < px_ms
        snapped = origin_ms + np.floor((base - origin_ms) / px_ms) * px_ms
        draw_base = np.where(thin, snapped, base)
        draw_width = np.where(thin, px_ms, dur)
        text = [safe_text(x) for x in boxes["label"]]
        safe_lane = safe_text(lane)
        busy = boxes["busy"].to_numpy()
        busy_text = np.where(boxes["count"].to_numpy() > 1,
                             np.char.add(np.char.add(" over the span, ", np.round(100 * busy).astype(int).astype(str)),
                                         "% busy"), "").astype(object)
        fig.add_trace(go.Bar(
            orientation="h", y=[safe_lane] * len(boxes), base=draw_base, x=draw_width,
            name=safe_lane, marker_color=_lane_color(lane), showlegend=False,
            # Merged boxes fade with how little of their span is busy; separate events keep
            # a thin white edge so that back-to-back ones stay distinguishable.
            marker_opacity=np.round(0.25 + 0.75 * busy, 3),
            marker_line_width=0.5 if len(boxes) < 300 else 0, marker_line_color="white",
            customdata=np.stack([np.asarray(text, dtype=object), dur * 1e3, busy_text, base], axis=1),
            hovertemplate=("%{customdata[0]}<br>%{customdata[1]:.1f} µs%{customdata[2]}, "
                           "starts at %{customdata[3]:.3f} ms<extra>%{y}</extra>"),
        ))
    n = len(events)
    subtitle = f"{n:,} event{'s' if n != 1 else ''}" + (f", drawn as {shown:,} boxes" if shown < n else "")
    fig.update_yaxes(categoryorder="array", categoryarray=[safe_text(lane) for lane in lanes], autorange="reversed")
    return _base_layout(
        fig, f"{safe_text(title)} ({subtitle})" if title else subtitle, barmode="overlay", bargap=0.25,
        height=max(300, 90 + 34 * len(lanes)), xaxis_title="ms since step start",
        xaxis_range=[(t0_ns - origin) / _NS_PER_MS, (t1_ns - origin) / _NS_PER_MS], margin=dict(l=160, r=20, t=50, b=40),
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
    "rank_step_heatmap", "mark_warmup_columns", "aggregate_events", "timeline_figure", "compare_buckets",
    "compare_step_deltas",
]
