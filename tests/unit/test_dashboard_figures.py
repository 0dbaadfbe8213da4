"""Figures and table rows of the dashboard, called as pure functions."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly
import plotly.graph_objects as go
import pytest

from perfscope.analyzers.result import BUCKETS
from perfscope.dashboards import figures, rank_figures, step_breakdown, tables
from perfscope.reports import style

pytestmark = pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")

EVIL = "<script>alert(1)</script>"


def _steps(ranks: int = 2, steps: int = 3) -> pd.DataFrame:
    rows = []
    for r in range(ranks):
        for s in range(steps):
            parts = {f"{b}_ns": (i + 1) * 1_000_000 * (r + 1) for i, b in enumerate(BUCKETS)}
            wall = sum(parts.values())
            rows.append({"rank": r, "step": 100 + s, "start_ns": s * 10**9, "end_ns": s * 10**9 + wall,
                         "wall_ns": wall, **parts})
    return pd.DataFrame(rows)


def test_bucket_bars_by_step_stack_the_six_buckets_in_ms() -> None:
    # GIVEN 2 ranks x 3 steps WHEN drawn per step (mean over ranks)
    fig = figures.bucket_bars_by_step(_steps())
    # THEN one bar trace per bucket, x = steps, y = the mean in ms
    assert [t.name for t in fig.data] == [figures.BUCKET_LABELS[b] for b in BUCKETS]
    assert all(isinstance(t, go.Bar) for t in fig.data)
    assert list(fig.data[0].x) == [100, 101, 102]
    assert fig.data[0].y[0] == pytest.approx(1.5)  # (1 ms + 2 ms) / 2
    assert fig.layout.barmode == "stack"
    one = figures.bucket_bars_by_step(_steps(), rank=1)
    assert one.data[0].y[0] == pytest.approx(2.0)


def test_bucket_bars_by_rank_carry_the_rank_for_clicks() -> None:
    fig = figures.bucket_bars_by_rank(_steps())
    assert list(fig.data[0].x) == ["rank 0", "rank 1"]
    assert list(fig.data[0].customdata) == [0, 1]
    assert fig.data[5].y[1] == pytest.approx(12.0)


def test_empty_steps_give_a_message_not_an_error() -> None:
    empty = _steps().iloc[:0]
    for fig in (figures.bucket_bars_by_step(empty), figures.bucket_bars_by_rank(empty),
                figures.rank_step_heatmap(empty), figures.compare_buckets(empty, empty, "a", "b")):
        assert fig.layout.annotations and "step" in fig.layout.annotations[0].text


def test_heatmap_is_rank_by_step_with_gaps() -> None:
    steps = _steps().drop(index=5)  # rank 1 lacks its last step
    fig = figures.rank_step_heatmap(steps, "wall_ns")
    (hm,) = fig.data
    assert isinstance(hm, go.Heatmap)
    z = np.array(hm.z, dtype=float)
    assert z.shape == (2, 3)
    assert np.isnan(z[1, 2]) and z[0, 0] == pytest.approx(21.0)
    assert list(hm.y) == ["rank 0", "rank 1"]


def test_straggler_bar_puts_the_worst_rank_on_top() -> None:
    df = pd.DataFrame({"rank": [0, 1, 2], "ops": [10, 10, 10], "last_count": [1, 8, 1], "last_share": [0.1, 0.8, 0.1],
                       "mean_lateness_ns": [0, 3_000_000, 0], "cost_to_others_ns": [0, 9_000_000, 0]})
    fig = rank_figures.straggler_cost_bar(df)
    assert fig.data[0].y[-1] == "rank 1"  # plotly draws the last category on top
    assert fig.data[0].x[-1] == pytest.approx(9.0)  # ms the others waited for it (issue #18: not % last)
    assert rank_figures.straggler_cost_bar(df.iloc[:0]).layout.annotations


def test_straggler_ranking_orders_by_cost_not_by_how_often_last() -> None:
    # rank 0 is last as often as rank 1 but only 2 ms late; rank 1 is 34 ms late: it is the straggler
    df = pd.DataFrame({"rank": [0, 1, 2], "ops": [8, 8, 8], "last_count": [4, 4, 0], "last_share": [0.5, 0.5, 0.0],
                       "mean_lateness_ns": [2_000_000, 34_000_000, 0],
                       "cost_to_others_ns": [16_000_000, 272_000_000, 0]})
    bar = rank_figures.straggler_cost_bar(df).data[0]
    assert list(bar.y) == ["rank 2", "rank 0", "rank 1"]
    assert bar.marker.color[-1] == style.STRAGGLER_COLOR and bar.marker.color[0] == style.OTHER_RANK_COLOR
    assert "272 ms" in bar.hovertext[-1] and "34.0 ms late" in bar.hovertext[-1]


def test_safe_text_escapes_markup() -> None:
    assert figures.safe_text(EVIL) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert figures.safe_text(None) == "" and figures.safe_text(float("nan")) == ""


def test_compare_figures_show_the_change() -> None:
    a, b = _steps(), _steps()
    b["compute_ns"] = b["compute_ns"] * 2
    fig = figures.compare_buckets(a, b, EVIL, "new")
    assert fig.data[1].text[0] == "+1.50 ms (+100.0%)"  # style.fmt_change: units that fit, never +0.00 ms
    assert fig.data[1].text[2] == "no change"
    assert fig.data[0].name == figures.safe_text(EVIL)
    deltas = figures.compare_step_deltas(a, b)
    assert deltas.data[0].y[0] == pytest.approx(1.5) and deltas.data[1].y[0] == pytest.approx(0.0)


def test_kernel_and_collective_rows_filter_cap_and_stay_json() -> None:
    k = pd.DataFrame({"rank": [0, 0, 1], "name": [EVIL, "gemm", "gemm"], "kind": ["compute"] * 3,
                      "count": [3, 2, 1], "total_ns": [3_000, 9_000_000, 1_000], "mean_ns": [1_000, 4.5e6, 1_000],
                      "median_ns": [1_000, 4.5e6, 1_000], "max_ns": [1_000, 5e6, 1_000], "share": [0.1, 0.9, 1.0]})
    rows, total = tables.kernel_rows(k)
    assert total == 3 and rows[0]["name"] == "gemm" and rows[0]["total_ms"] == 9.0
    rows1, total1 = tables.kernel_rows(k, rank=1)
    assert total1 == 1 and rows1[0]["rank"] == 1
    capped, total_c = tables.kernel_rows(k, limit=1)
    assert len(capped) == 1 and total_c == 3
    assert EVIL in json.dumps(rows)  # raw text: the DataTable shows it as text
    c = pd.DataFrame({"rank": [0, 1], "comm_id": ["pg0", "pg0"], "seq": [1, 1], "func": ["AllReduce"] * 2,
                      "bytes": [4_000_000, 4_000_000], "start_ns": [0, 0], "dur_ns": [2_000, 5_000],
                      "algbw_gbps": [2.0, 0.8], "busbw_gbps": [2.0, 0.8], "arrival_skew_ns": [3_000, 3_000],
                      "wait_ns": [3_000, pd.NA]})
    crows, ctotal = tables.collective_rows(c)
    assert ctotal == 2 and crows[0]["dur_us"] == 5.0 and crows[0]["wait_us"] is None
    json.dumps(crows)
    assert tables.collective_rows(c, "all")[1] == 2 and tables.collective_rows(c, 0)[1] == 1


def test_change_rows_from_a_comparison_table() -> None:
    ch = pd.DataFrame({"name": [EVIL], "kind": ["compute"], "base_ns_per_step": [1e6], "new_ns_per_step": [3e6],
                       "delta_ns_per_step": [2e6], "rel_change": [2.0], "status": ["changed"]})
    (row,) = tables.change_rows(ch)
    assert row == {"name": EVIL, "status": "changed", "base_ms": 1.0, "new_ms": 3.0, "delta_ms": 2.0,
                   "delta_pct": 200.0}
    assert tables.change_rows(ch.iloc[:0]) == []


def test_wait_heatmap_scale_starts_at_zero_and_spans_a_tenth_of_a_step() -> None:
    steps = _steps()
    steps["sync_ns"] = 25_000  # 25 µs of wait in ~20 ms steps: should look small
    hm = figures.rank_step_heatmap(steps, "sync_ns").data[0]
    assert hm.zmin == 0.0 and hm.zmax >= 0.1 * steps["wall_ns"].median() / 1e6
    assert figures.rank_step_heatmap(steps, "wall_ns").data[0].zmin is None


def _props(component: object) -> list[dict]:
    """Every component under ``component`` (itself first) as its JSON props."""
    out, todo = [], [json.loads(json.dumps(component, cls=plotly.utils.PlotlyJSONEncoder))]
    while todo:
        c = todo.pop(0)
        if isinstance(c, dict) and "props" in c:
            out.append(c["props"])
            kids = c["props"].get("children")
            todo.extend(kids if isinstance(kids, list) else [kids])
    return out


def test_step_breakdown_is_html_with_the_shares_colours_and_values_as_text() -> None:
    # GIVEN 2 ranks x 3 steps (rank 0: 1..6 ms per bucket, rank 1: twice that; 189 ms in all)
    steps = _steps()
    # WHEN the Overview's HTML breakdown is built (steps 100 as warm-up, left out)
    div = step_breakdown.step_breakdown(steps[steps["step"] != 100], warmup=(100,))
    props = _props(div)
    # THEN one box per bucket, in bucket order, width = share of the summed step time
    boxes = [p for p in props if p.get("className") == "breakdown-box"]
    assert [p["data-bucket"] for p in boxes] == list(BUCKETS)
    assert [p["style"]["background"] for p in boxes] == [style.BUCKET_COLORS[b] for b in BUCKETS]
    assert [float(p["data-share"]) for p in boxes] == pytest.approx([4.8, 9.5, 14.3, 19.0, 23.8, 28.6])
    assert float(boxes[0]["style"]["width"].rstrip("%")) == pytest.approx(100 / 21, abs=1e-4)
    # each value is also text: the box's title and the legend (ms per step = mean over rank x step rows)
    assert boxes[0]["title"] == "compute 1.50 ms per step (4.8%)"
    legend = [p for p in props if p.get("className") == "breakdown-item"]
    assert json.dumps(legend[4]).count("data loading") == 1 and "7.50 ms (23.8%)" in json.dumps(legend[4])
    title = next(p for p in props if p.get("id") == "step-breakdown-title")["children"]
    assert title == ("Where the step time goes: mean of 2 steps on 2 ranks, 31.5 ms per step; "
                     "warm-up step 100 excluded")
    # no plotly anywhere in it: React draws it without plotly.js
    assert "figure" not in json.dumps(props)


def test_step_breakdown_without_step_time_is_left_out() -> None:
    assert step_breakdown.step_breakdown(_steps().iloc[:0]) is None
    zero = _steps().assign(**{f"{b}_ns": 0 for b in BUCKETS}, wall_ns=0)
    assert step_breakdown.step_breakdown(zero) is None
