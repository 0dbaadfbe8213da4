"""The Timeline tab: its controls, its callbacks as plain functions, and :func:`register`.

The tab shows one step of several ranks aligned on one time axis (the focus rank's step
start is x = 0; the window spans the step on every shown rank), every rank's lanes in the
steady layout of :func:`~perfscope.analyzers.timeline.rank_lanes` with its GPU counter
tracks under them.  A zoom re-reads the narrower window from the store (``Run.window``:
an event spanning the window is kept); a search outlines the kernels whose name holds
the text; "Open in Perfetto" downloads the visible window (shown ranks, t0..t1) as a
Chrome trace.

As in :mod:`perfscope.dashboards.callbacks`, values from the browser are validated here
(ranks and steps through ``RunData``, windows as integers clipped to the step), and a bad
one is a :class:`~perfscope.errors.UsageError`, which :func:`register` answers with 400.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

import dash
import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, State, ctx, dcc, html

import perfscope
from perfscope.analyzers.counters import counter_samples
from perfscope.analyzers.timeline import launch_index, rank_lanes, timeline_events
from perfscope.dashboards import figures, layout
from perfscope.dashboards.data import DashboardData, RunData, strict_int
from perfscope.dashboards.timeline_figure import LINK_ON_HOVER, TimelineView, rows_for, timeline_figure
from perfscope.errors import UsageError

TIMELINE_WIDTH_PX = 1150  # the plot area of a 1400 px page, less the lane labels
TIMELINE_MAX_BOXES = 2000
MAX_DEFAULT_RANKS = 8  # ranks shown before the user picks: more lane groups than fit a screen
MAX_SEARCH_CHARS = 200
FIGURES_KEPT = 16  # Timeline figures kept per run (a few hundred kB each), the newest
GRAPH_CONFIG: dict[str, Any] = {**layout.GRAPH_CONFIG, "scrollZoom": False}


class _PerRun:
    """Lanes and launch links computed once per opened run (read from the whole run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[int, tuple[weakref.ref[Any], dict[Any, Any]]] = {}

    def of(self, rd: RunData) -> dict[Any, Any]:
        with self._lock:
            entry = self._by_id.get(id(rd.run))
            if entry is None or entry[0]() is not rd.run:  # an id reused by a newer run
                entry = (weakref.ref(rd.run), {})
                self._by_id[id(rd.run)] = entry
            return entry[1]


_PER_RUN = _PerRun()


def lanes(rd: RunData, rank: int) -> list[str]:
    """:func:`~perfscope.analyzers.timeline.rank_lanes` of ``rank`` (cached per run)."""
    cache = _PER_RUN.of(rd)
    if ("lanes", rank) not in cache:
        cache[("lanes", rank)] = rank_lanes(rd.run, rank)
    return list(cache[("lanes", rank)])


def launches(rd: RunData, rank: int) -> pd.DataFrame:
    """:func:`~perfscope.analyzers.timeline.launch_index` of ``rank`` (cached per run)."""
    cache = _PER_RUN.of(rd)
    if ("launches", rank) not in cache:
        cache[("launches", rank)] = launch_index(rd.run, rank)
    return cache[("launches", rank)]


def shown_ranks(rd: RunData, focus: int, ranks: Any) -> list[int]:
    """The ranks whose lanes are drawn: ``ranks`` as the browser sent them (each checked),
    or by default every rank with steps (the focus rank and the first others up to
    :data:`MAX_DEFAULT_RANKS`).  The focus rank is always among them."""
    if isinstance(ranks, list) and ranks:
        chosen = {rd.rank(r) for r in ranks} | {focus}
    else:
        everyone = sorted(int(r) for r in rd.steps["rank"].unique()) if not rd.steps.empty else [focus]
        chosen = {focus, *[r for r in everyone if r != focus][: MAX_DEFAULT_RANKS - 1]}
    return sorted(chosen)


def step_span(rd: RunData, ranks: list[int], focus: int, step: int) -> tuple[int, int, int]:
    """(t0, t1, origin) in ns: the step's window on all ``ranks`` that have it (their
    earliest start to their latest end), and the focus rank's step start."""
    origin, end = rd.step_window(focus, step)
    s = rd.steps
    mine = s[(s["step"] == step) & s["rank"].isin(ranks)]
    return min(origin, int(mine["start_ns"].min())), max(end, int(mine["end_ns"].max())), origin


def window_of(value: Any, span: tuple[int, int, int]) -> tuple[int, int] | None:
    """A window the browser sent back (``{"t0": ns, "t1": ns}``), clipped to the step's
    span; None when there is none (or it is empty after clipping)."""
    if not isinstance(value, dict):
        return None
    t0, t1 = strict_int(value.get("t0"), "window start"), strict_int(value.get("t1"), "window end")
    t0, t1 = max(t0, span[0]), min(t1, span[1])
    return (t0, t1) if t1 > t0 else None


def zoom_window(span: tuple[int, int, int], relayout: dict[str, Any] | None) -> tuple[int, int] | None:
    """The ns window a plotly ``relayoutData`` zoom asks for (x in ms since the origin).

    Returns:
        (t0, t1) clipped to the span, the whole span on an autorange (double click), or
        None when the relayout is not an x zoom.
    """
    if not isinstance(relayout, dict) or not relayout:
        return None
    t0, t1, origin = span
    if relayout.get("xaxis.autorange"):
        return t0, t1
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        x0, x1 = relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]
    elif isinstance(relayout.get("xaxis.range"), list) and len(relayout["xaxis.range"]) == 2:
        x0, x1 = relayout["xaxis.range"]
    else:
        return None
    try:
        a, b = sorted((origin + int(float(x0) * 1e6), origin + int(float(x1) * 1e6)))
    except (TypeError, ValueError, OverflowError):
        return None
    a, b = max(a, t0), min(b, t1)
    return (a, b) if b > a else (t0, t1)


