"""Creating or joining the run directory a recording process writes into."""
from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfscope.errors import RunExistsError


def environment_snapshot(note: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Return the doctor's facts *and* check results for ``run.json`` (the analyzers' rules
    read the checks); ``{}`` when the machine cannot be described (``note`` says why)."""
    try:
        from perfscope.doctor import environment_for_run

        snap = environment_for_run()
        return snap if isinstance(snap, dict) else {}
    except Exception as e:  # noqa: BLE001 - an environment we cannot read must not stop the job
        if note is not None:
            note(f"environment snapshot failed ({type(e).__name__}: {e})")
        return {}


def join_or_create_run(
    path: Path,
    *,
    rank: int,
    world_size: int,
    run_id: str | None,
    source: str,
    injected: bool,
    overwrite: bool,
    collectors: list[str],
    note: Callable[[str], None],
) -> tuple[str | None, bool]:
    """Make sure ``path`` holds the run this process records into.

    Under ``perfscope record`` (``injected``) the launcher created ``run.json``: join it (or
    create it when run by hand).  In-process, rank 0 creates the run and the other ranks
    wait for it; every rank derives the same run id from what the launcher gives all.

    Returns:
        (the run id, True when this process created the run and so finishes ``run.json``).

    Raises:
        RunExistsError: the directory holds another run and ``overwrite`` is false, or
            rank 0 never created the run.
    """
    from perfscope.store import create_run

    if injected:
        create_run(path, source="record", run_id=run_id, world_size=world_size, command=list(sys.orig_argv))
        return run_id, False
    world = world_size or 1
    if world > 1 and run_id is None:
        run_id = job_run_id(path)
    if world > 1 and rank != 0:
        wait_for_run(path, run_id, rank)
        return run_id, False
    if run_id is not None:
        _replace_same_id_run(path, run_id, overwrite)
    try:
        meta = create_run(
            path, command=list(sys.orig_argv), source=source, world_size=world, run_id=run_id,
            environment=environment_snapshot(note), collectors=collectors, overwrite=overwrite,
        )
    except RunExistsError:
        # The store's message names the CLI's --force; in Python the argument is overwrite.
        raise RunExistsError(f"{path} already holds a run or other files; choose another path or pass "
                             "overwrite=True to replace it") from None
    return meta["run_id"], True


def job_run_id(path: str | os.PathLike[str]) -> str:
    """The run id every rank of this job derives alike.

    From what the launcher gives all ranks and nothing else: the rendezvous id (a fresh
    uuid with --standalone, the job's --rdzv-id across nodes), else Slurm's or MPI's job
    id, else the parent's pid (one node), plus the job's address and the path.
    """
    rdzv = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if rdzv not in ("", "none"):
        job = rdzv
    else:
        # srun and mpirun start the ranks of each node from a different parent, so the
        # parent's pid names the job only on one node: prefer the launcher's job id.
        ids = [os.environ.get(v, "") for v in ("SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")]
        job = "job-" + "/".join(ids) if any(ids) else f"agent-{os.getppid()}"
    key = "|".join([
        job, os.environ.get("SLURM_JOB_ID", ""), os.environ.get("MASTER_ADDR", ""),
        os.environ.get("MASTER_PORT", ""), str(Path(path).resolve()),
    ])
    return hashlib.sha1(key.encode()).hexdigest()[:32]


def _replace_same_id_run(path: Path, run_id: str, overwrite: bool) -> None:
    """Rank 0 alone creates the run: a run.json with our id is left from an earlier job
    that reused the rendezvous id, never one to join."""
    from perfscope.store.meta import RUN_JSON, read_json

    p = Path(path) / RUN_JSON
    if not p.is_file() or read_json(p).get("run_id") != run_id:
        return
    if not overwrite:
        raise RunExistsError(f"{path} already holds a run; choose another path or pass overwrite=True to replace it")
    p.unlink()  # create_run(overwrite=True) then clears the rest


def wait_for_run(path: Path, run_id: str | None, rank: int, timeout_s: float = 120.0) -> None:
    """Rank > 0 of an in-process multi-rank job: wait until rank 0 has created the run.

    Raises:
        RunExistsError: no run with ``run_id`` appeared within ``timeout_s``.
    """
    from perfscope.store.meta import RUN_JSON, read_json

    deadline = time.monotonic() + timeout_s
    p = Path(path) / RUN_JSON
    while time.monotonic() < deadline:
        if p.is_file():
            try:
                if read_json(p).get("run_id") == run_id:
                    return
            except Exception:  # noqa: BLE001 - being written; try again
                pass
        time.sleep(0.05)
    raise RunExistsError(
        f"rank {rank} waited {timeout_s:.0f} s for rank 0 to create the run {path}; make sure every rank "
        "calls perfscope.profile() with the same path (rank 0 too), or pass overwrite=True if an old run is there"
    )


__all__ = ["join_or_create_run", "job_run_id", "wait_for_run", "environment_snapshot"]
