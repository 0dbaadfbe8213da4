"""Markdown of an analysis (``perfscope report --format md``) and of a comparison
(``perfscope compare --format md``, sized for a CI job summary).  Pure: data in, text out."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perfscope.analyzers import BUCKET_COLUMNS, BUCKETS, step_summary
from perfscope.analyzers.operators import top_call_sites, top_host_operators
from perfscope.analyzers.result import Analysis
from perfscope.reports.style import (
    escape_html,
    fmt_delta_ns,
    fmt_interval,
    fmt_ns,
    fmt_pct,
    md_cell,
    md_code,
    ms,
)

if TYPE_CHECKING:
    from perfscope.analyzers.compare import Comparison

MAX_STEP_ROWS = 60


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table: the first column left-aligned, the others right-aligned."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


# -- an analysis --------------------------------------------------------------------------


def render_markdown(a: Analysis, title: str = "perfscope report") -> str:
    """Render the analysis as a Markdown document.

    Returns:
        the document: run facts, top findings, median step per rank (ms and %), every step's
        buckets (up to 60 rows), HTA-style GPU summary, stragglers, top kernels, top host
        operators and call sites (when the run has operators), warnings.
    """
    meta = a.meta or {}
    lines = [f"# {md_cell(title, 100)}", ""]
    lines.append(f"Run {md_code(meta.get('run_id', '?'))} · source {md_cell(meta.get('source', '?'), 100)} · "
                 f"world size {md_cell(meta.get('world_size', '?'), 100)} · status {md_cell(meta.get('status', '?'), 100)}")
    lines.append("")
    for section in (_findings, _median_steps, _steps, _gpu_summary, _stragglers, _kernels, _operators):
        lines += section(a)
    if a.warnings:
        lines += ["## Warnings", ""] + [f"* {md_cell(w, 500)}" for w in a.warnings] + [""]
    return "\n".join(lines)


def _findings(a: Analysis) -> list[str]:
    lines = ["## Top findings", ""]
    if not a.recommendations:
        return lines + ["No rule fired: nothing in this run stands out.", ""]
    for i, r in enumerate(a.recommendations, 1):
        saving = f" — saves ~{ms(r.saving_ns)} ms/step ({100 * r.saving_share:.1f}%)" if r.saving_ns else ""
        lines.append(f"{i}. **{md_cell(r.title, 200)}** ({md_code(r.id)}, {md_cell(r.bucket, 100)}){saving}")
        lines.append(f"   {md_cell(r.message, 2000)}")
        if r.change:
            lines.append(f"   Change: {md_code(r.change, 1000)}")
        if r.evidence:
            lines.append("   Evidence: " + ", ".join(md_code(f"{k}={v}") for k, v in r.evidence.items()))
        lines.append("")
    return lines


def _median_steps(a: Analysis) -> list[str]:
    summary = step_summary(a.steps)
    lines = ["## Median step per rank", ""]
    if len(summary):
        rows = [[str(int(s["rank"])), str(int(s["steps"])), ms(s["wall_ns"]),
                 *[f"{ms(s[c])} ({100 * s[c] / (s['wall_ns'] or 1):.1f}%)" for c in BUCKET_COLUMNS]]
                for _, s in summary.iterrows()]
        lines += table(["rank", "steps", "wall ms", *[f"{b} ms (%)" for b in BUCKETS]], rows)
    else:
        lines.append("No steps.")
    return lines + [""]


def _steps(a: Analysis) -> list[str]:
    lines = ["## Steps", ""]
    if not len(a.steps):
        return lines + ["No steps.", ""]
    header = ["rank", "step", "wall ms", *[f"{b} ms" for b in BUCKETS], "hidden network ms", "hidden pcie ms"]
    rows = [[str(int(s["rank"])), str(int(s["step"])), ms(s["wall_ns"]), *[ms(s[c]) for c in BUCKET_COLUMNS],
             ms(s["hidden_network_ns"]), ms(s["hidden_pcie_ns"])] for _, s in a.steps.head(MAX_STEP_ROWS).iterrows()]
    lines += table(header, rows)
    if len(a.steps) > MAX_STEP_ROWS:
        lines += ["", f"({len(a.steps) - MAX_STEP_ROWS} more steps in the JSON report)"]
    return lines + [""]


def _gpu_summary(a: Analysis) -> list[str]:
    lines = ["## GPU time over the traced span (HTA temporal breakdown)", ""]
    g = a.gpu_summary
    if not len(g):
        return lines + ["No GPU events.", ""]
    lines += table(["rank", "span ms", "idle ms", "compute ms", "non-compute ms"],
                   [[str(int(r["rank"])), ms(r["span_ns"]), f"{ms(r['idle_ns'])} ({100 * r['idle_share']:.1f}%)",
                     f"{ms(r['compute_ns'])} ({100 * r['compute_share']:.1f}%)",
                     f"{ms(r['non_compute_ns'])} ({100 * r['non_compute_share']:.1f}%)"] for _, r in g.iterrows()])
    return lines + [""]


def _stragglers(a: Analysis) -> list[str]:
    if not len(a.stragglers):
        return []
    return ["## Stragglers", "", *table(
        ["rank", "ops", "arrived last", "share", "mean lateness ms", "cost to others ms"],
        [[str(int(r["rank"])), str(int(r["ops"])), str(int(r["last_count"])), f"{100 * r['last_share']:.0f}%",
          ms(r["mean_lateness_ns"]), ms(r["cost_to_others_ns"])] for _, r in a.stragglers.iterrows()]), ""]


def _kernels(a: Analysis) -> list[str]:
    if not len(a.kernels):
        return []
    k = a.kernels.sort_values("total_ns", ascending=False).head(15)
    return ["## Top kernels", "", *table(
        ["rank", "kernel", "kind", "count", "total ms", "mean us", "share"],
        [[str(int(r["rank"])), md_cell(r["name"], 90), md_cell(r["kind"], 100), str(int(r["count"])), ms(r["total_ns"]),
          f"{r['mean_ns'] / 1e3:,.1f}", f"{100 * r['share']:.1f}%"] for _, r in k.iterrows()]), ""]


def _operators(a: Analysis) -> list[str]:
    ops = top_host_operators(a.operators_overall, 15)
    if not len(ops):
        return []
    out = ["## Top host operators", "", "Self time of the host operators in the steps, over all ranks.", "", *table(
        ["operator", "calls", "self ms", "total ms", "self share"],
        [[md_cell(r["name"], 90), f"{int(r['calls']):,}", ms(r["self_ns"]), ms(r["total_ns"]),
          f"{100 * r['self_share']:.1f}%"] for _, r in ops.iterrows()]), ""]
    sites = top_call_sites(a.operator_sites, 10)
    if len(sites):
        out += ["### Top call sites", "", *table(
            ["call site", "top operator", "calls", "self ms"],
            [[md_cell(r["call_site"], 90), md_cell(r["top_operator"], 60), f"{int(r['calls']):,}", ms(r["self_ns"])]
             for _, r in sites.iterrows()]), ""]
    return out


# -- a comparison -------------------------------------------------------------------------


def render_comparison_markdown(c: Comparison, *, top: int = 10) -> str:
    """GitHub-flavoured Markdown sized for a CI job summary (``$GITHUB_STEP_SUMMARY``).

    Long tables sit in ``<details>`` blocks; names are escaped and cut to one line, so the
    summary stays well under GitHub's 1 MiB per-step limit.
    """
    from perfscope.reports.comparison import (
        change_note,
        headline,
        pooled_rows,
        rank_rows,
        side_summary,
    )

    icon = "❌" if not c.passed else "🚀" if c.verdict == "improvement" else "⚠️" if c.verdict in ("too_few_steps", "inconclusive") else "✅"
    out = [f"## {icon} perfscope compare: {md_cell(headline(c), 200)}", ""]
    out.append(f"**base** {md_cell(side_summary(c.base_label, c.base_info), 200)} → **new** {md_cell(side_summary(c.new_label, c.new_info), 200)}")
    out.append("")
    out += _metric_rows(pooled_rows(c))
    out += ["", f"<sub>{escape_html(change_note(c))}</sub>", ""]
    if c.per_rank:
        out += ["<details><summary>" + escape_html(f"{c.metric} per rank") + "</summary>", ""]
        out += _metric_rows(rank_rows(c))
        out += ["", "</details>", ""]
    if c.warnings:
        out += [f"> ⚠️ {md_cell(w, 400)}" + "  " for w in c.warnings]
        out.append("")
    out += _changed_items(c, top)
    if c.new_recommendations:
        out += ["### New recommendations in NEW", ""]
        for rec in c.new_recommendations:
            saving = f" — saves ~{rec.saving_share:.0%} of a step" if rec.saving_share else ""
            out.append(f"- **{md_cell(rec.title, 200)}** ({md_cell(rec.id, 80)}){saving}: {md_cell(rec.message, 400)}")
        out.append("")
    if c.resolved_recommendations:
        out += ["No longer fired: " + ", ".join(md_cell(i, 80) for i in c.resolved_recommendations), ""]
    return "\n".join(out) + "\n"


def _metric_rows(rows: pd.DataFrame) -> list[str]:
    from perfscope.reports.comparison import row_label, verdict_label

    lines = ["| metric | steps (base/new) | base median | new median | Δ | change | interval | verdict |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for _, r in rows.iterrows():
        name = md_cell(row_label(r))
        name = f"**{name}**" if r["gating"] else name
        lines.append(
            f"| {name} | {int(r['n_base'])}/{int(r['n_new'])} | {fmt_ns(r['base_median_ns'])} | {fmt_ns(r['new_median_ns'])} | "
            f"{fmt_delta_ns(r['delta_ns'])} | {fmt_pct(r['change'])} | {fmt_interval(r['ci_low'], r['ci_high'])} | "
            f"{verdict_label(r)} |"
        )
    return lines


def _changed_items(c: Comparison, top: int) -> list[str]:
    from perfscope.reports.comparison import item_change, item_name, item_tables

    out: list[str] = []
    for title, df, key in item_tables(c):
        out += [f"<details><summary>{title}</summary>", "",
                f"| {key} | base / step | new / step | Δ / step | change |", "|---|---:|---:|---:|---:|"]
        for _, r in df.head(top).iterrows():
            out.append(f"| {md_cell(item_name(r))} | {fmt_ns(r['base_ns_per_step'])} | {fmt_ns(r['new_ns_per_step'])} | "
                       f"{fmt_delta_ns(r['delta_ns_per_step'])} | {item_change(r)} |")
        out += ["", "</details>", ""]
    return out


__all__ = ["render_comparison_markdown", "render_markdown", "table"]
