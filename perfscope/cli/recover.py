"""``perfscope recover RUN``: decode what a killed job left undecoded in RUN."""
from __future__ import annotations

import click

from perfscope.recorder.recover import recover as recover_run


@click.command(name="recover")
@click.argument("run", type=click.Path())
def recover(run: str) -> None:
    """Decode the raw GPU records a killed job left in RUN, and mark the run recovered.

    A recording hands its CUPTI records to a decoder in another process; if the whole job
    was killed (kill -9 of the launcher too), what reached disk waits under RUN/raw/.
    This decodes it into the run's tables, marks the ranks whose process is gone
    incomplete and notes the recovery in run.json. `perfscope info` and `analyze` do the
    same on their own when they find such files.
    """
    result = recover_run(run)
    for note in result.notes:
        click.echo(f"perfscope: note: {note}", err=True)
    rows = ", ".join(f"{t} {r:,}" for t, r in sorted(result.rows.items())) or "no rows"
    damaged = f", {result.damaged} left out (damaged or unfinished)" if result.damaged else ""
    click.echo(f"perfscope: recovered {result.run_path}: decoded {result.segments} raw file(s){damaged} ({rows}); "
               f"status {result.status}")
