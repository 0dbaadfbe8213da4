"""Which process of a job records: a pure-stdlib module (no perfscope imports).

The injected ``sitecustomize`` loads this file by path, before importing perfscope, so
that the many helper processes of a job (DataLoader spawn workers, compile workers, the
launcher agent) decide "not me" without paying for importing perfscope, pandas and
pyarrow.  The file name is unusual on purpose: its folder is on the job's PYTHONPATH, so
it must not shadow any module of the user's.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

# The start-up twin of perfscope.options: it reads the variables the hook needs before
# perfscope can be imported.  Kept in step with perfscope.options (a unit test checks it).
ENV_RUN_DIR = "PERFSCOPE_RUN_DIR"
ENV_OWNER = "PERFSCOPE_OWNER"
ENV_DEBUG = "PERFSCOPE_DEBUG"
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")

AGENT_PROGRAMS = ("torchrun", "accelerate", "deepspeed")
AGENT_MODULES = (
    "torch.distributed.run", "torch.distributed.launch", "torch.distributed.elastic",
    "accelerate.commands.launch", "accelerate.commands.accelerate_cli", "deepspeed.launcher",
)


def _program(argv: Sequence[str]) -> tuple[str | None, str | None, str | None]:
    """Return (script path, ``-m`` module, ``-c`` code) of an interpreter command line."""
    args = list(argv[1:])
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--check-hash-based-pycs":
            i += 2
            continue
        if a.startswith("--") or a == "-":
            if a == "-":
                return a, None, None
            i += 1
            continue
        if a.startswith("-"):
            # A cluster of short options, e.g. ``-u``, ``-um mod``, ``-Werror``, ``-X dev``.
            for j in range(1, len(a)):
                ch, rest = a[j], a[j + 1:]
                if ch in "mc":
                    value = rest or (args[i + 1] if i + 1 < len(args) else None)
                    if value is None:
                        return None, None, None
                    return (None, value, None) if ch == "m" else (None, None, value)
                if ch in "WX":
                    if not rest:
                        i += 1  # its value is the next argument
                    break
            i += 1
            continue
        return a, None, None
    return None, None, None


def decide(env: Mapping[str, str], argv: Sequence[str], pid: int) -> tuple[bool, int, str]:
    """Decide whether the process with ``env`` and interpreter ``argv`` records.

    Args:
        env: the process environment.
        argv: the interpreter's full command line (``sys.orig_argv``).
        pid: the process id (for messages).

    Returns:
        (records, rank, why) where ``why`` explains the decision in a few words.
    """
    if not env.get(ENV_RUN_DIR):
        return False, 0, "PERFSCOPE_RUN_DIR is not set"
    script, module, code = _program(argv)
    if "--multiprocessing-fork" in argv or (code is not None and "from multiprocessing" in code):
        return False, 0, "multiprocessing helper process"
    if module is not None and any(module == m or module.startswith(m + ".") for m in AGENT_MODULES):
        return False, 0, f"launcher agent (python -m {module})"
    if script is not None and os.path.basename(script) in AGENT_PROGRAMS:
        return False, 0, f"launcher agent ({os.path.basename(script)})"
    rank = env_rank(env)
    owner = env.get(ENV_OWNER, "")
    owner_rank = owner.split(":", 1)[0] if owner else None
    if rank is None:
        if owner:
            return False, 0, f"child of the recording process {owner}"
        return True, 0, "top process of the job (no RANK): rank 0"
    if owner_rank == str(rank):
        return False, rank, f"helper process of rank {rank} ({owner})"
    return True, rank, f"rank {rank} from the launcher's environment"


def recording_requested(env: Mapping[str, str]) -> bool:
    """True when ``perfscope record`` started this job (its run directory is set)."""
    return bool(env.get(ENV_RUN_DIR))


def debugging(env: Mapping[str, str]) -> bool:
    """True when each process should say on stderr why it records or not."""
    return bool(env.get(ENV_DEBUG))


def env_rank(env: Mapping[str, str]) -> int | None:
    """The rank a launcher gave the process: RANK, else Open MPI's, PMI's or Slurm's (None: none)."""
    for name in RANK_VARS:
        value = _int(env.get(name))
        if value is not None:
            return value
    return None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


__all__ = ["decide", "env_rank", "recording_requested", "debugging", "AGENT_PROGRAMS", "AGENT_MODULES", "RANK_VARS"]
