"""Dashboard callbacks and data loading, called as plain functions on synthetic runs."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import plotly
import pytest

from dashboard_fixtures import EVIL_KERNEL, EVIL_MARKER, GEMM, NCCL_KERNEL, analysis_for, make_run
from perfscope.analyzers.timeline import timeline_events
from perfscope.dashboards import callbacks, layout, timeline_callbacks
from perfscope.dashboards.data import DashboardData
from perfscope.errors import NotARunError, UsageError

pytestmark = pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> DashboardData:
    root = tmp_path_factory.mktemp("runs")
    make_run(root / "a", steps=4)
    make_run(root / "b", steps=6, step_ns=26_000_000)
    return DashboardData([str(root / "a"), str(root / "b")], analyze=analysis_for)


def _json(component: Any) -> str:
    return json.dumps(component, cls=plotly.utils.PlotlyJSONEncoder)


def _texts(node: Any) -> list[str]:
    """Every plain-string child under ``node`` (what React renders as text)."""
    out = []
    for comp in _walk(node):
        if isinstance(getattr(comp, "children", None), str):
            out.append(comp.children)
        elif isinstance(getattr(comp, "children", None), (list, tuple)):
            out += [c for c in comp.children if isinstance(c, str)]
    return out


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


@pytest.mark.parametrize("tab", [t for t, _ in layout.TABS])
def test_every_tab_renders_and_serialises(data: DashboardData, tab: str) -> None:
    content = callbacks.render_tab(data, tab, 0, None)
    payload = _json(content)
    assert len(payload) < 200_000
    for comp in _walk(content):
        # names from traces never reach HTML or Markdown renderers
        assert type(comp).__name__ != "Markdown"
        assert not getattr(comp, "dangerously_allow_html", False)
        if type(comp).__name__ == "DataTable":
            assert all(c.get("presentation", "input") == "input" for c in comp.columns)
            for tip in getattr(comp, "tooltip_data", None) or []:
                assert all(v["type"] == "text" for v in tip.values())


def test_overview_shows_facts_and_hostile_names_as_plain_text(data: DashboardData) -> None:
    content = callbacks.render_tab(data, "overview", 0, None)
    text = _json(content)
    assert '"4 steps"' in text and "2 x NVIDIA H200" in text
    recs = data.get(0).analysis.recommendations
    assert recs and any(recs[0].title == t for t in _texts(content))  # plain string children: React shows text
    figs = [c.figure for c in _walk(content) if type(c).__name__ == "Graph"]
    assert len(figs) == 2


def test_hostile_names_stay_text_everywhere(data: DashboardData) -> None:
    # Kernels table: the raw name as a cell value (DataTable renders cells as text).
    rows, _, tips = callbacks.kernel_table(data, 0, "all")
    assert EVIL_KERNEL in {r["name"] for r in rows}
    assert {"value": EVIL_KERNEL, "type": "text"} in [t["name"] for t in tips]  # tooltips: text, not Markdown
    # Figures: escaped, so plotly's HTML-subset renderer shows the characters.
    for tab in ("overview", "ranks", "timeline", "compare"):
        for comp in _walk(callbacks.render_tab(data, tab, 0, None)):
            if type(comp).__name__ == "Graph":
                payload = _json(comp.figure)
                assert EVIL_KERNEL not in payload and EVIL_MARKER not in payload
    # A hostile recommendation (as a rule could quote a kernel name) is rendered as text.
    from dataclasses import replace

    from perfscope.analyzers.result import Recommendation

    rd = data.get(0)
    evil = Recommendation(id="x", bucket="compute", title=EVIL_KERNEL, message=EVIL_MARKER,
                          evidence={"kernel": EVIL_KERNEL}, saving_ns=1, change=EVIL_KERNEL)
    cards = layout.recommendation_cards(replace(rd, analysis=replace(rd.analysis, recommendations=[evil])))
    texts = _texts(cards)
    assert EVIL_KERNEL in texts and EVIL_MARKER in texts
    facts = dict(layout._facts(data.get(0)))
    assert facts["ranks"] == "2 of world size 2" and facts["median step time"] != "n/a"


def test_timeline_reads_one_step_of_one_rank(data: DashboardData) -> None:
    rd = data.get(0)
    t0, t1 = rd.step_window(1, 12)
    ev = timeline_events(rd.run, 1, t0, t1)
    lanes = list(dict.fromkeys(ev["lane"]))
    assert lanes == ["NVTX default", "host: dataloader_wait", "host: optimizer_step", "stream 7", "stream 20",
                     "copies", "NCCL", "sync"]
    assert (ev["start_ns"] + ev["dur_ns"] > t0).all() and (ev["start_ns"] < t1).all()
    assert (ev["lane"] == "stream 7").sum() == 30  # this step's kernels only
    assert EVIL_MARKER in set(ev["name"]) and NCCL_KERNEL in set(ev["name"])
    fig = callbacks.timeline_figure(data, 0, 1, 12)
    assert "rank 1, step 12" in fig.layout.title.text
    assert EVIL_MARKER not in fig.to_json()


def test_clicks_pick_rank_and_step_and_open_the_timeline(data: DashboardData) -> None:
    sel, tab = callbacks.pick(data, 0, "heat-wall", {"points": [{"x": "12", "y": "rank 1", "z": 23.0}]}, None)
    assert (sel, tab) == ({"run": 0, "rank": 1, "step": 12}, "timeline")
    sel2, _ = callbacks.pick(data, 0, "steps", {"points": [{"x": 11, "customdata": 11}]}, sel)
    assert sel2 == {"run": 0, "rank": 1, "step": 11}
    sel3, _ = callbacks.pick(data, 0, "ranks", {"points": [{"x": "rank 0", "customdata": 0}]}, sel2)
    assert sel3["rank"] == 0 and sel3["step"] == 11
    sel4, _ = callbacks.pick(data, 0, "stragglers", {"points": [{"y": "rank 1"}]}, sel3)
    assert sel4["rank"] == 1
    assert callbacks.pick(data, 0, "steps", None, sel) is None
    assert callbacks.pick(data, 0, "heat-wall", {"points": [{"x": "oops", "y": "rank 1"}]}, sel) is None
    assert callbacks.pick(data, 0, "nope", {"points": [{"x": 1}]}, sel) is None
    # a selection from another run falls back to this run's default
    content = callbacks.render_tab(data, "timeline", 1, sel)
    assert "rank 0, step" in _json(content)


def test_timeline_update_by_dropdown_and_zoom(data: DashboardData) -> None:
    fig, options, value, sel, window = timeline_callbacks.timeline_update(data, 0, 1, 99, None, "tl-rank")
    assert [o["value"] for o in options] == [10, 11, 12, 13] and value == 10
    assert sel == {"run": 0, "rank": 1, "step": 10}
    fig, options, value, sel, window = timeline_callbacks.timeline_update(data, 0, 0, 11, None, "tl-step")
    assert options is None and value is None and "rank 0, step 11" in fig.layout.title.text
    zoom = {"xaxis.range[0]": 2.0, "xaxis.range[1]": 4.0}
    fig, *rest, _ = timeline_callbacks.timeline_update(data, 0, 0, 11, zoom, "tl-zoom")
    assert list(fig.layout.xaxis.range) == pytest.approx([2.0, 4.0])
    # the zoom goes into the selection (and so into the URL)
    assert rest == [None, None, {"run": 0, "rank": 0, "step": 11, "zoom": [2.0, 4.0]}]
    assert timeline_callbacks.timeline_update(data, 0, 0, 11, {"autosize": True}, "tl-zoom") is None
    rd = data.get(0)
    span = timeline_callbacks.step_span(rd, [0, 1], 0, 11)
    assert timeline_callbacks.zoom_window(span, {"xaxis.autorange": True}) == span[:2]
    assert timeline_callbacks.zoom_window(span, {"xaxis.range": [-5, 1e9]}) == span[:2]


def test_zoom_inside_a_long_collective_still_draws_it(data: DashboardData) -> None:
    # issue #18: the exposed all-reduce covers 14.4-17.0 ms of rank 0's steps; a zoom
    # inside it used to read no row and draw "no events".
    for x0, x1 in ((15.0, 15.2), (15.5, 15.5001)):
        fig, *_ = timeline_callbacks.timeline_update(data, 0, 0, 11, {"xaxis.range[0]": x0, "xaxis.range[1]": x1},
                                                     "tl-zoom", [0])
        assert [t.name for t in fig.data] == ["rank 0 · stream 20", "rank 0 · NCCL"]
        assert list(fig.layout.xaxis.range) == pytest.approx([x0, x1])


def test_table_filters(data: DashboardData) -> None:
    rows, note, tips = callbacks.kernel_table(data, 0, "all")
    assert {r["rank"] for r in rows} == {0, 1} and "8 kernel rows" == note
    assert [t["name"]["value"] for t in tips] == [r["name"] for r in rows]
    rows, note, _ = callbacks.kernel_table(data, 0, 1)
    assert {r["rank"] for r in rows} == {1} and {GEMM, EVIL_KERNEL} <= {r["name"] for r in rows}
    rows, note = callbacks.collective_table(data, 0, 0)
    assert {r["func"] for r in rows} == {"AllReduce"} and {r["rank"] for r in rows} == {0}


def test_compare_two_runs(data: DashboardData) -> None:
    body = callbacks.compare_update(data, 0, 1)
    text = _json(body)
    assert "median step time: base a" in text and "new b" in text
    assert GEMM in text
    assert callbacks.render_tab(data, "compare", 0, None) is not None


def test_the_browser_cannot_name_a_path(data: DashboardData, tmp_path: Path) -> None:
    for bad in ("../../etc", "/etc/passwd", 2, -1, None, "1e9"):
        with pytest.raises(UsageError):
            data.get(bad)
    with pytest.raises(NotARunError):
        DashboardData([str(tmp_path)])
    with pytest.raises(UsageError):
        DashboardData([])


def test_the_url_names_run_tab_rank_step_zoom_and_warm_up(data: DashboardData) -> None:
    st = callbacks.url_state(data, "?run=1&tab=timeline&rank=1&step=12&zoom=2.5,4&warmup=1")
    assert st == {"run": 1, "tab": "timeline", "warmup": ["include"],
                  "selection": {"run": 1, "rank": 1, "step": 12, "zoom": [2.5, 4.0]}}
    back = callbacks.state_url(st["run"], st["tab"], st["selection"], st["warmup"])
    assert back == "?run=1&tab=timeline&rank=1&step=12&zoom=2.5000%2C4.0000&warmup=1"
    assert callbacks.url_state(data, back) == st
    assert callbacks.state_url(0, "overview", None, []) == "?run=0&tab=overview"
    # another run picked: the old run's step does not follow it into the URL
    assert callbacks.state_url(0, "timeline", st["selection"], []) == "?run=0&tab=timeline"


@pytest.mark.parametrize("search", ["", "?", "?run=9", "?run=true&tab=evil", "?tab=<script>", "?rank=1&step=99",
                                    "?rank=x&step=1", "?run=0&tab=timeline&rank=1&step=12&zoom=nan,1",
                                    "?zoom=1,2&" + "a=1&" * 50])
def test_a_bad_url_opens_the_default_view(data: DashboardData, search: str) -> None:
    st = callbacks.url_state(data, search)
    assert st["run"] in (0, 1) and st["tab"] in {t for t, _ in layout.TABS} and st["warmup"] == []
    sel = st["selection"]
    assert sel is None or (sel == layout.default_selection(data.get(st["run"]))) or "zoom" not in sel


def test_sync_state_applies_the_url_once_then_writes_it(data: DashboardData) -> None:
    url = "?run=1&tab=ranks"
    # first call (whatever triggered it): the page takes the URL's state
    assert callbacks.sync_state(data, "selection", url, 0, "overview", None, [], loaded=False) == (
        None, 1, "ranks", None, None)
    # later, a change of tab rewrites the URL
    assert callbacks.sync_state(data, "tabs", url, 1, "kernels", None, [], loaded=True) == (
        "?run=1&tab=kernels", None, None, None, None)
    # back/forward: the URL changed, the page follows
    assert callbacks.sync_state(data, "url", "?run=0&tab=kernels", 1, "kernels", None, [])[1] == 0


def test_warm_up_toggle_reaches_overview_and_compare(data: DashboardData) -> None:
    assert callbacks.include_warmup(["include"]) and not callbacks.include_warmup([]) \
        and not callbacks.include_warmup("include")
    # the synthetic runs have no warm-up: both views say so and show the same numbers
    a = _json(callbacks.render_tab(data, "overview", 0, None, []))
    b = _json(callbacks.render_tab(data, "overview", 0, None, ["include"]))
    assert "none detected" in a and a == b
    assert "median step time" in _json(callbacks.compare_update(data, 0, 1, ["include"]))


def test_the_page_is_built_once_and_preloads_plotly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfscope.dashboards.app import PRELOADED, create_app, warm_up

    # GIVEN an app, counting how often the page is built
    make_run(tmp_path / "a", steps=4)
    built: list[int] = []
    page = layout.page
    monkeypatch.setattr(layout, "page", lambda d: built.append(1) or page(d))
    app = create_app([str(tmp_path / "a")], analyze=analysis_for)
    client = app.server.test_client()
    # WHEN the warm-up has run and the page loads twice
    warm_up(app).join()
    index = client.get("/").get_data(as_text=True)
    layouts = [client.get("/_dash-layout").get_data(as_text=True) for _ in range(2)]
    # THEN the page was built once, both loads got it, and the index asks for plotly.js and
    # the Graph's chunk at once (before Dash would, once the layout came back)
    assert built == [1] and layouts[0] == layouts[1] and "median step time" in layouts[0]
    for path in PRELOADED:
        assert f'<link rel="preload" as="script" href="/_dash-component-suites/{path}">' in index
    assert "plotly/package_data/plotly.min.js" in PRELOADED
    # AND the default Timeline was drawn by the warm-up: opening the tab draws nothing new
    data = app.server.config["perfscope_data"]
    drawn: list[int] = []
    build = timeline_callbacks._build
    monkeypatch.setattr(timeline_callbacks, "_build", lambda *a: drawn.append(1) or build(*a))
    callbacks.render_tab(data, "timeline", 0, None)
    assert drawn == []
