"""End to end: the dashboard served on a synthetic run, driven by a real headless Chromium.

GIVEN two synthetic runs (2 ranks, 4 and 5 steps, a kernel named ``<script>alert(1)</script>``)
WHEN a headless Chromium opens the dashboard and clicks through every tab
THEN each tab shows real content, a heatmap click opens that step's timeline, and the hostile
names appear as literal text with no script ever running; all of it under the app's
Content-Security-Policy, which the page never violates.

Set ``PERFSCOPE_SCREENSHOTS=/some/dir`` to save one screenshot per tab.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser_fixtures import browser, serving  # noqa: F401 - browser is a fixture
from dashboard_fixtures import EVIL_KERNEL, EVIL_MARKER, GEMM, analysis_for, make_run

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")]

TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from perfscope.dashboards.app import create_app

    root = tmp_path_factory.mktemp("dash")
    base = make_run(root / "base.perfscope", steps=4)
    new = make_run(root / "new.perfscope", steps=6, kernels_per_step=45, step_ns=26_000_000)
    app = create_app([str(base.path), str(new.path)], analyze=analysis_for)
    with serving(app) as url:
        yield url


def _shot(page: object, name: str) -> None:
    folder = os.environ.get("PERFSCOPE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"dashboard-{name}.png"), full_page=True)  # type: ignore[attr-defined]


def _tab(page: object, name: str) -> None:
    page.click(f"#tab-{name}")  # type: ignore[attr-defined]


def _zoom(page: object, x0_ms: float, x1_ms: float, title: str) -> str:
    """Zoom the Timeline to ``[x0_ms, x1_ms]`` as a drag would; returns the new title.

    A relayout made while plotly is still drawing the previous figure is dropped without
    a relayout event, so it is repeated until the server's new figure shows.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(5):
        page.evaluate("r => Plotly.relayout(document.querySelector('#tl-graph .js-plotly-plot'),"  # type: ignore[attr-defined]
                      " {'xaxis.range[0]': r[0], 'xaxis.range[1]': r[1]})", [x0_ms, x1_ms])
        try:
            page.wait_for_function(  # type: ignore[attr-defined]
                "before => { const t = document.querySelector('#tl-graph .gtitle');"
                " return t && t.textContent !== before; }", arg=title, timeout=3_000)
        except PlaywrightTimeout:
            continue
        return page.locator("#tl-graph .gtitle").text_content() or ""  # type: ignore[attr-defined]
    raise AssertionError(f"the Timeline did not redraw for a zoom to {x0_ms}-{x1_ms} ms")


