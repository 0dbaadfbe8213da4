"""First render of the dashboard on a run with about a million events, and peak memory.

Method
    A synthetic run is written through the store writer (``tests/dashboard_fixtures.py``:
    2 ranks, ``--steps`` steps, kernels spread evenly so the total is ``--events``, plus NCCL
    kernels, collectives, copies, syncs, markers and host spans).  Then, in a *fresh* Python
    process (so imports, caches and the peak RSS are the server's own):

    * ``open``: ``create_app([run])`` (opens the run, builds the Dash app);
    * ``analyze``: ``perfscope.analyzers.analyze_run`` (the dashboard's per-run cache fill);
    * ``overview``: the page layout, which embeds the Overview tab (run facts, both bucket
      figures, recommendations), built and serialised to JSON: what the browser receives;
    * ``first render`` = open + analyze + overview: the server-side time from a cold start
      to the first screen's bytes;
    * ``timeline``: one step of one rank (the densest lane has events/(ranks*steps)
      kernels) read from the store, aggregated and serialised;
    * ``other tabs``: Ranks, Kernels, Collectives built and serialised;
    * peak RSS of that process (``ru_maxrss``).

    Wall and CPU time (``process_time``: this process's user + system time) are both shown:
    on a shared 2-core machine other work inflates wall time, CPU time much less.

    With ``--browser``, the app is first warmed as ``perfscope dashboard`` warms it
    (``warm_up``: the page and the default Timeline, built in the background after the
    analysis), then headless Chromium loads the page from a real server and the time from
    navigation until the Overview's HTML step breakdown is visible (drawn by React before
    plotly.js is evaluated; also the page's own clock at the first animation frame after it
    entered the DOM) and until the Overview's first plotly bar chart is drawn is measured,
    each with the browser cache
    cold (a new context: JS, layout request, callbacks, plotly.js evaluated from scratch;
    3 loads) and warm (the same context navigating again: files from the HTTP cache,
    plotly.js from V8's code cache; 3 loads), with the bytes the page transferred
    (compressed) on a cold load and on a warm one.  Then it clicks through the tabs and the
    warm-up toggle; for each interaction the server's time on its callbacks (the longest
    callback request; a WSGI middleware times them) and the browser's time until the
    content shows are reported.  The browser's server is a new app (nothing cached but what
    the warm-up builds): every tab is a first visit, except the Timeline tab, whose figure
    the warm-up built (the ``timeline`` stage above is its cold cost); the zoom is a figure
    not built before.

Run:  python benchmarks/dashboard_render.py                 (1M events; about 30 s)
      python benchmarks/dashboard_render.py --browser       (adds the browser: breakdown, first figure)
      python benchmarks/dashboard_render.py --events 100000 (smaller)
Prints a Markdown table (the one in benchmarks/README.md).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RANKS = 2


def generate(path: Path, events: int, steps: int) -> tuple[int, float]:
    """Write the synthetic run; returns (events written, seconds)."""
    sys.path.insert(0, str(REPO / "tests"))
    from dashboard_fixtures import make_run

    t = time.perf_counter()
    k = max(events // (RANKS * steps), 1)
    run = make_run(path, ranks=RANKS, steps=steps, kernels_per_step=k, step_ns=max(20_000_000, k * 2_000))
    return run.n_events, time.perf_counter() - t


def measure(path: str, browser: bool) -> dict[str, Any]:
    """Run in the fresh process: time each stage; returns the figures as a dict."""
    import plotly

    t0 = time.perf_counter()
    from perfscope.dashboards import callbacks, layout
    from perfscope.dashboards.app import create_app

    t_import = time.perf_counter() - t0
    out: dict[str, Any] = {"import_s": t_import}

    def dumps(obj: Any) -> int:
        return len(json.dumps(obj, cls=plotly.utils.PlotlyJSONEncoder))

    t, c = time.perf_counter(), time.process_time()
    app = create_app([path])
    data = app.server.config["perfscope_data"]
    out["open_s"], out["open_cpu"] = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    rd = data.get(0)
    out["analyze_s"], out["analyze_cpu"] = time.perf_counter() - t, time.process_time() - c
    out["events"] = sum(v for k, v in rd.row_counts.items() if k not in ("steps", "metrics"))
    t, c = time.perf_counter(), time.process_time()
    out["overview_bytes"] = dumps(layout.page(data))  # the page embeds the first run's Overview
    out["overview_s"], out["overview_cpu"] = time.perf_counter() - t, time.process_time() - c
    out["first_render_s"] = out["open_s"] + out["analyze_s"] + out["overview_s"]
    out["first_render_cpu"] = out["open_cpu"] + out["analyze_cpu"] + out["overview_cpu"]
    t = time.perf_counter()
    sel = layout.default_selection(rd)
    fig = callbacks.timeline_figure(data, 0, sel["rank"], sel["step"])
    out["timeline_bytes"] = dumps(fig)
    out["timeline_s"] = time.perf_counter() - t
    out["timeline_title"] = fig.layout.title.text
    for tab in ("ranks", "kernels", "collectives"):
        t = time.perf_counter()
        out[f"{tab}_bytes"] = dumps(callbacks.render_tab(data, tab, 0, None))
        out[f"{tab}_s"] = time.perf_counter() - t
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if browser:
        from perfscope.dashboards.app import warm_up

        # A new app, as `perfscope dashboard` serves it: analysed, then warmed (the page and
        # the default Timeline); the tabs built above are not in its caches.
        app = create_app([path])
        app.server.config["perfscope_data"].get(0)
        warm_up(app).join()
        out.update(browser_first_paint(app))
    return out


class _ServerClock:
    """WSGI middleware: how long the server spent on each Dash callback request (from the
    call until the body is complete; wall time and the CPU time of the thread serving it,
    which a loaded machine inflates far less), so interactions are timed without the
    browser's part."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.times: list[tuple[float, float]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        body = list(self.app(environ, start_response))
        if environ.get("PATH_INFO", "").startswith("/_dash-update-component"):
            self.times.append((time.perf_counter() - t, time.thread_time() - c))
        return body


