"""The dashboard's page and the content of each tab, built from a loaded run.

Every builder is a plain function (data in, Dash components out).  Untrusted names go only
into component children and DataTable cells, which React renders as text; nothing here
uses ``dangerously_allow_html`` or Markdown.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from dash import dash_table, dcc, html

from perfscope.dashboards import figures, tables
from perfscope.dashboards.step_breakdown import step_breakdown
from perfscope.dashboards.data import DashboardData, RunData
from perfscope.reports.style import BUCKET_COLORS, BUCKET_LABELS, fmt_duration, fmt_evidence, fmt_share
from perfscope.reports.style import fmt_ms as _fmt_ms

TABS: tuple[tuple[str, str], ...] = (
    ("overview", "Overview"), ("ranks", "Ranks"), ("timeline", "Timeline"),
    ("collectives", "Collectives"), ("kernels", "Kernels"), ("operators", "Operators"), ("compare", "Compare"),
)
GRAPH_CONFIG: dict[str, Any] = {"displaylogo": False, "responsive": True}
_CARD = {"border": "1px solid #ddd", "borderRadius": "6px", "padding": "10px 14px", "margin": "8px 0"}
TABLE_STYLE: dict[str, Any] = dict(
    style_table={"overflowX": "auto"},
    style_cell={"fontFamily": "ui-monospace, monospace", "fontSize": "13px", "textAlign": "left",
                "maxWidth": "520px", "overflow": "hidden", "textOverflow": "ellipsis", "whiteSpace": "nowrap"},
    style_header={"fontWeight": "bold", "backgroundColor": "#f3f3f3"},

    tooltip_delay=300, tooltip_duration=None,
)


WARMUP_TOGGLE = "include"  # the warm-up checklist's value when warm-up steps are included


def fmt_ms(ns: float | int | None) -> str:
    """``62.4 ms`` (3 significant digits; ``n/a`` when unknown) from nanoseconds."""
    if ns is None or (isinstance(ns, float) and np.isnan(ns)):
        return "n/a"
    return _fmt_ms(float(ns))


def empty_reason(text: str, tab: str) -> html.Div:
    """What a tab shows instead of empty content: why it is empty (class ``empty-reason``)."""
    return html.Div(text, id=f"empty-{tab}", className="empty-reason",
                    style={"padding": "14px 16px", "margin": "12px 0", "background": "#f8f9fb",
                           "border": "1px solid #e4e7ec", "borderRadius": "6px", "color": "#344054"})


def median_step_ns(steps: pd.DataFrame) -> float | None:
    """Median of ``wall_ns`` over every (rank, step) row, or None without steps."""
    if steps.empty:
        return None
    return float(steps["wall_ns"].median())


def default_selection(rd: RunData) -> dict[str, Any]:
    """The (rank, step) the Timeline opens on: the first rank's median-length step."""
    s = rd.steps
    if s.empty:
        return {"run": rd.index, "rank": None, "step": None}
    rank = int(s["rank"].min())
    mine = s[s["rank"] == rank]
    med = mine["wall_ns"].median()
    step = int(mine.loc[(mine["wall_ns"] - med).abs().idxmin(), "step"])
    return {"run": rd.index, "rank": rank, "step": step}


# -- page ----------------------------------------------------------------------------------

def page(data: DashboardData) -> html.Div:
    """The whole page: header with run picker, tabs, tab content and the selection store.

    The Overview of the first run is part of the page itself (no callback round trip
    before the first screen); other tabs are filled by the ``render_tab`` callback, so each
    costs only when opened.
    """
    options = [{"label": label, "value": i} for i, label in enumerate(data.labels)]
    tabs = [dcc.Tab(label=label, value=value, id=f"tab-{value}") for value, label in TABS
            if value != "compare" or len(data) >= 2]
    return html.Div([
        # The state (run, tab, rank, step, zoom, warm-up) lives in the URL: a reload or a
        # shared link opens the same view (callbacks.url_state / state_url).
        dcc.Location(id="url", refresh=False),
        html.Div([
            html.H2("perfscope", style={"margin": "0 16px 0 0", "display": "inline-block"}),
            html.Span("run: ", style={"marginRight": "6px"}),
            html.Div(dcc.Dropdown(id="run", options=options, value=0, clearable=False),
                     style={"display": "inline-block", "width": "420px", "verticalAlign": "middle"}),
            dcc.Checklist(id="warmup", options=[{"label": " include warm-up steps in summaries",
                                                 "value": WARMUP_TOGGLE}],
                          value=[], style={"marginLeft": "20px"}),
        ], style={"display": "flex", "alignItems": "center", "padding": "8px 0"}),
        dcc.Tabs(id="tabs", value="overview", children=tabs),
        dcc.Loading(html.Div(kept_tab(data, "overview", 0, False, lambda: overview(data.get(0))), id="tab-content",
                             style={"padding": "8px 4px"}),
                    type="default", delay_show=300, show_initially=False),
        dcc.Store(id="selection", data=None),
        dcc.Store(id="url-loaded", data=False),  # set once the URL's state has been applied
    ], style={"fontFamily": "system-ui, sans-serif", "margin": "0 18px"})


