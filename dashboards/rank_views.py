"""The distributed view: the Ranks and Collectives tabs, built from a loaded run.

Ranks: who is the straggler and what it costs the others (ms), each rank's computation /
communication / waiting split, how long the others waited for each rank per step, step
times, and arrival skew over time.  Collectives: operations by kind and message size with
their bus bandwidth, and every operation in a table.  A tab with nothing to show says why.
"""
from __future__ import annotations

from typing import Any

from dash import dash_table, dcc, html

from perfscope.analyzers.distributed import caused_wait, collective_sizes, comm_overlap, without_steps
from perfscope.dashboards import figures, rank_figures, tables
from perfscope.dashboards.data import RunData
from perfscope.dashboards.layout import GRAPH_CONFIG, TABLE_STYLE, empty_reason, pick_graph, rank_filter, table_note
from perfscope.reports.style import STRAGGLER_COLOR, fmt_duration


def straggler_of(rd: RunData) -> int | None:
    """The rank the others waited for longest, or None when no rank made anyone wait."""
    s = rd.analysis.stragglers
    if s is None or s.empty or float(s["cost_to_others_ns"].max()) <= 0:
        return None
    return int(s.sort_values("cost_to_others_ns", ascending=False, kind="stable")["rank"].iloc[0])


def straggler_callout(rd: RunData) -> html.Div:
    """One line naming the straggler and its cost to the others (or saying there is none)."""
    rank = straggler_of(rd)
    if rank is None:
        return html.Div("No straggler: no rank arrived late enough at a collective to make the others wait.",
                        id="straggler-callout", className="straggler none")
    r = rd.analysis.stragglers.set_index("rank").loc[rank]
    return html.Div([
        html.B(f"Straggler: rank {rank}", style={"color": STRAGGLER_COLOR}),
        f" — the other ranks waited {fmt_duration(float(r['cost_to_others_ns']))} for it in all "
        f"(it arrived last at {int(r['last_count'])} of {int(r['ops'])} collectives, "
        f"{fmt_duration(float(r['mean_lateness_ns']))} after the first rank on average). "
        "Click its bar or row to open its timeline.",
    ], id="straggler-callout", className="straggler", **{"data-rank": str(rank)},
        style={"borderLeft": f"4px solid {STRAGGLER_COLOR}", "padding": "6px 10px", "margin": "8px 0",
               "background": "#fef3f2"})


def ranks(rd: RunData, include_warmup: bool = False) -> html.Div:
    """Ranks tab: straggler callout and ranking, per-rank communication split, the wait
    each rank caused per step, step times, arrival skew over time."""
    n_ranks = len(set(rd.run.ranks) | set(rd.steps["rank"].unique().tolist()))
    if n_ranks < 2:
        only = rd.run.ranks[0] if rd.run.ranks else 0
        return empty_reason(
            f"One rank only (rank {only}): the Ranks view compares ranks (stragglers, waits, arrival skew), so "
            "it needs a run of two or more ranks, e.g. perfscope record -- torchrun --nproc-per-node 2 train.py. "
            "This rank's steps are on the Overview and Timeline tabs.", "ranks")
    if rd.steps.empty:
        return empty_reason("No steps in this run, so there is nothing to compare across ranks per step "
                            "(see the Overview tab for why no steps were found).", "ranks")
    steps = rd.summary_steps(include_warmup)
    warm = rd.warmup if include_warmup else ()
    straggler = straggler_of(rd)
    caused = caused_wait(rd.analysis.collectives, rd.steps)
    if not include_warmup:
        caused = without_steps(caused, rd.warmup)
    return html.Div([
        straggler_callout(rd),
        pick_graph("stragglers", rank_figures.straggler_cost_bar(rd.analysis.stragglers)),
        pick_graph("overlap", rank_figures.comm_overlap_bars(comm_overlap(steps), straggler)),
        pick_graph("heat-waited", rank_figures.caused_wait_heatmap(caused, warm)),
        pick_graph("heat-wall", figures.rank_step_heatmap(steps, "wall_ns", warmup=warm)),
        dcc.Graph(figure=rank_figures.arrival_skew_over_time(rd.analysis.collectives, straggler), config=GRAPH_CONFIG),
    ])


def _no_collectives_reason(rd: RunData) -> str:
    """Why a run has no collectives, in words."""
    ranks = rd.run.ranks
    if len(ranks) <= 1:
        return (f"No collectives: this is a single-rank trace (rank {ranks[0] if ranks else 0}), so there was no "
                "other rank to communicate with and NCCL ran no collective. Collectives appear for runs of two or "
                "more ranks (perfscope record -- torchrun --nproc-per-node N train.py).")
    return (f"No collectives on these {len(ranks)} ranks: the trace holds no NCCL operations or kernels. Either "
            "the job does not communicate, or the NCCL collector did not run (perfscope record enables it; an "
            "imported trace needs NCCL kernels in it).")


def collectives(rd: RunData) -> html.Div:
    """Collectives tab: operations by kind and size with bus bandwidth, then every operation
    (rank filter, sortable), or the reason there are none."""
    coll = rd.analysis.collectives
    if coll is None or coll.empty:
        return empty_reason(_no_collectives_reason(rd), "collectives")
    sizes = collective_sizes(coll)
    size_rows = tables.size_rows(sizes)
    rows, total = tables.collective_rows(coll)
    notes: list[Any] = []
    if "matched_ranks" in coll.columns and not (coll["matched_ranks"] > 1).any():
        notes.append(html.P("Arrival skew and waits are unknown: no operation was matched across ranks (only one "
                            "rank's trace is here, or the ranks' operations do not line up).", className="note"))
    return html.Div([
        *notes,
        html.H4("By operation and message size"),
        dash_table.DataTable(id="c-sizes", columns=tables.SIZE_COLUMNS, data=size_rows, sort_action="native",
                             page_action="native", page_size=10, **TABLE_STYLE),
        dcc.Graph(figure=rank_figures.busbw_by_size(coll, sizes), config=GRAPH_CONFIG),
        html.H4("Every operation"),
        html.Div([html.Span("rank "), html.Div(rank_filter("c-rank", rd), style={"width": "180px"}),
                  html.Span(table_note(len(rows), total, "collectives"), id="c-note", style={"marginLeft": "16px"})],
                 style={"display": "flex", "alignItems": "center", "marginBottom": "8px"}),
        dash_table.DataTable(id="c-table", columns=tables.COLLECTIVE_COLUMNS, data=rows, sort_action="native",
                             filter_action="native", page_action="native", page_size=25,
                             sort_by=[{"column_id": "dur_us", "direction": "desc"}], **TABLE_STYLE),
    ])


__all__ = ["collectives", "ranks", "straggler_callout", "straggler_of"]
