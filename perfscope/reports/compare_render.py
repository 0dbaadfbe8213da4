"""Render a :class:`~perfscope.analyzers.compare.Comparison` as text, Markdown, JUnit XML,
self-contained HTML or JSON.

Every renderer is a pure function ``Comparison -> str``; the CLI decides where it goes.
Names that come from traces (kernel names, labels, recommendation text) are untrusted:
each format escapes them its own way (Markdown: HTML entities and ``\\|``; XML: the
serializer plus removal of characters XML 1.0 forbids; HTML: ``html.escape``; rich: plain
``Text`` objects, never markup).
"""
from __future__ import annotations

import html
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict
from typing import Any
from xml.etree import ElementTree as ET

import pandas as pd

from perfscope.analyzers.compare import METRIC_COLUMNS, STEP_TIME, Comparison

FORMATS: tuple[str, ...] = ("text", "md", "junit", "html", "json")
JSON_SCHEMA = 1

_VERDICT_MD = {
    "regression": "❌ regression",
    "improvement": "🚀 improvement",
    "too_few_steps": "⚠️ too few steps",
    "inconclusive": "⚠️ inconclusive",
    "slower": "slower (within threshold)",
    "faster": "faster",
    "unchanged": "unchanged",
}
_VERDICT_STYLE = {
    "regression": "bold red", "improvement": "bold green", "too_few_steps": "yellow",
    "inconclusive": "yellow", "slower": "", "faster": "green", "unchanged": "dim",
}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# Kernel names of templated C++ code run to hundreds of characters; reports show a prefix.
_NAME_WIDTH = 90


# -- small formatting helpers -----------------------------------------------------------


def fmt_ns(ns: float) -> str:
    """Format a duration in nanoseconds with a unit that keeps 3-4 significant digits."""
    if ns is None or not math.isfinite(ns):
        return "–"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3g} s" if a < 1e11 else f"{ns / 1e9:,.0f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.4g} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.4g} µs"
    return f"{ns:.0f} ns"


def fmt_delta_ns(ns: float) -> str:
    """Like :func:`fmt_ns` with an explicit sign."""
    if ns is None or not math.isfinite(ns):
        return "–"
    return ("+" if ns > 0 else "-" if ns < 0 else "±") + fmt_ns(abs(ns))


def fmt_pct(x: float, digits: int = 1) -> str:
    """Format a share as a signed percentage (``+10.2%``); ``–`` for NaN."""
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x * 100:+.{digits}f}%"


def fmt_interval(lo: float, hi: float) -> str:
    """Format an interval of shares: ``+6.1% … +14.0%``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "–"
    return f"{fmt_pct(lo)} … {fmt_pct(hi)}"


def fmt_bytes(n: float) -> str:
    """Format a byte count with binary units."""
    if n is None or not math.isfinite(n) or n < 0:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n} B"


def short(name: object, width: int = _NAME_WIDTH) -> str:
    """Return ``name`` as one line of at most ``width`` characters (ellipsis at the end)."""
    # Control characters would corrupt a terminal or break XML/Markdown; drop them.
    s = _CONTROL.sub("", " ".join(str(name).split()))
    return s if len(s) <= width else s[: width - 1] + "…"


def verdict_label(row: pd.Series, *, icons: bool = True) -> str:
    """The verdict as shown in a table; only the gate's rows get a pass/fail icon, since
    only they decide the exit code (a bucket can grow while the step does not)."""
    v = str(row["verdict"])
    if row["gating"] and icons:
        return _VERDICT_MD.get(v, v)
    return {"slower": "slower (within threshold)", "too_few_steps": "too few steps"}.get(v, v)


def row_label(row: pd.Series) -> str:
    """``step_time`` or ``step_time [rank 3]``."""
    return str(row["metric"]) + ("" if pd.isna(row["rank"]) else f" [rank {int(row['rank'])}]")


def headline(c: Comparison) -> str:
    """One sentence: the verdict of the gating metric, for every format's title."""
    g = c.gating_rows
    thr = f"{c.max_regression:.1%}"
    if c.verdict == "regression":
        worst = g[g["verdict"] == "regression"].sort_values("change", ascending=False).iloc[0]
        return f"Regression: {row_label(worst)} {fmt_pct(worst['change'])} (allowed {thr})"
    if c.verdict == "too_few_steps":
        return f"Not judged: too few steps for {c.metric} (need {c.min_steps} per side); passing"
    if c.verdict == "inconclusive":
        return f"Inconclusive: {c.metric} is too noisy to judge against {thr}; passing"
    if len(g) == 1:
        r = g.iloc[0]
        word = {"improvement": "Improvement", "faster": "Faster", "slower": "Slower, within threshold"}.get(c.verdict, "No regression")
        return f"{word}: {c.metric} {fmt_pct(r['change'])} (allowed {thr})"
    return f"{'Improvement' if c.verdict == 'improvement' else 'No regression'}: {c.metric} on {len(g)} ranks (allowed {thr})"