def timeline_figure_of(data: DashboardData, run: Any, rank: Any, step: Any, window: tuple[int, int] | None = None,
                       ranks: Any = None, search: Any = "") -> go.Figure:
    """The Timeline figure of ``step`` on the shown ranks (focus ``rank``), optionally
    zoomed to ``window`` (ns) and with ``search`` outlined."""
    rd = data.get(run)
    if rank is None or step is None:
        return figures.empty_figure("this run has no steps to show")
    focus, step = rd.rank(rank), strict_int(step, "step")
    try:
        span = step_span(rd, shown_ranks(rd, focus, ranks), focus, step)
    except UsageError as e:
        return figures.empty_figure(str(e))
    return _draw(rd, focus, step, shown_ranks(rd, focus, ranks), span, window, _search_text(search))


_FIGURES_LOCK = threading.Lock()


def _draw(rd: RunData, focus: int, step: int, ranks: list[int], span: tuple[int, int, int],
          window: tuple[int, int] | None, search: str) -> go.Figure:
    """The figure of this view, from the run's figure cache when it was drawn before (the
    tab opened again, a zoom undone by a double click, or the default step drawn by
    :func:`perfscope.dashboards.app.warm_up`)."""
    key = (focus, step, tuple(ranks), window or span[:2], search)
    with _FIGURES_LOCK:
        kept: OrderedDict[Any, go.Figure] = _PER_RUN.of(rd).setdefault("figures", OrderedDict())
        if key in kept:
            kept.move_to_end(key)
            return kept[key]
    fig = _build(rd, focus, step, ranks, span, window, search)
    with _FIGURES_LOCK:
        kept[key] = fig
        while len(kept) > FIGURES_KEPT:
            kept.popitem(last=False)
    return fig


def forget_figures(rd: RunData) -> None:
    """Drop the Timeline figures kept for ``rd`` (a benchmark then times a build, not a
    lookup)."""
    with _FIGURES_LOCK:
        _PER_RUN.of(rd).pop("figures", None)


