"""What every renderer of a :class:`~perfscope.analyzers.compare.Comparison` says alike: the
headline, row and verdict labels, the note on how a change is measured, and the names of
the kernels and collectives that changed.  The renderers live with their format
(:mod:`.text`, :mod:`.markdown`, :mod:`.junit`, :mod:`.html_compare`, :mod:`.jsondoc`).
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from perfscope.analyzers.compare import STEP_TIME, Comparison
from perfscope.reports.style import fmt_bytes, fmt_ns, fmt_pct, short

VERDICT_ICONS = {
    "regression": "❌ regression",
    "improvement": "🚀 improvement",
    "too_few_steps": "⚠️ too few steps",
    "inconclusive": "⚠️ inconclusive",
    "slower": "slower (within threshold)",
    "faster": "faster",
    "unchanged": "unchanged",
}
# Kernel names of templated C++ code run to hundreds of characters; reports show a prefix.
NAME_WIDTH = 90
# The tables of changed items: (title, Comparison attribute, name column).
ITEM_TABLES: tuple[tuple[str, str, str], ...] = (
    ("Kernels whose time per step changed most", "kernels", "kernel"),
    ("Collectives whose time per step changed most", "collectives", "collective"),
)


def verdict_label(row: pd.Series, *, icons: bool = True) -> str:
    """The verdict as shown in a table; only the gate's rows get a pass/fail icon, since
    only they decide the exit code (a bucket can grow while the step does not)."""
    v = str(row["verdict"])
    if row["gating"] and icons:
        return VERDICT_ICONS.get(v, v)
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


def change_note(c: Comparison) -> str:
    """How a change is measured and judged (shown under the metric table)."""
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


def side_summary(label: str, info: dict[str, Any]) -> str:
    """``LABEL (40 steps, NVIDIA H200)``: one side of the comparison."""
    n_ranks = len(info.get("ranks") or [])
    parts = [f"{info.get('steps', 0)} rank-steps on {n_ranks} rank{'s' if n_ranks != 1 else ''}" if n_ranks > 1
             else f"{info.get('steps', 0)} steps"]
    if info.get("gpu"):
        parts.append(str(info["gpu"]))
    return f"{label} ({', '.join(parts)})"


def pooled_rows(c: Comparison) -> pd.DataFrame:
    """The rows of every metric over all ranks."""
    return c.rows[c.rows["rank"].isna()]


def rank_rows(c: Comparison) -> pd.DataFrame:
    """The gating metric's per-rank rows."""
    return c.rows[c.rows["rank"].notna() & (c.rows["metric"] == c.metric)]


def item_tables(c: Comparison) -> list[tuple[str, pd.DataFrame, str]]:
    """(title, rows, name column) of the non-empty tables of changed kernels and collectives."""
    return [(title, getattr(c, attr), key) for title, attr, key in ITEM_TABLES if not getattr(c, attr).empty]


def item_name(r: pd.Series, width: int = NAME_WIDTH) -> str:
    """A changed kernel's name or a collective's ``func size``, one line, tagged new/gone."""
    if "func" in r.index:
        name = f"{r['func']} {fmt_bytes(float(r['bytes']))}"
    else:
        name = str(r["name"])
    tag = {"new": " (new)", "gone": " (gone)"}.get(str(r["status"]), "")
    return short(name, width - len(tag)) + tag


def item_change(r: pd.Series) -> str:
    """``new``, ``gone`` or the relative change of a kernel's or collective's time per step."""
    if r["status"] == "new":
        return "new"
    if r["status"] == "gone":
        return "gone"
    return fmt_pct(r["rel_change"])


__all__ = [
    "NAME_WIDTH",
    "VERDICT_ICONS",
    "change_note",
    "headline",
    "item_change",
    "item_name",
    "item_tables",
    "pooled_rows",
    "rank_rows",
    "row_label",
    "side_summary",
    "verdict_label",
]
