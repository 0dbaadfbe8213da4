"""The launcher behind ``perfscope record``: run a command with every rank recorded.

:func:`launch` creates the run, starts the command with perfscope's ``sitecustomize`` on
a prepended ``PYTHONPATH`` (see :mod:`perfscope.collectors.inject`), forwards SIGTERM and
SIGINT to it, waits, turns the NCCL plugin's files into the ``collectives`` table, and
marks the run ``complete`` (the command exited, whatever its exit code) or ``incomplete``
(it was killed by a signal).  It never prints; the CLI reports what it returns.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfscope.errors import UsageError
from perfscope.options import ENV_OWNER, ENV_RUN_DIR, ENV_RUN_ID, RecordOptions
from perfscope.profiler import NCCL_RAW_DIR, _optional_module


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


def _environment_snapshot() -> dict[str, Any]:
    """The doctor's facts and check results (the analyzers' rules read the checks)."""
    mod, _ = _optional_module("perfscope.doctor")
    if mod is None:
        return {}
    try:
        snap = mod.environment_for_run()
        return snap if isinstance(snap, dict) else {}
    except Exception:  # noqa: BLE001 - an environment we cannot read must not stop the job
        return {}


def child_env(run_path: Path, run_id: str, options: RecordOptions, base: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment for the recorded command (before NCCL configuration)."""
    from perfscope.collectors.inject import site_dir

    env = dict(os.environ if base is None else base)
    env.pop(ENV_OWNER, None)  # a job started from a recorded process starts fresh
    env.update(options.to_env())
    env[ENV_RUN_DIR] = str(run_path.resolve())
    env[ENV_RUN_ID] = run_id
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = site_dir() + (os.pathsep + old if old else "")
    return env


def _configure_nccl(env: dict[str, str], run_path: Path, notes: list[str]) -> None:
    mod, _ = _optional_module("perfscope.collectors.nccl")
    if mod is None or not hasattr(mod, "configure_env"):
        notes.append("the NCCL profiler plugin is not part of this build: no collectives table")
        return
    users = env.get("NCCL_PROFILER_PLUGIN")
    try:
        warnings = mod.configure_env(env, str(run_path / NCCL_RAW_DIR))
    except Exception as e:  # noqa: BLE001
        notes.append(f"the NCCL profiler plugin was not configured ({type(e).__name__}: {e})")
        return
    notes.extend(str(w) for w in warnings or [])
    if users and env.get("NCCL_PROFILER_PLUGIN") != users and not warnings:
        notes.append(f"NCCL_PROFILER_PLUGIN={users} was replaced by perfscope's plugin")


def _ingest_nccl(run_path: Path, notes: list[str]) -> None:
    """Write the plugin's files into the run and add its counters to each rank's metadata."""
    from perfscope.store.meta import rank_meta_path, read_json, write_rank_meta

    raw = run_path / NCCL_RAW_DIR
    if not raw.is_dir() or not any(raw.iterdir()):
        return
    mod, _ = _optional_module("perfscope.collectors.nccl")
    if mod is None or not hasattr(mod, "ingest_dir"):
        return
    try:
        mod.ingest_dir(str(raw), str(run_path))
    except Exception as e:  # noqa: BLE001
        notes.append(f"reading the NCCL plugin's files failed ({type(e).__name__}: {e}); they stay in {raw}")
        return
    try:
        summary = mod.summarize_dir(str(raw)) if hasattr(mod, "summarize_dir") else {}
    except Exception:  # noqa: BLE001
        return
    # The ranks have exited, so the launcher is now the only writer of their files.
    for rank, extra in summary.items():
        p = rank_meta_path(run_path, rank)
        if not p.is_file():
            continue
        meta = read_json(p)
        dropped = dict(meta.get("dropped_events") or {})
        for k, v in (extra.get("dropped_events") or {}).items():
            dropped[k] = dropped.get(k, 0) + int(v)
        meta["dropped_events"] = dropped
        if extra.get("nccl_plugin"):
            meta["nccl_plugin"] = extra["nccl_plugin"]
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
) -> LaunchResult:
    """Run ``command`` with every Python rank recorded into ``output``.

    Args:
        command: the program and its arguments, e.g. ``["torchrun", "--nproc-per-node",
            "8", "train.py"]``.
        output: the run directory (default :func:`default_output`).
        options: what to record.
        force: replace an existing run at ``output``.

    Returns:
        a :class:`LaunchResult`; its ``exit_code`` is the command's.

    Raises:
        UsageError: no command, or the program cannot be found.
        RunExistsError: ``output`` holds data and ``force`` is false.
    """
    from perfscope.store import create_run, load_meta, update_run

    command = list(command)
    if not command:
        raise UsageError("nothing to record: give the command after `--`, e.g. perfscope record -- python train.py")
    if shutil.which(command[0]) is None:
        raise UsageError(f"cannot run {command[0]!r}: no such program (check the command after `--`)")
    options = options or RecordOptions()
    run_path = Path(output) if output is not None else default_output(command)
    world = guess_world_size(command)
    meta = create_run(
        run_path, command=command, source="record", world_size=world, environment=_environment_snapshot(),
        collectors=options.collector_names(), overwrite=force,
    )
    notes: list[str] = []
    env = child_env(run_path, meta["run_id"], options)
    if options.nccl:
        _configure_nccl(env, run_path, notes)

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
        rc = child.wait()
    finally:
        for signum, handler in previous.items():
            try:
                signal.signal(signum, handler)
            except (ValueError, OSError):
                pass

    if options.nccl:
        _ingest_nccl(run_path, notes)
    status = "complete" if rc >= 0 else "incomplete"
    exit_code = rc if rc >= 0 else 128 - rc
    try:
        merged = load_meta(run_path)
        ranks_meta = merged.get("ranks", [])
    except Exception:  # noqa: BLE001
        ranks_meta = []
    ranks = sorted(int(r.get("rank", 0)) for r in ranks_meta)
    if not ranks:
        notes.append(
            "no process of the command recorded anything: is it a Python program run with this environment's "
            "interpreter (perfscope must be importable there, and `python -I`/`-E` ignore PYTHONPATH)? "
            "Set PERFSCOPE_DEBUG=1 to see each process's decision"
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
        run_path=run_path, exit_code=exit_code, status=final_status, ranks=ranks,
        warnings=_merge_warnings(ranks_meta), notes=notes,
    )


def _merge_warnings(ranks_meta: list[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    seen: dict[str, list[int]] = {}
    for r in ranks_meta:
        for w in r.get("warnings", []) or []:
            seen.setdefault(str(w), []).append(int(r.get("rank", 0)))
    return [(w, sorted(rs)) for w, rs in seen.items()]


__all__ = ["launch", "LaunchResult", "default_output", "guess_world_size", "child_env"]