_TRANSFERRED = ("() => performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))"
                ".reduce((a, e) => a + (e.transferSize || 0), 0)")
# Interactions: (name, a selector to click or a script to run, what shows when it is done).
_ZOOM = ("() => { const gd = document.querySelector('#tl-graph .js-plotly-plot');"
         " const r = gd.layout.xaxis.range; Plotly.relayout(gd, {'xaxis.range[0]': r[0] + (r[1] - r[0]) * 0.4,"
         " 'xaxis.range[1]': r[0] + (r[1] - r[0]) * 0.45}); }")
_INTERACTIONS = (
    ("Ranks tab", "#tab-ranks", "#straggler-callout"),
    ("Timeline tab", "#tab-timeline", "#tl-graph .gtitle"),
    ("Timeline zoom to 5% of the step", _ZOOM, "#tl-graph .gtitle"),
    ("Collectives tab", "#tab-collectives", "#c-table"),
    ("Kernels tab", "#tab-kernels", "#k-table"),
    ("Overview tab", "#tab-overview", "#run-facts"),
)


def _until_redrawn(page: Any, script: str, title: str) -> None:
    """Run ``script`` (a relayout) until the figure's ``title`` element changes: plotly drops
    a relayout made while it is still drawing the previous figure."""
    before = page.locator(title).first.text_content()
    for _ in range(5):
        page.evaluate(script)
        try:
            page.wait_for_function("([sel, before]) => { const t = document.querySelector(sel);"
                                   " return t && t.textContent !== before; }", arg=[title, before], timeout=10_000)
            return
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: try again
            continue
    raise RuntimeError("the Timeline did not redraw after a zoom")


