"""The launcher behind ``perfscope record``: run a command with every rank recorded.

:func:`launch` creates the run, starts the command with perfscope's ``sitecustomize`` on
a prepended ``PYTHONPATH`` (see :mod:`perfscope.recorder.inject`), runs the job-wide
collectors around it (the NCCL plugin: set up before, its files turned into the
``collectives`` table after), forwards SIGTERM and SIGINT to it, waits, and then settles
every status (:func:`reconcile_ranks`; docs/reliability.md, "Recording and signals"):

* a rank whose file still says ``recording`` once its process has ended was killed
  before its last flush (SIGKILL, the out-of-memory killer): it becomes ``incomplete``,
  with that reason;
* the rank that is the command itself, killed by a signal, is ``incomplete`` even when
  its recorder had stopped cleanly;
* the run is ``complete`` when the command exited by itself (whatever its exit code) and
  every rank is ``complete``; else ``incomplete``.

It never prints; the CLI reports what it returns.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfscope.collectors.base import CollectorContext, CollectorStats
from perfscope.errors import UsageError
from perfscope._steps import Schedule
from perfscope.options import ENV_DEBUG, ENV_OWNER, ENV_RUN_DIR, ENV_RUN_ID, ENV_SCHEDULE, RecordOptions, schedule_env
from perfscope.recorder.driver import CollectorSet
from perfscope.recorder.inject import site_dir
from perfscope.recorder.runs import environment_snapshot


@dataclass
class LaunchResult:
    """What happened to a recorded command.

    Attributes:
        run_path: the run directory.
        exit_code: the command's exit status as a shell reports it (128 + N when a signal
            N killed it).
        status: the run's status once finished (``complete`` or ``incomplete``).
        ranks: the ranks that wrote metadata.
        warnings: (message, ranks it came from) pairs, deduplicated across ranks.
        notes: launcher-side remarks (NCCL plugin configuration, nothing recorded, ...).
    """

    run_path: Path
    exit_code: int
    status: str
    ranks: list[int] = field(default_factory=list)
    warnings: list[tuple[str, list[int]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def default_output(command: Sequence[str]) -> Path:
    """Return ``<script or program>-YYYYmmdd-HHMMSS.perfscope`` in the current directory."""
    stem = None
    for arg in command:
        if arg.endswith(".py"):
            stem = Path(arg).stem
            break
    if stem is None:
        stem = Path(command[0]).name if command else "run"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) or "run"
    return Path(f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}.perfscope")


def guess_world_size(command: Sequence[str]) -> int | None:
    """Return the job's world size when the command line says it, else None.

    ``python train.py`` is 1; ``torchrun --nproc-per-node N [--nnodes M]`` is N x M when
    both are plain integers; anything else is unknown (the ranks report it themselves).
    """
    if not command:
        return None
    prog = Path(command[0]).name
    args = list(command[1:])
    is_torchrun = prog == "torchrun"
    if re.fullmatch(r"python[0-9.]*", prog):
        if len(args) >= 2 and args[0] == "-m" and args[1] in ("torch.distributed.run", "torch.distributed.launch"):
            is_torchrun = True
            args = args[2:]
        elif "-m" not in args and "-c" not in args:
            return 1
    if not is_torchrun:
        return None
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            break  # the training script: its own arguments follow
        key, eq, val = a[2:].partition("=")
        key = key.replace("_", "-")
        if not eq and i + 1 < len(args) and key in ("nproc-per-node", "nnodes"):
            val = args[i + 1]
            i += 1
        values[key] = val
        i += 1
    nproc = values.get("nproc-per-node", "1")
    nnodes = values.get("nnodes", "1")
    if nproc.isdigit() and nnodes.isdigit():
        return int(nproc) * int(nnodes)
    return None


def child_env(
    run_path: Path, run_id: str, options: RecordOptions, base: dict[str, str] | None = None, schedule: Schedule | None = None,
) -> dict[str, str]:
    """Return the environment for the recorded command (before the job-wide collectors add theirs)."""
    env = dict(os.environ if base is None else base)
    env.pop(ENV_OWNER, None)  # a job started from a recorded process starts fresh
    env.pop(ENV_SCHEDULE, None)
    env.update(options.to_env())
    env.update(schedule_env(schedule))
    env[ENV_RUN_DIR] = str(run_path.resolve())
    env[ENV_RUN_ID] = run_id
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = site_dir() + (os.pathsep + old if old else "")
    return env


def _write_rank_stats(run_path: Path, by_rank: dict[int, CollectorStats]) -> None:
    """Add what the job-wide collectors found per rank (dropped events, details) to its rank file.

    The ranks have exited, so the launcher is now the only writer of their files.
    """
    from perfscope.store.meta import rank_meta_path, read_json, write_rank_meta

    for rank, stats in by_rank.items():
        p = rank_meta_path(run_path, rank)
        if not p.is_file():
            continue
        meta = read_json(p)
        dropped = dict(meta.get("dropped_events") or {})
        for k, v in stats.dropped.items():
            dropped[k] = dropped.get(k, 0) + int(v)
        meta["dropped_events"] = dropped
        meta.update(stats.details)
        write_rank_meta(run_path, rank, meta)


def _sigint_reaches_child() -> bool:
    """True when Ctrl-C in the terminal already signals the child (same foreground group)."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def launch(
    command: Sequence[str],
    output: str | os.PathLike[str] | None = None,
    *,
    options: RecordOptions | None = None,
    force: bool = False,
    schedule: Schedule | None = None,
) -> LaunchResult:
    """Run ``command`` with every Python rank recorded into ``output``.

    Args:
        command: the program and its arguments, e.g. ``["torchrun", "--nproc-per-node",
            "8", "train.py"]``.
        output: the run directory (default :func:`default_output`).
        options: what to record.
        force: replace an existing run at ``output``.
        schedule: which steps every rank records (None: all); ``Schedule(on_demand=True)``
            records only the windows ``perfscope trigger`` opens.

    Returns:
        a :class:`LaunchResult`; its ``exit_code`` is the command's.

    Raises:
        UsageError: no command, or the program cannot be found.
        RunExistsError: ``output`` holds data and ``force`` is false.
    """
    from perfscope.store import create_run, update_run

    command = list(command)
    if not command:
        raise UsageError("nothing to record: give the command after `--`, e.g. perfscope record -- python train.py")
    if shutil.which(command[0]) is None:
        raise UsageError(f"cannot run {command[0]!r}: no such program (check the command after `--`)")
    options = options or RecordOptions()
    run_path = Path(output) if output is not None else default_output(command)
    world = guess_world_size(command)
    meta = create_run(
        run_path, command=command, source="record", world_size=world, environment=environment_snapshot(),
        collectors=options.collector_names(), overwrite=force,
    )
    notes: list[str] = []
    if schedule is not None:  # `perfscope trigger` reads it: only on-demand runs take requests
        meta = update_run(run_path, schedule=schedule.as_dict())
    env = child_env(run_path, meta["run_id"], options, schedule=schedule)
    job = CollectorSet(options, CollectorContext(
        run_path=run_path, rank=None, options=options.collector_options(env), note=notes.append, env=env,
    ))
    job.start(("job",))
    rc, forwarded, pid = _run(command, env, run_path)
    notes += job.stop(("job",))
    _write_rank_stats(run_path, job.by_rank)
    notes += reconcile_ranks(run_path, pid, rc)
    return _finish(run_path, meta, rc, forwarded, world, notes)


