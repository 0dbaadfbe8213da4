"""Self-contained HTML page of a comparison (``perfscope compare --format html``).

Charts: the gating metric per step for both runs (distribution and sequence), bucket
medians side by side, and the kernels whose time per step changed most.  Every name from a
trace is HTML-escaped, in tables and in chart labels.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from perfscope.analyzers.compare import METRIC_COLUMNS, STEP_TIME, Comparison
from perfscope.reports.comparison import (
    change_note,
    headline,
    item_change,
    item_name,
    item_tables,
    pooled_rows,
    rank_rows,
    row_label,
    side_summary,
    verdict_label,
)
from perfscope.reports.html import figure_div, page
from perfscope.reports.style import (
    BASE_COLOR,
    BETTER_COLOR,
    NEW_COLOR,
    WORSE_COLOR,
    fmt_delta_ns,
    fmt_interval,
    fmt_ns,
    fmt_pct,
    short,
)
from perfscope.reports.style import escape_html as e

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#1b1f24;padding:0 16px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px}
.fail{color:#b42318}.pass{color:#067647}.warn{color:#b54708}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{padding:4px 8px;border-bottom:1px solid #e4e7ec;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left;white-space:normal;word-break:break-all}
td.v{text-align:left} tr.gate td{font-weight:600}
.note{color:#667085;font-size:12px} .warnbox{background:#fffaeb;border:1px solid #fedf89;padding:8px 12px;border-radius:6px}
code{background:#f2f4f7;padding:1px 4px;border-radius:4px}
"""


def render_comparison_html(c: Comparison, *, top: int = 10) -> str:
    """Return one self-contained HTML page (plotly.js inlined, no network needed): headline,
    metric tables, charts, the kernels and collectives that changed most, new advice."""
    cls = "fail" if not c.passed else "pass" if c.verdict in ("improvement", "faster", "unchanged", "slower") else "warn"
    body = [f"<h1 class='{cls}'>{e(headline(c))}</h1>",
            f"<p><b>base</b> {e(side_summary(c.base_label, c.base_info))} &rarr; <b>new</b> {e(side_summary(c.new_label, c.new_info))}</p>"]
    if c.warnings:
        body.append("<div class='warnbox'>" + "".join(f"<div>&#9888; {e(w)}</div>" for w in c.warnings) + "</div>")
    body.append("<h2>Step time and buckets</h2>" + _metric_table(pooled_rows(c)) + f"<p class='note'>{e(change_note(c))}</p>")
    if c.per_rank:
        body.append(f"<h2>{e(c.metric)} per rank</h2>" + _metric_table(rank_rows(c)))
    figs = [*_step_figures(c), *_bucket_figure(c), *_kernel_figure(c, top)]
    for i, f in enumerate(figs):
        f.update_layout(template="plotly_white", margin={"l": 40, "r": 20, "t": 50, "b": 40})
        body.append(figure_div(f, f"fig-{i}"))
    body += _changed_items(c, top)
    body += _recommendations(c)
    return page("perfscope compare: " + headline(c), CSS, body) + "\n"


def _metric_table(rows: pd.DataFrame) -> str:
    h = [("<table><tr><th>metric</th><th>steps base/new</th><th>base median</th><th>new median</th><th>&Delta;</th>"
          "<th>change</th><th>interval</th><th>verdict</th></tr>")]
    for _, r in rows.iterrows():
        failed = r["verdict"] == "regression" and r["gating"]
        h.append(
            f"<tr class='{'gate' if r['gating'] else ''}'><td>{e(row_label(r))}</td><td>{int(r['n_base'])}/{int(r['n_new'])}</td>"
            f"<td>{e(fmt_ns(r['base_median_ns']))}</td><td>{e(fmt_ns(r['new_median_ns']))}</td><td>{e(fmt_delta_ns(r['delta_ns']))}</td>"
            f"<td>{e(fmt_pct(r['change']))}</td><td>{e(fmt_interval(r['ci_low'], r['ci_high']))}</td>"
            f"<td class='v {'fail' if failed else ''}'>{e(verdict_label(r, icons=False))}</td></tr>"
        )
    h.append("</table>")
    return "".join(h)


