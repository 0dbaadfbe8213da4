"""Self-contained HTML report of an analysis: one file, plotly.js inlined, no network needed.

Every trace-derived string is HTML-escaped (:func:`perfscope.reports.style.escape_html`);
figures are embedded as JSON that cannot close the script element.  :func:`page` and
:func:`html_table` are shared with the comparison's page (:mod:`.html_compare`).
"""
from __future__ import annotations

import json

import plotly.graph_objects as go
import plotly.io as pio

from perfscope.analyzers import BUCKET_COLUMNS, BUCKETS, step_summary
from perfscope.analyzers.operators import top_call_sites, top_host_operators
from perfscope.analyzers.result import Analysis
from perfscope.reports import figures
from perfscope.reports.style import escape_html as e
from perfscope.reports.style import ms

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#212121;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #e0e0e0;padding-bottom:.2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}th,td{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child,td.l{text-align:left}code{background:#f5f5f5;padding:.1rem .3rem;border-radius:3px}
.rec{border-left:4px solid #0072B2;padding:.4rem .8rem;margin:.8rem 0;background:#fafafa}.rec h3{margin:.2rem 0;font-size:1rem}
.meta{color:#616161}.warn{color:#e65100}
"""
TEXT_LIMIT = 2000


def page(title: str, css: str, body: list[str]) -> str:
    """A whole HTML page: ``title`` (escaped), the style sheet, plotly.js inlined, ``body``
    (HTML fragments, one per line)."""
    from plotly.offline import get_plotlyjs

    head = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(title, TEXT_LIMIT)}</title><style>{css}</style>",
            f"<script>{get_plotlyjs()}</script></head><body>"]
    return "\n".join([*head, *body, "</body></html>"])


def figure_div(fig: go.Figure, div_id: str) -> str:
    """``fig`` as a div and the script that draws it (plotly.js must be on the page)."""
    # to_json escapes nothing HTML-specific; "</" inside a script would end it, so escape it.
    payload = pio.to_json(fig, validate=False).replace("</", "<\\/")
    return (f'<div id="{div_id}" class="fig"></div>\n<script>(function(){{var f={payload};'
            f'Plotly.newPlot("{div_id}",f.data,f.layout,{{responsive:true,displaylogo:false}});}})();</script>')


def html_table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """A table of HTML cells (escaped by the caller); the first ``left`` columns left-aligned."""
    th = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def render_html(a: Analysis, title: str = "perfscope report") -> str:
    """Render the analysis as one self-contained HTML page (plotly.js inlined).

    Returns:
        the HTML text: findings, figures (step buckets, median step per rank, GPU summary,
        top kernels, collective skew) and tables (top host operators and call sites when the
        run has operators).
    """
    meta = a.meta or {}
    facts = (f"run <code>{e(meta.get('run_id', '?'))}</code> · source {e(meta.get('source', '?'))} · "
             f"world size {e(meta.get('world_size', '?'))} · status {e(meta.get('status', '?'))}")
    body = [f"<h1>{e(title, TEXT_LIMIT)}</h1>", f"<p class=\"meta\">{facts}</p>"]
    for section in (_findings, _buckets, _gpu, _collectives, _kernels, _operators):
        body += section(a)
    if a.warnings:
        body.append("<h2>Warnings</h2><ul>" + "".join(f'<li class="warn">{e(w, TEXT_LIMIT)}</li>' for w in a.warnings) + "</ul>")
    body.append(f"<script type=\"application/json\" id=\"perfscope-summary\">{json.dumps({'buckets': list(BUCKETS)})}</script>")
    return page(title, CSS, body)


def _findings(a: Analysis) -> list[str]:
    out = ["<h2>Top findings</h2>"]
    if not a.recommendations:
        return out + ["<p>No rule fired: nothing in this run stands out.</p>"]
    for r in a.recommendations:
        saving = f" — saves ~{ms(r.saving_ns)} ms/step ({100 * r.saving_share:.1f}%)" if r.saving_ns else ""
        ev = ", ".join(f"{e(k)}={e(v, TEXT_LIMIT)}" for k, v in r.evidence.items())
        out.append(f'<div class="rec"><h3>{e(r.title, TEXT_LIMIT)} <code>{e(r.id)}</code>{e(saving)}</h3><p>{e(r.message, TEXT_LIMIT)}</p>'
                   + (f"<p>Change: <code>{e(r.change, TEXT_LIMIT)}</code></p>" if r.change else "")
                   + (f'<p class="meta">Evidence: {ev}</p>' if ev else "") + "</div>")
    return out


def _buckets(a: Analysis) -> list[str]:
    summary = step_summary(a.steps)
    out = ["<h2>Where the step time goes</h2>", figure_div(figures.rank_shares_figure(summary), "fig-ranks"),
           figure_div(figures.step_buckets_figure(a.steps), "fig-steps")]
    if len(summary):
        rows = [[str(int(s["rank"])), str(int(s["steps"])), ms(s["wall_ns"]),
                 *[f"{ms(s[c])} ({100 * s[c] / (s['wall_ns'] or 1):.1f}%)" for c in BUCKET_COLUMNS]] for _, s in summary.iterrows()]
        out.append(html_table(["rank", "steps", "median wall ms", *[f"{b} ms" for b in BUCKETS]], rows))
    return out


def _gpu(a: Analysis) -> list[str]:
    return ["<h2>GPU time over the traced span (HTA temporal breakdown)</h2>", figure_div(figures.gpu_summary_figure(a.gpu_summary), "fig-gpu")]


def _collectives(a: Analysis) -> list[str]:
    if not (len(a.collectives) and (a.collectives["matched_ranks"] > 1).any()):
        return []
    out = ["<h2>Collectives and stragglers</h2>", figure_div(figures.arrival_skew_figure(a.collectives), "fig-skew")]
    if len(a.stragglers):
        out.append(html_table(["rank", "ops", "arrived last", "share", "mean lateness ms", "cost to others ms"],
                              [[str(int(r["rank"])), str(int(r["ops"])), str(int(r["last_count"])), f"{100 * r['last_share']:.0f}%",
                                ms(r["mean_lateness_ns"]), ms(r["cost_to_others_ns"])] for _, r in a.stragglers.iterrows()]))
    return out


def _kernels(a: Analysis) -> list[str]:
    if not len(a.kernels):
        return []
    k = a.kernels.sort_values("total_ns", ascending=False).head(25)
    return ["<h2>Top kernels</h2>", figure_div(figures.top_kernels_figure(a.kernels), "fig-kernels"),
            html_table(["kernel", "rank", "kind", "count", "total ms", "mean us", "share"],
                       [[e(r["name"], 160), str(int(r["rank"])), e(r["kind"]), str(int(r["count"])), ms(r["total_ns"]),
                         f"{r['mean_ns'] / 1e3:,.1f}", f"{100 * r['share']:.1f}%"] for _, r in k.iterrows()])]


def _operators(a: Analysis) -> list[str]:
    ops = top_host_operators(a.operators_overall, 25)
    if not len(ops):
        return []
    out = ["<h2>Top host operators</h2>", "<p class=\"meta\">Self time of the host operators in the steps, over all ranks.</p>",
           html_table(["operator", "calls", "self ms", "total ms", "self share"],
                      [[e(r["name"], 160), f"{int(r['calls']):,}", ms(r["self_ns"]), ms(r["total_ns"]),
                        f"{100 * r['self_share']:.1f}%"] for _, r in ops.iterrows()])]
    sites = top_call_sites(a.operator_sites, 15)
    if len(sites):
        out += ["<h3>Top call sites</h3>", html_table(
            ["call site", "top operator", "calls", "self ms"],
            [[e(r["call_site"], 160), e(r["top_operator"], 160), f"{int(r['calls']):,}", ms(r["self_ns"])]
             for _, r in sites.iterrows()], left=2)]
    return out


__all__ = ["figure_div", "html_table", "page", "render_html"]
