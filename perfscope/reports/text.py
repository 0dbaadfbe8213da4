"""Terminal text (rich tables) of an analysis, a comparison, a run's info and a doctor check.

Every renderer returns a string; ANSI colours only when asked (``color``).  Untrusted names
are printed as plain rich ``Text``, never as markup.
"""
from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfscope.analyzers import BUCKET_COLUMNS, BUCKETS, step_summary
from perfscope.analyzers.operators import top_call_sites, top_host_operators
from perfscope.analyzers.result import Analysis
from perfscope.reports.style import fmt_delta_ns, fmt_interval, fmt_ns, fmt_pct, short

if TYPE_CHECKING:
    import pandas as pd

    from perfscope.analyzers.compare import Comparison

# Rows of the top-kernels table, and how much of a (C++ template) kernel name it shows.
TOP_KERNELS = 10
# Rows of the top host operators and call sites tables.
TOP_OPERATORS = 10
KERNEL_NAME_WIDTH = 70
# "As wide as it needs": text going to a pipe or a file is never cut to a terminal's width.
NATURAL_WIDTH = 10_000
VERDICT_STYLE = {
    "regression": "bold red", "improvement": "bold green", "too_few_steps": "yellow",
    "inconclusive": "yellow", "slower": "", "faster": "green", "unchanged": "dim",
}
DOCTOR_STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _console(width: int, color: bool, **kw: Any) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None, **kw), buf


# -- an analysis --------------------------------------------------------------------------


def render_analysis_text(a: Analysis, *, width: int = 160, color: bool = False, steps: bool = False,
                         top_kernels: int = TOP_KERNELS) -> str:
    """The terminal report of an analysis, the answer first: run facts, the findings, the
    warnings, then the summary (median step per rank, stragglers, the ``top_kernels``
    kernels with the most GPU time, the host operators and call sites with the most self
    time when the run has operators) and, with ``steps``, every step's buckets."""
    con, buf = _console(width, color)
    meta = a.meta or {}
    con.print(Text(f"run {meta.get('run_id', '?')}  source={meta.get('source', '?')}  world_size={meta.get('world_size', '?')}  "
                   f"status={meta.get('status', '?')}", style="bold"))
    if len(a.steps):
        _print_findings(con, a)
    for w in a.warnings:
        con.print(Text(f"warning: {w}", style="yellow"))
    if len(a.steps) == 0:
        con.print("no steps to break down")
    else:
        con.print(_median_step_table(a))
        if len(a.stragglers):
            con.print(_stragglers_table(a.stragglers))
    kernels = _kernels_table(a.kernels, top_kernels)
    if kernels is not None:
        con.print(kernels)
    for table in _operator_tables(a):
        con.print(table)
    if len(a.steps) and steps:
        con.print(_steps_table(a.steps))
    elif len(a.steps):
        con.print(Text(f"(--steps lists each step's buckets: {len(a.steps)} rows)", style="dim"))
    return buf.getvalue()


def _median_step_table(a: Analysis) -> Table:
    t = Table(title="Median step per rank (ms, % of step)", title_justify="left")
    for h in ("rank", "steps", "wall", *BUCKETS):
        t.add_column(h, justify="right")
    for _, s in step_summary(a.steps).iterrows():
        w = s["wall_ns"] or 1
        t.add_row(str(int(s["rank"])), str(int(s["steps"])), f"{s['wall_ns'] / 1e6:,.2f}",
                  *[f"{s[c] / 1e6:,.2f} ({100 * s[c] / w:.0f}%)" for c in BUCKET_COLUMNS])
    return t


def _steps_table(steps: pd.DataFrame) -> Table:
    t = Table(title="Steps (ms)", title_justify="left")
    for h in ("rank", "step", "wall", *BUCKETS, "hidden net", "hidden pcie"):
        t.add_column(h, justify="right")
    for _, s in steps.iterrows():
        t.add_row(str(int(s["rank"])), str(int(s["step"])), f"{s['wall_ns'] / 1e6:,.2f}",
                  *[f"{s[c] / 1e6:,.2f}" for c in BUCKET_COLUMNS], f"{s['hidden_network_ns'] / 1e6:,.2f}", f"{s['hidden_pcie_ns'] / 1e6:,.2f}")
    return t


