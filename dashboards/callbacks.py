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

from collections.abc import Callable
from typing import Any

import dash
from dash import ALL, Input, Output, State, ctx, html
from werkzeug.exceptions import BadRequest

from perfscope.dashboards import layout, tables, timeline_callbacks
from perfscope.dashboards.data import DashboardData, RunData, strict_int
# The Timeline tab lives in timeline_callbacks; its figure is also reached from here.
from perfscope.dashboards.timeline_callbacks import timeline_figure_of as timeline_figure
from perfscope.errors import UsageError


def _selection(rd: RunData, selection: dict[str, Any] | None) -> dict[str, Any]:
    """``selection`` (as ints) if it belongs to this run and names a step it has, else the default."""
    if not isinstance(selection, dict):
        return layout.default_selection(rd)
    try:
        run, rank, step = (strict_int(selection.get(k), k) for k in ("run", "rank", "step"))
        rd.step_window(rank, step)
    except UsageError:
        return layout.default_selection(rd)
    return {"run": run, "rank": rank, "step": step} if run == rd.index else layout.default_selection(rd)


def render_tab(data: DashboardData, tab: str, run: Any, selection: dict[str, Any] | None) -> Any:
    """Content of tab ``tab`` for run ``run`` (Timeline opens on ``selection``)."""
    if tab == "compare":
        return layout.compare(data) if len(data) >= 2 else dash_text("Compare needs two runs: "
                                                                      "perfscope dashboard BASE NEW")
    rd = data.get(run)
    if tab == "ranks":
        return layout.ranks(rd)
    if tab == "timeline":
        return timeline_callbacks.timeline_tab(data, rd, _selection(rd, selection))
    if tab == "collectives":
        return layout.collectives(rd)
    if tab == "kernels":
        return layout.kernels(rd)
    return layout.overview(rd)


def dash_text(text: str) -> Any:
    """A paragraph of plain text."""
    return html.P(text)


def pick(data: DashboardData, run: Any, graph: str | None, click: dict[str, Any] | None,
         selection: dict[str, Any] | None) -> tuple[dict[str, Any], str] | None:
    """A click on a bar or heatmap cell: the new selection and the Timeline tab.

    Args:
        graph: which graph was clicked: ``steps`` (bucket bars per step), ``ranks`` (per
            rank), ``heat-wall`` / ``heat-sync`` (rank x step cells), ``stragglers``.
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
        elif graph == "ranks":
            sel["rank"] = strict_int(point["customdata"], "rank") if "customdata" in point else _rank_of(point.get("x"))
        elif graph in ("heat-wall", "heat-sync"):
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


def compare_update(data: DashboardData, a: Any, b: Any) -> list[Any]:
    """Compare body for base run ``a`` and new run ``b``."""
    return layout.compare_body(data, a, b)


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
                  State("selection", "data"), prevent_initial_call=True)  # the page holds the first Overview
    def _render_tab(tab: str, run: Any, selection: dict[str, Any] | None) -> Any:
        return _checked(render_tab, data, tab, run, selection)

    @app.callback(Output("selection", "data"), Output("tabs", "value"),
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

    @app.callback(Output("cmp-body", "children"), Input("cmp-a", "value"), Input("cmp-b", "value"),
                  prevent_initial_call=True)
    def _compare(a: Any, b: Any) -> Any:
        if ctx.triggered_id is None:
            return dash.no_update
        return _checked(compare_update, data, a, b)


__all__ = ["render_tab", "pick", "timeline_figure", "kernel_table",
           "collective_table", "compare_update", "register"]
