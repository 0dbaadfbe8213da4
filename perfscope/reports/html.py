"""Self-contained HTML report: one file, plotly.js inlined, no network access needed.

Every trace-derived string is HTML-escaped (:func:`perfscope.reports.figures.safe` and
``html.escape``); figures are embedded as JSON that cannot close the script element.
"""
from __future__ import annotations

import html as _html
import json

import plotly.io as pio
from plotly.offline import get_plotlyjs

from perfscope.analyzers.analysis import step_summary
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS, Analysis
from perfscope.reports import figures as F

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#212121;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #e0e0e0;padding-bottom:.2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}th,td{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child,td.l{text-align:left}code{background:#f5f5f5;padding:.1rem .3rem;border-radius:3px}
.rec{border-left:4px solid #1565c0;padding:.4rem .8rem;margin:.8rem 0;background:#fafafa}.rec h3{margin:.2rem 0;font-size:1rem}
.meta{color:#616161}.warn{color:#e65100}
"""


def _e(text: object, limit: int = 2000) -> str:
    s = str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return _html.escape(s, quote=True)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f}"


def _fig_div(fig, div_id: str) -> str:
    # to_json escapes nothing HTML-specific; "</" inside a script would end it, so escape it.
    payload = pio.to_json(fig, validate=False).replace("</", "<\\/")
    return (f'<div id="{div_id}" class="fig"></div>\n<script>(function(){{var f={payload};'
            f'Plotly.newPlot("{div_id}",f.data,f.layout,{{responsive:true,displaylogo:false}});}})();</script>')


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    th = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def render_html(a: Analysis, title: str = "perfscope report") -> str:
    """Render the analysis as one self-contained HTML page (plotly.js inlined).

    Returns:
        the HTML text: findings, figures (step buckets, median step per rank, GPU summary,
        top kernels, collective skew) and tables.
    """
    meta = a.meta or {}
    parts = [f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{_e(title)}</title><style>{CSS}</style>",
             f"<script>{get_plotlyjs()}</script></head><body>",
             f"<h1>{_e(title)}</h1>",
             f"<p class=\"meta\">run <code>{_e(meta.get('run_id', '?'))}</code> · source {_e(meta.get('source', '?'))} · "
             f"world size {_e(meta.get('world_size', '?'))} · status {_e(meta.get('status', '?'))}</p>",
             "<h2>Top findings</h2>"]
    if a.recommendations:
        for r in a.recommendations:
            saving = f" — saves ~{_ms(r.saving_ns)} ms/step ({100 * r.saving_share:.1f}%)" if r.saving_ns else ""
            ev = ", ".join(f"{_e(k)}={_e(v)}" for k, v in r.evidence.items())
            parts.append(f'<div class="rec"><h3>{_e(r.title)} <code>{_e(r.id)}</code>{_e(saving)}</h3><p>{_e(r.message)}</p>'
                         + (f"<p>Change: <code>{_e(r.change)}</code></p>" if r.change else "")
                         + (f'<p class="meta">Evidence: {ev}</p>' if ev else "") + "</div>")
    else:
        parts.append("<p>No rule fired: nothing in this run stands out.</p>")

    summary = step_summary(a.steps)
    parts.append("<h2>Where the step time goes</h2>")
    parts.append(_fig_div(F.rank_shares_figure(summary), "fig-ranks"))
    parts.append(_fig_div(F.step_buckets_figure(a.steps), "fig-steps"))
    if len(summary):
        rows = [[str(int(s["rank"])), str(int(s["steps"])), _ms(s["wall_ns"]),
                 *[f"{_ms(s[c])} ({100 * s[c] / (s['wall_ns'] or 1):.1f}%)" for c in BUCKET_COLUMNS]] for _, s in summary.iterrows()]
        parts.append(_table(["rank", "steps", "median wall ms", *[f"{b} ms" for b in BUCKETS]], rows))

    parts.append("<h2>GPU time over the traced span (HTA temporal breakdown)</h2>")
    parts.append(_fig_div(F.gpu_summary_figure(a.gpu_summary), "fig-gpu"))

    if len(a.collectives) and (a.collectives["matched_ranks"] > 1).any():
        parts.append("<h2>Collectives and stragglers</h2>")
        parts.append(_fig_div(F.arrival_skew_figure(a.collectives), "fig-skew"))
        if len(a.stragglers):
            parts.append(_table(["rank", "ops", "arrived last", "share", "mean lateness ms", "cost to others ms"],
                                [[str(int(r["rank"])), str(int(r["ops"])), str(int(r["last_count"])), f"{100 * r['last_share']:.0f}%",
                                  _ms(r["mean_lateness_ns"]), _ms(r["cost_to_others_ns"])] for _, r in a.stragglers.iterrows()]))

    if len(a.kernels):
        parts.append("<h2>Top kernels</h2>")
        parts.append(_fig_div(F.top_kernels_figure(a.kernels), "fig-kernels"))
        k = a.kernels.sort_values("total_ns", ascending=False).head(25)
        parts.append(_table(["kernel", "rank", "kind", "count", "total ms", "mean us", "share"],
                            [[_e(r["name"], 160), str(int(r["rank"])), _e(r["kind"]), str(int(r["count"])), _ms(r["total_ns"]),
                              f"{r['mean_ns'] / 1e3:,.1f}", f"{100 * r['share']:.1f}%"] for _, r in k.iterrows()]))
    if a.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f'<li class="warn">{_e(w)}</li>' for w in a.warnings) + "</ul>")
    parts.append(f"<script type=\"application/json\" id=\"perfscope-summary\">{json.dumps({'buckets': list(BUCKETS)})}</script>")
    parts.append("</body></html>")
    return "\n".join(parts)


__all__ = ["render_html"]