def top_kernels_overall(kernels: pd.DataFrame, n: int) -> pd.DataFrame:
    """The ``n`` kernel names with the most GPU time over all ranks, from the analysis's
    per-rank table (:attr:`Analysis.kernels`, which keeps each rank's top names).

    Returns:
        ``name``, ``kind``, ``count``, ``total_ns``, ``mean_ns`` (ns) and ``share`` (of all
        ranks' kernel time, 0..1), by ``total_ns`` descending (ties by name).
    """
    k = kernels[kernels["count"] > 0]
    # Each rank's kernel time is total_ns / share of any of its rows.
    per_rank = (k["total_ns"] / k["share"].where(k["share"] > 0)).groupby(k["rank"]).median()
    g = k.groupby("name", sort=True, observed=True).agg(kind=("kind", "first"), count=("count", "sum"),
                                                         total_ns=("total_ns", "sum")).reset_index()
    g["mean_ns"] = g["total_ns"] / g["count"]
    all_ranks = float(per_rank.sum())
    g["share"] = g["total_ns"] / all_ranks if all_ranks > 0 else 0.0
    return g.sort_values("total_ns", ascending=False, kind="stable").head(n).reset_index(drop=True)


def _kernels_table(kernels: pd.DataFrame, n: int) -> Table | None:
    if n <= 0 or not len(kernels):
        return None
    ranks = kernels["rank"].nunique()
    t = Table(title=f"Top kernels by GPU time{f' (all {ranks} ranks)' if ranks > 1 else ''}", title_justify="left")
    for h, just in (("kernel", "left"), ("kind", "left"), ("count", "right"), ("total ms", "right"),
                    ("mean us", "right"), ("share", "right")):
        t.add_column(h, justify=just, no_wrap=h == "kernel", overflow="ellipsis")  # type: ignore[arg-type]
    for _, r in top_kernels_overall(kernels, n).iterrows():
        t.add_row(Text(short(r["name"], KERNEL_NAME_WIDTH)), Text(str(r["kind"])), f"{int(r['count']):,}",
                  f"{r['total_ns'] / 1e6:,.2f}", f"{r['mean_ns'] / 1e3:,.1f}", f"{100 * r['share']:.1f}%")
    return t


def _operator_tables(a: Analysis) -> list[Table]:
    """"Top host operators" (and "Top call sites" when the trace has Python frames): the
    operators with the most self time in the steps, over all ranks; none without operators."""
    ops = top_host_operators(a.operators_overall, TOP_OPERATORS)
    if not len(ops):
        return []
    ranks = a.operators["rank"].nunique()
    t = Table(title=f"Top host operators by self time in the steps{f' (all {ranks} ranks)' if ranks > 1 else ''}",
              title_justify="left")
    for h in ("operator", "calls", "self ms", "total ms", "self share"):
        t.add_column(h, justify="left" if h == "operator" else "right", no_wrap=h == "operator", overflow="ellipsis")
    for _, r in ops.iterrows():
        t.add_row(Text(short(r["name"], KERNEL_NAME_WIDTH)), f"{int(r['calls']):,}", f"{r['self_ns'] / 1e6:,.2f}",
                  f"{r['total_ns'] / 1e6:,.2f}", f"{100 * r['self_share']:.1f}%")
    tables = [t]
    sites = top_call_sites(a.operator_sites, TOP_OPERATORS)
    if len(sites):
        s = Table(title="Top call sites by operator self time", title_justify="left")
        for h in ("call site", "top operator", "calls", "self ms"):
            s.add_column(h, justify="right" if h in ("calls", "self ms") else "left", no_wrap=True, overflow="ellipsis")
        for _, r in sites.iterrows():
            s.add_row(Text(short(r["call_site"], KERNEL_NAME_WIDTH)), Text(short(r["top_operator"], 40)),
                      f"{int(r['calls']):,}", f"{r['self_ns'] / 1e6:,.2f}")
        tables.append(s)
    return tables


