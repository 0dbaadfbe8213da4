"""The Operators tab: where the host time of the steps goes, by PyTorch operator and by the
user's call site (``Analysis.operators``, ``operators_overall``, ``operator_sites`` and
``launch_operators``, from :mod:`perfscope.analyzers.operators`).

Operator names and call sites come from the trace: DataTable cells and tooltips show them as
text, and the figure's labels go through :mod:`perfscope.reports.style`'s escaping.
"""
from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from dash import dash_table, dcc, html

from perfscope.dashboards import tables
from perfscope.dashboards.data import RunData
from perfscope.dashboards.figures import _base_layout, empty_figure
from perfscope.dashboards.layout import GRAPH_CONFIG, TABLE_STYLE, empty_reason, rank_filter, table_note
from perfscope.reports.style import BUCKET_COLORS, escape_html, fmt_duration, fmt_share, hover_text

TOP = 15


def top_operators_figure(ops: pd.DataFrame, top: int = TOP) -> go.Figure:
    """Horizontal bars: the ``top`` operators by self host time (ms, summed over ranks).

    Args:
        ops: ``Analysis.operators_overall`` or one rank's rows of ``Analysis.operators``
            (``name``, ``kind``, ``calls``, ``self_ns``, ``total_ns``, ``self_share``).

    Returns:
        one ``go.Bar``, largest on top; labels cut to 50 characters and escaped, the full
        name (wrapped, bounded) in the hover.
    """
    if ops is None or ops.empty:
        return empty_figure("no operators")
    df = ops.sort_values("self_ns", ascending=False, kind="stable").head(top).iloc[::-1]
    labels, seen = [], set()
    for name in df["name"]:
        label = escape_html(name, 50)
        while label in seen:  # two names cut to the same text stay two bars
            label += " "
        seen.add(label)
        labels.append(label)
    hover = [f"{hover_text(r.name)}<br>self {fmt_duration(r.self_ns)} of total {fmt_duration(r.total_ns)}, "
             f"{int(r.calls):,} calls ({fmt_share(r.self_share)} of self time)" for r in df.itertuples()]
    fig = go.Figure(go.Bar(orientation="h", x=df["self_ns"].to_numpy(dtype="float64") / 1e6, y=labels,
                           marker_color=BUCKET_COLORS["host"], hovertext=hover,
                           hovertemplate="%{hovertext}<extra></extra>"))
    fig = _base_layout(fig, "Top operators by self host time (in the analysed steps)", xaxis_title="self time (ms)",
                       height=max(260, 60 + 24 * len(df)), margin=dict(l=20, r=20, t=50, b=40))
    fig.update_yaxes(automargin=True, type="category")
    return fig


def _rows(df: pd.DataFrame, cols: dict[str, str]) -> list[dict[str, Any]]:
    """``df``'s columns as table records: ``*_ns`` columns in ms, shares in %, the rest as is."""
    out = pd.DataFrame(index=df.index)
    for src, dst in cols.items():
        if src not in df.columns:
            continue
        if src.endswith("_ns"):
            out[dst] = (pd.to_numeric(df[src], errors="coerce") / 1e6).round(3)
        elif src.endswith("share"):
            out[dst] = (100 * pd.to_numeric(df[src], errors="coerce")).round(2)
        else:
            out[dst] = df[src].astype(object)
    return tables.records(out.reset_index(drop=True))


OPERATOR_COLUMNS: list[dict[str, Any]] = [
    {"name": "operator", "id": "name", "type": "text"},
    {"name": "kind", "id": "kind", "type": "text"},
    {"name": "calls", "id": "calls", "type": "numeric"},
    {"name": "self ms", "id": "self_ms", "type": "numeric", "format": tables.fixed(2)},
    {"name": "total ms", "id": "total_ms", "type": "numeric", "format": tables.fixed(2)},
    {"name": "self %", "id": "self_pct", "type": "numeric", "format": tables.fixed(1)},
]
SITE_COLUMNS: list[dict[str, Any]] = [
    {"name": "rank", "id": "rank", "type": "numeric"},
    {"name": "call site", "id": "call_site", "type": "text"},
    {"name": "calls", "id": "calls", "type": "numeric"},
    {"name": "self ms", "id": "self_ms", "type": "numeric", "format": tables.fixed(2)},
    {"name": "top operator", "id": "top_operator", "type": "text"},
]


