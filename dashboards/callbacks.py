"""The dashboard's callbacks: plain functions, plus :func:`register` that wires them to Dash.

Each ``*`` function below takes the served :class:`~perfscope.dashboards.data.DashboardData`
and the values Dash passes in, and returns what Dash should set, with ``None`` meaning
"leave it as it is" (``register`` turns it into ``dash.no_update``).  So tests call them
directly, without a server or a browser.

The browser only ever sends run *indices*, ranks, steps and table filters; they are
validated here (integers only as :func:`~perfscope.dashboards.data.strict_int` takes
them, and in range), and no value it sends becomes a path.  A value that fails is a
:class:`~perfscope.errors.UsageError`, which :func:`register` answers with 400 Bad Request.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlencode

import dash
from dash import ALL, Input, Output, State, ctx, html
from werkzeug.exceptions import BadRequest

from perfscope.dashboards import layout, operator_views, rank_views, tables, timeline_callbacks
from perfscope.dashboards.data import DashboardData, RunData, strict_int
# The Timeline tab lives in timeline_callbacks; its figure is also reached from here.
from perfscope.dashboards.timeline_callbacks import timeline_figure_of as timeline_figure
from perfscope.errors import UsageError


def _zoom(value: Any) -> list[float] | None:
    """A selection's zoom ``[x0_ms, x1_ms]`` (ms since the step's start) when it is two
    finite numbers in order, else None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    try:
        x0, x1 = (float(v) for v in value)
    except (TypeError, ValueError):
        return None
    return [x0, x1] if math.isfinite(x0) and math.isfinite(x1) and x1 > x0 else None


def _selection(rd: RunData, selection: dict[str, Any] | None) -> dict[str, Any]:
    """``selection`` (as ints, with its zoom if valid) if it belongs to this run and names a
    step it has, else the default."""
    if not isinstance(selection, dict):
        return layout.default_selection(rd)
    try:
        run, rank, step = (strict_int(selection.get(k), k) for k in ("run", "rank", "step"))
        rd.step_window(rank, step)
    except UsageError:
        return layout.default_selection(rd)
    if run != rd.index:
        return layout.default_selection(rd)
    sel: dict[str, Any] = {"run": run, "rank": rank, "step": step}
    zoom = _zoom(selection.get("zoom"))
    if zoom is not None:
        sel["zoom"] = zoom
    return sel


def include_warmup(warmup: Any) -> bool:
    """True when the warm-up checklist's value asks for warm-up steps in summaries."""
    return isinstance(warmup, list) and layout.WARMUP_TOGGLE in warmup


def render_tab(data: DashboardData, tab: str, run: Any, selection: dict[str, Any] | None,
               warmup: Any = None) -> Any:
    """Content of tab ``tab`` for run ``run`` (Timeline opens on ``selection``; summaries
    leave warm-up steps out unless the ``warmup`` checklist includes them)."""
    include = include_warmup(warmup)
    if tab == "compare":
        return layout.compare(data, include) if len(data) >= 2 else dash_text("Compare needs two runs: "
                                                                               "perfscope dashboard BASE NEW")
    rd = data.get(run)
    if tab == "timeline":
        return timeline_callbacks.timeline_tab(data, rd, _selection(rd, selection))
    builders: dict[str, Callable[[], Any]] = {
        "ranks": lambda: rank_views.ranks(rd, include), "collectives": lambda: rank_views.collectives(rd),
        "kernels": lambda: layout.kernels(rd), "operators": lambda: operator_views.operators(rd)}
    return layout.kept_tab(data, tab if tab in builders else "overview", rd.index, include,
                           builders.get(tab, lambda: layout.overview(rd, include)))


_TAB_IDS = frozenset(t for t, _ in layout.TABS)


