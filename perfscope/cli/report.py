"""``perfscope report RUN --format md|html|json -o FILE``: write an analysis report.

HTML is one self-contained file (plotly.js inlined). An existing FILE is replaced only with
``--force`` (checked before the analysis); the file is written under a temporary name and
renamed, so a failed run never leaves half a report.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfscope.cli.options import analysis_options, progress_reporter

if TYPE_CHECKING:
    from perfscope.analyzers import AnalysisConfig

EXT = {"md": "md", "html": "html", "json": "json"}


@click.command(name="report")
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(list(EXT)), default="html", show_default=True)
@click.option("-o", "--output", type=click.Path(), default=None, help="Report file (default: RUN-report.EXT beside the run).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@analysis_options
def report(run: str, fmt: str, output: str | None, force: bool, config: AnalysisConfig) -> None:
    """Write an analysis report of RUN as Markdown, self-contained HTML or JSON."""
    import perfscope
    from perfscope.reports import render_analysis
    from perfscope.reports.output import check_output, write_atomic

    out = check_output(output or f"{str(run).rstrip('/')}-report.{EXT[fmt]}", force=force)
    with progress_reporter() as progress:
        a = perfscope.analyze(run, config, progress=progress)
    options = {} if fmt == "json" else {"title": f"perfscope report: {Path(run).name}"}
    write_atomic(out, render_analysis(a, fmt, **options))
    click.echo(f"wrote {out} ({out.stat().st_size / 1024:,.0f} KiB)", err=True)
