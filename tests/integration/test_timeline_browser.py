"""The Timeline tab in a real headless Chromium (issue #18).

GIVEN a synthetic 3-rank run (the last rank a straggler, steps of 20 ms with an exposed
all-reduce at 14.4-17.0 ms) and the H200 straggler run (4 ranks, NVML samples)
WHEN a headless Chromium opens each run's Timeline, zooms, searches and exports
THEN every rank's lane group is drawn on one axis with its lanes' real names, a zoom inside
the all-reduce still draws it, a search outlines the kernel named, "Open in Perfetto"
downloads valid JSON holding the window's events, and the H200 run shows GPU counter tracks,
all under the app's Content-Security-Policy.

Set ``PERFSCOPE_SCREENSHOTS=/some/dir`` to save screenshots.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser_fixtures import serving
from dashboard_fixtures import EVIL_KERNEL, NCCL_KERNEL, NCCL_STREAM, analysis_for, make_run
import test_dashboard_browser
from test_dashboard_browser import TIMEOUT_MS, _shot, _tab, _zoom

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")]

H200 = Path(__file__).resolve().parents[1] / "data" / "h200" / "straggler.perfscope"
browser = test_dashboard_browser.browser  # the headless Chromium fixture, shared
LANES = ["NVTX default", "host: dataloader_wait", "host: optimizer_step", "stream 7", f"stream {NCCL_STREAM}",
         "copies", "NCCL", "sync"]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from perfscope.dashboards.app import create_app

    run = make_run(tmp_path_factory.mktemp("tl") / "three.perfscope", ranks=3, steps=4)
    with serving(create_app([str(run.path), str(H200)], analyze=analysis_for)) as url:
        yield url


@pytest.fixture()
def page(server_url: str, browser: Any) -> Iterator[Any]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script("window.__csp = []; document.addEventListener('securitypolicyviolation',"
                         " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));")
    page.goto(server_url)
    page.locator("#run-facts").wait_for()
    yield page
    assert errors == [], errors
    assert page.evaluate("window.__csp") == [], "the page broke its Content-Security-Policy"
    page.close()


def _open_timeline(page: Any) -> str:
    _tab(page, "timeline")
    page.locator("#tl-graph .ytick", has_text="stream").first.wait_for()
    return page.locator("#tl-graph .gtitle").text_content() or ""


def _ticks(page: Any) -> list[str]:
    return page.locator("#tl-graph .ytick").all_text_contents()


def _traces(page: Any) -> list[dict[str, Any]]:
    """Name, type and bars (base, width in ms; y row) of every trace drawn (plotly's decoded
    copy of the data: the server sends arrays as base64)."""
    return page.evaluate("() => document.querySelector('#tl-graph .js-plotly-plot')._fullData.map(t => ({name: t.name,"
                         " type: t.type, base: Array.from(t.base || []), x: Array.from(t.x || []),"
                         " y: Array.from(t.y || [])}))")


def test_all_ranks_aligned_with_real_lane_names_and_a_zoom_that_keeps_the_spanning_event(page: Any) -> None:
    title = _open_timeline(page)
    assert title.startswith("rank 0, step") and "3 ranks aligned" in title, title
    # every rank's lane group, in one steady order, named by what the lanes hold
    assert _ticks(page) == [f"rank {r} · {lane}" for r in range(3) for lane in LANES]
    _shot(page, "timeline-all-ranks")
    # zoom inside the exposed all-reduce (14.4-17.0 ms): the NCCL kernel and the collective that
    # span the whole window are still drawn, on ranks 0 and 1 (the straggler is still computing)
    after = _zoom(page, 15.0, 15.2, title)
    assert after.startswith(title.split(" (")[0]), after
    drawn = {t["name"]: t for t in _traces(page)}
    for r in (0, 1):
        for lane in (f"stream {NCCL_STREAM}", "NCCL"):
            bar = drawn[f"rank {r} · {lane}"]
            assert len(bar["x"]) == 1 and bar["base"][0] < 15.0 and bar["base"][0] + bar["x"][0] > 15.2, (lane, bar)
    assert set(drawn) == {f"rank {r} · {lane}" for r in (0, 1) for lane in (f"stream {NCCL_STREAM}", "NCCL")} | {
        "rank 2 · stream 7", "rank 2 · NVTX default"}
    assert _ticks(page) == [f"rank {r} · {lane}" for r in range(3) for lane in LANES]  # the rows stayed
    # hover the NCCL kernel: its name, as text
    page.evaluate("() => { const gd = document.querySelector('#tl-graph .js-plotly-plot');"
                  f" const i = gd.data.findIndex(t => t.name === 'rank 0 · stream {NCCL_STREAM}');"
                  " Plotly.Fx.hover(gd, [{curveNumber: i, pointNumber: 0}]); }")
    page.wait_for_function("() => document.querySelector('#tl-graph .hoverlayer').textContent.length > 0")
    assert NCCL_KERNEL.split("(")[0] in (page.locator("#tl-graph .hoverlayer").text_content() or "")


def test_opening_the_timeline_draws_its_figure_once(page: Any) -> None:
    # GIVEN the Overview, no selection yet WHEN the Timeline tab opens
    figures: list[str] = []
    page.on("response", lambda r: "_dash-update-component" in r.url and r.status == 200
            and figures.append(r.text()))
    _open_timeline(page)
    page.wait_for_function("() => !document.querySelector('[data-dash-is-loading=\"true\"]')")
    page.wait_for_load_state("networkidle")
    # THEN the figure comes once, with the tab: no callback builds it again
    with_tab = [f for f in figures if '"tab-content"' in f]
    redrawn = [f for f in figures if json.loads(f).get("response", {}).get("tl-graph")]
    assert len(with_tab) == 1 and '"tl-graph"' in with_tab[0]
    assert redrawn == [], f"{len(redrawn)} more Timeline figure(s) sent after the tab"


def test_search_outlines_the_named_kernel(page: Any) -> None:
    title = _open_timeline(page)
    # Type once no callback is pending, as a user would after seeing the figure.
    page.wait_for_function("() => !document.querySelector('[data-dash-is-loading=\"true\"]')")
    page.fill("#tl-search", EVIL_KERNEL)
    page.press("#tl-search", "Enter")
    page.locator("#tl-graph .gtitle", has_text="matches for").wait_for()
    new_title = page.locator("#tl-graph .gtitle").text_content() or ""
    assert new_title != title and f"30 matches for “{EVIL_KERNEL}”" in new_title, new_title
    matches = [t for t in _traces(page) if t["name"] == "search matches"]
    assert len(matches) == 1 and len(matches[0]["x"]) == 30  # 10 kernels so named per step on each of 3 ranks
    assert page.locator("#tl-graph script").count() == 0
    _shot(page, "timeline-search")


def test_open_in_perfetto_downloads_the_window(page: Any) -> None:
    title = _open_timeline(page)
    _zoom(page, 15.0, 15.2, title)
    with page.expect_download() as info:
        page.click("#tl-perfetto")
    download = info.value
    assert download.suggested_filename.endswith(".json"), download.suggested_filename
    trace = json.loads(Path(download.path()).read_text())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in events}
    assert NCCL_KERNEL in names
    assert {b["rank"] for b in trace["perfscope"]["ranks"]} == {0, 1, 2}
    # only the window's events: the kernels the straggler runs then, none of the others' compute
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and len(kernels) < 30, len(kernels)


def test_counter_tracks_of_a_run_with_nvml_samples(page: Any) -> None:
    page.click("#run")
    page.get_by_role("option", name="straggler.perfscope").click()
    page.locator("#run-facts", has_text="straggler").wait_for()
    _open_timeline(page)
    ticks = _ticks(page)
    for r in range(4):
        for track in ("GPU util (%)", "SM clock (MHz)", "power (W)", "memory used (GiB)"):
            assert f"rank {r} · {track}" in ticks, (r, track)
    lines = [t for t in _traces(page) if t["type"] == "scatter"]
    assert {t["name"] for t in lines} >= {f"rank {r} · GPU util (%)" for r in range(4)}
    assert all(t["x"] for t in lines)
    _shot(page, "timeline-counters")
    # hover (with the mouse: plotly reports only real hovers) the widest kernel whose launch is
    # known: its API call is named, and a dotted line joins the two
    bar, point = page.evaluate("""() => { const gd = document.querySelector('#tl-graph .js-plotly-plot');
        let best = null; let bars = -1;
        for (const t of gd._fullData) {
            if (t.type !== 'bar') continue;
            bars += 1;
            if (!t.name.includes('stream') || !t.customdata) continue;
            for (let p = 0; p < t.customdata.length; p++) {
                if (t.customdata[p][3] !== null && (best === null || t.x[p] > best[2])) best = [bars, p, t.x[p]];
            }
        }
        return best.slice(0, 2); }""")
    asked: list[str] = []  # what the hover asks the server's Timeline callback (nothing: drawn in the browser)
    page.on("request", lambda r: asked.append(r.post_data or "") if "_dash-update-component" in r.url
            and "tl-graph.figure" in (r.post_data or "") else None)
    page.locator("#tl-graph .barlayer .trace").nth(bar).locator("path").nth(point).hover(force=True)
    page.wait_for_function("() => (document.querySelector('#tl-graph .js-plotly-plot').layout.shapes || [])"
                           ".some(s => s.name === 'launch-link')")
    assert "launched by cudaLaunch" in (page.locator("#tl-graph .hoverlayer").text_content() or "")
    page.wait_for_timeout(300)
    # the line's relayout is not a zoom: no request, which would have made Dash drop the answer
    # to a zoom or search still on its way
    assert asked == []
    _shot(page, "timeline-launch-link")
