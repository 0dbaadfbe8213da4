"""The Dash web dashboard: layout, thin callbacks and pure plotly figure functions.

``create_app(run_paths)`` (in :mod:`perfscope.dashboards.app`) builds the app;
``perfscope dashboard RUN...`` serves it.  Imported lazily so that ``import
perfscope.dashboards.figures`` does not pay for the whole Dash app.
"""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from perfscope.dashboards.app import create_app

        return create_app
    raise AttributeError(f"module 'perfscope.dashboards' has no attribute {name!r}")


__all__ = ["create_app"]
