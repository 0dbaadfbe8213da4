"""``perfscope report RUN --format md|html|json -o FILE``: write an analysis report.

HTML is one self-contained file (plotly.js inlined). ``-o -`` prints the report on stdout.
An existing FILE is replaced only with ``--force`` (checked before the analysis); the file
is written under a temporary name and renamed, so a failed run never leaves half a report.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfscope.cli.options import (
    analysis_options,
    emit,
    format_option,
    output_target,
    progress_reporter,
)

if TYPE_CHECKING:
    from perfscope.analyzers import AnalysisConfig

EXT = {"md": "md", "html": "html", "json": "json"}


@click.command(name="report")
@click.argument("run", type=click.Path())
@format_option(tuple(EXT), "html", "html (one self-contained page with charts), md (Markdown, e.g. for a CI job "
                                  "summary) or json (every table, one document).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default=None, metavar="FILE",
              help="Report file (default: RUN-report.EXT beside the run; -: stdout).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@analysis_options
def report(run: str, fmt: str, output: str | None, force: bool, config: AnalysisConfig) -> None:
    """Write an analysis report of RUN as Markdown, self-contained HTML or JSON."""
    import perfscope
    from perfscope.reports import render_analysis

    out = output_target(output or f"{str(run).rstrip('/')}-report.{EXT[fmt]}", force=force)
    with progress_reporter() as progress:
        a = perfscope.analyze(run, config, progress=progress)
    options = {} if fmt == "json" else {"title": f"perfscope report: {Path(run).name}"}
    text = render_analysis(a, fmt, **options)
    if out is None:  # on stdout, end with a newline as every printed output does
        emit(text if text.endswith("\n") else text + "\n", None)
        return
    emit(text, out)
    click.echo(f"wrote {out} ({out.stat().st_size / 1024:,.0f} KiB)", err=True)
