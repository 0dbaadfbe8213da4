"""``perfscope analyze SOURCE...``: the top findings and the step-time breakdown.

``--format text`` (default) prints rich tables, the findings first; ``--format json`` one
JSON document (:func:`perfscope.reports.jsondoc.analysis_to_json`); ``-o FILE`` writes
either to FILE.  Progress goes to stderr, only on a terminal.  Given Kineto traces instead
of a run (a file, several, or a folder of them), :func:`perfscope.analyze` imports them
into a run (``--run-out``, else beside them), or reuses the run an earlier ``analyze``
imported from the same unchanged files, and analyses it in one go.
"""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import click

from perfscope.cli.import_cmd import max_inflate_option
from perfscope.cli.options import (
    analysis_options,
    emit,
    format_option,
    import_warnings_on_stderr,
    output_option,
    output_target,
    progress_reporter,
    text_style,
)
from perfscope.errors import UsageError

if TYPE_CHECKING:
    from perfscope.analyzers import AnalysisConfig
    from perfscope.trace_sources import TraceImport

# A pipe has no width; rich's 80 columns would truncate the bucket columns.
PIPE_WIDTH = 160


@click.command(name="analyze")
@click.argument("sources", nargs=-1, required=True, type=click.Path(), metavar="SOURCE...")
@format_option(("text", "json"), "text", "text (tables, the findings first) or json (every table, one document).")
@output_option("the analysis", "Replace FILE if it exists; for traces, import them again, replacing their run.")
@click.option("--steps", "show_steps", is_flag=True, help="Text: add the table of every step's buckets.")
@analysis_options
@click.option("--run-out", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="SOURCE is traces: import them into DIR (default: beside them, named after them, e.g. "
                   "t.json.gz -> t.perfscope, logs/ -> logs.perfscope).")
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Analyse the ranks in parallel on a local Dask cluster of N processes (needs perfscope[dask]).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Analyse the ranks on the Dask cluster at ADDRESS (tcp://HOST:8786); its workers must see the run "
                   "at the same path (docs/scale.md).")
@max_inflate_option
def analyze(sources: tuple[str, ...], fmt: str, output: str | None, force: bool, show_steps: bool,
            config: AnalysisConfig, run_out: str | None, workers: int | None, scheduler: str | None,
            max_inflate: int | None) -> None:
    """Break each step of a run into compute/network/sync/pcie/data_loading/host and recommend changes.

    SOURCE is a run directory, or PyTorch profiler (Kineto) traces (.json or .json.gz): one
    file, several files (one per rank), or a folder of *.pt.trace.json[.gz] as
    torch.profiler.tensorboard_trace_handler writes it.  Traces are imported into a run,
    as `perfscope import kineto` does, and analysed in one go; the run is kept for later
    commands (where is said on stderr), and the next `analyze` of the same unchanged
    traces reuses it.  --force imports again, replacing the run, and replaces -o FILE.

    With --workers or --scheduler, each rank of the run (a run directory, or traces'
    reused run) is read and analysed by a Dask task, and only small per-rank summaries
    come back; the result is the same.

    \b
    Examples:
      perfscope analyze runs/exp1
      perfscope analyze trace.json.gz --steps
      perfscope analyze tb_logs/ --format json -o analysis.json
    """
    import perfscope
    from perfscope.reports import render_analysis
    from perfscope.trace_sources import plan_trace_import

    source = sources[0] if len(sources) == 1 else list(sources)
    plan = plan_trace_import(source, run_out, force=force)
    if plan is None and run_out is not None:
        raise UsageError(f"--run-out applies to trace files, and {sources[0]} is a run")
    target = output_target(output, force=force)
    if plan is None and isinstance(source, str):
        from perfscope.recorder.recover import recover_if_needed

        recovered = recover_if_needed(source, by="perfscope analyze")
        if recovered:
            click.echo(f"perfscope: {recovered}", err=True)
    label = "analysing" if plan is None or plan.reuse else "importing and analysing"
    with progress_reporter(label) as progress, import_warnings_on_stderr():
        a = perfscope.analyze(source, config, progress=progress, run_out=run_out, force=force and plan is not None,
                              workers=workers, scheduler=scheduler, max_inflate=max_inflate)
    if plan is not None:
        _say_where(plan)
    if fmt == "json":
        emit(render_analysis(a, "json") + "\n", target)
        return
    color, width = text_style(target, PIPE_WIDTH)
    emit(render_analysis(a, "text", width=width, color=color, steps=show_steps), target)


def _say_where(plan: TraceImport) -> None:
    """Say on stderr which run the traces went to, or came from."""
    again = f"perfscope analyze {shlex.quote(str(plan.out))}"
    if plan.reuse:
        click.echo(f"perfscope: reusing {plan.out}, imported from the unchanged {plan.describe()} "
                   "(--force imports again)", err=True)
    else:
        click.echo(f"perfscope: imported {plan.describe()} into {plan.out} (next time: {again})", err=True)