def browser_first_paint(app: Any) -> dict[str, Any]:
    """Serve ``app`` and drive headless Chromium: time from navigation to the drawn Overview
    (best of 3 cold-cache loads), the bytes each load transferred (cold, then a reload with
    the cache warm), and the server time of each interaction's callbacks."""
    import threading

    from playwright.sync_api import sync_playwright
    from werkzeug.serving import make_server

    clock = _ServerClock(app.server.wsgi_app)
    app.server.wsgi_app = clock
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/"
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    out: dict[str, Any] = {}
    try:
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=args)
            times, busy = [], []
            for _ in range(3):
                page = _new_page(b)  # a cold cache each time
                cdp = page.context.new_cdp_session(page)
                cdp.send("Performance.enable")
                times.append(_load_until_drawn(page, url))
                # The page's main-thread work until then (Chromium's TaskDuration): what the
                # first figure costs the browser, less inflated than wall time on a busy machine.
                metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
                busy.append(float(metrics.get("TaskDuration", float("nan"))))
                page.wait_for_load_state("networkidle")
                out["transfer_cold_bytes"] = page.evaluate(_TRANSFERRED)
                page.close()
            page = _new_page(b)
            _load_until_drawn(page, url)
            warm = []
            for _ in range(3):  # the same context: HTTP cache and V8's code cache warm
                page.wait_for_load_state("networkidle")
                warm.append(_load_until_drawn(page, url))
            page.wait_for_load_state("networkidle")
            out["transfer_warm_bytes"] = page.evaluate(_TRANSFERRED)
            out["browser_first_paint_warm"] = warm
            interactions = {}
            for name, target, done in _INTERACTIONS:
                page.wait_for_load_state("networkidle")
                clock.times.clear()
                t = time.perf_counter()
                if target.startswith("()"):
                    _until_redrawn(page, target, done)
                else:
                    page.click(target)
                page.locator(done).first.wait_for(timeout=60_000)
                page.wait_for_load_state("networkidle")
                slowest = max(clock.times, default=(0.0, 0.0))
                interactions[name] = (slowest[0], slowest[1], time.perf_counter() - t)
            out["interactions"] = interactions
            from perfscope.reports.style import BUCKET_COLORS

            colours = [c for b, c in BUCKET_COLORS.items() if b != "host"]  # grey would match the page's own greys
            out["filmstrip_breakdown_s"] = [filmstrip_first_colour(b, url, colours, dump=os.environ.get("FILMSTRIP_DIR"))
                                            for _ in range(3)]
            b.close()
    finally:
        server.shutdown()
    out["browser_first_paint_cold"] = times
    out["browser_busy_s"] = min(busy)
    return out


# The page's own clock (ms since navigation) at the first animation frame after the HTML
# step breakdown, then the first plotly legend entry, entered the DOM: the frame that draws
# each.  Playwright's wait_for polls on the page's main thread, so while plotly.js is being
# evaluated it cannot see what the frame before already drew.
_FRAMES = ("window.__drawnMs = {}; for (const [k, sel] of [['html', '#step-breakdown .breakdown-box'],"
           " ['figure', '.legendtext']]) new MutationObserver((_, obs) => { if (document.querySelector(sel)) {"
           " obs.disconnect(); requestAnimationFrame(() => { window.__drawnMs[k] = performance.now(); }); } })"
           ".observe(document, {childList: true, subtree: true});")