def _build(rd: RunData, focus: int, step: int, ranks: list[int], span: tuple[int, int, int],
           window: tuple[int, int] | None, search: str) -> go.Figure:
    w0, w1 = window if window else span[:2]
    summary = rd.gpu_counters
    metrics = {r: summary.loc[summary["rank"] == r, "metric"].tolist() for r in ranks}
    view = TimelineView(
        rows=rows_for(ranks, {r: lanes(rd, r) for r in ranks}, metrics),
        events={r: timeline_events(rd.run, r, w0, w1, launches(rd, r)) for r in ranks},
        samples={r: counter_samples(rd.run, r, w0, w1) for r in ranks if metrics[r]},
        scales=dict(zip(summary["metric"], summary["scale"])), t0_ns=w0, t1_ns=w1, origin_ns=span[2],
        title=f"rank {focus}, step {step}" + (f" · {len(ranks)} ranks aligned" if len(ranks) > 1 else ""),
        search=search, x_title=f"ms since step {step} started on rank {focus}", width_px=TIMELINE_WIDTH_PX,
        max_boxes=TIMELINE_MAX_BOXES,
    )
    return timeline_figure(view)


def _search_text(value: Any) -> str:
    """The search box's text (anything else is no search)."""
    return value[:MAX_SEARCH_CHARS] if isinstance(value, str) else ""


def timeline_update(data: DashboardData, run: Any, rank: Any, step: Any, relayout: dict[str, Any] | None,
                    trigger: str | None, ranks: Any = None, search: Any = "", window: Any = None
                    ) -> tuple[Any, Any, Any, Any, Any] | None:
    """Focus rank, step, shown ranks, search or zoom changed on the Timeline tab.

    Returns:
        (figure, step options, step value, selection, window ``{"t0", "t1"}``); None
        entries mean no change; None as a whole when nothing should change (a relayout
        that is not an x zoom).  A new focus rank or step shows the whole step; a search
        or a change of ranks keeps the zoom; a zoom sets the selection's ``zoom``.
    """
    rd = data.get(run)
    if rank is None:
        return None
    focus = rd.rank(rank)
    step = None if step is None else strict_int(step, "step")
    if trigger in ("tl-zoom", "tl-ranks", "tl-search"):
        if step is None:
            return None
        shown = shown_ranks(rd, focus, ranks)
        span = step_span(rd, shown, focus, step)
        win = zoom_window(span, relayout) if trigger == "tl-zoom" else window_of(window, span)
        if win is None and trigger == "tl-zoom":
            return None
        fig = _draw(rd, focus, step, shown, span, win, _search_text(search))
        # A zoom goes into the selection (so into the URL); the whole step needs none.
        sel = _zoomed_selection(rd.index, focus, step, span, win) if trigger == "tl-zoom" else None
        return fig, None, None, sel, _window_data(win or span[:2])
    options = layout.step_options(rd, focus)
    values = [o["value"] for o in options]
    new_step = step if step in values else (values[0] if values else None)
    sel = {"run": rd.index, "rank": focus, "step": new_step}
    fig = timeline_figure_of(data, rd.index, focus, new_step, None, ranks, search)
    whole = None if new_step is None else _window_data(step_span(rd, shown_ranks(rd, focus, ranks), focus, new_step)[:2])
    return fig, (options if trigger == "tl-rank" else None), (new_step if new_step != step else None), sel, whole


def _zoomed_selection(run: int, focus: int, step: int, span: tuple[int, int, int],
                      window: tuple[int, int] | None) -> dict[str, Any]:
    """The selection of a zoom: run, focus rank, step and, unless ``window`` is the whole
    span, ``zoom`` ``[x0_ms, x1_ms]`` since the focus rank's step start."""
    sel: dict[str, Any] = {"run": run, "rank": focus, "step": step}
    if window is not None and window != span[:2]:
        sel["zoom"] = [(window[0] - span[2]) / 1e6, (window[1] - span[2]) / 1e6]
    return sel


def _window_data(window: tuple[int, int]) -> dict[str, int]:
    return {"t0": int(window[0]), "t1": int(window[1])}