def test_every_tab_in_a_real_browser(server_url: str, browser: object) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    page.set_default_timeout(TIMEOUT_MS)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script("window.__csp = []; document.addEventListener('securitypolicyviolation',"
                         " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));")
    response = page.goto(server_url)
    assert response is not None and "script-src 'self' 'sha256-" in response.headers["content-security-policy"]

    # Overview: run facts with the step count, bucket legend, recommendation with a hostile name.
    facts = page.locator("#run-facts")
    facts.wait_for()
    assert "4 steps" in facts.inner_text()
    assert "NVIDIA H200" in facts.inner_text()
    page.locator(".legendtext", has_text="data loading").first.wait_for()
    legend = page.locator(".legendtext").all_text_contents()
    assert "compute" in legend and "network" in legend
    assert "saves about" in page.locator("#recommendations").inner_text()
    _shot(page, "overview")

    # Ranks: heatmaps and straggler ranking; a click on a cell opens that step's timeline.
    _tab(page, "ranks")
    page.get_by_text("Step time per rank", exact=False).first.wait_for()
    page.get_by_text("Straggler ranking", exact=False).first.wait_for()
    _shot(page, "ranks")
    heat = page.locator("[id*='heat-wall'] .js-plotly-plot").first.locator(".nsewdrag").first
    heat.scroll_into_view_if_needed()
    box = heat.bounding_box()
    assert box is not None
    # Bottom-right cell: the last rank (the straggler), the last step.
    page.mouse.click(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.8)
    page.locator("#tl-graph .ytick", has_text="stream 7").first.wait_for()
    title = page.locator("#tl-graph .gtitle").text_content() or ""
    assert "rank 1, step 13" in title, title
    lanes = page.locator("#tl-graph .ytick").all_text_contents()
    assert {f"rank 1 · {lane}" for lane in ("NVTX default", "stream 20", "copies", "NCCL", "sync")} <= set(lanes), lanes
    # Hover the hostile marker: plotly shows its name as literal characters.
    page.evaluate("() => { const gd = document.querySelector('#tl-graph .js-plotly-plot');"
                  " const i = gd.data.findIndex(t => t.name === 'rank 1 · NVTX default');"
                  " Plotly.Fx.hover(gd, [{curveNumber: i, pointNumber: 2}]); }")
    hover = page.locator("#tl-graph .hoverlayer")
    page.wait_for_function("() => document.querySelector('#tl-graph .hoverlayer').textContent.length > 0")
    assert EVIL_MARKER in (hover.text_content() or "")
    assert page.locator("#tl-graph img").count() == 0
    _shot(page, "timeline")

    # Timeline by dropdown: pick rank 0; the figure follows.
    page.click("#tl-rank")
    page.get_by_role("option", name="rank 0").click()
    page.locator("#tl-graph .gtitle", has_text="rank 0,").wait_for()
    # Zoom (as a drag would): the server re-reads the narrower window.
    before = page.locator("#tl-graph .gtitle").text_content() or ""
    after = _zoom(page, 2.0, 4.0, before)
    assert after.startswith("rank 0,") and int(after.split("(")[1].split()[0]) < int(before.split("(")[1].split()[0])
    # Zoom inside the exposed all-reduce (14.4-17.0 ms of the step): the NCCL kernel and the
    # collective that span the whole window are still drawn (issue #18); the straggler (rank 1,
    # whose step lasts 23 ms) is still computing then.
    assert _zoom(page, 15.0, 15.2, after).startswith("rank 0, step 13 · 2 ranks aligned (4 events")
    drawn = page.evaluate("() => document.querySelector('#tl-graph .js-plotly-plot').data.map(t => t.name)")
    assert sorted(drawn) == ["rank 0 · NCCL", "rank 0 · stream 20", "rank 1 · NVTX default", "rank 1 · stream 7"], drawn

    # Collectives: a sortable table of AllReduce operations.
    _tab(page, "collectives")
    page.locator("#c-table td", has_text="AllReduce").first.wait_for()
    _shot(page, "collectives")

    # Kernels: kernel names, the hostile one as literal text; the rank filter works.
    _tab(page, "kernels")
    page.locator("#k-table td", has_text=GEMM).first.wait_for()
    page.locator("#k-table td", has_text=EVIL_KERNEL).first.wait_for()
    assert page.locator("#k-table script").count() == 0
    assert EVIL_KERNEL in page.locator("#k-table").inner_text()  # the literal text is visible
    page.click("#k-rank")
    page.get_by_role("option", name="rank 1").click()
    page.locator("#k-note", has_text="4 kernel rows").wait_for()
    ranks_shown = set(page.locator("#k-table td[data-dash-column=rank]").all_text_contents())
    assert ranks_shown == {"1"}, ranks_shown
    _shot(page, "kernels")

    # Compare: both runs, bucket deltas and kernel changes.
    _tab(page, "compare")
    summary = page.locator("#cmp-summary")
    summary.wait_for()
    assert "base base.perfscope" in summary.inner_text() and "new new.perfscope" in summary.inner_text()
    page.get_by_text("Median time per step by bucket", exact=False).first.wait_for()
    _shot(page, "compare")

    assert dialogs == [], f"a script ran: {dialogs}"
    assert errors == [], errors
    assert page.evaluate("window.__csp") == [], "the page broke its Content-Security-Policy"
    page.close()