def url_state(data: DashboardData, search: Any) -> dict[str, Any]:
    """The view a URL query names: ``{"run", "tab", "selection", "warmup"}``.

    ``?run=1&tab=timeline&rank=2&step=5&zoom=2.5,4`` -> run 1's Timeline of rank 2, step 5,
    zoomed to 2.5-4 ms.  Anything invalid falls back to the default (run 0, Overview, no
    selection, warm-up excluded): a link must never fail to open.
    """
    try:
        q = parse_qs(search[1:] if isinstance(search, str) and search.startswith("?") else "", max_num_fields=20)
    except ValueError:  # too many fields: not a link this page wrote
        q = {}

    def one(key: str) -> str | None:
        values = q.get(key)
        return values[0] if values else None

    try:
        run = data.index(one("run") or "0")
    except UsageError:
        run = 0
    tab = one("tab") or "overview"
    if tab not in _TAB_IDS or (tab == "compare" and len(data) < 2):
        tab = "overview"
    selection: dict[str, Any] | None = None
    if one("rank") is not None and one("step") is not None:
        selection = {"run": run, "rank": one("rank"), "step": one("step")}
        zoom = _zoom((one("zoom") or "").split(","))
        if zoom is not None:
            selection["zoom"] = zoom
        selection = _selection(data.get(run), selection)
    return {"run": run, "tab": tab, "selection": selection,
            "warmup": [layout.WARMUP_TOGGLE] if one("warmup") == "1" else []}


def state_url(run: Any, tab: Any, selection: Any, warmup: Any) -> str:
    """The URL query of a view (the inverse of :func:`url_state`; values as the page holds
    them, written as text only)."""
    q: dict[str, Any] = {"run": run if isinstance(run, int) else 0, "tab": tab if tab in _TAB_IDS else "overview"}
    if (isinstance(selection, dict) and selection.get("run") == q["run"] and selection.get("rank") is not None
            and selection.get("step") is not None):  # a selection of the run shown, not of the one before
        q["rank"], q["step"] = selection["rank"], selection["step"]
        zoom = _zoom(selection.get("zoom"))
        if zoom is not None:
            q["zoom"] = f"{zoom[0]:.4f},{zoom[1]:.4f}"
    if include_warmup(warmup):
        q["warmup"] = 1
    return "?" + urlencode(q)


def sync_state(data: DashboardData, trigger: str | None, search: Any, run: Any, tab: Any, selection: Any,
               warmup: Any, loaded: bool = True) -> tuple[Any, Any, Any, Any, Any]:
    """Keep the URL and the page's state in step.

    On page load (``loaded`` False: the first call, whatever triggered it; a Store's mount
    may come first) or when the URL changes (back/forward), the page takes the URL's state;
    when the page's state changes, the URL is rewritten.

    Returns:
        (url search, run, tab, selection, warm-up checklist), None for "leave as it is".
    """
    if not loaded or trigger in (None, "url"):
        st = url_state(data, search)
        return (None, st["run"] if st["run"] != run else None, st["tab"] if st["tab"] != tab else None,
                st["selection"] if st["selection"] != selection else None,
                st["warmup"] if st["warmup"] != (warmup or []) else None)
    url = state_url(run, tab, selection, warmup)
    return (url if url != search else None), None, None, None, None


def dash_text(text: str) -> Any:
    """A paragraph of plain text."""
    return html.P(text)