def _change_note(c: Comparison) -> str:
    return (
        f"Change = change of the median per step, as a share of the base median step time "
        f"({fmt_ns(_base_step(c))}); interval: {c.confidence:.0%} bootstrap over steps "
        f"({c.n_boot} resamples, seed {c.seed})"
        + ("; per-rank rows Bonferroni-corrected" if c.per_rank else "")
        + f". Gate: {c.metric}, fails only when NEW is significantly slower by more than {c.max_regression:.1%}."
    )


def _base_step(c: Comparison) -> float:
    r = c.rows[(c.rows["metric"] == STEP_TIME) & c.rows["rank"].isna()]
    return float(r["base_median_ns"].iloc[0]) if len(r) else math.nan


def _side_summary(label: str, info: dict[str, Any]) -> str:
    n_ranks = len(info.get("ranks") or [])
    parts = [f"{info.get('steps', 0)} rank-steps on {n_ranks} rank{'s' if n_ranks != 1 else ''}" if n_ranks > 1
             else f"{info.get('steps', 0)} steps"]
    if info.get("gpu"):
        parts.append(str(info["gpu"]))
    return f"{label} ({', '.join(parts)})"


def _pooled_rows(c: Comparison) -> pd.DataFrame:
    return c.rows[c.rows["rank"].isna()]


def _rank_rows(c: Comparison) -> pd.DataFrame:
    return c.rows[c.rows["rank"].notna() & (c.rows["metric"] == c.metric)]


# -- JSON ---------------------------------------------------------------------------------


def _plain(v: Any) -> Any:
    """Turn numpy/pandas scalars into JSON-able Python values (NaN/NA -> None)."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            v = v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (str, int, float, bool)):
        return v
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return str(v)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in rec.items()} for rec in df.to_dict(orient="records")]


def to_dict(c: Comparison) -> dict[str, Any]:
    """Return the comparison as a JSON-able dict (the ``--format json`` document).

    Keys: ``schema``, ``verdict``, ``passed``, ``headline``, ``metric``, ``max_regression``,
    ``confidence``, ``per_rank``, ``min_steps``, ``n_boot``, ``seed``, ``base`` and ``new``
    (``label`` plus run facts), ``rows``, ``kernels``, ``collectives`` (lists of records with
    the columns documented on :class:`Comparison`; NaN becomes null),
    ``new_recommendations`` (full records), ``resolved_recommendations`` (ids), ``warnings``.
    """
    return {
        "schema": JSON_SCHEMA,
        "verdict": c.verdict,
        "passed": c.passed,
        "headline": headline(c),
        "metric": c.metric,
        "max_regression": c.max_regression,
        "confidence": c.confidence,
        "per_rank": c.per_rank,
        "min_steps": c.min_steps,
        "n_boot": c.n_boot,
        "seed": c.seed,
        "base": {"label": c.base_label, **_plain(c.base_info)},
        "new": {"label": c.new_label, **_plain(c.new_info)},
        "rows": _records(c.rows),
        "kernels": _records(c.kernels),
        "collectives": _records(c.collectives),
        "new_recommendations": [_plain(asdict(r)) for r in c.new_recommendations],
        "resolved_recommendations": list(c.resolved_recommendations),
        "warnings": list(c.warnings),
    }


def render_json(c: Comparison) -> str:
    """Return :func:`to_dict` as indented JSON (strict: no NaN literals)."""
    return json.dumps(to_dict(c), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


# -- text ---------------------------------------------------------------------------------


def render_text(c: Comparison, *, width: int = 110, color: bool = False, top: int = 5) -> str:
    """Return a terminal report (rich tables); ANSI colours only when ``color``."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                  highlight=False, emoji=False, markup=False)
    style = "bold red" if not c.passed else "bold green" if c.verdict in ("improvement", "faster") else "bold"
    con.print(Text("perfscope compare: " + headline(c), style=style))
    con.print(Text(f"base: {_side_summary(c.base_label, c.base_info)}"))
    con.print(Text(f"new:  {_side_summary(c.new_label, c.new_info)}"))

    def metric_table(rows: pd.DataFrame, title: str) -> Table:
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
                Text(str(r["verdict"]).replace("_", " "), style=_VERDICT_STYLE.get(str(r["verdict"]), "") if r["gating"] else ""),
            )
        return t

    con.print()
    con.print(metric_table(_pooled_rows(c), "Step time and buckets (median per step, ranks averaged; * = gate)"))
    if c.per_rank:
        con.print()
        con.print(metric_table(_rank_rows(c), f"{c.metric} per rank"))
    con.print(Text(_change_note(c), style="dim"))
    for title, df, key in (("Kernels whose time per step changed most", c.kernels, "kernel"),
                           ("Collectives whose time per step changed most", c.collectives, "collective")):
        if df.empty:
            continue
        con.print()
        t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        for col, just in ((key, "left"), ("base/step", "right"), ("new/step", "right"), ("Δ/step", "right"), ("change", "right")):
            t.add_column(col, justify=just, overflow="fold" if col == key else "ellipsis")  # type: ignore[arg-type]
        for _, r in df.head(top).iterrows():
            t.add_row(Text(_item_name(r, width=60)), Text(fmt_ns(r["base_ns_per_step"])), Text(fmt_ns(r["new_ns_per_step"])),
                      Text(fmt_delta_ns(r["delta_ns_per_step"])), Text(_item_change(r)))
        con.print(t)
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