def filmstrip_first_colour(b: Any, url: str, colours: list[str], min_pixels: int = 150,
                           dump: str | None = None) -> float | None:
    """One cold-cache load recorded with Chromium's filmstrip (the frames the compositor
    presented, as DevTools' Performance panel shows them, scaled down): seconds from the
    navigation's start to the first frame holding ``min_pixels`` pixels of the ``colours``
    (the buckets' colours: the HTML step breakdown, which precedes every plotly figure), or
    None.  Unlike a poll from the page, the filmstrip sees a frame drawn before a long script.
    ``dump``: write the frames there as ``<ms>.jpg`` (to look at them)."""
    import base64
    import io
    import json as _json

    from PIL import Image

    page = _new_page(b)
    b.start_tracing(page=page, screenshots=True,
                    categories=["devtools.timeline", "disabled-by-default-devtools.screenshot", "blink.user_timing"])
    _load_until_drawn(page, url)
    events = _json.loads(b.stop_tracing())
    events = events["traceEvents"] if isinstance(events, dict) else events
    page.close()
    nav = [e["ts"] for e in events if e.get("name") == "navigationStart"]
    if not nav:
        return None
    wants = [tuple(int(c.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4)) for c in colours]
    found = None
    for e in sorted((e for e in events if e.get("name") == "Screenshot"), key=lambda e: e["ts"]):
        if e["ts"] < min(nav):
            continue
        raw = base64.b64decode(e["args"]["snapshot"])
        if dump:
            Path(dump).mkdir(parents=True, exist_ok=True)
            (Path(dump) / f"{(e['ts'] - min(nav)) // 1000:05d}.jpg").write_bytes(raw)
        img = Image.open(io.BytesIO(raw)).convert("RGB")
        near = sum(1 for px in img.getdata() if any(sum(abs(a - w) for a, w in zip(px, want)) < 60 for want in wants))
        if near >= min_pixels and found is None:
            found = (e["ts"] - min(nav)) / 1e6
            if not dump:
                break
    return found


def _new_page(b: Any) -> Any:
    """A page in a new browser context (its own, cold, cache) that notes when the breakdown is drawn."""
    page = b.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.add_init_script(_FRAMES)
    return page


def _load_until_drawn(page: Any, url: str) -> tuple[float, float, float, float]:
    """Navigate ``page`` to ``url``; returns the seconds until the Overview's HTML step
    breakdown is visible, until its first plotly figure (a legend entry) and its
    recommendations show, and the page's clock at the first frame of each (:data:`_FRAMES`)."""
    t = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.locator("#step-breakdown .breakdown-box").first.wait_for(state="visible", timeout=60_000)
    html_s = time.perf_counter() - t
    page.locator(".legendtext").first.wait_for(timeout=60_000)
    page.locator("#recommendations").wait_for(timeout=60_000)
    fig_s = time.perf_counter() - t
    page.wait_for_function("() => window.__drawnMs.figure !== undefined", timeout=60_000)
    frames = page.evaluate("window.__drawnMs")
    return html_s, fig_s, frames["html"] / 1e3, frames["figure"] / 1e3


def _spread(times: list[float]) -> str:
    return "all " + " / ".join(f"{t:.2f}" for t in times) + " s"


