"""The dashboard on the runs perfscope itself recorded on the H200 (tests/data/h200/).

Every tab's content is built through the callbacks as plain functions (no server, no
browser) with the real analyzers, and checked for real content: step counts, bucket
labels, kernel names, the collectives, and the straggler ranking of ``straggler.perfscope``
(rank 2 sleeps 30 ms per step, so it must come out worst).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import plotly
import pytest

from perfscope.dashboards import callbacks, layout
from perfscope.dashboards.data import DashboardData

pytestmark = pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"
# run -> (ranks, steps per rank, a kernel name that must be listed)
RUNS: dict[str, tuple[list[int], int, str]] = {
    "profile": ([0], 8, "multi_tensor_apply_kernel"),
    "record": ([0], 10, "multi_tensor_apply_kernel"),
    "comm_heavy": ([0, 1], 7, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    "straggler": ([0, 1, 2, 3], 7, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
}
NAMES = list(RUNS)


@pytest.fixture(scope="module")
def data() -> DashboardData:
    paths = [H200 / f"{name}.perfscope" for name in NAMES]
    missing = [p.name for p in paths if not (p / "run.json").is_file()]
    if missing:
        pytest.fail(f"committed H200 fixture runs are missing: {missing} (check .gitignore)")
    try:
        from perfscope.analyzers import analyze_run  # noqa: F401
    except ImportError:
        pytest.fail("needs perfscope.analyzers.analyze_run")
    return DashboardData([str(p) for p in paths])


def _json(component: Any) -> str:
    return json.dumps(component, cls=plotly.utils.PlotlyJSONEncoder)


def _walk(node: Any) -> list[Any]:
    """Every Dash component under ``node``."""
    out = []
    if hasattr(node, "_namespace"):
        out.append(node)
        node = getattr(node, "children", None)
    if isinstance(node, (list, tuple)):
        for child in node:
            out += _walk(child)
    elif hasattr(node, "_namespace"):
        out += _walk(node)
    return out


def _figures(component: Any) -> list[Any]:
    return [c.figure for c in _walk(component) if type(c).__name__ == "Graph"]


@pytest.mark.parametrize("name", NAMES)
def test_every_tab_renders_real_content(data: DashboardData, name: str) -> None:
    i = NAMES.index(name)
    ranks, n_steps, kernel = RUNS[name]
    rd = data.get(i)
    assert sorted(rd.steps["rank"].unique()) == ranks
    assert rd.steps.groupby("rank").size().to_dict() == {r: n_steps for r in ranks}

    # Overview: run facts with the step count, both bucket figures with bucket labels.
    overview = callbacks.render_tab(data, "overview", i, None)
    text = _json(overview)
    assert f'"{n_steps} steps"' in text and "NVIDIA H200" in text
    figs = _figures(overview)
    assert len(figs) == 2
    labels = {t.name for t in figs[0].data}
    assert {"compute", "network", "sync", "pcie", "data loading", "host"} <= labels
    # warm-up steps (profile's 201 ms step 0) are left out of the summaries by default
    steady = sorted(set(rd.steps["step"].unique().tolist()) - set(rd.warmup))
    assert sorted(int(x) for x in figs[0].data[0].x) == steady
    assert rd.warmup == ((0,) if name == "profile" else (1,) if name == "record" else ())
    every = _figures(callbacks.render_tab(data, "overview", i, None, ["include"]))[0]
    assert sorted(int(x) for x in every.data[0].x) == sorted(rd.steps["step"].unique().tolist())
    assert rd.analysis.recommendations and rd.analysis.recommendations[0].title in text

    # Ranks: straggler ranking, per-rank split, two heatmaps (rank x step), arrival skew;
    # a single-rank run says why there is nothing to compare.
    ranks_tab = callbacks.render_tab(data, "ranks", i, None)
    if len(ranks) > 1:
        strag, overlap, heat_waited, heat_wall, skew = _figures(ranks_tab)
        assert len(heat_wall.data[0].y) == len(ranks) == len(heat_waited.data[0].y) == len(overlap.data[0].x)
        assert {t.name.split()[1] for t in skew.data} == {str(r) for r in ranks}  # one series per rank
    else:
        assert not _figures(ranks_tab) and "One rank only" in _json(ranks_tab)

    # Timeline of the default (rank, step): real lanes from the store.
    timeline = callbacks.render_tab(data, "timeline", i, None)
    sel = layout.default_selection(rd)
    assert sel["rank"] in ranks
    fig = callbacks.timeline_figure(data, i, sel["rank"], sel["step"])
    lanes = {t.name for t in fig.data}
    assert any(" · stream " in lane for lane in lanes), lanes
    # every rank has its lane group, with its GPU counter tracks when the run sampled them
    ticks = list(fig.layout.yaxis.ticktext)
    assert {int(t.split(" ")[1]) for t in ticks} == set(ranks)
    if rd.row_counts.get("metrics", 0) > 100:
        assert {f"rank {r} · GPU util (%)" for r in ranks} <= set(ticks)
        assert any(t.type == "scatter" for t in fig.data)
    assert f"step {sel['step']}" in fig.layout.title.text
    assert _figures(timeline)

    # Kernels: the table lists the run's kernels with their real names.
    kernels_tab = callbacks.render_tab(data, "kernels", i, None)
    assert kernel in _json(kernels_tab)
    rows, note, _ = callbacks.kernel_table(data, i, "all")
    assert any(kernel in r["name"] for r in rows)
    assert note.startswith(f"{len(rd.analysis.kernels):,} kernel rows")
    rows0, _, _ = callbacks.kernel_table(data, i, ranks[-1])
    assert rows0 and all(int(r["rank"]) == ranks[-1] for r in rows0)

    # Collectives: NCCL all-reduces on the multi-rank runs, none on one rank.
    callbacks.render_tab(data, "collectives", i, None)
    crows, cnote = callbacks.collective_table(data, i, "all")
    if len(ranks) > 1:
        assert crows and all(r["func"] == "AllReduce" for r in crows)
        assert {int(r["rank"]) for r in crows} == set(ranks)
    else:
        assert not crows and cnote.startswith("0 collectives")
        assert "single-rank trace" in _json(callbacks.render_tab(data, "collectives", i, None))

    for tab, _ in layout.TABS:
        assert len(_json(callbacks.render_tab(data, tab, i, None))) < 1_000_000


def test_straggler_run_ranks_rank_2_first(data: DashboardData) -> None:
    i = NAMES.index("straggler")
    rd = data.get(i)
    assert int(rd.analysis.stragglers["rank"].iloc[0]) == 2
    ranks_tab = callbacks.render_tab(data, "ranks", i, None)
    strag = _figures(ranks_tab)[0]
    assert list(strag.data[0].y)[-1] == "rank 2"  # worst rank drawn on top
    assert strag.data[0].x[-1] == pytest.approx(647.016285)  # ms the others waited for it
    callout = next(c for c in _walk(ranks_tab) if getattr(c, "id", None) == "straggler-callout")
    assert "Straggler: rank 2" in _json(callout) and "647 ms" in _json(callout)
    # the wait heatmap: rank 2's row is where the others' waits are charged
    waited = _figures(ranks_tab)[2].data[0]
    assert waited.y[int(max(range(len(waited.y)), key=lambda j: sum(v or 0 for v in waited.z[j])))] == "rank 2"
    recs = [r.id for r in rd.analysis.recommendations]
    assert "comm.straggler" in recs
    straggler_rec = next(r for r in rd.analysis.recommendations if r.id == "comm.straggler")
    assert 2 in (straggler_rec.ranks or [])
    # A click on the ranking opens that rank on the Timeline.
    sel, tab = callbacks.pick(data, i, "stragglers", {"points": [{"y": "rank 2", "x": 87.5}]}, None)
    assert tab == "timeline" and sel["rank"] == 2
    fig = callbacks.timeline_figure(data, i, sel["rank"], sel["step"])
    assert fig.layout.title.text.startswith("rank 2,")


def test_compare_tab_on_profile_and_record(data: DashboardData) -> None:
    content = callbacks.render_tab(data, "compare", 0, None)
    assert content is not None
    body = _json(callbacks.compare_update(data, NAMES.index("profile"), NAMES.index("record")))
    # the same workload recorded twice: both runs named, a median step time each, a verdict
    assert "median step time: base profile.perfscope" in body and "new record.perfscope" in body
    assert "verdict: " in body


def test_h200_timeline_links_kernels_to_their_launch_and_shows_counters(data: DashboardData) -> None:
    from perfscope.dashboards import timeline_callbacks

    i = NAMES.index("straggler")
    rd = data.get(i)
    # A window where rank 1's GPU runs kernels (it runs far behind the host's steps here).
    k = rd.run.table("kernels", [1], ["start_ns"])["start_ns"].sort_values()
    step = int(rd.steps[rd.steps["rank"] == 1]["step"].iloc[0])
    fig = timeline_callbacks.timeline_figure_of(data, i, 1, step, (int(k.iloc[60]), int(k.iloc[60]) + 2_000_000), [1])
    hovers = [str(d[1]) for t in fig.data if t.type == "bar" for d in t.customdata]
    assert any("launched by cudaLaunchKernel on API " in h for h in hovers), hovers[:5]
    counters = [t for t in fig.data if t.type == "scatter"]
    assert {t.name for t in counters} >= {"rank 1 · GPU util (%)", "rank 1 · power (W)", "rank 1 · SM clock (MHz)"}
    assert all(len(t.x) >= 1 for t in counters)  # a sample on each side of the window at least
    table = json.dumps(layout.overview_counters(rd).to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder)
    assert "GPU util" in table and "power" in table and "(rank " in table
