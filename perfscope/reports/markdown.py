"""Markdown report of an analysis (a pure function: Analysis in, text out)."""
from __future__ import annotations

from perfscope.analyzers.analysis import step_summary
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS, Analysis

MAX_STEP_ROWS = 60


def md_text(text: object, limit: int = 100) -> str:
    """Make untrusted text safe inside a Markdown table cell: no HTML, pipes or newlines."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("`", "\\`"), ("*", "\\*"), ("_", "\\_"), ("[", "\\["), ("]", "\\]")):
        s = s.replace(a, b)
    return s


def md_code(text: object, limit: int = 300) -> str:
    """Untrusted text as an inline code span (no escapes are processed inside one, so only
    backticks and newlines are replaced)."""
    s = str(text).replace("`", "'").replace("\r", " ").replace("\n", " ")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return f"`{s}`"


def ms(ns: float) -> str:
    """Nanoseconds as milliseconds with 2 decimals."""
    return f"{ns / 1e6:,.2f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def render_markdown(a: Analysis, title: str = "perfscope report") -> str:
    """Render the analysis as a Markdown document.

    Returns:
        the document: run facts, top findings, median step per rank (ms and %), every step's
        buckets (up to 60 rows), HTA-style GPU summary, stragglers, top kernels, warnings.
    """
    meta = a.meta or {}
    lines = [f"# {md_text(title)}", ""]
    lines.append(f"Run {md_code(meta.get('run_id', '?'))} · source {md_text(meta.get('source', '?'))} · "
                 f"world size {md_text(meta.get('world_size', '?'))} · status {md_text(meta.get('status', '?'))}")
    lines.append("")
    lines += ["## Top findings", ""]
    if a.recommendations:
        for i, r in enumerate(a.recommendations, 1):
            saving = f" — saves ~{ms(r.saving_ns)} ms/step ({100 * r.saving_share:.1f}%)" if r.saving_ns else ""
            lines.append(f"{i}. **{md_text(r.title, 200)}** ({md_code(r.id)}, {md_text(r.bucket)}){saving}")
            lines.append(f"   {md_text(r.message, 2000)}")
            if r.change:
                lines.append(f"   Change: {md_code(r.change, 1000)}")
            if r.evidence:
                ev = ", ".join(md_code(f"{k}={v}") for k, v in r.evidence.items())
                lines.append(f"   Evidence: {ev}")
            lines.append("")
    else:
        lines += ["No rule fired: nothing in this run stands out.", ""]

    summary = step_summary(a.steps)
    lines += ["## Median step per rank", ""]
    if len(summary):
        header = ["rank", "steps", "wall ms", *[f"{b} ms (%)" for b in BUCKETS]]
        rows = []
        for _, s in summary.iterrows():
            w = s["wall_ns"] or 1
            rows.append([str(int(s["rank"])), str(int(s["steps"])), ms(s["wall_ns"]),
                         *[f"{ms(s[c])} ({100 * s[c] / w:.1f}%)" for c in BUCKET_COLUMNS]])
        lines += _table(header, rows)
    else:
        lines.append("No steps.")
    lines.append("")

    lines += ["## Steps", ""]
    if len(a.steps):
        header = ["rank", "step", "wall ms", *[f"{b} ms" for b in BUCKETS], "hidden network ms", "hidden pcie ms"]
        rows = [[str(int(s["rank"])), str(int(s["step"])), ms(s["wall_ns"]), *[ms(s[c]) for c in BUCKET_COLUMNS],
                 ms(s["hidden_network_ns"]), ms(s["hidden_pcie_ns"])] for _, s in a.steps.head(MAX_STEP_ROWS).iterrows()]
        lines += _table(header, rows)
        if len(a.steps) > MAX_STEP_ROWS:
            lines += ["", f"({len(a.steps) - MAX_STEP_ROWS} more steps in the JSON report)"]
    else:
        lines.append("No steps.")
    lines.append("")

    lines += ["## GPU time over the traced span (HTA temporal breakdown)", ""]
    g = a.gpu_summary
    if len(g):
        lines += _table(["rank", "span ms", "idle ms", "compute ms", "non-compute ms"],
                        [[str(int(r["rank"])), ms(r["span_ns"]), f"{ms(r['idle_ns'])} ({100 * r['idle_share']:.1f}%)",
                          f"{ms(r['compute_ns'])} ({100 * r['compute_share']:.1f}%)",
                          f"{ms(r['non_compute_ns'])} ({100 * r['non_compute_share']:.1f}%)"] for _, r in g.iterrows()])
    else:
        lines.append("No GPU events.")
    lines.append("")

    if len(a.stragglers):
        lines += ["## Stragglers", ""]
        lines += _table(["rank", "ops", "arrived last", "share", "mean lateness ms", "cost to others ms"],
                        [[str(int(r["rank"])), str(int(r["ops"])), str(int(r["last_count"])), f"{100 * r['last_share']:.0f}%",
                          ms(r["mean_lateness_ns"]), ms(r["cost_to_others_ns"])] for _, r in a.stragglers.iterrows()])
        lines.append("")

    if len(a.kernels):
        lines += ["## Top kernels", ""]
        k = a.kernels.sort_values("total_ns", ascending=False).head(15)
        lines += _table(["rank", "kernel", "kind", "count", "total ms", "mean us", "share"],
                        [[str(int(r["rank"])), md_text(r["name"], 90), md_text(r["kind"]), str(int(r["count"])), ms(r["total_ns"]),
                          f"{r['mean_ns'] / 1e3:,.1f}", f"{100 * r['share']:.1f}%"] for _, r in k.iterrows()])
        lines.append("")

    if a.warnings:
        lines += ["## Warnings", ""] + [f"* {md_text(w, 500)}" for w in a.warnings] + [""]
    return "\n".join(lines)


__all__ = ["render_markdown", "md_text", "md_code"]
