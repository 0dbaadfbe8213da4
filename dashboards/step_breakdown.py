"""The Overview's answer without plotly: the run's step time split into the six buckets,
drawn as a stacked bar of HTML boxes with a legend (ms per step and share of each bucket).

It is part of the layout Dash sends, so React draws it on its first render, before
plotly.js (4.8 MB; 1.4-1.7 s of a cold load's main thread, benchmarks/README.md) has been
evaluated; the Overview's plotly figures below it follow once plotly has loaded.  The
numbers are those of the Overview's bucket bars (the mean over the summary steps' rank x
step rows), the colours and labels the reports' (:mod:`perfscope.reports.style`).
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from dash import html

from perfscope.analyzers.result import BUCKETS
from perfscope.reports.style import BUCKET_COLORS, BUCKET_LABELS, fmt_ms, fmt_share

_BAR = {"display": "flex", "height": "26px", "width": "100%", "borderRadius": "4px", "overflow": "hidden",
        "background": "#f2f4f7"}
_LEGEND = {"display": "flex", "flexWrap": "wrap", "gap": "4px 18px", "listStyle": "none", "padding": "0",
           "margin": "6px 0 0", "fontSize": "13px"}
_SWATCH = {"display": "inline-block", "width": "12px", "height": "12px", "borderRadius": "2px",
           "marginRight": "6px", "verticalAlign": "-1px"}


def bucket_means(steps: pd.DataFrame) -> list[tuple[str, float, float]]:
    """The run's breakdown over ``steps`` (``Analysis.steps`` rows, ``*_ns`` bucket columns).

    Returns:
        one ``(bucket, mean_ns, share)`` per bucket column present, in ``BUCKETS`` order:
        ``mean_ns`` the bucket's mean per (rank, step) row in nanoseconds, ``share`` its part
        of the summed step time (0..1; the shares add up to 1, as the buckets add up to
        ``wall_ns``).  Empty when there are no steps or no step time.
    """
    cols = [b for b in BUCKETS if f"{b}_ns" in steps.columns]
    if steps.empty or not cols:
        return []
    totals = steps[[f"{b}_ns" for b in cols]].sum().to_numpy(dtype="float64")
    wall = float(totals.sum())
    if wall <= 0:
        return []
    return [(b, float(t) / len(steps), float(t) / wall) for b, t in zip(cols, totals)]


def _title(steps: pd.DataFrame, warmup: Sequence[int], include_warmup: bool) -> str:
    """``Where the step time goes: mean of 9 steps on 2 ranks, 20.1 ms per step; warm-up step 0 excluded``."""
    n_steps, n_ranks = int(steps["step"].nunique()), int(steps["rank"].nunique())
    text = (f"Where the step time goes: mean of {n_steps} step{'s' if n_steps != 1 else ''} on {n_ranks} "
            f"rank{'s' if n_ranks != 1 else ''}, {fmt_ms(float(steps['wall_ns'].mean()))} per step")
    if warmup:
        word = "step" if len(warmup) == 1 else "steps"
        text += f"; warm-up {word} {', '.join(map(str, warmup))} {'included' if include_warmup else 'excluded'}"
    return text


def step_breakdown(steps: pd.DataFrame, warmup: Sequence[int] = (), include_warmup: bool = False) -> html.Div | None:
    """The breakdown of ``steps`` (the summary steps: warm-up left out unless
    ``include_warmup``) as plain HTML: a title, a stacked bar (one box per bucket with
    time, ``title`` text and ``data-bucket`` / ``data-share`` attributes) and a legend
    naming each bucket with its ms per step and share, so no value is told by colour alone.

    Returns:
        a Div with id ``step-breakdown``, or None when ``steps`` hold no step time.
    """
    means = bucket_means(steps)
    if not means:
        return None
    title = _title(steps, warmup, include_warmup)
    said = [f"{BUCKET_LABELS[b]} {fmt_ms(ns)} per step ({fmt_share(share)})" for b, ns, share in means]
    boxes = [html.Div(className="breakdown-box", title=text,
                      style={"width": f"{100 * share:.4f}%", "background": BUCKET_COLORS[b]},
                      **{"data-bucket": b, "data-share": f"{100 * share:.1f}"})
             for (b, _, share), text in zip(means, said) if share > 0]
    legend = [html.Li([html.Span(style={**_SWATCH, "background": BUCKET_COLORS[b]}), html.B(BUCKET_LABELS[b]),
                       f" {fmt_ms(ns)} ({fmt_share(share)})"], className="breakdown-item", **{"data-bucket": b})
              for b, ns, share in means]
    return html.Div([
        html.H4(title, id="step-breakdown-title", style={"margin": "8px 0 6px"}),
        html.Div(boxes, role="img", **{"aria-label": f"{title}: {'; '.join(said)}"}, style=_BAR),
        html.Ul(legend, style=_LEGEND),
    ], id="step-breakdown", style={"margin": "4px 0 12px", "maxWidth": "1100px"})


__all__ = ["bucket_means", "step_breakdown"]