def kept_tab(data: DashboardData, tab: str, run: int, include_warmup: bool, build: Callable[[], Any]) -> Any:
    """Tab ``tab`` of run ``run`` as ``build()`` makes it, built once and kept
    (:meth:`DashboardData.kept`): a tab depends only on the run and the warm-up choice, so
    opening it again (or the page's Overview, then the Overview tab) costs nothing."""
    return data.kept(("tab", tab, run, include_warmup), build)


# -- overview ------------------------------------------------------------------------------

def _warmup_fact(rd: RunData, include_warmup: bool) -> str:
    """``step 0 (201 ms), excluded from summaries`` (or ``none detected``)."""
    if not rd.warmup:
        return "none detected (no leading step lasts 1.5 x the median step)"
    walls = rd.steps[rd.steps["step"].isin(list(rd.warmup))].groupby("step")["wall_ns"].max()
    listed = ", ".join(f"{s} ({fmt_duration(float(w))})" for s, w in walls.items())
    word = "step" if len(rd.warmup) == 1 else "steps"
    return f"{word} {listed}, {'included in' if include_warmup else 'excluded from'} summaries"


def overview_counters(rd: RunData) -> html.Div:
    """The Overview's GPU counters: how many NVML samples the run holds and, per counter,
    the mean over all ranks' samples, the lowest rank mean (and its rank) and the maximum;
    or why the run holds none."""
    s = rd.gpu_counters
    if s.empty:
        return html.Div([html.H4("GPU counters"), html.P(
            "No GPU counter samples in this run: the NVML sampler did not run (an imported trace, or recorded "
            "without --metrics / nvidia-ml-py).", className="muted")], id="gpu-counters")
    head = html.Tr([html.Th(h, style={"textAlign": "left", "paddingRight": "14px"})
                    for h in ("GPU counter", "mean", "lowest rank mean", "max")])
    def value(x: float, unit: str) -> str:  # 1,530 MHz, 108 W, 5.71 %, 0.0204 GB/s: no exponents
        return f"{x:,.0f} {unit}" if abs(x) >= 100 else f"{x:.3g} {unit}"

    cell = {"paddingRight": "14px"}
    body = []
    for _, g in s.groupby("metric", sort=False):
        unit = str(g["unit"].iloc[0])
        mean = float((g["mean"] * g["samples"]).sum() / g["samples"].sum())
        low = g.loc[g["mean"].idxmin()]
        body.append(html.Tr([html.Td(str(g["label"].iloc[0]), style=cell), html.Td(value(mean, unit), style=cell),
                             html.Td(f"{value(float(low['mean']), unit)} (rank {int(low['rank'])})", style=cell),
                             html.Td(value(float(g["max"].max()), unit), style=cell)]))
    n = int(rd.row_counts.get("metrics", 0))
    return html.Div([html.H4("GPU counters (NVML)"),
                     html.P(f"{n:,} samples; tracks of them under each rank's lanes in the Timeline.",
                            style={"color": "#555", "fontSize": "13px", "margin": "0 0 4px"}),
                     html.Table([head, *body])], id="gpu-counters")