def perfetto_export(data: DashboardData, run: Any, rank: Any, step: Any, ranks: Any, window: Any) -> dict[str, Any]:
    """The visible window (shown ranks, t0..t1; the whole step when not zoomed) as a Chrome
    trace download: ``dcc.Download`` data (base64 JSON, named after run, step and ranks)."""
    rd = data.get(run)
    focus, step = rd.rank(rank), strict_int(step, "step")
    shown = shown_ranks(rd, focus, ranks)
    span = step_span(rd, shown, focus, step)
    t0, t1 = window_of(window, span) or span[:2]
    body = perfscope.chrome_window_trace(rd.run, shown, t0, t1)
    who = f"rank{shown[0]}" if len(shown) == 1 else f"ranks{shown[0]}-{shown[-1]}"
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in rd.label)
    return dcc.send_bytes(body, f"{name}-step{step}-{who}-{(t0 - span[2]) / 1e6:.3f}ms.json",
                          type="application/json")


def timeline_tab(data: DashboardData, rd: RunData, selection: dict[str, Any]) -> html.Div:
    """The Timeline tab: focus rank and step pickers, the ranks shown, the kernel search,
    "Open in Perfetto", and the figure of the selection (zoomed to its ``zoom``, ms since
    the focus rank's step start, when it has one)."""
    rank, step = selection.get("rank"), selection.get("step")
    all_ranks = sorted(int(r) for r in rd.steps["rank"].unique()) if not rd.steps.empty else []
    shown = shown_ranks(rd, rank, None) if rank is not None else []
    span = step_span(rd, shown, rank, step) if rank is not None and step is not None else None
    zoom = selection.get("zoom")
    window = zoom_window(span, {"xaxis.range": zoom}) if span and zoom else None
    small = {"marginLeft": "16px"}
    return html.Div([
        html.Div([
            html.Span("rank "), html.Div(dcc.Dropdown(id="tl-rank", options=[{"label": f"rank {r}", "value": r}
                                                                               for r in all_ranks],
                                                     value=rank, clearable=False), style={"width": "130px"}),
            html.Span("step ", style=small),
            html.Div(dcc.Dropdown(id="tl-step", options=layout.step_options(rd, rank), value=step, clearable=False),
                     style={"width": "230px"}),
            html.Span("ranks shown ", style=small),
            html.Div(dcc.Dropdown(id="tl-ranks", options=[{"label": str(r), "value": r} for r in all_ranks],
                                  value=shown, multi=True, clearable=False), style={"minWidth": "200px"}),
            html.Span("find kernel ", style=small),
            dcc.Input(id="tl-search", type="text", value="", debounce=True, placeholder="name or part of it",
                      maxLength=MAX_SEARCH_CHARS, style={"width": "220px"}),
            html.Button("Open in Perfetto", id="tl-perfetto", n_clicks=0, style=small,
                        title="download the visible window (shown ranks, zoomed time) as a Chrome trace "
                              "for ui.perfetto.dev"),
        ], style={"display": "flex", "alignItems": "center", "flexWrap": "wrap", "gap": "4px"}),
        html.P("Drag to zoom (the server re-reads the window); double-click for the whole step. Events narrower "
               "than a pixel are merged into faint thin density strips; hover an event for its launch.",
               style={"color": "#666", "fontSize": "13px", "margin": "4px 0"}),
        dcc.Graph(id="tl-graph", figure=timeline_figure_of(data, rd.index, rank, step, window), config=GRAPH_CONFIG),
        dcc.Store(id="tl-window", data=_window_data(window or span[:2]) if span else None),
        dcc.Store(id="tl-zoom", data=None),  # the graph's x zooms (ONLY_ZOOMS), for the server
        dcc.Store(id="tl-link", data=None),  # the launch link drawn on hover (set in the browser)
        dcc.Download(id="tl-download"),
    ])