def operator_rows(rd: RunData, rank: Any) -> list[dict[str, Any]]:
    """The operator table's rows: summed over ranks (``all``) or one rank's."""
    a = rd.analysis
    df = a.operators_overall if rank in (None, "", "all") else a.operators[a.operators["rank"] == rank]
    return _rows(df, {"name": "name", "kind": "kind", "calls": "calls", "self_ns": "self_ms", "total_ns": "total_ms",
                      "self_share": "self_pct"})


def site_rows(rd: RunData, rank: Any) -> list[dict[str, Any]]:
    """The call-site table's rows (every rank, or one rank's)."""
    s = rd.analysis.operator_sites
    if rank not in (None, "", "all") and not s.empty:
        s = s[s["rank"] == rank]
    return _rows(s, {"rank": "rank", "call_site": "call_site", "calls": "calls", "self_ns": "self_ms",
                     "top_operator": "top_operator"})


def has_operators(rd: RunData) -> bool:
    """True when the analysis holds an operator view."""
    ops = getattr(rd.analysis, "operators", None)
    return isinstance(ops, pd.DataFrame) and not ops.empty


def operators(rd: RunData) -> html.Div:
    """Operators tab: top operators by self host time (figure and table) and the call sites
    behind them, with a rank filter; or why the run has none."""
    if not has_operators(rd):
        return empty_reason(
            "No operators: this run holds no CPU operator records. They come from torch.profiler traces "
            "(cpu_op and python_function events, imported with perfscope import kineto); perfscope's own recorder "
            "records GPU activity, NCCL and host hooks but not every PyTorch operator.", "operators")
    rows, sites = operator_rows(rd, "all"), site_rows(rd, "all")
    n_sites = len(rd.analysis.operator_sites)
    return html.Div([
        html.Div([html.Span("rank "), html.Div(rank_filter("op-rank", rd), style={"width": "180px"}),
                  html.Span("host time of operators that start inside the analysed steps; self = less their "
                            "children", style={"marginLeft": "16px", "color": "#666", "fontSize": "13px"})],
                 style={"display": "flex", "alignItems": "center", "marginBottom": "8px"}),
        dcc.Graph(id="op-graph", figure=top_operators_figure(rd.analysis.operators_overall), config=GRAPH_CONFIG),
        html.H4("Top operators"),
        dash_table.DataTable(id="op-table", columns=OPERATOR_COLUMNS, data=rows, sort_action="native",
                             filter_action="native", page_action="native", page_size=20,
                             tooltip_data=tables.name_tooltips(rows), **TABLE_STYLE),
        html.H4("Call sites behind the operator time"),
        html.Span(table_note(len(sites), n_sites, "call sites") if n_sites else
                  "No call sites: the trace holds no Python stacks (torch.profiler records them with "
                  "with_stack=True).", id="op-note"),
        html.Div(dash_table.DataTable(id="op-sites", columns=SITE_COLUMNS, data=sites, sort_action="native",
                                      filter_action="native", page_action="native", page_size=20,
                                      tooltip_data=tables.name_tooltips(sites, "call_site"), **TABLE_STYLE),
                 style={} if n_sites else {"display": "none"}),
    ])


def operator_update(rd: RunData, rank: Any) -> tuple[go.Figure, list[dict[str, Any]], list[dict[str, Any]],
                                                     list[dict[str, Any]], list[dict[str, Any]]]:
    """The Operators tab for the rank filter's value: figure, operator rows and tooltips,
    call-site rows and tooltips."""
    a = rd.analysis
    ops = a.operators_overall if rank == "all" else a.operators[a.operators["rank"] == rank]
    rows, sites = operator_rows(rd, rank), site_rows(rd, rank)
    return (top_operators_figure(ops), rows, tables.name_tooltips(rows), sites,
            tables.name_tooltips(sites, "call_site"))


__all__ = ["OPERATOR_COLUMNS", "SITE_COLUMNS", "has_operators", "operator_update", "operators", "top_operators_figure"]