def _facts(rd: RunData, include_warmup: bool = False) -> list[tuple[str, str]]:
    meta, steps = rd.analysis.meta or rd.run.meta, rd.summary_steps(include_warmup)
    rank_meta: list[dict[str, Any]] = list(rd.run.meta.get("ranks", []))
    gpus = Counter(str((r.get("gpu") or {}).get("name", "unknown")) for r in rank_meta if r.get("gpu"))
    hosts = sorted({str(r.get("host")) for r in rank_meta if r.get("host")})
    versions: dict[str, set[str]] = {}
    for r in rank_meta:
        for k, v in (r.get("versions") or {}).items():
            if v not in (None, ""):
                versions.setdefault(str(k), set()).add(str(v))
    facts = [
        ("run", rd.label),
        ("status", str(rd.run.status)),
        ("source", str(meta.get("source", "unknown"))),
        ("ranks", f"{len(rd.run.ranks)}" + (f" of world size {meta['world_size']}" if meta.get("world_size") else "")),
        ("hosts", ", ".join(hosts) if hosts else "unknown"),
        ("GPUs", ", ".join(f"{n} x {name}" for name, n in gpus.most_common()) or "unknown"),
        ("versions", "; ".join(f"{k} {' / '.join(sorted(v))}" for k, v in sorted(versions.items())) or "unknown"),
        ("steps", f"{int(rd.steps['step'].nunique()) if not rd.steps.empty else 0} steps"),
        ("warm-up", _warmup_fact(rd, include_warmup)),
        ("median step time", fmt_ms(median_step_ns(steps))),
        ("mean step time", fmt_ms(float(steps["wall_ns"].mean()) if not steps.empty else None)),
        ("events", f"{sum(v for k, v in rd.row_counts.items() if k not in ('steps', 'metrics')):,}"),
    ]
    return facts


def _findings(rd: RunData) -> list[str]:
    out = [f"{r.title}: {r.message}" for r in rd.analysis.recommendations if r.bucket == "environment"]
    out += [str(w) for w in rd.analysis.warnings]
    for r in rd.run.meta.get("ranks", []):
        for w in r.get("warnings") or []:
            out.append(f"rank {r.get('rank')}: {w}")
        dropped = {k: v for k, v in (r.get("dropped_events") or {}).items() if v}
        if dropped:
            out.append(f"rank {r.get('rank')} dropped events: " + ", ".join(f"{k}={v}" for k, v in dropped.items()))
    return out


def _evidence(ev: dict[str, Any]) -> str:
    """``cost to others = 647 ms; last share = 87.5%``: each value with its unit."""
    return "; ".join("{} = {}".format(*fmt_evidence(k, v)) for k, v in ev.items())


def recommendation_cards(rd: RunData, top: int = 5) -> list[html.Div | html.P]:
    """One card per top recommendation: title, message, evidence, saving, the change to try."""
    recs = [r for r in rd.analysis.recommendations if r.bucket != "environment"][:top]
    if not recs:
        return [html.P("No recommendation fired for this run.", className="muted")]
    cards = []
    for r in recs:
        saving = f"saves about {fmt_duration(r.saving_ns)} per step ({fmt_share(r.saving_share)})"
        label = BUCKET_LABELS.get(r.bucket, r.bucket)
        body: list[Any] = [
            html.Div([html.B(r.title), html.Span(f"  [{label}] {saving}", style={"color": "#555"})]),
            html.P(r.message, style={"margin": "4px 0"}),
        ]
        if r.evidence:
            body.append(html.Div(["evidence: ", html.Code(_evidence(r.evidence))], style={"fontSize": "13px"}))
        if r.change:
            body.append(html.Div(["try: ", html.Code(r.change)], style={"fontSize": "13px", "marginTop": "2px"}))
        if r.ranks:
            body.append(html.Div(f"ranks: {', '.join(map(str, r.ranks))}", style={"fontSize": "13px"}))
        cards.append(html.Div(body, className="recommendation",
                              style={**_CARD, "borderLeft": f"4px solid {BUCKET_COLORS.get(r.bucket, '#999')}"}))
    return cards


def pick_graph(name: str, fig: Any) -> dcc.Graph:
    """A graph whose clicks open the Timeline (``callbacks.pick`` reads ``name``)."""
    return dcc.Graph(id={"type": "pick", "name": name}, figure=fig, config=GRAPH_CONFIG)


def _no_steps_reason(rd: RunData) -> str:
    said = [str(w) for w in rd.analysis.warnings if "step" in str(w).lower()]
    return ("No steps in this run, so there is no step-time breakdown: perfscope found no step markers "
            "(torch.profiler's ProfilerStep#N, perfscope.step() / prof.step(), or optimizer steps). Mark steps in "
            "the training loop, or name them with perfscope analyze --step-pattern." + (" " + " ".join(said) if said else ""))


