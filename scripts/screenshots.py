"""Take the README's dashboard screenshots: every tab of one H200 run, in headless Chromium.

Serves ``tests/data/h200/straggler.perfscope`` (4 ranks; rank 2 sleeps 30 ms per step) with
``comm_heavy.perfscope`` beside it for the Compare tab, and for the Operators tab a two-rank
torch.profiler trace imported from ``tests/data/kineto`` (perfscope's recorder keeps no CPU
operators; the H200 run's Operators tab only says so), opens each tab through its URL
(the dashboard keeps its state in the query string), waits until its figures are drawn and
writes ``docs/images/dashboard-<tab>.png``, downscaled to ``--width`` pixels and palette-
quantised so each file stays well under 1 MB (Pillow does that part; without it the
full-size screenshots are kept).

Run:  python scripts/screenshots.py [--out docs/images] [--chromium /usr/bin/chromium]
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "tests" / "data" / "h200"
RUNS = ("straggler.perfscope", "comm_heavy.perfscope")
# tab -> (URL query, text that shows once the tab has drawn)
TABS: dict[str, tuple[str, str]] = {
    "overview": ("?run=0&tab=overview", "Where each step's time went"),
    "ranks": ("?run=0&tab=ranks", "Straggler ranking"),
    "timeline": ("?run=0&tab=timeline&rank=2&step=4", "rank 2, step 4"),
    "collectives": ("?run=0&tab=collectives", "Bus bandwidth against message size"),
    "kernels": ("?run=0&tab=kernels", "kernel rows"),
    "operators": ("?run=2&tab=operators", "Top operators by self host time"),
    "compare": ("?run=0&tab=compare", "Median time per step by bucket"),
}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def shrink(path: Path, width: int) -> None:
    """Downscale the PNG at ``path`` to ``width`` pixels and quantise it to 256 colours
    (fast octree: the small legend swatches keep their own colours, which median cut merges)."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as img:
        rgb = img.convert("RGB")
        if rgb.width > width:
            rgb = rgb.resize((width, round(rgb.height * width / rgb.width)), Image.Resampling.LANCZOS)
        rgb.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(path, optimize=True)


def take(out: Path, chromium: str, width: int, tabs: list[str]) -> list[Path]:
    """Serve the runs, screenshot each tab in ``tabs``; returns the files written."""
    from perfscope.cli.main import main
    from perfscope.dashboards.app import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    tmp = Path(tempfile.mkdtemp(prefix="perfscope-shots-"))
    try:
        ddp = tmp / "ddp_kineto"
        kineto = REPO / "tests" / "data" / "kineto"
        if main(["import", "kineto", str(kineto / "ddp_rank0.json.gz"), str(kineto / "ddp_rank1.json.gz"),
                 "-o", str(ddp)]) != 0:
            raise SystemExit("importing tests/data/kineto/ddp_rank*.json.gz failed")
        app = create_app([*(str(H200 / r) for r in RUNS), str(ddp)])
        return _shoot(app, out, chromium, width, tabs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _shoot(app: Any, out: Path, chromium: str, width: int, tabs: list[str]) -> list[Path]:
    """Serve ``app`` and write the screenshots of ``tabs``; returns the files written."""
    from playwright.sync_api import sync_playwright
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/"
    written = []
    out.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page: Any = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(60_000)
            for tab in tabs:
                query, ready = TABS[tab]
                page.goto(url + query)
                page.get_by_text(ready, exact=False).first.wait_for()
                page.wait_for_timeout(800)  # plotly's transitions and the loading spinner settle
                path = out / f"dashboard-{tab}.png"
                page.screenshot(path=str(path), full_page=True)
                shrink(path, width)
                written.append(path)
            browser.close()
    finally:
        server.shutdown()
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="folder for the PNG files")
    ap.add_argument("--chromium", default=os.environ.get("PERFSCOPE_CHROMIUM") or shutil.which("chromium")
                    or "/usr/bin/chromium", help="Chromium executable")
    ap.add_argument("--width", type=int, default=1100, help="width of the saved images in pixels")
    ap.add_argument("--tab", action="append", choices=list(TABS), help="only this tab (repeatable)")
    args = ap.parse_args()
    for path in take(args.out, args.chromium, args.width, args.tab or list(TABS)):
        print(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {path.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
