"""The dashboard's issue-#18 views in a real headless Chromium, on the runs perfscope
recorded on the H200 (tests/data/h200): ``straggler`` (4 ranks; rank 2 sleeps 30 ms per
step), ``comm_heavy`` (2 ranks) and ``profile`` (one rank; step 0 is a 201 ms warm-up), beside a
two-rank torch.profiler trace imported from tests/data/kineto (it holds CPU operators).

GIVEN the dashboard serving those runs
WHEN Chromium opens its views by URL, clicks, zooms and reloads
THEN the straggler is named and drawn in the straggler colour in the Ranks view; a bucket
has one colour in the HTML report and the dashboard; a reload keeps the URL's state; empty
tabs say why; the warm-up toggle changes the Overview's numbers; answers are compressed
and the versioned bundles cached.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser_fixtures import browser, serving  # noqa: F401 - browser is a fixture
from test_dashboard_browser import _zoom
from perfscope.reports import style

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")]

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"
RUNS = ("straggler", "comm_heavy", "profile")
TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from perfscope.cli.main import main
    from perfscope.dashboards.app import create_app

    # run 3: a two-rank torch.profiler trace, imported: it holds CPU operators
    ddp = tmp_path_factory.mktemp("kineto") / "ddp"
    kineto = H200.parent / "kineto"
    assert main(["import", "kineto", str(kineto / "ddp_rank0.json.gz"), str(kineto / "ddp_rank1.json.gz"),
                 "-o", str(ddp)]) == 0
    app = create_app([*(str(H200 / f"{name}.perfscope") for name in RUNS), str(ddp)])
    with serving(app) as base:
        yield base


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:  # noqa: F811 - the imported fixture
    p = browser.new_page(viewport={"width": 1400, "height": 1000})
    p.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    yield p
    p.close()
    assert errors == [], errors


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def _facts(page: Any) -> dict[str, str]:
    rows = page.locator("#run-facts tr").all()
    return {r.locator("th").inner_text().strip(): r.locator("td").inner_text().strip() for r in rows}


def _legend_colours(page: Any, plot: str) -> dict[str, str]:
    """Legend entry -> the fill of its swatch, in the plotly figure ``plot`` (a selector)."""
    return page.evaluate(
        "plot => { const gd = document.querySelector(plot); const out = {};"
        " gd.querySelectorAll('.legend .traces').forEach(t => {"
        "  out[t.querySelector('.legendtext').textContent] = t.querySelector('.legendpoints path').style.fill; });"
        " return out; }", plot)


def test_the_straggler_is_named_and_highlighted_in_the_ranks_view(url: str, page: Any) -> None:
    page.goto(url + "?run=0&tab=ranks")
    callout = page.locator("#straggler-callout")
    callout.wait_for()
    assert callout.get_attribute("data-rank") == "2"
    assert "Straggler: rank 2" in callout.inner_text() and "647 ms" in callout.inner_text()
    # The ranking: rank 2 on top, drawn in the straggler colour, the others muted.
    graph = "[id*='stragglers'] .js-plotly-plot"
    page.locator(graph).wait_for()
    fills = page.evaluate(
        "sel => Array.from(document.querySelectorAll(sel + ' .point path')).map(p => p.style.fill)", graph)
    ticks = page.locator(f"{graph} .ytick").all_text_contents()
    assert ticks[-1] == "rank 2", ticks  # the last category is drawn on top
    assert fills[-1] == _rgb(style.STRAGGLER_COLOR)
    assert set(fills[:-1]) <= {_rgb(style.OTHER_RANK_COLOR)}
    # The wait heatmap charges the others' waits to rank 2: its row is the darkest.
    rows = page.evaluate(
        "() => { const gd = document.querySelector(\"[id*='heat-waited'] .js-plotly-plot\");"
        " const t = gd._fullData[0]; return Array.from(t.y).map((y, i) => [y, Array.from(t.z[i]).reduce((a, v) => a + (v || 0), 0)]); }")
    assert max(rows, key=lambda r: r[1])[0] == "rank 2", rows
    # A click on the straggler's bar opens its timeline, and the URL says so.
    bar = page.locator(f"{graph} .point").last
    bar.scroll_into_view_if_needed()
    box = bar.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # plotly's drag layer takes clicks
    page.wait_for_url(re.compile(r"tab=timeline.*rank=2"))


def test_a_bucket_has_one_colour_in_the_report_and_the_dashboard(url: str, page: Any, tmp_path: Path) -> None:
    from perfscope import open_run
    from perfscope.pipeline import analyze
    from perfscope.reports.html import render_html

    report = tmp_path / "report.html"
    report.write_text(render_html(analyze(open_run(H200 / "straggler.perfscope"))), encoding="utf-8")
    page.goto(report.as_uri())
    page.locator("#fig-steps .legendtext").first.wait_for()
    in_report = _legend_colours(page, "#fig-steps")
    page.goto(url + "?run=0&tab=overview")
    page.locator("[id*='steps'] .legendtext").first.wait_for()
    in_dashboard = _legend_colours(page, "[id*='\"steps\"'] .js-plotly-plot")
    buckets = {style.BUCKET_LABELS[b] for b in style.BUCKET_COLORS}
    assert buckets <= set(in_report) and buckets <= set(in_dashboard)
    for b, colour in style.BUCKET_COLORS.items():
        label = style.BUCKET_LABELS[b]
        assert in_report[label] == in_dashboard[label] == _rgb(colour), b
    assert in_dashboard["network"] != in_dashboard["sync"]


def test_a_reload_keeps_the_state_in_the_url(url: str, page: Any) -> None:
    # Pick a run, a tab and the warm-up toggle by hand: the URL follows.
    page.goto(url)
    page.locator("#run-facts").wait_for()
    page.click("#run")
    page.get_by_role("option", name="comm_heavy.perfscope").click()
    page.locator("#run-facts", has_text="comm_heavy.perfscope").wait_for()
    page.click("#tab-collectives")
    page.wait_for_url(re.compile(r"run=1&tab=collectives"))
    page.reload()
    page.locator("#c-table").wait_for()
    assert "comm_heavy.perfscope" in page.locator("#run").inner_text()
    assert "tab--selected" in (page.locator("#tab-collectives").get_attribute("class") or "")
    # A shared link to one step, zoomed: it opens there, and again after a reload, drawn once
    # (by the tab itself: the Timeline callback sends no second figure on insertion).
    answers: list[Any] = []  # the Timeline callback's answers (an empty one changes nothing)
    page.on("response", lambda r: answers.append(r) if "_dash-update-component" in r.url
            and "tl-graph.figure" in (r.request.post_data or "") else None)
    page.goto(url + "?run=0&tab=timeline&rank=2&step=4&zoom=30.0,60.0")
    for _ in range(2):
        page.locator("#tl-graph .gtitle", has_text="step 4").wait_for()
        rng = page.evaluate("() => document.querySelector('#tl-graph .js-plotly-plot').layout.xaxis.range")
        assert rng == pytest.approx([30.0, 60.0], abs=1e-3)
        assert re.search(r"rank=2&step=4", page.url)
        page.wait_for_timeout(500)
        assert not [r for r in answers if '"tl-graph"' in r.text()]
        answers.clear()
        page.reload()
    # A zoom by hand goes into the URL (ms since the step started on the focus rank).
    page.locator("#tl-graph .gtitle", has_text="step 4").wait_for()
    _zoom(page, 40.0, 50.0, page.locator("#tl-graph .gtitle").text_content() or "")
    page.wait_for_url(re.compile(r"rank=2&step=4&zoom=40\.0+(,|%2C)50\.0+"))


def test_empty_tabs_say_why(url: str, page: Any) -> None:
    page.goto(url + "?run=2&tab=collectives")
    reason = page.locator("#empty-collectives")
    reason.wait_for()
    assert "single-rank trace" in reason.inner_text() and "no other rank" in reason.inner_text()
    page.click("#tab-ranks")
    assert "One rank only" in page.locator("#empty-ranks").inner_text()
    page.click("#tab-operators")
    assert "No operators" in page.locator("#empty-operators").inner_text()


def test_the_operators_tab_ranks_operators_by_self_host_time(url: str, page: Any) -> None:
    page.goto(url + "?run=3&tab=operators")
    page.locator("#op-table td[data-dash-column=name]").first.wait_for()
    names = page.locator("#op-table td[data-dash-column=name]").all_text_contents()
    self_ms = [float(x.replace(",", "")) for x in page.locator("#op-table td[data-dash-column=self_ms]").all_text_contents()]
    assert names and self_ms == sorted(self_ms, reverse=True)
    bars = page.evaluate("() => Array.from(document.querySelector('#op-graph .js-plotly-plot')._fullData[0].y)")
    assert bars[-1].strip() == names[0][:50].strip()  # the largest drawn on top
    # one rank only: the table follows the filter (the figures of both ranks, read before the
    # click: read after it, they may already be rank 1's, and the wait would never end)
    both = ",".join(page.locator("#op-table td[data-dash-column=self_ms]").all_text_contents())
    page.click("#op-rank")
    page.get_by_role("option", name="rank 1").click()
    page.wait_for_function("n => document.querySelectorAll('#op-table td[data-dash-column=name]').length > 0"
                           " && Array.from(document.querySelectorAll('#op-table td[data-dash-column=self_ms]'))"
                           ".map(td => td.textContent).join() !== n", arg=both)


def test_the_warmup_toggle_changes_the_overview_numbers(url: str, page: Any) -> None:
    page.goto(url + "?run=2&tab=overview")
    page.locator("#run-facts", has_text="profile.perfscope").wait_for()  # the page first holds run 0's
    before = _facts(page)
    assert before["warm-up"].startswith("step 0 (201 ms), excluded")
    page.locator("#warmup input").check()
    page.locator("#run-facts", has_text="included in summaries").wait_for()
    after = _facts(page)
    mean = {k: float(v["mean step time"].split()[0]) for k, v in (("before", before), ("after", after))}
    assert mean["before"] < 3.0 < 20.0 < mean["after"]  # 7 steps of ~1.8 ms; with the 201 ms step, ~27 ms
    assert "warmup=1" in page.url
    # the per-step chart now holds step 0, hatched
    page.wait_for_function("() => { const g = document.querySelector(\"[id*='\\\"steps\\\"'] .js-plotly-plot\");"
                           " return g && Array.from(g._fullData[0].x).map(Number).includes(0); }")


def test_answers_are_compressed_and_versioned_bundles_cached(url: str, page: Any) -> None:
    seen: dict[str, dict[str, str]] = {}
    page.on("response", lambda r: seen.__setitem__(r.url, r.headers))
    page.goto(url)
    page.locator(".legendtext").first.wait_for()
    plotly = next(h for u, h in seen.items() if u.endswith("plotly.min.js"))
    assert plotly.get("content-encoding") in ("br", "gzip")
    bundles = [h for u, h in seen.items() if re.search(r"\.v\d[\w]*m\d+\.", u)]
    assert bundles and all("immutable" in h.get("cache-control", "") for h in bundles)
    assert all(h.get("content-encoding") in ("br", "gzip") for h in bundles)
    sent = page.evaluate("() => performance.getEntriesByType('navigation').concat("
                         "performance.getEntriesByType('resource')).reduce((a, e) => a + (e.transferSize || 0), 0)")
    assert sent < 2_500_000, sent  # about 6.1 MB uncompressed
