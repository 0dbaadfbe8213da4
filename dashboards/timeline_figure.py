"""The Timeline figure: lane groups of several ranks on one time axis (Nsight-style).

A pure function of what the analyzers return (:func:`perfscope.analyzers.timeline.
timeline_events` per rank, :func:`perfscope.analyzers.counters.counter_samples`), so it is
tested without a server.  Layout:

* one row per (rank, lane), rank by rank, in the steady order of
  :func:`~perfscope.analyzers.timeline.rank_lanes` (a lane without events in the window
  keeps its row), then that rank's GPU counter tracks; a line separates the ranks;
* boxes coloured by what they are, in the buckets' colours of
  :mod:`perfscope.reports.style` (NCCL kernels and collectives in the network colour,
  synchronisation and waits in the sync colour, host copies in the PCIe colour);
* whole events at their true width with their name drawn on them when it fits; sub-pixel
  events merged into density strips (:mod:`perfscope.dashboards.timeline_boxes`);
* hover: name, duration, start, and the launch link (the API call that launched a kernel
  or copy, the kernel an API call launched, by correlation id);
* a search outlines the matching events (each drawn, at least a pixel wide) and fades the
  rest.

Names from the trace are untrusted: they reach plotly only through ``safe_text``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from perfscope.analyzers.counters import COUNTERS
from perfscope.dashboards.timeline_boxes import aggregate_events, label_for_width, search_mask
from perfscope.reports.style import BUCKET_COLORS, escape_html, fmt_ns, hover_text, short

# Colour of each event kind (timeline_events' ``kind``): the buckets' own, plus two for
# what feeds no bucket by itself.
KIND_COLORS: dict[str, str] = {**BUCKET_COLORS, "marker": "#56B4E9", "api": "#7f7f7f"}
COUNTER_COLOR = "#4d4d4d"
MAX_MATCHES = 2000
_NS_PER_MS = 1e6
_LANE_PX = 24
_WHOLE, _STRIP = 0.8, 0.3  # bar thickness, in rows, of a whole event and of a density strip
_HOVER = "%{customdata[0]}<br>%{customdata[1]}<extra>%{customdata[2]}</extra>"
# A clientside callback (on the graph's hoverData): a dotted line from the hovered event
# to the other end of its launch link (customdata[3], [4]: x and row; [5]: its own start),
# drawn in the browser, so that hovering costs no figure from the server.
LINK_ON_HOVER = """function(hover) {
    const gd = document.querySelector('#tl-graph .js-plotly-plot');
    if (!gd || !gd.layout) { return window.dash_clientside.no_update; }
    const shapes = (gd.layout.shapes || []).filter(s => s.name !== 'launch-link');
    const p = hover && hover.points && hover.points[0];
    const cd = p && p.customdata;
    const linked = cd && cd.length > 5 && cd[3] !== null && cd[3] !== undefined;
    if (linked) {
        shapes.push({type: 'line', name: 'launch-link', xref: 'x', yref: 'y', x0: cd[5], y0: p.y, x1: cd[3],
                     y1: cd[4], line: {color: '#000000', width: 1.5, dash: 'dot'}});
    }
    if (linked || shapes.length !== (gd.layout.shapes || []).length) { Plotly.relayout(gd, {shapes: shapes}); }
    return linked ? [cd[3], cd[4]] : null;
}"""


def counter_lane(metric: str) -> str:
    """The lane name of a GPU counter track, e.g. ``GPU util (%)``."""
    label, unit, _, _ = COUNTERS[metric]
    return f"{label} ({unit})"


def row_label(rank: int, lane: str) -> str:
    """The y-axis label of a lane of rank ``rank`` (raw; escaped when drawn)."""
    return f"rank {rank} · {lane}"


@dataclass
class TimelineView:
    """What one Timeline figure shows.

    Attributes:
        rows: (rank, lane) per row, top to bottom (lanes and counter tracks, see
            :func:`counter_lane`).
        events: rank -> its ``timeline_events`` in the window.
        samples: rank -> its ``counter_samples`` in the window.
        scales: counter metric -> top of its track (``counter_summary``'s ``scale``).
        t0_ns, t1_ns: the window shown; origin_ns: x = 0 (ms are counted from it).
        title: first part of the title (raw); search: the name searched for, or "";
            x_title: the x axis title (raw).
        width_px, max_boxes: plot width and boxes kept whole per lane (see aggregate_events).
    """

    rows: list[tuple[int, str]]
    events: Mapping[int, pd.DataFrame]
    t0_ns: int
    t1_ns: int
    origin_ns: int
    title: str = ""
    samples: Mapping[int, pd.DataFrame] = field(default_factory=dict)
    scales: Mapping[str, float] = field(default_factory=dict)
    search: str = ""
    x_title: str = "ms since step start"
    width_px: int = 1200
    max_boxes: int = 2000


def timeline_figure(view: TimelineView) -> go.Figure:
    """The Timeline figure of ``view`` (see the module doc).

    Returns:
        one horizontal ``go.Bar`` per lane with events (named by :func:`row_label`; base =
        start, x = width, both ms since ``origin_ns``; ``width`` is 0.8 rows for a whole
        event, 0.3 for a density strip), one ``go.Scatter`` per counter track, one
        ``go.Bar`` named ``search matches`` when a search matched; y is the row number,
        labelled by ``tickvals``/``ticktext``.
    """
    row_of = {key: i for i, key in enumerate(view.rows)}
    px_ns = max((view.t1_ns - view.t0_ns) / max(view.width_px, 1), 1.0)
    traces: list[dict[str, Any]] = []
    matches: list[pd.DataFrame] = []
    n_events = shown = 0
    for rank, ev in view.events.items():
        if ev.empty:
            continue
        n_events += len(ev)
        hit = search_mask(ev["name"].to_numpy(object), view.search)
        for lane, idx in ev.groupby("lane", sort=False).indices.items():
            row = row_of.get((rank, str(lane)))
            if row is None:
                continue
            lane_ev = ev.iloc[idx]
            if hit[idx].any():
                matches.append(lane_ev[hit[idx]].assign(row=row, rank=rank))
            trace, boxes = _lane_trace(lane_ev, row, rank, view, px_ns, row_of, faded=bool(view.search.strip()))
            shown += boxes
            traces.append(trace)
    for rank, df in view.samples.items():
        for metric, s in df.groupby("metric", sort=False):
            row = row_of.get((rank, counter_lane(str(metric))))
            if row is not None:
                traces.append(_counter_trace(s, row, rank, str(metric), view))
    if matches:
        traces.append(_match_trace(pd.concat(matches, ignore_index=True), view, px_ns))
    layout = _layout(view, n_events, shown, sum(len(m) for m in matches))
    # Built from plain dicts without plotly's per-property validation (most of the time
    # of a figure of a hundred lanes); what goes in is the schema's, checked by the tests.
    return go.Figure(data=traces, layout=layout, _validate=False)


def _lane_trace(ev: pd.DataFrame, row: int, rank: int, view: TimelineView, px_ns: float,
                row_of: Mapping[tuple[int, str], int], faded: bool) -> tuple[dict[str, Any], int]:
    """The bar trace of one lane's events; returns it and how many boxes it draws.

    ``customdata`` per box: name, hover details, lane, and for an event with a launch link
    the x (ms) and row of the other end, with the box's own start, for the line that
    ``LINK_ON_HOVER`` draws (None without a link)."""
    boxes = aggregate_events(ev["start_ns"].to_numpy(), ev["dur_ns"].to_numpy(), ev["name"].to_numpy(),
                             view.t0_ns, view.t1_ns, width_px=view.width_px, max_boxes=view.max_boxes,
                             kinds=ev["kind"].to_numpy())
    start, dur = boxes["start_ns"].to_numpy(), boxes["dur_ns"].to_numpy()
    whole = (boxes["count"].to_numpy() == 1) & (dur >= px_ns)
    busy = boxes["busy"].to_numpy()
    opacity = np.where(whole, 1.0, 0.15 + 0.85 * busy) * (0.3 if faded else 1.0)
    width_ns = np.where(whole, dur, np.maximum(dur, px_ns))
    labels = boxes["label"].to_numpy(object)
    text = [escape_html(label_for_width(str(lb), w / px_ns)) if ok else ""
            for lb, w, ok in zip(labels, width_ns, whole)]
    details = _details(boxes, ev, view.origin_ns)
    link_x, link_y = _link_ends(boxes, ev, rank, row_of, view.origin_ns)
    lane = row_label(rank, str(ev["lane"].iloc[0]))
    trace = dict(
        type="bar", orientation="h", y=np.full(len(boxes), row), base=(start - view.origin_ns) / _NS_PER_MS,
        x=width_ns / _NS_PER_MS, width=np.where(whole, _WHOLE, _STRIP), name=escape_html(lane), showlegend=False,
        marker=dict(color=[KIND_COLORS.get(k, "#444444") for k in boxes["kind"]], opacity=np.round(opacity, 3),
                    line=dict(width=0.5 if len(boxes) < 300 else 0, color="white")),
        text=text, textposition="inside", insidetextanchor="start", textfont=dict(size=10, color="white"),
        customdata=np.stack([np.array([hover_text(lb) for lb in labels], dtype=object), details,
                             np.full(len(boxes), escape_html(lane), dtype=object), link_x, link_y,
                             ((start - view.origin_ns) / _NS_PER_MS).astype(object)], axis=1),
        hovertemplate=_HOVER,
    )
    return trace, len(boxes)


def _link_ends(boxes: pd.DataFrame, ev: pd.DataFrame, rank: int, row_of: Mapping[tuple[int, str], int],
               origin_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """x (ms since the origin) and row of the other end of each box's launch link
    (object arrays, None where a box has no link or its other end has no row)."""
    link_x, link_y = np.full(len(boxes), None, object), np.full(len(boxes), None, object)
    rows = boxes["row"].to_numpy("int64")
    link_lane, link_start = ev["link_lane"].to_numpy(object), ev["link_start_ns"].to_numpy("int64")
    for i in np.flatnonzero(rows >= 0):
        r = rows[i]
        y = row_of.get((rank, str(link_lane[r]))) if link_lane[r] else None
        if y is not None:
            link_x[i], link_y[i] = (int(link_start[r]) - origin_ns) / _NS_PER_MS, y
    return link_x, link_y


def _details(boxes: pd.DataFrame, ev: pd.DataFrame, origin_ns: int) -> np.ndarray:
    """Hover line of each box: duration and start; for a whole event its launch link, for
    a merged box how busy its span was."""
    out = np.empty(len(boxes), dtype=object)
    link_name, link_lane = ev["link_name"].to_numpy(object), ev["link_lane"].to_numpy(object)
    link_start, ev_start = ev["link_start_ns"].to_numpy("int64"), ev["start_ns"].to_numpy("int64")
    is_api = str(ev["lane"].iloc[0]).startswith("API ")
    for i, (s, d, c, b, r) in enumerate(zip(boxes["start_ns"], boxes["dur_ns"], boxes["count"], boxes["busy"],
                                            boxes["row"])):
        text = f"{fmt_ns(d)} at {(s - origin_ns) / _NS_PER_MS:,.3f} ms"
        if c > 1:
            text += f", {100 * b:.0f}% busy over the span"
        elif r >= 0 and link_name[r]:
            gap = fmt_ns(abs(int(ev_start[r]) - int(link_start[r])))
            what = hover_text(link_name[r], lines=1)
            text += (f"<br>launched {what} on {escape_html(link_lane[r])}, {gap} later" if is_api else
                     f"<br>launched by {what} on {escape_html(link_lane[r])}, {gap} before")
        out[i] = text
    return out


def _counter_trace(s: pd.DataFrame, row: int, rank: int, metric: str, view: TimelineView) -> dict[str, Any]:
    """One counter track: a step line inside its row, 0 at the row's bottom, the track's
    scale at its top."""
    label, unit, _, top = COUNTERS[metric]
    scale = float(view.scales.get(metric) or top or max(float(s["value"].max()), 1e-12))
    value = s["value"].to_numpy("float64")
    y = row + _WHOLE / 2 - _WHOLE * np.clip(value / scale, 0.0, 1.0)
    name = escape_html(row_label(rank, counter_lane(metric)))
    return dict(
        type="scatter", x=(s["ts_ns"].to_numpy("int64") - view.origin_ns) / _NS_PER_MS, y=y, mode="lines", name=name,
        line=dict(color=COUNTER_COLOR, width=1.2, shape="hv"), showlegend=False,
        customdata=np.stack([np.full(len(s), escape_html(label), dtype=object),
                             np.array([f"{v:,.3g} {unit}" for v in value], dtype=object),
                             np.full(len(s), name, dtype=object)], axis=1),
        hovertemplate=_HOVER,
    )


def _match_trace(m: pd.DataFrame, view: TimelineView, px_ns: float) -> dict[str, Any]:
    """The events a search matched (the :data:`MAX_MATCHES` longest), each drawn whole and
    at least a pixel wide, outlined in black."""
    if len(m) > MAX_MATCHES:
        m = m.nlargest(MAX_MATCHES, "dur_ns")
    dur = m["dur_ns"].to_numpy("int64")
    names = m["name"].to_numpy(object)
    return dict(
        type="bar", orientation="h", y=m["row"].to_numpy(), base=(m["start_ns"].to_numpy("int64") - view.origin_ns) / _NS_PER_MS,
        x=np.maximum(dur, px_ns) / _NS_PER_MS, width=_WHOLE, name="search matches", showlegend=False,
        marker=dict(color=[KIND_COLORS.get(k, "#444444") for k in m["kind"]], line=dict(width=2, color="#000000")),
        customdata=np.stack([np.array([hover_text(n) for n in names], dtype=object),
                             np.array([f"{fmt_ns(d)} at {(s - view.origin_ns) / _NS_PER_MS:,.3f} ms (match)"
                                       for s, d in zip(m["start_ns"], dur)], dtype=object),
                             np.array([escape_html(row_label(r, lane)) for r, lane in zip(m["rank"], m["lane"])],
                                      dtype=object)], axis=1),
        hovertemplate=_HOVER,
    )


def _layout(view: TimelineView, n_events: int, shown: int, n_matches: int) -> dict[str, Any]:
    """The layout of the Timeline figure: axes, rank separators and title."""
    n = len(view.rows)
    subtitle = f"{n_events:,} event{'s' if n_events != 1 else ''}" + (
        f", drawn as {shown:,} boxes" if shown < n_events else "")
    if view.search.strip():
        subtitle += f"; {n_matches:,} match{'es' if n_matches != 1 else ''} for “{short(view.search, 40)}”"
    title = f"{view.title} ({subtitle})" if view.title else subtitle
    ranks = [r for r, _ in view.rows]
    seps = [i - 0.5 for i in range(1, n) if ranks[i] != ranks[i - 1]]
    layout: dict[str, Any] = dict(
        title=dict(text=escape_html(title), x=0.01), template=pio.templates["plotly_white"], barmode="overlay",
        height=max(260, 90 + _LANE_PX * n), margin=dict(l=250, r=20, t=50, b=40), hovermode="closest",
        uniformtext=dict(minsize=8, mode="hide"), dragmode="zoom",
        xaxis=dict(title=dict(text=escape_html(view.x_title)), range=[(view.t0_ns - view.origin_ns) / _NS_PER_MS,
                                                       (view.t1_ns - view.origin_ns) / _NS_PER_MS]),
        yaxis=dict(tickmode="array", tickvals=list(range(n)), autorange=False, range=[n - 0.5, -0.5],
                   ticktext=[escape_html(row_label(r, lane), 44) for r, lane in view.rows], fixedrange=True,
                   showgrid=False, zeroline=False),
        shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=y, y1=y, line=dict(color="#555", width=1))
                for y in seps],
        hoverlabel=dict(align="left"),
    )
    if not view.rows:
        layout["annotations"] = [dict(text="no events in this window on these ranks", showarrow=False, x=0.5, y=0.5,
                                      xref="paper", yref="paper")]
    return layout


def rows_for(ranks: Sequence[int], lanes: Mapping[int, list[str]], counters: Mapping[int, list[str]]
             ) -> list[tuple[int, str]]:
    """The rows of a Timeline of ``ranks``: each rank's lanes, then its counter tracks
    (``counters``: rank -> metrics sampled, in :data:`COUNTERS` order)."""
    return [(r, x) for r in ranks for x in [*lanes.get(r, []), *(counter_lane(m) for m in counters.get(r, []))]]


__all__ = ["KIND_COLORS", "LINK_ON_HOVER", "MAX_MATCHES", "TimelineView", "counter_lane", "row_label", "rows_for", "timeline_figure"]