def _item_name(r: pd.Series, width: int = _NAME_WIDTH) -> str:
    if "func" in r.index:
        name = f"{r['func']} {fmt_bytes(float(r['bytes']))}"
    else:
        name = str(r["name"])
    tag = {"new": " (new)", "gone": " (gone)"}.get(str(r["status"]), "")
    return short(name, width - len(tag)) + tag


def _item_change(r: pd.Series) -> str:
    if r["status"] == "new":
        return "new"
    if r["status"] == "gone":
        return "gone"
    return fmt_pct(r["rel_change"])


# -- Markdown -----------------------------------------------------------------------------


def md_escape(s: object, width: int = _NAME_WIDTH) -> str:
    """Escape untrusted text for a GitHub Markdown table cell (one line, no tags, no ``|``)."""
    t = html.escape(short(s, width), quote=False)
    # Characters that start Markdown syntax or would end the cell.
    t = t.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_")
    t = t.replace("[", "\\[").replace("]", "\\]")
    return t


def render_markdown(c: Comparison, *, top: int = 10) -> str:
    """Return GitHub-flavoured Markdown sized for a CI job summary (``$GITHUB_STEP_SUMMARY``).

    Long tables sit in ``<details>`` blocks; names are escaped and cut to one line, so the
    summary stays well under GitHub's 1 MiB per-step limit.
    """
    icon = "❌" if not c.passed else "🚀" if c.verdict == "improvement" else "⚠️" if c.verdict in ("too_few_steps", "inconclusive") else "✅"
    out = [f"## {icon} perfscope compare: {md_escape(headline(c), 200)}", ""]
    out.append(f"**base** {md_escape(_side_summary(c.base_label, c.base_info), 200)} → **new** {md_escape(_side_summary(c.new_label, c.new_info), 200)}")
    out.append("")

    def table(rows: pd.DataFrame) -> list[str]:
        lines = ["| metric | steps (base/new) | base median | new median | Δ | change | interval | verdict |",
                 "|---|---:|---:|---:|---:|---:|---|---|"]
        for _, r in rows.iterrows():
            name = md_escape(row_label(r))
            name = f"**{name}**" if r["gating"] else name
            lines.append(
                f"| {name} | {int(r['n_base'])}/{int(r['n_new'])} | {fmt_ns(r['base_median_ns'])} | {fmt_ns(r['new_median_ns'])} | "
                f"{fmt_delta_ns(r['delta_ns'])} | {fmt_pct(r['change'])} | {fmt_interval(r['ci_low'], r['ci_high'])} | "
                f"{verdict_label(r)} |"
            )
        return lines

    out += table(_pooled_rows(c))
    out.append("")
    out.append(f"<sub>{html.escape(_change_note(c), quote=False)}</sub>")
    out.append("")
    if c.per_rank:
        out += ["<details><summary>" + html.escape(f"{c.metric} per rank") + "</summary>", ""]
        out += table(_rank_rows(c))
        out += ["", "</details>", ""]
    if c.warnings:
        out += [f"> ⚠️ {md_escape(w, 400)}" + "  " for w in c.warnings]
        out.append("")
    for title, df, key in (("Kernels whose time per step changed most", c.kernels, "kernel"),
                           ("Collectives whose time per step changed most", c.collectives, "collective")):
        if df.empty:
            continue
        out += [f"<details><summary>{title}</summary>", "",
                f"| {key} | base / step | new / step | Δ / step | change |", "|---|---:|---:|---:|---:|"]
        for _, r in df.head(top).iterrows():
            out.append(f"| {md_escape(_item_name(r))} | {fmt_ns(r['base_ns_per_step'])} | {fmt_ns(r['new_ns_per_step'])} | "
                       f"{fmt_delta_ns(r['delta_ns_per_step'])} | {_item_change(r)} |")
        out += ["", "</details>", ""]
    if c.new_recommendations:
        out += ["### New recommendations in NEW", ""]
        for rec in c.new_recommendations:
            saving = f" — saves ~{rec.saving_share:.0%} of a step" if rec.saving_share else ""
            out.append(f"- **{md_escape(rec.title, 200)}** ({md_escape(rec.id, 80)}){saving}: {md_escape(rec.message, 400)}")
        out.append("")
    if c.resolved_recommendations:
        out += ["No longer fired: " + ", ".join(md_escape(i, 80) for i in c.resolved_recommendations), ""]
    return "\n".join(out) + "\n"