def pick(data: DashboardData, run: Any, graph: str | None, click: dict[str, Any] | None,
         selection: dict[str, Any] | None) -> tuple[dict[str, Any], str] | None:
    """A click on a bar or heatmap cell: the new selection and the Timeline tab.

    Args:
        graph: which graph was clicked: ``steps`` (bucket bars per step), ``ranks`` /
            ``overlap`` (per rank), ``heat-wall`` / ``heat-sync`` / ``heat-waited`` (rank x
            step cells), ``stragglers``.
        click: Dash ``clickData`` (``{"points": [{"x", "y", "customdata", ...}]}``).

    Returns:
        (selection ``{"run", "rank", "step"}``, ``"timeline"``), or None when the click
        holds no usable point.
    """
    if not isinstance(click, dict) or not click.get("points") or graph is None:
        return None
    rd = data.get(run)
    sel = dict(_selection(rd, selection))
    try:
        point = click["points"][0]
        if graph == "steps":
            sel["step"] = strict_int(point.get("customdata", point.get("x")), "step")
        elif graph in ("ranks", "overlap"):
            custom = point.get("customdata")
            custom = custom[0] if isinstance(custom, list) and custom else custom
            sel["rank"] = strict_int(custom, "rank") if custom is not None else _rank_of(point.get("x"))
        elif graph in ("heat-wall", "heat-sync", "heat-waited"):
            sel["step"], sel["rank"] = strict_int(point["x"], "step"), _rank_of(point["y"])
        elif graph == "stragglers":
            sel["rank"] = _rank_of(point["y"])
        else:
            return None
    except (KeyError, TypeError, AttributeError, UsageError):
        return None  # not a point of ours: a click elsewhere, or a forged one
    s = rd.steps
    mine = s[s["rank"] == sel["rank"]]
    if mine.empty:
        return None
    if sel["step"] not in set(mine["step"]):
        sel["step"] = int(mine["step"].iloc[0])  # that rank lacks the step: open its first one
    sel["run"] = rd.index
    sel.pop("zoom", None)  # a new (rank, step) opens whole
    return sel, "timeline"


def _rank_of(label: Any) -> int:
    """``rank 3`` or ``3`` -> 3 (raises UsageError for anything else)."""
    if isinstance(label, str) and label.startswith("rank "):
        label = label[len("rank "):]
    return strict_int(label, "rank")


def kernel_table(data: DashboardData, run: Any, rank: Any) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]]:
    """Kernels table rows, note and name tooltips for the rank filter (``all`` or a rank)."""
    rd = data.get(run)
    rows, total = tables.kernel_rows(rd.analysis.kernels, _rank_filter(rd, rank))
    return rows, layout.table_note(len(rows), total, "kernel rows"), tables.name_tooltips(rows)


def collective_table(data: DashboardData, run: Any, rank: Any) -> tuple[list[dict[str, Any]], str]:
    """Collectives table rows and note for the rank filter (``all`` or a rank)."""
    rd = data.get(run)
    rows, total = tables.collective_rows(rd.analysis.collectives, _rank_filter(rd, rank))
    return rows, layout.table_note(len(rows), total, "collectives")


def _rank_filter(rd: RunData, rank: Any) -> int | str:
    """A table's rank filter: ``"all"`` (also for None or empty) or a rank of ``rd``."""
    return "all" if rank in (None, "", "all") else rd.rank(rank)


def operator_table(data: DashboardData, run: Any, rank: Any) -> tuple[Any, ...]:
    """The Operators tab for the rank filter (``all`` or a rank): figure, operator rows and
    tooltips, call-site rows and tooltips."""
    rd = data.get(run)
    return operator_views.operator_update(rd, _rank_filter(rd, rank))


def compare_update(data: DashboardData, a: Any, b: Any, warmup: Any = None) -> list[Any]:
    """Compare body for base run ``a`` and new run ``b`` (warm-up steps as the checklist says)."""
    return layout.compare_body(data, a, b, include_warmup(warmup))


# -- wiring --------------------------------------------------------------------------------

def _nu(value: Any) -> Any:
    return dash.no_update if value is None else value


