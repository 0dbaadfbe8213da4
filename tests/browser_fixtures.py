"""Headless Chromium for the dashboard's browser tests, and a server for a Dash app.

Import the fixture into a test module (``from browser_fixtures import browser``); mark the
module ``pytest.mark.browser``.
"""
from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("PERFSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless Chromium (skips without one, except in CI where it must be installed)."""
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        if os.environ.get("CI"):
            # CI installs it (scripts/setup-test-env.sh): a silent skip there would hide a broken setup.
            pytest.fail(f"no Chromium at {CHROMIUM} in CI; scripts/setup-test-env.sh should have installed it")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                               args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve the Dash ``app`` on a free loopback port; yields its URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        thread.join(timeout=5)
