"""``perfscope export chrome RUN -o FILE``: a run as Chrome/Perfetto trace JSON."""
from __future__ import annotations

import click

from perfscope.store.chrome import export_chrome


@click.group(name="export")
def export_group() -> None:
    """Export a run to other formats."""


@export_group.command(name="chrome")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="Trace file to write (.json, or .json.gz to compress).")
@click.option("--rank", "ranks", type=int, multiple=True, help="Export only this rank (repeatable).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
def chrome(run: str, output: str, ranks: tuple[int, ...], force: bool) -> None:
    """Write RUN as Chrome trace JSON for Perfetto UI (ui.perfetto.dev) or chrome://tracing."""
    result = export_chrome(run, output, ranks=list(ranks) or None, force=force)
    click.echo(f"Wrote {result.events:,} events for rank(s) {', '.join(map(str, result.ranks))} to {result.path}.")
    click.echo("Next: open it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing")