def _stragglers_table(stragglers: pd.DataFrame) -> Table:
    t = Table(title="Stragglers", title_justify="left")
    for h in ("rank", "ops", "arrived last", "share", "mean lateness ms", "cost to others ms"):
        t.add_column(h, justify="right")
    for _, r in stragglers.iterrows():
        t.add_row(str(int(r["rank"])), str(int(r["ops"])), str(int(r["last_count"])), f"{100 * r['last_share']:.0f}%",
                  f"{r['mean_lateness_ns'] / 1e6:,.2f}", f"{r['cost_to_others_ns'] / 1e6:,.2f}")
    return t


def _print_findings(con: Console, a: Analysis) -> None:
    con.print(Text("Top findings", style="bold underline"))
    if not a.recommendations:
        con.print("no rule fired; nothing in this run stands out.")
    for i, r in enumerate(a.recommendations, 1):
        saving = f"  saves ~{r.saving_ns / 1e6:,.2f} ms/step ({100 * r.saving_share:.0f}%)" if r.saving_ns else ""
        con.print(Text(f"{i}. {r.title}", style="bold") + Text(f"  [{r.id}]", style="dim") + Text(saving, style="green"))
        con.print(Text("   " + r.message))
        if r.change:
            con.print(Text("   change: ", style="dim") + Text(r.change, style="cyan"))


# -- a comparison -------------------------------------------------------------------------


def render_comparison_text(c: Comparison, *, width: int = 110, color: bool = False, top: int = 5) -> str:
    """The terminal report of a comparison: headline, both sides, the metric table (and per
    rank), the kernels and collectives that changed most, new recommendations, warnings."""
    from perfscope.reports.comparison import (
        change_note,
        headline,
        item_tables,
        pooled_rows,
        rank_rows,
        side_summary,
    )

    con, buf = _console(width, color, highlight=False, emoji=False, markup=False)
    style = "bold red" if not c.passed else "bold green" if c.verdict in ("improvement", "faster") else "bold"
    con.print(Text("perfscope compare: " + headline(c), style=style))
    con.print(Text(f"base: {side_summary(c.base_label, c.base_info)}"))
    con.print(Text(f"new:  {side_summary(c.new_label, c.new_info)}"))
    con.print()
    con.print(_metric_table(pooled_rows(c), "Step time and buckets (median per step, ranks averaged; * = gate)"))
    if c.per_rank:
        con.print()
        con.print(_metric_table(rank_rows(c), f"{c.metric} per rank"))
    con.print(Text(change_note(c), style="dim"))
    for title, df, key in item_tables(c):
        con.print()
        con.print(_item_table(title, df.head(top), key))
    if c.new_recommendations:
        con.print()
        con.print(Text("New recommendations in NEW:", style="bold"))
        for rec in c.new_recommendations:
            con.print(Text(f"  • [{rec.id}] {short(rec.title, 100)}" + (f" (saves ~{rec.saving_share:.0%} of a step)" if rec.saving_share else "")))
            if rec.message:
                con.print(Text(f"    {short(rec.message, 300)}", style="dim"))
    if c.resolved_recommendations:
        con.print(Text("No longer fired: " + ", ".join(c.resolved_recommendations), style="dim"))
    if c.warnings:
        con.print()
        for w in c.warnings:
            con.print(Text(f"warning: {w}", style="yellow"))
    return buf.getvalue()


