"""``perfscope import kineto FILES... -o RUN``: PyTorch profiler traces into a run."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from collections.abc import Iterator

import click

from perfscope.store.kineto import ProgressFn, import_kineto

#: Inputs at least this big (bytes, all files) get a progress bar on a terminal.
PROGRESS_MIN_BYTES = 20 << 20


@click.group(name="import")
def import_group() -> None:
    """Import traces from other profilers into a perfscope run."""


@contextmanager
def _progress(total_bytes: int) -> Iterator[ProgressFn | None]:
    """A rich progress bar on stderr when it is a terminal and the input is big, else None."""
    if total_bytes < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("importing", total=total_bytes)

        def update(message: str, done: int, total: int) -> None:
            bar.update(task, description=message, completed=done, total=total)

        yield update


@import_group.command(name="kineto")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False),
              help="Run directory to create.")
@click.option("--rank", type=click.IntRange(min=0), default=None,
              help="Rank of a single file that has no distributedInfo.rank.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it already holds a run.")
def kineto(files: tuple[str, ...], output: str, rank: int | None, force: bool) -> None:
    """Import PyTorch profiler (Kineto) trace FILES (.json or .json.gz, one per rank)."""
    import os

    total = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    with _progress(total) as progress:
        result = import_kineto(list(files), output, rank=rank, force=force, progress=progress)
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
