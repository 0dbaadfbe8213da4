"""The Dash application: :func:`create_app` serves the runs it is given, and only those."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import dash

from perfscope.dashboards import callbacks, layout
from perfscope.dashboards.data import Analyze, DashboardData

if TYPE_CHECKING:
    from flask import Response

_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def create_app(run_paths: Sequence[str | os.PathLike[str]], analyze: Analyze | None = None) -> dash.Dash:
    """Build the dashboard app for ``run_paths``.

    Every run is opened now (so a bad path fails before the server starts) and analysed on
    first view, then cached.  The browser refers to runs by their index in ``run_paths``;
    nothing it sends is used as a path.  Assets are served from the installed packages (no
    CDN), so the page works offline.

    Args:
        run_paths: run directories (at least one).
        analyze: analysis function (default ``perfscope.analyzers.analyze_run``); tests pass
            their own.

    Returns:
        the ``dash.Dash`` app; its Flask server is ``app.server``.

    Raises:
        UsageError: no run given.
        InputError, NotARunError, SchemaVersionError, CorruptRunError: a run cannot be opened.
    """
    data = DashboardData(run_paths, analyze=analyze)
    app = dash.Dash(
        __name__,
        title="perfscope",
        suppress_callback_exceptions=True,  # tab content (and its callbacks' components) comes and goes
        serve_locally=True,
        update_title=None,
    )
    app.layout = lambda: layout.page(data)
    callbacks.register(app, data)
    app.server.config["perfscope_data"] = data

    @app.server.after_request
    def _headers(response: Response) -> Response:
        for k, v in _SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    return app


__all__ = ["create_app"]