# -- JUnit XML ----------------------------------------------------------------------------

_XML_BAD = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(s: object) -> str:
    """Text safe for XML 1.0 (the serializer escapes ``<&"``; this drops forbidden chars)."""
    return _XML_BAD.sub("\ufffd", str(s))


def render_junit(c: Comparison) -> str:
    """Return JUnit XML: one ``testcase`` per metric row, a ``failure`` per gating regression.

    Only the gating metric's rows can fail (matching the exit code); ``too_few_steps`` is a
    ``skipped`` case with the reason; every case's ``system-out`` holds its numbers.
    """
    rows = c.rows
    failures = int(((rows["verdict"] == "regression") & rows["gating"]).sum())
    skipped = int(((rows["verdict"] == "too_few_steps") & rows["gating"]).sum())
    suites = ET.Element("testsuites", name="perfscope compare", tests=str(len(rows)), failures=str(failures),
                        errors="0", skipped=str(skipped))
    suite = ET.SubElement(suites, "testsuite", name=_x(f"perfscope compare {c.base_label} -> {c.new_label}"),
                          tests=str(len(rows)), failures=str(failures), errors="0", skipped=str(skipped), time="0")
    props = ET.SubElement(suite, "properties")
    for k, v in (("metric", c.metric), ("max_regression", c.max_regression), ("confidence", c.confidence),
                 ("per_rank", c.per_rank), ("min_steps", c.min_steps), ("n_boot", c.n_boot), ("seed", c.seed),
                 ("verdict", c.verdict), ("base", c.base_label), ("new", c.new_label)):
        ET.SubElement(props, "property", name=k, value=_x(v))
    for _, r in rows.iterrows():
        name = row_label(r)
        case = ET.SubElement(suite, "testcase", classname="perfscope.compare", name=_x(name), time="0")
        detail = (
            f"{name}: base median {fmt_ns(r['base_median_ns'])} ({int(r['n_base'])} steps), "
            f"new median {fmt_ns(r['new_median_ns'])} ({int(r['n_new'])} steps), Δ {fmt_delta_ns(r['delta_ns'])}, "
            f"change {fmt_pct(r['change'])} of the base step, {c.confidence:.0%} interval {fmt_interval(r['ci_low'], r['ci_high'])}, "
            f"verdict {r['verdict']}" + ("" if r["gating"] else " (informational: not the gate)")
        )
        if r["gating"] and r["verdict"] == "regression":
            f = ET.SubElement(case, "failure", type="regression",
                              message=_x(f"{name} regressed {fmt_pct(r['change'])} (interval {fmt_interval(r['ci_low'], r['ci_high'])}), "
                                         f"more than the allowed {c.max_regression:.1%}"))
            f.text = _x(detail)
        elif r["gating"] and r["verdict"] == "too_few_steps":
            ET.SubElement(case, "skipped", message=_x(
                f"not judged: need at least {c.min_steps} steps per side (base {int(r['n_base'])}, new {int(r['n_new'])})"))
        out = ET.SubElement(case, "system-out")
        out.text = _x(detail)
    if c.warnings:
        err = ET.SubElement(suite, "system-err")
        err.text = _x("\n".join(f"warning: {w}" for w in c.warnings))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# -- HTML ---------------------------------------------------------------------------------