def _browser_rows(res: dict[str, Any]) -> None:
    """Print the browser's rows: the HTML breakdown and the first plotly figure, cold and warm;
    polled from outside (wall) and by the page's clock at the frame that draws each."""
    for cache in ("cold", "warm"):
        loads = res[f"browser_first_paint_{cache}"]
        html_s, fig_s, html_frame, fig_frame = ([load[i] for load in loads] for i in range(4))
        again = "" if cache == "cold" else "the same browser again; "
        print(f"| **browser: navigation to the HTML step breakdown visible, cache {cache}** ({again}median of 3, "
              f"{_spread(html_s)}) | **{statistics.median(html_s):.2f} s** | | |")
        print(f"| browser, the page's clock at the frame that draws it, cache {cache}: HTML step breakdown "
              f"(median of 3, {_spread(html_frame)}) / first plotly figure ({_spread(fig_frame)}) "
              f"| **{statistics.median(html_frame):.2f} s** / {statistics.median(fig_frame):.2f} s | | |")
        if cache == "cold":
            print(f"| **browser: navigation to the first drawn figure, cache cold** (warm server; median of 3, "
                  f"{_spread(fig_s)}; CPU time = the page's main-thread work, least of 3) "
                  f"| **{statistics.median(fig_s):.2f} s** | {res['browser_busy_s']:.2f} s | "
                  f"{res['transfer_cold_bytes'] / 1e6:.2f} MB transferred |")
            strip = [t for t in res.get("filmstrip_breakdown_s") or [] if t is not None]
            if strip:
                print(f"| **browser, Chromium's filmstrip: first presented frame showing the HTML step breakdown, "
                      f"cache cold** (median of {len(strip)}, {_spread(strip)}) | **{statistics.median(strip):.2f} s** | | |")
        else:
            print(f"| **browser: navigation to the first drawn figure, cache warm** (the same browser again; median "
                  f"of 3, {_spread(fig_s)}) | **{statistics.median(fig_s):.2f} s** | | "
                  f"{res['transfer_warm_bytes'] / 1e3:.0f} kB transferred |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="kernel events in the run (about)")
    ap.add_argument("--steps", type=int, default=10, help="steps per rank")
    ap.add_argument("--browser", action="store_true", help="also time headless Chromium to the breakdown and the first figure")
    ap.add_argument("--run", help="use (or create) this run directory instead of a temporary one")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the fresh measuring process
    ap.add_argument("--generate", help=argparse.SUPPRESS)  # internal: write the synthetic run there
    args = ap.parse_args()
    if args.generate:
        n, gen_s = generate(Path(args.generate), args.events, args.steps)
        print(f"generated {n:,} events in {gen_s:.1f} s at {args.generate}", file=sys.stderr)
        return
    if args.measure:
        print(json.dumps(measure(args.measure, args.browser)))
        return
    with tempfile.TemporaryDirectory(prefix="perfscope-bench-") as tmp:
        path = Path(args.run) if args.run else Path(tmp) / "big.perfscope"
        if not (path / "run.json").exists():
            # In a child: a process's peak RSS counts its parent's RSS at fork time (Linux
            # keeps ru_maxrss across exec), so the process that forks the measurement stays small.
            subprocess.run([sys.executable, __file__, "--generate", str(path), "--events", str(args.events),
                            "--steps", str(args.steps)], check=True)
        cmd = [sys.executable, __file__, "--measure", str(path)] + (["--browser"] if args.browser else [])
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                        env={**os.environ, "PYTHONHASHSEED": "0"}).stdout)
    print(f"Dashboard on {res['events']:,} events ({RANKS} ranks x {args.steps} steps), "
          f"{os.cpu_count()} CPUs, fresh process:\n")
    print("| stage | wall time | CPU time | JSON sent |")
    print("| --- | --- | --- | --- |")
    print(f"| import dash + perfscope.dashboards | {res['import_s']:.2f} s | | |")
    print(f"| open run, build app | {res['open_s']:.2f} s | {res['open_cpu']:.2f} s | |")
    print(f"| analyze_run (cached afterwards) | {res['analyze_s']:.2f} s | {res['analyze_cpu']:.2f} s | |")
    print(f"| page with the Overview tab, to JSON | {res['overview_s']:.2f} s | {res['overview_cpu']:.2f} s "
          f"| {res['overview_bytes'] / 1e3:.0f} kB |")
    print(f"| **first render (open + analyze + Overview)** | **{res['first_render_s']:.2f} s** "
          f"| {res['first_render_cpu']:.2f} s | |")
    print(f"| Timeline, one step, cold ({res['timeline_title']}) | {res['timeline_s']:.2f} s | | "
          f"{res['timeline_bytes'] / 1e3:.0f} kB |")
    for tab in ("ranks", "kernels", "collectives"):
        print(f"| {tab.capitalize()} tab | {res[f'{tab}_s']:.2f} s | | {res[f'{tab}_bytes'] / 1e3:.0f} kB |")
    if "browser_first_paint_cold" in res:
        _browser_rows(res)
        for name, (server_s, server_cpu, wall_s) in res["interactions"].items():
            print(f"| interaction: {name} (server time of its slowest callback; in the browser {wall_s:.2f} s) "
                  f"| {server_s:.2f} s | {server_cpu:.2f} s | |")
    load = os.getloadavg()[0]
    print(f"\npeak RSS of the server process: {res['peak_rss_mb']:.0f} MB; load average at the end: {load:.1f}")


if __name__ == "__main__":
    main()