def _step_figures(c: Comparison) -> list[go.Figure]:
    """The gating metric per step of both runs: its distribution and its sequence."""
    col = METRIC_COLUMNS[c.metric]
    s = c.samples
    if s.empty or col not in s.columns:
        return []
    dist, seq = go.Figure(), go.Figure()
    for side, label, colour in (("base", c.base_label, BASE_COLOR), ("new", c.new_label, NEW_COLOR if c.passed else WORSE_COLOR)):
        d = s[s["side"] == side]
        name = e(short(f"{side}: {label}", 60))
        dist.add_trace(go.Box(y=d[col] / 1e6, name=name, boxpoints="all", jitter=0.4, pointpos=0, marker_color=colour))
        seq.add_trace(go.Scatter(x=list(range(len(d))), y=d[col] / 1e6, mode="lines+markers", name=name, line_color=colour))
    dist.update_layout(title=f"{e(c.metric)} per step (ms, ranks averaged)", yaxis_title="ms", height=380, showlegend=False)
    seq.update_layout(title=f"{e(c.metric)} step by step", xaxis_title="step (in order)", yaxis_title="ms", height=380)
    return [dist, seq]


def _bucket_figure(c: Comparison) -> list[go.Figure]:
    """Median per step of every bucket, base beside new."""
    pooled = pooled_rows(c)
    if pooled.empty:
        return []
    b = pooled[pooled["metric"] != STEP_TIME]
    bars = go.Figure([
        go.Bar(x=list(b["metric"]), y=b["base_median_ns"] / 1e6, name=e(short(f"base: {c.base_label}", 60)), marker_color=BASE_COLOR),
        go.Bar(x=list(b["metric"]), y=b["new_median_ns"] / 1e6, name=e(short(f"new: {c.new_label}", 60)), marker_color=NEW_COLOR),
    ])
    bars.update_layout(title="Median per step by bucket (ms)", barmode="group", yaxis_title="ms", height=360)
    return [bars]


def _kernel_figure(c: Comparison, top: int) -> list[go.Figure]:
    """The change of time per step of the ``top`` kernels that changed most (µs)."""
    if c.kernels.empty:
        return []
    k = c.kernels.head(top).iloc[::-1]
    labels = [e(item_name(r, 70)) for _, r in k.iterrows()]
    kf = go.Figure(go.Bar(x=k["delta_ns_per_step"] / 1e3, y=list(range(len(k))), orientation="h",
                          hovertext=labels, hoverinfo="text+x",
                          marker_color=[WORSE_COLOR if v > 0 else BETTER_COLOR for v in k["delta_ns_per_step"]]))
    kf.update_layout(title="Kernels: change of time per step (µs)", height=120 + 28 * len(k),
                     yaxis={"tickmode": "array", "tickvals": list(range(len(k))), "ticktext": labels, "automargin": True})
    return [kf]


def _changed_items(c: Comparison, top: int) -> list[str]:
    out = []
    for title, df, key in item_tables(c):
        rows_html = "".join(
            f"<tr><td>{e(item_name(r, 200))}</td><td>{e(fmt_ns(r['base_ns_per_step']))}</td><td>{e(fmt_ns(r['new_ns_per_step']))}</td>"
            f"<td>{e(fmt_delta_ns(r['delta_ns_per_step']))}</td><td>{e(item_change(r))}</td></tr>"
            for _, r in df.head(top).iterrows()
        )
        out.append(f"<h2>{title}</h2><table><tr><th>{key}</th><th>base / step</th><th>new / step</th>"
                   f"<th>&Delta; / step</th><th>change</th></tr>{rows_html}</table>")
    return out


def _recommendations(c: Comparison) -> list[str]:
    out = []
    if c.new_recommendations:
        items = "".join(
            f"<li><b>{e(r.title)}</b> <code>{e(r.id)}</code>"
            + (f" &mdash; saves ~{r.saving_share:.0%} of a step" if r.saving_share else "")
            + f"<br>{e(r.message)}" + (f"<br>Try: <code>{e(r.change)}</code>" if r.change else "") + "</li>"
            for r in c.new_recommendations
        )
        out.append(f"<h2>New recommendations in NEW</h2><ul>{items}</ul>")
    if c.resolved_recommendations:
        out.append("<p class='note'>No longer fired: " + ", ".join(f"<code>{e(i)}</code>" for i in c.resolved_recommendations) + "</p>")
    return out


__all__ = ["render_comparison_html"]
