"""``perfscope analyze RUN``: the step-time breakdown and the top findings.

``--format text`` (default) prints rich tables; ``--format json`` prints one JSON document
(:func:`perfscope.reports.jsondoc.analysis_to_json`).  Progress goes to stderr, only on a
terminal.  Given a Kineto trace file instead of a run, :func:`perfscope.analyze` imports the
trace into a run (``-o``, else beside the trace) and analyses it in one go.
"""
from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

import click

from perfscope.cli.options import (
    analysis_options,
    import_warnings_on_stderr,
    progress_reporter,
    stdout_style,
)

if TYPE_CHECKING:
    from perfscope.analyzers import AnalysisConfig

# A pipe has no width; rich's 80 columns would truncate the bucket columns.
PIPE_WIDTH = 160


@click.command(name="analyze")
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format.")
@analysis_options
@click.option("-o", "--run-out", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="RUN is a trace: import it into DIR (default: beside the trace, named after it, e.g. "
                   "t.json.gz -> t.perfscope).")
@click.option("--force", is_flag=True, help="RUN is a trace: replace the run at the output if there is one.")
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Analyse the ranks in parallel on a local Dask cluster of N processes (needs perfscope[dask]).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Analyse the ranks on the Dask cluster at ADDRESS (tcp://HOST:8786); its workers must see RUN "
                   "at the same path (docs/scale.md).")
def analyze(run: str, fmt: str, config: AnalysisConfig, run_out: str | None, force: bool, workers: int | None,
            scheduler: str | None) -> None:
    """Break each step of RUN into compute/network/sync/pcie/data_loading/host and recommend changes.

    RUN is a run directory, or a PyTorch profiler (Kineto) trace file (.json or .json.gz):
    the trace is then imported into a run, as `perfscope import kineto` does, and analysed
    in one go; the run is kept for later commands (where is said on stderr). An existing
    run is not replaced without --force. Several trace files (one per rank) go through
    `perfscope import kineto FILES... -o DIR` first.

    With --workers or --scheduler, each rank of RUN (a run directory) is read and analysed
    by a Dask task, and only small per-rank summaries come back; the result is the same.
    """
    import perfscope
    from perfscope.pipeline import default_run_dir
    from perfscope.reports import render_analysis

    is_trace = os.path.isfile(run)
    with progress_reporter("importing and analysing" if is_trace else "analysing") as progress, import_warnings_on_stderr():
        a = perfscope.analyze(run, config, progress=progress, run_out=run_out, force=force, workers=workers,
                              scheduler=scheduler)
    if is_trace:
        out = run_out or default_run_dir(run)
        click.echo(f"perfscope: imported {run} into {out} (next time: perfscope analyze {shlex.quote(str(out))})", err=True)
    if fmt == "json":
        click.echo(render_analysis(a, "json"))
        return
    color, width = stdout_style(PIPE_WIDTH)
    click.echo(render_analysis(a, "text", width=width, color=color), nl=False)
