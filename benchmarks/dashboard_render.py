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

    With ``--browser``, headless Chromium then loads the page from a real server and the
    time from navigation until the Overview's bar chart is drawn is measured (server cache
    warm, so this is the client-side cost: JS, layout request, tab callback, plotly).

Run:  python benchmarks/dashboard_render.py                 (1M events; about 30 s)
      python benchmarks/dashboard_render.py --browser       (adds time to first paint)
      python benchmarks/dashboard_render.py --events 100000 (smaller)
Prints a Markdown table (the one in benchmarks/README.md).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
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
        out.update(browser_first_paint(app))
    return out


def browser_first_paint(app: Any) -> dict[str, Any]:
    """Serve ``app`` and time headless Chromium from navigation to the drawn Overview."""
    import threading

    from playwright.sync_api import sync_playwright
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/"
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    try:
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=args)
            times = []
            for _ in range(3):
                page = b.new_page(viewport={"width": 1400, "height": 1000})
                t = time.perf_counter()
                page.goto(url)
                page.locator(".legendtext").first.wait_for(timeout=60_000)
                page.locator("#recommendations").wait_for(timeout=60_000)
                times.append(time.perf_counter() - t)
                page.close()
            b.close()
    finally:
        server.shutdown()
    return {"browser_first_paint_s": min(times), "browser_first_paint_cold_s": times[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="kernel events in the run (about)")
    ap.add_argument("--steps", type=int, default=10, help="steps per rank")
    ap.add_argument("--browser", action="store_true", help="also time headless Chromium to first paint")
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
    print(f"| Timeline, one step ({res['timeline_title']}) | {res['timeline_s']:.2f} s | | "
          f"{res['timeline_bytes'] / 1e3:.0f} kB |")
    for tab in ("ranks", "kernels", "collectives"):
        print(f"| {tab.capitalize()} tab | {res[f'{tab}_s']:.2f} s | | {res[f'{tab}_bytes'] / 1e3:.0f} kB |")
    if "browser_first_paint_s" in res:
        print(f"| browser: navigation to drawn Overview (warm server; best of 3, first "
              f"{res['browser_first_paint_cold_s']:.2f} s) | {res['browser_first_paint_s']:.2f} s | | |")
    load = os.getloadavg()[0]
    print(f"\npeak RSS of the server process: {res['peak_rss_mb']:.0f} MB; load average at the end: {load:.1f}")


if __name__ == "__main__":
    main()