_CSS = """
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


def render_html(c: Comparison, *, top: int = 10) -> str:
    """Return one self-contained HTML page (plotly.js inlined, no network needed).

    Charts: the gating metric per step for both runs (distribution and sequence), bucket
    medians side by side, and the kernels whose time per step changed most.  Every name
    from a trace is HTML-escaped, in tables and in chart labels.
    """
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    e = html.escape
    cls = "fail" if not c.passed else "pass" if c.verdict in ("improvement", "faster", "unchanged", "slower") else "warn"
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{e('perfscope compare: ' + headline(c))}</title><style>{_CSS}</style>",
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>",
        f"<h1 class='{cls}'>{e(headline(c))}</h1>",
        f"<p><b>base</b> {e(_side_summary(c.base_label, c.base_info))} &rarr; <b>new</b> {e(_side_summary(c.new_label, c.new_info))}</p>",
    ]
    if c.warnings:
        parts.append("<div class='warnbox'>" + "".join(f"<div>&#9888; {e(w)}</div>" for w in c.warnings) + "</div>")

    def table(rows: pd.DataFrame) -> str:
        h = ["<table><tr><th>metric</th><th>steps base/new</th><th>base median</th><th>new median</th><th>&Delta;</th>"
             "<th>change</th><th>interval</th><th>verdict</th></tr>"]
        for _, r in rows.iterrows():
            h.append(
                f"<tr class='{'gate' if r['gating'] else ''}'><td>{e(row_label(r))}</td><td>{int(r['n_base'])}/{int(r['n_new'])}</td>"
                f"<td>{e(fmt_ns(r['base_median_ns']))}</td><td>{e(fmt_ns(r['new_median_ns']))}</td><td>{e(fmt_delta_ns(r['delta_ns']))}</td>"
                f"<td>{e(fmt_pct(r['change']))}</td><td>{e(fmt_interval(r['ci_low'], r['ci_high']))}</td>"
                f"<td class='v {'fail' if r['verdict'] == 'regression' and r['gating'] else ''}'>{e(verdict_label(r, icons=False))}</td></tr>"
            )
        h.append("</table>")
        return "".join(h)

    parts.append("<h2>Step time and buckets</h2>" + table(_pooled_rows(c)) + f"<p class='note'>{e(_change_note(c))}</p>")
    if c.per_rank:
        parts.append(f"<h2>{e(c.metric)} per rank</h2>" + table(_rank_rows(c)))

    figs: list[go.Figure] = []
    col = METRIC_COLUMNS[c.metric]
    s = c.samples
    if not s.empty and col in s.columns:
        dist = go.Figure()
        seq = go.Figure()
        for side, label, colour in (("base", c.base_label, "#667085"), ("new", c.new_label, "#d92d20" if not c.passed else "#1570ef")):
            d = s[s["side"] == side]
            name = e(short(f"{side}: {label}", 60))
            dist.add_trace(go.Box(y=d[col] / 1e6, name=name, boxpoints="all", jitter=0.4, pointpos=0, marker_color=colour))
            seq.add_trace(go.Scatter(x=list(range(len(d))), y=d[col] / 1e6, mode="lines+markers", name=name, line_color=colour))
        dist.update_layout(title=f"{e(c.metric)} per step (ms, ranks averaged)", yaxis_title="ms", height=380, showlegend=False)
        seq.update_layout(title=f"{e(c.metric)} step by step", xaxis_title="step (in order)", yaxis_title="ms", height=380)
        figs += [dist, seq]
    pooled = _pooled_rows(c)
    if not pooled.empty:
        b = pooled[pooled["metric"] != STEP_TIME]
        bars = go.Figure([
            go.Bar(x=list(b["metric"]), y=b["base_median_ns"] / 1e6, name=e(short(f"base: {c.base_label}", 60)), marker_color="#98a2b3"),
            go.Bar(x=list(b["metric"]), y=b["new_median_ns"] / 1e6, name=e(short(f"new: {c.new_label}", 60)), marker_color="#1570ef"),
        ])
        bars.update_layout(title="Median per step by bucket (ms)", barmode="group", yaxis_title="ms", height=360)
        figs.append(bars)
    if not c.kernels.empty:
        k = c.kernels.head(top).iloc[::-1]
        labels = [e(_item_name(r, 70)) for _, r in k.iterrows()]
        kf = go.Figure(go.Bar(x=k["delta_ns_per_step"] / 1e3, y=list(range(len(k))), orientation="h",
                              hovertext=labels, hoverinfo="text+x",
                              marker_color=["#d92d20" if v > 0 else "#12b76a" for v in k["delta_ns_per_step"]]))
        kf.update_layout(title="Kernels: change of time per step (µs)", height=120 + 28 * len(k),
                         yaxis=dict(tickmode="array", tickvals=list(range(len(k))), ticktext=labels, automargin=True))
        figs.append(kf)
    for f in figs:
        f.update_layout(template="plotly_white", margin=dict(l=40, r=20, t=50, b=40))
        parts.append(pio.to_html(f, full_html=False, include_plotlyjs=False, config={"displaylogo": False}))

    for title, df, key in (("Kernels whose time per step changed most", c.kernels, "kernel"),
                           ("Collectives whose time per step changed most", c.collectives, "collective")):
        if df.empty:
            continue
        rows_html = "".join(
            f"<tr><td>{e(_item_name(r, 200))}</td><td>{e(fmt_ns(r['base_ns_per_step']))}</td><td>{e(fmt_ns(r['new_ns_per_step']))}</td>"
            f"<td>{e(fmt_delta_ns(r['delta_ns_per_step']))}</td><td>{e(_item_change(r))}</td></tr>"
            for _, r in df.head(top).iterrows()
        )
        parts.append(f"<h2>{title}</h2><table><tr><th>{key}</th><th>base / step</th><th>new / step</th>"
                     f"<th>&Delta; / step</th><th>change</th></tr>{rows_html}</table>")
    if c.new_recommendations:
        items = "".join(
            f"<li><b>{e(r.title)}</b> <code>{e(r.id)}</code>"
            + (f" &mdash; saves ~{r.saving_share:.0%} of a step" if r.saving_share else "")
            + f"<br>{e(r.message)}" + (f"<br>Try: <code>{e(r.change)}</code>" if r.change else "") + "</li>"
            for r in c.new_recommendations
        )
        parts.append(f"<h2>New recommendations in NEW</h2><ul>{items}</ul>")
    if c.resolved_recommendations:
        parts.append("<p class='note'>No longer fired: " + ", ".join(f"<code>{e(i)}</code>" for i in c.resolved_recommendations) + "</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


RENDERERS: dict[str, Callable[[Comparison], str]] = {
    "text": render_text,
    "md": render_markdown,
    "junit": render_junit,
    "html": render_html,
    "json": render_json,
}


def render(c: Comparison, fmt: str) -> str:
    """Render ``c`` in format ``fmt`` (one of :data:`FORMATS`)."""
    try:
        return RENDERERS[fmt](c)
    except KeyError:
        from perfscope.errors import UsageError

        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}") from None


__all__ = ["FORMATS", "RENDERERS", "render", "render_text", "render_markdown", "render_junit", "render_html",
           "render_json", "to_dict", "headline"]
