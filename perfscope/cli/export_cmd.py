"""``perfscope export chrome|tensorboard RUN -o ...``: a run as Chrome/Perfetto trace JSON,
or as Kineto traces for TensorBoard's PyTorch profiler plugin."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import click

from perfscope.store.chrome import export_chrome
from perfscope.store.tensorboard import export_tensorboard

_RANKS = click.option("--rank", "ranks", type=int, multiple=True, help="Export only this rank (repeatable).")


@click.group(name="export")
def export_group() -> None:
    """Export a run: Chrome/Perfetto trace JSON, or traces for TensorBoard's profiler plugin."""


@export_group.command(name="chrome")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="Trace file to write (.json, or .json.gz to compress; - writes JSON to stdout).")
@_RANKS
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
def chrome(run: str, output: str, ranks: tuple[int, ...], force: bool) -> None:
    """Write RUN as Chrome trace JSON for Perfetto UI (ui.perfetto.dev) or chrome://tracing.

    One file holds every rank: per rank a GPU process (a lane per stream, plus
    synchronisation, annotations, collectives and one lane per NCCL channel) and a host
    process (steps, markers, API calls, host spans, NCCL proxy operations and steps)."""
    if output == "-":
        # The exporter writes a file (atomically, maybe compressed): stream it, and say the rest on stderr.
        with tempfile.TemporaryDirectory(prefix="perfscope-export-") as tmp:
            result = export_chrome(run, Path(tmp) / "trace.json", ranks=list(ranks) or None)
            with open(result.path, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer)
            sys.stdout.flush()
        click.echo(f"Wrote {result.events:,} events for rank(s) {', '.join(map(str, result.ranks))} to stdout.", err=True)
        return
    result = export_chrome(run, output, ranks=list(ranks) or None, force=force)
    click.echo(f"Wrote {result.events:,} events for rank(s) {', '.join(map(str, result.ranks))} to {result.path}.")
    click.echo("Next: open it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing")


@export_group.command(name="tensorboard")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False),
              help="TensorBoard log directory; traces go to OUTPUT/plugins/profile/NAME/.")
@click.option("--name", "run_name", default=None,
              help="Run name shown in TensorBoard (default: RUN's folder name without .perfscope).")
@_RANKS
@click.option("--force", is_flag=True, help="Replace the traces of an earlier export under the same name.")
def tensorboard(run: str, output: str, run_name: str | None, ranks: tuple[int, ...], force: bool) -> None:
    """Write RUN for TensorBoard's PyTorch profiler plugin (pip install torch-tb-profiler).

    One Kineto trace per rank (worker HOST_PID, as torch.profiler's trace handler names
    it): the plugin's overview (step times), kernel, operator (host spans), trace and, for
    NCCL runs, distributed views read them."""
    result = export_tensorboard(run, output, run_name=run_name, ranks=list(ranks) or None, force=force)
    click.echo(f"Wrote {result.events:,} events for rank(s) {', '.join(map(str, result.ranks))} "
               f"as {len(result.files)} worker trace(s) in {result.run_dir}.")
    click.echo(f"Next: tensorboard --logdir {output}  (then open the PYTORCH_PROFILER tab)")