def _checked(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, with a value the browser should not have sent answered 400 Bad Request
    (not a 500 with a traceback in the log)."""
    try:
        return fn(*args)
    except UsageError as e:
        raise BadRequest(str(e)) from None


def register(app: dash.Dash, data: DashboardData) -> None:
    """Attach every callback of the dashboard to ``app``, serving ``data``."""

    @app.callback(Output("tab-content", "children"), Input("tabs", "value"), Input("run", "value"),
                  Input("warmup", "value"), State("selection", "data"),
                  prevent_initial_call=True)  # the page holds the first Overview
    def _render_tab(tab: str, run: Any, warmup: Any, selection: dict[str, Any] | None) -> Any:
        return _checked(render_tab, data, tab, run, selection, warmup)

    # One callback both ways (Dash allows a cycle only within one callback): the URL sets
    # the state on load and on back/forward; a change of state rewrites the URL.
    @app.callback(Output("url", "search"), Output("run", "value"), Output("tabs", "value", allow_duplicate=True),
                  Output("selection", "data", allow_duplicate=True), Output("warmup", "value"),
                  Output("url-loaded", "data"),
                  Input("url", "search"), Input("run", "value"), Input("tabs", "value"), Input("selection", "data"),
                  Input("warmup", "value"), State("url-loaded", "data"), prevent_initial_call="initial_duplicate")
    def _state(search: Any, run: Any, tab: Any, selection: Any, warmup: Any, loaded: Any) -> Any:
        trig = ctx.triggered_id if isinstance(ctx.triggered_id, str) else None
        out = sync_state(data, trig, search, run, tab, selection, warmup, loaded is True)
        return (*(_nu(v) for v in out), dash.no_update if loaded is True else True)

    @app.callback(Output("selection", "data", allow_duplicate=True), Output("tabs", "value", allow_duplicate=True),
                  Input({"type": "pick", "name": ALL}, "clickData"), State("run", "value"),
                  State("selection", "data"), prevent_initial_call=True)
    def _pick(clicks: list[Any], run: Any, selection: dict[str, Any] | None) -> Any:
        trig = ctx.triggered_id
        if not isinstance(trig, dict):
            return dash.no_update, dash.no_update
        click = None
        for item, value in zip(ctx.inputs_list[0], clicks):
            if item["id"] == trig:
                click = value
        out = _checked(pick, data, run, trig.get("name"), click, selection)
        return (dash.no_update, dash.no_update) if out is None else out

    timeline_callbacks.register(app, data, _checked)

    @app.callback(Output("k-table", "data"), Output("k-note", "children"), Output("k-table", "tooltip_data"),
                  Input("k-rank", "value"), State("run", "value"), prevent_initial_call=True)
    def _kernels(rank: Any, run: Any) -> Any:
        if ctx.triggered_id is None:
            return dash.no_update, dash.no_update, dash.no_update
        return _checked(kernel_table, data, run, rank)

    @app.callback(Output("c-table", "data"), Output("c-note", "children"), Input("c-rank", "value"),
                  State("run", "value"), prevent_initial_call=True)
    def _collectives(rank: Any, run: Any) -> Any:
        if ctx.triggered_id is None:
            return dash.no_update, dash.no_update
        return _checked(collective_table, data, run, rank)

    @app.callback(Output("op-graph", "figure"), Output("op-table", "data"), Output("op-table", "tooltip_data"),
                  Output("op-sites", "data"), Output("op-sites", "tooltip_data"), Input("op-rank", "value"),
                  State("run", "value"), prevent_initial_call=True)
    def _operators(rank: Any, run: Any) -> Any:
        if ctx.triggered_id is None:
            return (dash.no_update,) * 5
        return _checked(operator_table, data, run, rank)

    @app.callback(Output("cmp-body", "children"), Input("cmp-a", "value"), Input("cmp-b", "value"),
                  State("warmup", "value"), prevent_initial_call=True)
    def _compare(a: Any, b: Any, warmup: Any) -> Any:
        if ctx.triggered_id is None:
            return dash.no_update
        return _checked(compare_update, data, a, b, warmup)


__all__ = ["render_tab", "url_state", "state_url", "sync_state", "include_warmup", "pick", "timeline_figure",
           "kernel_table", "collective_table", "operator_table", "compare_update", "register"]
