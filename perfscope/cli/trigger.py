"""``perfscope trigger RUN|PID --steps N``: open a recording window in a running job."""
from __future__ import annotations

import time

import click

from perfscope.errors import UsageError


@click.command(name="trigger", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("target", metavar="RUN|PID")
@click.option("--steps", type=int, required=True, help="Steps to record.")
@click.option("--warmup", type=int, default=1, show_default=True,
              help="Steps collected before them and dropped (CUPTI's start-up cost lands there).")
@click.option("--align", type=int, default=1, show_default=True, metavar="K",
              help="Start at a step that is a multiple of K, so that ranks which see the request a step apart "
                   "record the same steps (e.g. 10 on a large job).")
@click.option("--wait", "wait_s", type=float, default=None, metavar="S",
              help="Wait up to S seconds for every rank to finish the window, and say which steps it recorded.")
def trigger(target: str, steps: int, warmup: int, align: int, wait_s: float | None) -> int:
    """Open a window of N steps in a job recorded with `perfscope record --on-demand`.

    RUN is the run folder, or PID a process of the job (the `perfscope record` launcher,
    torchrun, or a rank): every rank of the run records the window.
    """
    from perfscope.recorder.trigger import request_windows, resolve_target, write_request

    run = resolve_target(target)
    req = write_request(run, steps, warmup=warmup, align=align)
    click.echo(f"perfscope: requested {steps} steps (after {warmup} warm-up) in {run}; request {req['id']}", err=True)
    if wait_s is None:
        click.echo("perfscope: each rank opens the window at its next step", err=True)
        return 0
    deadline = time.monotonic() + wait_s
    windows = request_windows(run, req["id"])
    while time.monotonic() < deadline and (not windows or any(w is None or w.get("last_step") is None for w in windows.values())):
        time.sleep(0.2)
        windows = request_windows(run, req["id"])
    for rank, w in sorted(windows.items()):
        if w is None or w.get("first_step") is None:
            click.echo(f"rank {rank}: not opened yet")
        elif w.get("last_step") is None:
            click.echo(f"rank {rank}: recording from step {w['first_step']}")
        else:
            click.echo(f"rank {rank}: recorded steps {w['first_step']}-{w['last_step']}")
    done = bool(windows) and all(w is not None and w.get("last_step") is not None for w in windows.values())
    if not done:
        raise UsageError(f"not every rank finished the window within {wait_s:g} s (ranks write their state at each "
                         "flush); `perfscope info` shows it later")
    return 0
