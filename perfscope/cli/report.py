"""``perfscope report RUN --format md|html|json -o FILE``: write an analysis report.

HTML is one self-contained file (plotly.js inlined). An existing FILE is replaced only with
``--force``; the file is written under a temporary name and renamed, so a failed run never
leaves half a report.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import click

from perfscope.cli.analyze import run_analysis
from perfscope.errors import RunExistsError

EXT = {"md": "md", "html": "html", "json": "json"}


def render(a: object, fmt: str, title: str) -> str:
    """Render an analysis in ``fmt`` (md, html or json) and return the text."""
    if fmt == "json":
        from perfscope.analyzers import analysis_to_json

        return json.dumps(analysis_to_json(a), indent=1, allow_nan=False)
    if fmt == "md":
        from perfscope.reports.markdown import render_markdown

        return render_markdown(a, title=title)
    from perfscope.reports.html import render_html

    return render_html(a, title=title)


@click.command(name="report")
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["md", "html", "json"]), default="html", show_default=True)
@click.option("-o", "--output", type=click.Path(), default=None, help="Report file (default: RUN-report.EXT beside the run).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.option("--step-pattern", default=None, metavar="REGEX", help="Regex over NVTX/annotation names that marks steps.")
@click.option("--ranks", default=None, metavar="LIST", help="Ranks to analyse, e.g. 0,2,4-7 (default: all).")
def report(run: str, fmt: str, output: str | None, force: bool, step_pattern: str | None, ranks: str | None) -> None:
    """Write an analysis report of RUN as Markdown, self-contained HTML or JSON."""
    out = Path(output) if output else Path(f"{str(run).rstrip('/')}-report.{EXT[fmt]}")
    if out.exists() and not force:
        raise RunExistsError(f"{out} already exists; choose another -o FILE or pass --force to replace it")
    a = run_analysis(run, step_pattern, ranks)
    text = render(a, fmt, title=f"perfscope report: {Path(run).name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    click.echo(f"wrote {out} ({out.stat().st_size / 1024:,.0f} KiB)", err=True)
