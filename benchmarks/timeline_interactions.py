"""Server time of the dashboard's Timeline interactions on a run with about a million events.

Method
    A synthetic run is written through the store writer (``tests/dashboard_fixtures.py``,
    as ``benchmarks/dashboard_render.py`` writes it: 2 ranks, ``--steps`` steps, kernels
    spread evenly so the total is ``--events``, plus NCCL kernels, collectives, copies,
    syncs, markers and host spans; analysed by the fixture's own exact analysis, so the
    numbers are the Timeline's alone).  Then each interaction is called as the Dash callback
    calls it (``perfscope.dashboards.timeline_callbacks``), both ranks aligned, and its
    figure serialised to JSON as Dash sends it.  Each is timed ``--repeat`` times; the
    table shows the median wall and CPU (``process_time``) seconds and the bytes sent.
    The first row is the tab's first build (lane layout and launch index read once per
    run, then cached).  The dashboard also keeps the figures it drew (a tab opened again, a
    zoom undone); they are dropped before each call, so every row times a first view.  On a shared machine wall time includes waiting for a core; CPU
    time much less.

Run:  python benchmarks/timeline_interactions.py [--events 1000000] [--steps 10] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _timed(fn: Callable[[], Any], repeat: int, forget: Callable[[], None]) -> tuple[float, float, int]:
    """Median wall and CPU seconds of ``fn()`` and the JSON bytes of the figure it returns
    (``forget()`` before each call: the dashboard keeps the figures it drew, and each call
    is timed as a first view)."""
    import plotly

    walls, cpus, size = [], [], 0
    for _ in range(repeat):
        forget()
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        fig = out[0] if isinstance(out, tuple) else out
        size = len(json.dumps(fig, cls=plotly.utils.PlotlyJSONEncoder))
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from dashboard_fixtures import fake_analyze, make_run

    from perfscope.dashboards import layout
    from perfscope.dashboards import timeline_callbacks as tc
    from perfscope.dashboards.data import DashboardData

    with tempfile.TemporaryDirectory() as tmp:
        k = max(args.events // (2 * args.steps), 1)
        run = make_run(Path(tmp) / "run.perfscope", ranks=2, steps=args.steps, kernels_per_step=k,
                       step_ns=max(20_000_000, k * 2_000))
        data = DashboardData([str(run.path)], analyze=fake_analyze)
        rd = data.get(0)
        sel = layout.default_selection(rd)
        rank, step = sel["rank"], sel["step"]
        t0, t1, origin = tc.step_span(rd, tc.shown_ranks(rd, rank, None), rank, step)
        mid = (t0 + t1) / 2e6 - origin / 1e6
        win = {"t0": origin + int(mid * 1e6), "t1": origin + int(mid * 1e6) + 1_000_000}
        rows: list[tuple[str, Callable[[], Any], int]] = [
            ("Timeline tab, first build", lambda: tc.timeline_tab(data, rd, sel), 1),
            ("step change", lambda: tc.timeline_update(data, 0, rank, step - 1, None, "tl-step"), args.repeat),
            ("zoom to 1 ms", lambda: tc.timeline_update(
                data, 0, rank, step, {"xaxis.range[0]": mid, "xaxis.range[1]": mid + 1}, "tl-zoom"), args.repeat),
            ("zoom to 10 µs", lambda: tc.timeline_update(
                data, 0, rank, step, {"xaxis.range[0]": mid, "xaxis.range[1]": mid + 0.01}, "tl-zoom"), args.repeat),
            ("whole step again (double click)", lambda: tc.timeline_update(
                data, 0, rank, step, {"xaxis.autorange": True}, "tl-zoom"), args.repeat),
            ("search a kernel name, whole step", lambda: tc.timeline_update(
                data, 0, rank, step, None, "tl-search", None, "sgemm", None), args.repeat),
            ("one rank shown", lambda: tc.timeline_update(data, 0, rank, step, None, "tl-ranks", [rank], "", None),
             args.repeat),
            ("Open in Perfetto, 1 ms window", lambda: (tc.perfetto_export(data, 0, rank, step, None, win),),
             args.repeat),
        ]
        print(f"{run.n_events:,} events, 2 ranks, {args.steps} steps ({k:,} kernels per rank and step)\n")
        print("| interaction | wall s | CPU s | bytes sent |\n|---|---:|---:|---:|")
        for label, fn, n in rows:
            wall, cpu, size = _timed(fn, n, lambda: tc.forget_figures(rd))
            print(f"| {label} | {wall:.3f} | {cpu:.3f} | {size:,} |")


if __name__ == "__main__":
    main()
