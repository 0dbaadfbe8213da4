"""Report renderers: draw what the analyzers return (Markdown, self-contained HTML, figures).

Pure functions from an :class:`~perfscope.analyzers.result.Analysis` to text or plotly
figures; the CLI writes the files.  Modules: :mod:`.markdown` (``render_markdown``),
:mod:`.html` (``render_html``, plotly.js inlined), :mod:`.figures` (plotly figures),
:mod:`.compare_render` (``perfscope compare``).  Imported lazily so that using one renderer
does not import plotly for the others.
"""
from __future__ import annotations

from typing import Any

_LAZY = {"render_html": "perfscope.reports.html", "render_markdown": "perfscope.reports.markdown"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'perfscope.reports' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["render_html", "render_markdown"]
