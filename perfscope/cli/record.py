"""``perfscope record [-o DIR] [options] -- CMD ...``: record a job without code changes."""
from __future__ import annotations

import shlex

import click

from perfscope._steps import Schedule
from perfscope.errors import UsageError
from perfscope.launch import default_output, launch
from perfscope.options import RecordOptions


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ",".join(str(r) for r in ranks)


@click.command(
    name="record",
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": ["-h", "--help"],
    },
)
@click.option("-o", "--output", type=click.Path(file_okay=False), default=None,
              help="Run directory to write (default: <script>-<date>-<time>.perfscope).")
@click.option("--force", is_flag=True, help="Replace an existing run at the output directory.")
@click.option("--no-cupti", is_flag=True, help="Do not capture GPU activity (kernels, copies, syncs, NVTX).")
@click.option("--no-nccl", is_flag=True, help="Do not load perfscope's NCCL profiler plugin.")
@click.option("--no-nvml", is_flag=True, help="Do not sample GPU metrics through NVML.")
@click.option("--flush-interval", type=float, default=2.0, show_default=True, metavar="S",
              help="Seconds between writes to disk (the most a killed job loses).")
@click.option("--schedule", "schedule_text", default=None, metavar="wait=W,warmup=U,active=A,repeat=R",
              help="Record only some steps, as torch.profiler's schedule: per cycle, skip W steps, collect and drop "
                   "U warm-up steps, record A steps; R cycles (0: until the end). Between windows CUPTI is off.")
@click.option("--on-demand", is_flag=True,
              help="Record nothing until `perfscope trigger RUN --steps N` opens a window of N steps.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def record(
    output: str | None,
    force: bool,
    no_cupti: bool,
    no_nccl: bool,
    no_nvml: bool,
    flush_interval: float,
    schedule_text: str | None,
    on_demand: bool,
    command: tuple[str, ...],
) -> int:
    """Record a training job: perfscope record -o RUN -- CMD ...

    Works for `python train.py` and `torchrun --nproc-per-node N train.py` (each rank
    writes its own shard into the run). The command's output and exit code pass through.
    """
    if schedule_text is not None and on_demand:
        raise UsageError("--schedule and --on-demand exclude each other: an on-demand recording's windows come from "
                         "`perfscope trigger`")
    schedule = Schedule(on_demand=True) if on_demand else Schedule.parse(schedule_text) if schedule_text else None
    options = RecordOptions(cupti=not no_cupti, nccl=not no_nccl, nvml=not no_nvml, flush_interval_s=flush_interval)
    out = output if output is not None else str(default_output(command))
    click.echo(f"perfscope: recording `{shlex.join(command)}` into {out}", err=True)
    if on_demand:
        click.echo(f"perfscope: armed; open a window with: perfscope trigger {shlex.quote(out)} --steps N", err=True)
    result = launch(command, out, options=options, force=force, schedule=schedule)
    for note in result.notes:
        click.echo(f"perfscope: note: {note}", err=True)
    for message, ranks in result.warnings:
        click.echo(f"perfscope: warning ({_ranks_text(ranks)}): {message}", err=True)
    recorded = _ranks_text(result.ranks) if result.ranks else "no ranks"
    click.echo(f"perfscope: recorded {recorded} into {result.run_path} ({result.status}; "
               f"the command exited with {result.exit_code})", err=True)
    if result.ranks:
        click.echo(f"perfscope: next: perfscope analyze {shlex.quote(str(result.run_path))}", err=True)
    return result.exit_code
