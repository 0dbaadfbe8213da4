"""The Overview's step breakdown is plain HTML: it shows before plotly.js has loaded.

GIVEN a synthetic run (2 ranks, 6 steps) served by the dashboard
WHEN a headless Chromium opens it with every plotly.js request refused
THEN the breakdown is drawn anyway (no plotly on the page), with the analysis' bucket shares
and the reports' bucket colours; and with plotly allowed, the plotly bucket figure under it
shows the same shares.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from browser_fixtures import browser, serving  # noqa: F401 - browser is a fixture
from dashboard_fixtures import analysis_for, make_run
from perfscope.analyzers.result import BUCKETS
from perfscope.reports.style import BUCKET_COLORS, BUCKET_LABELS

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")]

TIMEOUT_MS = 15_000
_BOXES = ("() => [...document.querySelectorAll('#step-breakdown .breakdown-box')].map(e => ({bucket: e.dataset.bucket,"
          " share: e.dataset.share, title: e.title, width: e.getBoundingClientRect().width,"
          " color: getComputedStyle(e).backgroundColor}))")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, float]]]:
    """The dashboard's URL and the analysis' share (in %) of each bucket over the summary steps."""
    from perfscope.dashboards.app import create_app

    run = make_run(tmp_path_factory.mktemp("dash") / "run.perfscope", steps=6)
    app = create_app([str(run.path)], analyze=analysis_for)
    steps = app.server.config["perfscope_data"].get(0).summary_steps(False)
    shares = {b: 100 * float(steps[f"{b}_ns"].sum() / steps["wall_ns"].sum()) for b in BUCKETS}
    with serving(app) as url:
        yield url, shares


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def test_breakdown_shows_before_plotly_with_the_analysis_shares_and_colours(served: tuple[str, dict[str, float]],
                                                                            browser: object) -> None:
    url, shares = served
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    page.set_default_timeout(TIMEOUT_MS)
    refused: list[str] = []
    page.route("**/*plotly*.js*", lambda route: (refused.append(route.request.url), route.abort()))
    page.goto(url)
    page.locator("#step-breakdown .breakdown-box").first.wait_for(state="visible")
    page.locator("#run-facts").wait_for()
    # plotly.js was asked for and refused: nothing of it ran, no figure is drawn
    assert refused and page.evaluate("typeof window.Plotly") == "undefined"
    assert page.locator(".js-plotly-plot .main-svg").count() == 0
    boxes = page.evaluate(_BOXES)
    shown = [b for b in BUCKETS if shares[b] > 0]
    assert [b["bucket"] for b in boxes] == shown
    for box in boxes:
        b = box["bucket"]
        assert float(box["share"]) == pytest.approx(shares[b], abs=0.05)
        assert box["color"] == _rgb(BUCKET_COLORS[b])
        assert box["title"].startswith(BUCKET_LABELS[b]) and f"({shares[b]:.1f}%)" in box["title"]
    bar = sum(box["width"] for box in boxes)
    for box in boxes:  # drawn with the width of its share
        assert 100 * box["width"] / bar == pytest.approx(shares[box["bucket"]], abs=0.2)
    legend = page.locator("#step-breakdown .breakdown-item").all_inner_texts()
    assert [t.split(" ")[0] for t in legend] == [BUCKET_LABELS[b].split(" ")[0] for b in BUCKETS]
    assert all(f"({shares[b]:.1f}%)" in t for b, t in zip(BUCKETS, legend)), legend
    assert "mean of 6 steps on 2 ranks" in page.locator("#step-breakdown-title").inner_text()
    page.close()


def test_breakdown_matches_the_plotly_bucket_figure(served: tuple[str, dict[str, float]], browser: object) -> None:
    url, _ = served
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.locator(".legendtext").first.wait_for()
    # The per-rank figure's bars are each rank's mean step; every rank has the same steps, so
    # their sums per bucket give the run's shares.
    plotted = page.evaluate("() => { const gd = [...document.querySelectorAll('.js-plotly-plot')]"
                            ".find(g => g._fullData[0].x[0] === 'rank 0');"
                            " return Object.fromEntries(gd._fullData.map(t => [t.name, Array.from(t.y).reduce((a, v) => a + v, 0)])); }")
    total = sum(plotted.values())
    for box in page.evaluate(_BOXES):
        assert float(box["share"]) == pytest.approx(100 * plotted[BUCKET_LABELS[box["bucket"]]] / total, abs=0.05)
    page.close()