def _ended(info: dict[str, Any]) -> bool:
    """True when the rank's process is known to have ended (it ran on this host and its
    pid is gone); a rank of another host cannot be checked from here."""
    pid = info.get("pid")
    if info.get("host") != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def reconcile_ranks(run_path: Path, command_pid: int, rc: int) -> list[str]:
    """Make each rank file's status say how its process ended, once the command has.

    A rank still ``recording`` whose process has ended is marked ``incomplete`` (its
    ``stop_reason`` says it was killed before its last flush, naming the signal when the
    rank was the command itself); the command's own rank, killed by a signal (``rc`` < 0),
    is ``incomplete`` whatever it said.  The ranks have exited, so the launcher is the only
    writer of their files.

    Returns:
        one note per rank changed, e.g. ``rank 0 was killed (SIGKILL) before its last flush``.
    """
    from perfscope.store.meta import RANKS_DIR, read_json, write_rank_meta

    killed_by = signal.Signals(-rc).name if rc < 0 and -rc in signal.valid_signals() else None
    notes = []
    for path in sorted((run_path / RANKS_DIR).glob("rank-*.json")):
        try:
            info = read_json(path)
            rank = int(info["rank"])
        except Exception:  # noqa: BLE001 - a damaged rank file is the reader's to report
            continue
        is_command = info.get("pid") == command_pid and info.get("host") == socket.gethostname()
        if info.get("status") == "recording" and (is_command or _ended(info)):
            how = f"killed ({killed_by})" if is_command and killed_by else "killed (SIGKILL or out of memory)"
            reason = f"{how} before its last flush"
        elif info.get("status") == "complete" and is_command and killed_by:
            reason = f"{killed_by} ended the process after its recorder stopped"
        else:
            continue
        info.update(status="incomplete", stop_reason=reason)
        write_rank_meta(run_path, rank, info)
        notes.append(f"rank {rank} was {reason}" if reason.startswith("killed") else f"rank {rank}: {reason}")
    return notes


