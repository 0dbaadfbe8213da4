"""``perfscope import kineto FILES... -o RUN``: PyTorch profiler traces into a run."""
from __future__ import annotations

import click

from perfscope.cli.options import max_inflate_option, progress_reporter
from perfscope.store.kineto import import_kineto

#: Inputs at least this big (bytes, all files) show progress on a terminal.
PROGRESS_MIN_BYTES = 20 << 20


@click.group(name="import")
def import_group() -> None:
    """Import traces from other profilers into a perfscope run."""


@import_group.command(name="kineto")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False),
              help="Run directory to create.")
@click.option("--rank", type=click.IntRange(min=0), default=None,
              help="Rank of a single file that has no distributedInfo.rank.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it already holds a run.")
@max_inflate_option
def kineto(files: tuple[str, ...], output: str, rank: int | None, force: bool, max_inflate: int | None) -> None:
    """Import PyTorch profiler (Kineto) trace FILES (.json or .json.gz, one per rank)."""
    import os

    total = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    with progress_reporter("importing", enabled=total >= PROGRESS_MIN_BYTES) as progress:
        result = import_kineto(list(files), output, rank=rank, force=force, max_inflate=max_inflate,
                               progress=progress.fraction if progress is not None else None)
    for w in result.warnings:
        click.echo(f"perfscope: warning: {w}", err=True)
    ranks = result.ranks
    rank_text = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks"
    click.echo(
        f"Imported {len(files)} file(s) into {result.path} ({rank_text}): "
        f"{result.total('kernels'):,} kernels, {result.total('memcpy'):,} memcpy, "
        f"{result.total('collectives'):,} collectives, {result.total('steps'):,} steps."
    )
    click.echo(f"Next: perfscope analyze {_quote(str(result.path))}")


def _quote(path: str) -> str:
    import shlex

    return shlex.quote(path)