# The graph's relayoutData passed on to the server only when it is an x zoom (or its undoing):
# plotly also reports its first autosize and the launch-link line drawn on hover, and any
# request of the Timeline callback makes Dash drop the answer of the one before it, so an
# autosize reported just after a zoom lost the zoom, and each hover cost a round trip.
ONLY_ZOOMS = """function(relayout) {
    const r = relayout || {};
    const zoom = r['xaxis.autorange'] || ('xaxis.range[0]' in r && 'xaxis.range[1]' in r) || Array.isArray(r['xaxis.range']);
    return zoom ? r : window.dash_clientside.no_update;
}"""


def inserted_with_tab(triggered: list[str]) -> bool:
    """True when the Timeline callback's inputs (``ctx.triggered_prop_ids``) changed all at
    once: Dash calls it so when the tab's content is inserted (its output ``selection`` is
    outside the tab, so ``prevent_initial_call`` does not hold it back), never for a user's
    change, which is one input.

    The tab arrives with its figure drawn.  Before this check, opening the Timeline with no
    selection yet (from the Overview) built the same figure a second time, a callback that
    stayed pending as long as that took (seconds on a large run or a loaded machine); a
    search typed meanwhile was intermittently lost (the likely cause of the wait in
    tests/integration/test_timeline_browser.py).
    """
    return len(triggered) > 1


def register(app: dash.Dash, data: DashboardData, checked: Any) -> None:
    """Attach the Timeline's callbacks to ``app`` (``checked(fn, *args)`` answers a
    UsageError with 400 Bad Request)."""

    @app.callback(Output("tl-graph", "figure"), Output("tl-step", "options"), Output("tl-step", "value"),
                  Output("selection", "data", allow_duplicate=True), Output("tl-window", "data"),
                  Input("tl-rank", "value"), Input("tl-step", "value"), Input("tl-zoom", "data"),
                  Input("tl-ranks", "value"), Input("tl-search", "value"),
                  State("run", "value"), State("tl-window", "data"), State("selection", "data"),
                  prevent_initial_call=True)
    def _timeline(rank: Any, step: Any, relayout: Any, ranks: Any, search: Any, run: Any, window: Any,
                  selection: Any) -> Any:
        trig = ctx.triggered_id if isinstance(ctx.triggered_id, str) else None
        if trig is None or inserted_with_tab(list(ctx.triggered_prop_ids)) or (
                trig in ("tl-rank", "tl-step") and isinstance(selection, dict)
                and (selection.get("rank"), selection.get("step")) == (rank, step)):
            # inserted with the tab, whose figure (zoomed as the selection says) timeline_tab
            # built: drawing it again would cost a second read and lose a linked zoom
            return (dash.no_update,) * 5
        out = checked(timeline_update, data, run, rank, step, relayout, trig, ranks, search, window)
        if out is None:
            return (dash.no_update,) * 5
        return tuple(dash.no_update if v is None else v for v in out)

    app.clientside_callback(LINK_ON_HOVER, Output("tl-link", "data"), Input("tl-graph", "hoverData"),
                            prevent_initial_call=True)
    app.clientside_callback(ONLY_ZOOMS, Output("tl-zoom", "data"), Input("tl-graph", "relayoutData"),
                            prevent_initial_call=True)

    @app.callback(Output("tl-download", "data"), Input("tl-perfetto", "n_clicks"), State("run", "value"),
                  State("tl-rank", "value"), State("tl-step", "value"), State("tl-ranks", "value"),
                  State("tl-window", "data"), prevent_initial_call=True)
    def _perfetto(clicks: Any, run: Any, rank: Any, step: Any, ranks: Any, window: Any) -> Any:
        if not clicks:
            return dash.no_update
        return checked(perfetto_export, data, run, rank, step, ranks, window)


__all__ = ["FIGURES_KEPT", "MAX_DEFAULT_RANKS", "forget_figures", "TIMELINE_MAX_BOXES", "TIMELINE_WIDTH_PX", "lanes",
           "perfetto_export", "register", "shown_ranks", "step_span", "timeline_figure_of", "timeline_tab",
           "timeline_update", "window_of", "zoom_window"]
