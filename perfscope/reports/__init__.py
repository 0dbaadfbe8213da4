"""Report renderers: draw what the analyzers return (Markdown, self-contained HTML, figures).

Pure functions from an :class:`~perfscope.analyzers.result.Analysis` to text or plotly
figures; the CLI writes the files.
"""
from perfscope.reports.html import render_html
from perfscope.reports.markdown import render_markdown

__all__ = ["render_html", "render_markdown"]