def overview(rd: RunData, include_warmup: bool = False) -> html.Div:
    """Overview tab: the step breakdown in plain HTML (drawn before plotly.js has loaded),
    run facts, environment findings, bucket bars (warm-up steps left out unless
    ``include_warmup``, then hatched), top recommendations."""
    facts = html.Table([html.Tr([html.Th(k, style={"textAlign": "left", "paddingRight": "14px"}), html.Td(v)])
                        for k, v in _facts(rd, include_warmup)], id="run-facts")
    findings = _findings(rd)
    env = rd.run.meta.get("environment") or {}
    env_block = html.Details([
        html.Summary(f"environment snapshot ({len(env)} entries)"),
        html.Pre("\n".join(f"{k}={v}" for k, v in sorted(env.items(), key=lambda kv: str(kv[0]))),
                 style={"fontSize": "12px"}),
    ]) if env else html.Div()
    summary = rd.summary_steps(include_warmup)
    return html.Div([
        step_breakdown(summary, rd.warmup, include_warmup),
        html.Div([
            html.Div([html.H4("Run"), facts], style={"flex": "1", "minWidth": "380px"}),
            html.Div([
                html.H4("Environment findings"),
                html.Ul([html.Li(f) for f in findings]) if findings else html.P("None."),
                env_block,
            ], style={"flex": "1", "minWidth": "380px"}),
        ], style={"display": "flex", "gap": "24px", "flexWrap": "wrap"}),
        overview_counters(rd),
        *([empty_reason(_no_steps_reason(rd), "overview")] if rd.steps.empty else [
            pick_graph("steps", figures.bucket_bars_by_step(summary, warmup=rd.warmup)),
            pick_graph("ranks", figures.bucket_bars_by_rank(summary))]),
        html.H4("Top recommendations"),
        html.Div(recommendation_cards(rd), id="recommendations"),
    ])


# -- timeline ------------------------------------------------------------------------------

def step_options(rd: RunData, rank: int | None) -> list[dict[str, Any]]:
    """Dropdown options of the steps that ``rank`` has (label shows its wall time)."""
    s = rd.steps if rank is None else rd.steps[rd.steps["rank"] == rank]
    s = s.drop_duplicates("step").sort_values("step")
    return [{"label": f"step {int(r.step)} ({fmt_ms(r.wall_ns)})", "value": int(r.step)} for r in s.itertuples()]


# -- tables --------------------------------------------------------------------------------

def rank_filter(id_: str, rd: RunData) -> dcc.Dropdown:
    """A rank picker for a table: ``all ranks`` or one rank of the run."""
    opts = [{"label": "all ranks", "value": "all"}] + [{"label": f"rank {r}", "value": int(r)} for r in rd.run.ranks]
    return dcc.Dropdown(id=id_, options=opts, value="all", clearable=False)


def table_note(shown: int, total: int, what: str) -> str:
    """``1,234 kernel rows (showing the 500 longest)``."""
    return f"{total:,} {what}" + (f" (showing the {shown:,} longest)" if shown < total else "")


def kernels(rd: RunData) -> html.Div:
    """Kernels tab: per-rank filter and a sortable, filterable table of kernels (or why
    there are none)."""
    rows, total = tables.kernel_rows(rd.analysis.kernels)
    if not total:
        return empty_reason("No GPU kernels in this run: the trace holds no kernel records (recorded without the "
                            "CUPTI collector, or a CPU-only trace). perfscope record captures them on a GPU job.",
                            "kernels")
    return html.Div([
        html.Div([html.Span("rank "), html.Div(rank_filter("k-rank", rd), style={"width": "180px"}),
                  html.Span(table_note(len(rows), total, "kernel rows"), id="k-note", style={"marginLeft": "16px"})],
                 style={"display": "flex", "alignItems": "center", "marginBottom": "8px"}),
        dash_table.DataTable(id="k-table", columns=tables.KERNEL_COLUMNS, data=rows, sort_action="native",
                             tooltip_data=tables.name_tooltips(rows),
                             filter_action="native", page_action="native", page_size=25,
                             sort_by=[{"column_id": "total_ms", "direction": "desc"}], **TABLE_STYLE),
    ])


# -- compare -------------------------------------------------------------------------------