def _metric_table(rows: pd.DataFrame, title: str) -> Table:
    from perfscope.reports.comparison import row_label

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for col, just in (("metric", "left"), ("steps", "right"), ("base median", "right"), ("new median", "right"),
                      ("Δ", "right"), ("change", "right"), ("interval", "right"), ("verdict", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for _, r in rows.iterrows():
        t.add_row(
            Text(row_label(r) + (" *" if r["gating"] else ""), style="bold" if r["gating"] else ""),
            Text(f"{int(r['n_base'])}/{int(r['n_new'])}"),
            Text(fmt_ns(r["base_median_ns"])), Text(fmt_ns(r["new_median_ns"])),
            Text(fmt_delta_ns(r["delta_ns"])), Text(fmt_pct(r["change"])),
            Text(fmt_interval(r["ci_low"], r["ci_high"])),
            Text(str(r["verdict"]).replace("_", " "), style=VERDICT_STYLE.get(str(r["verdict"]), "") if r["gating"] else ""),
        )
    return t


def _item_table(title: str, rows: pd.DataFrame, key: str) -> Table:
    from perfscope.reports.comparison import item_change, item_name

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for col, just in ((key, "left"), ("base/step", "right"), ("new/step", "right"), ("Δ/step", "right"), ("change", "right")):
        t.add_column(col, justify=just, overflow="fold" if col == key else "ellipsis")  # type: ignore[arg-type]
    for _, r in rows.iterrows():
        t.add_row(Text(item_name(r, width=60)), Text(fmt_ns(r["base_ns_per_step"])), Text(fmt_ns(r["new_ns_per_step"])),
                  Text(fmt_delta_ns(r["delta_ns_per_step"])), Text(item_change(r)))
    return t


# -- a run's info and a doctor check ------------------------------------------------------


def render_info_text(doc: dict[str, Any], *, width: int = 80, color: bool = False) -> str:
    """``perfscope info``: the run's path, status and command, its ranks and row counts
    (``doc`` as :func:`perfscope.cli.info.run_info` builds it)."""
    con, buf = _console(width, color)
    con.print(f"[bold]{doc['path']}[/bold]  status={doc['status']}  schema={doc['schema_version']}  source={doc['source']}")
    if doc["command"]:
        con.print("command: " + " ".join(map(str, doc["command"])), markup=False)
    ranks = Table("rank", "host", "status", "gpu", title="ranks")
    for r in doc["ranks"]:
        gpu = r.get("gpu") or {}
        ranks.add_row(
            str(r.get("rank")),
            str(r.get("host") or "-"),
            str(r.get("status") or "-"),
            str((gpu.get("name") if isinstance(gpu, dict) else gpu) or "-"),
        )
    con.print(ranks)
    for r in doc["ranks"]:
        if r.get("trace"):
            con.print(f"rank {r.get('rank')} trace: {r['trace']}", markup=False)
    tables = Table("table", "rows", title="tables")
    for name, n in doc["tables"].items():
        tables.add_row(name, f"{n:,}")
    con.print(tables)
    for w in doc.get("integrity_warnings", ()):
        con.print(Text.assemble(("warning: ", "yellow"), str(w)))
    return buf.getvalue()


def render_doctor_text(doc: dict[str, Any], *, width: int = 80, color: bool = False) -> str:
    """``perfscope doctor``: one row per check (status, message, fix), the counts, and what
    could not be read (``doc`` as :func:`perfscope.doctor.diagnose` returns it)."""
    con, buf = _console(width, color)
    facts = doc["facts"]
    table = Table("check", "status", "message", "fix", title=f"perfscope doctor: {facts.get('host', '')}", show_lines=True)
    for c in doc["checks"]:
        table.add_row(
            c["id"],
            Text(c["status"], style=DOCTOR_STATUS_STYLE.get(c["status"], "")),
            Text(c["message"]),
            Text(c["fix"], style="cyan"),
        )
    con.print(table)
    s = doc["summary"]
    con.print(f"{s['pass']} pass, {s['warn']} warn, {s['fail']} fail, {s['skip']} skip  (perfscope doctor --format json for every fact)")
    for err in facts.get("errors") or []:
        con.print(Text(f"could not read: {err}", style="dim"))
    return buf.getvalue()


__all__ = ["NATURAL_WIDTH", "TOP_KERNELS", "render_analysis_text", "render_comparison_text", "render_doctor_text", "render_info_text", "top_kernels_overall"]