def _run(command: list[str], env: dict[str, str], run_path: Path) -> tuple[int, list[int], int]:
    """Start the command, forward SIGTERM/SIGINT/SIGHUP to it while it runs, and wait.

    Returns:
        (its return code, negative when a signal killed it; the signals forwarded; its pid).

    Raises:
        UsageError: the command could not start (the run is marked ``incomplete``).
    """
    from perfscope.store import update_run

    forwarded: list[int] = []
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as e:
        update_run(run_path, status="incomplete", notes=[f"the command could not start: {e}"])
        raise UsageError(f"cannot run {command[0]!r}: {e}") from None

    def forward(signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and _sigint_reaches_child():
            return  # the terminal sent it to the child too; a second one would cut its clean-up short
        forwarded.append(signum)
        try:
            child.send_signal(signum)
        except OSError:
            pass

    previous: dict[int, Any] = {}
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            previous[signum] = signal.signal(signum, forward)
        except (ValueError, OSError):
            pass  # not the main thread: the child still gets terminal signals directly
    try:
        return child.wait(), forwarded, child.pid
    finally:
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):
                pass


def _finish(
    run_path: Path, meta: dict[str, Any], rc: int, forwarded: list[int], world: int | None, notes: list[str]
) -> LaunchResult:
    """Mark the run finished: ``complete`` when the command exited by itself and every
    rank says ``complete``, else ``incomplete``."""
    from perfscope.store import load_meta, update_run

    try:
        ranks_meta = load_meta(run_path).get("ranks", [])
    except Exception:  # noqa: BLE001
        ranks_meta = []
    whole = all(r.get("status") == "complete" for r in ranks_meta)
    status = "complete" if rc >= 0 and whole else "incomplete"
    ranks = sorted(int(r.get("rank", 0)) for r in ranks_meta)
    if not ranks:
        notes.append(
            "no process of the command recorded anything: is it a Python program run with this environment's "
            "interpreter (perfscope must be importable there, and `python -I`/`-E` ignore PYTHONPATH)? "
            f"Set {ENV_DEBUG}=1 to see each process's decision"
        )
    fields: dict[str, Any] = {
        "status": status,
        "exit_code": rc,
        "finished_ns": time.time_ns(),
        "notes": list(meta.get("notes", [])) + notes,
    }
    if forwarded:
        fields["signals_forwarded"] = [signal.Signals(s).name for s in forwarded]
    if world is None and ranks_meta:
        sizes = [r.get("world_size") for r in ranks_meta if isinstance(r.get("world_size"), int)]
        fields["world_size"] = max(sizes) if sizes else len(ranks)
    update_run(run_path, **fields)
    try:
        final_status = load_meta(run_path)["status"]
    except Exception:  # noqa: BLE001
        final_status = status
    return LaunchResult(
        run_path=run_path, exit_code=rc if rc >= 0 else 128 - rc, status=final_status, ranks=ranks,
        warnings=_merge_warnings(ranks_meta), notes=notes,
    )


def _merge_warnings(ranks_meta: list[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    seen: dict[str, list[int]] = {}
    for r in ranks_meta:
        for w in r.get("warnings", []) or []:
            seen.setdefault(str(w), []).append(int(r.get("rank", 0)))
    return [(w, sorted(rs)) for w, rs in seen.items()]


__all__ = ["launch", "LaunchResult", "default_output", "guess_world_size", "child_env", "reconcile_ranks"]