def compare(data: DashboardData, include_warmup: bool = False) -> html.Div:
    """Compare tab: base and new run pickers; the body is filled by ``compare_body``."""
    options = [{"label": label, "value": i} for i, label in enumerate(data.labels)]
    return html.Div([
        html.Div([
            html.Span("base "), html.Div(dcc.Dropdown(id="cmp-a", options=options, value=0, clearable=False),
                                         style={"width": "320px"}),
            html.Span("new ", style={"marginLeft": "16px"}),
            html.Div(dcc.Dropdown(id="cmp-b", options=options, value=1 if len(data) > 1 else 0, clearable=False),
                     style={"width": "320px"}),
        ], style={"display": "flex", "alignItems": "center"}),
        html.Div(compare_body(data, 0, 1 if len(data) > 1 else 0, include_warmup), id="cmp-body"),
    ])


def _verdict(cmp: Any) -> list[Any]:
    """The gating verdict of a ``Comparison`` and its warnings, as text."""
    out: list[Any] = []
    rows = cmp.gating_rows
    if not rows.empty:
        r = rows.iloc[0]
        out.append(html.P([html.B(f"verdict: {cmp.verdict}"),
                           f" ({cmp.metric}: {100 * float(r['change']):+.1f}% of the base median step, "
                           f"{100 * cmp.confidence:.0f}% interval {100 * float(r['ci_low']):+.1f}% .. "
                           f"{100 * float(r['ci_high']):+.1f}%; allowed {100 * cmp.max_regression:.0f}%)"],
                          id="cmp-verdict"))
    if cmp.warnings:
        out.append(html.Ul([html.Li(str(w)) for w in cmp.warnings]))
    return out


def compare_body(data: DashboardData, base: Any, new: Any, include_warmup: bool = False) -> list[Any]:
    """Median step times, verdict, bucket deltas (median and per step), kernel and
    collective changes of base run ``base`` and new run ``new`` (indices), on their steady
    steps unless ``include_warmup``."""
    a, b = data.get(base), data.get(new)
    sa, sb = a.summary_steps(include_warmup), b.summary_steps(include_warmup)
    if sa.empty or sb.empty:
        who = " and ".join(r.label for r, s in ((a, sa), (b, sb)) if s.empty)
        return [empty_reason(f"Nothing to compare: {who} has no steps (the Overview tab says why).", "compare")]
    ma, mb = median_step_ns(sa), median_step_ns(sb)
    change = f" ({100 * (mb - ma) / ma:+.1f}%)" if ma and mb else ""
    warm = [f"{r.label}: {len(r.warmup)}" for r in (a, b) if r.warmup]
    if warm:
        change += f"; warm-up steps {'included' if include_warmup else 'excluded'} ({', '.join(warm)})"
    cmp = data.comparison(a.index, b.index, include_warmup)
    kernel_rows = tables.change_rows(cmp.kernels)
    coll_rows = tables.change_rows(cmp.collectives)
    body: list[Any] = [
        html.P(f"median step time: base {a.label} {fmt_ms(ma)}, new {b.label} {fmt_ms(mb)}{change}",
               id="cmp-summary"),
        *_verdict(cmp),
        dcc.Graph(figure=figures.compare_buckets(sa, sb, a.label, b.label), config=GRAPH_CONFIG),
        dcc.Graph(figure=figures.compare_step_deltas(sa, sb), config=GRAPH_CONFIG),
        html.H4("Kernels whose time per step changed most"),
        dash_table.DataTable(id="cmp-kernels", columns=tables.KERNEL_CHANGE_COLUMNS, data=kernel_rows,
                             tooltip_data=tables.name_tooltips(kernel_rows),
                             sort_action="native", page_size=20, **TABLE_STYLE),
    ]
    if coll_rows:
        body += [html.H4("Collectives whose time per step changed most"),
                 dash_table.DataTable(id="cmp-collectives", columns=tables.COLLECTIVE_CHANGE_COLUMNS, data=coll_rows,
                                      sort_action="native", page_size=20, **TABLE_STYLE)]
    return body


__all__ = ["TABS", "GRAPH_CONFIG", "TABLE_STYLE", "WARMUP_TOGGLE", "page", "overview", "kernels", "compare",
           "compare_body", "empty_reason", "overview_counters", "pick_graph", "rank_filter", "recommendation_cards", "table_note",
           "default_selection", "step_options", "median_step_ns", "fmt_ms"]
