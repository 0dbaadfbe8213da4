"""Renderers: an :class:`~perfscope.analyzers.result.Analysis` or a
:class:`~perfscope.analyzers.compare.Comparison` in, text out.  The CLI picks a format and
decides where the text goes.

One module per format, each rendering both: :mod:`.text` (rich tables; also ``info`` and
``doctor``), :mod:`.jsondoc` (JSON documents), :mod:`.markdown`, :mod:`.html` (one
self-contained page, plotly.js inlined; :mod:`.figures` draws its charts) with
:mod:`.html_compare`, and :mod:`.junit` (comparisons only).  :mod:`.style` holds what they
share with each other and with the dashboard (bucket colours and labels, number formats,
escaping); :mod:`.comparison` what the comparison renderers say alike; :mod:`.output`
writes report files.  Modules are imported on use, so one format does not pay for
plotly or rich.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perfscope.errors import UsageError

if TYPE_CHECKING:
    from perfscope.analyzers.compare import Comparison
    from perfscope.analyzers.result import Analysis

# format -> "module:function"; every function takes the object first, then keyword options.
ANALYSIS_RENDERERS: dict[str, str] = {
    "text": "perfscope.reports.text:render_analysis_text",
    "json": "perfscope.reports.jsondoc:render_analysis_json",
    "md": "perfscope.reports.markdown:render_markdown",
    "html": "perfscope.reports.html:render_html",
}
COMPARISON_RENDERERS: dict[str, str] = {
    "text": "perfscope.reports.text:render_comparison_text",
    "md": "perfscope.reports.markdown:render_comparison_markdown",
    "junit": "perfscope.reports.junit:render_junit",
    "html": "perfscope.reports.html_compare:render_comparison_html",
    "json": "perfscope.reports.jsondoc:render_comparison_json",
}
ANALYSIS_FORMATS: tuple[str, ...] = tuple(ANALYSIS_RENDERERS)
COMPARISON_FORMATS: tuple[str, ...] = tuple(COMPARISON_RENDERERS)


def _renderer(table: dict[str, str], fmt: str) -> Callable[..., str]:
    try:
        module, name = table[fmt].split(":")
    except KeyError:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(table)}") from None
    return getattr(importlib.import_module(module), name)


def render_analysis(a: Analysis, fmt: str, **options: Any) -> str:
    """Render an analysis in ``fmt`` (one of :data:`ANALYSIS_FORMATS`); ``options`` go to
    the format's renderer (``title`` for md/html, ``width``/``color`` for text).

    Raises:
        UsageError: an unknown format.
    """
    return _renderer(ANALYSIS_RENDERERS, fmt)(a, **options)


def render_comparison(c: Comparison, fmt: str, **options: Any) -> str:
    """Render a comparison in ``fmt`` (one of :data:`COMPARISON_FORMATS`); ``options`` go
    to the format's renderer (``width``/``color`` for text, ``top`` for tables).

    Raises:
        UsageError: an unknown format.
    """
    return _renderer(COMPARISON_RENDERERS, fmt)(c, **options)


__all__ = ["ANALYSIS_FORMATS", "COMPARISON_FORMATS", "render_analysis", "render_comparison"]
