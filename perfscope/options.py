"""Recording options, and the one place that reads and writes ``PERFSCOPE_*`` variables.

``perfscope record`` turns its flags into a :class:`RecordOptions`, hands it to every
process of the job through the environment (:meth:`RecordOptions.to_env`), and the injected
``sitecustomize`` reads it back (:meth:`RecordOptions.from_env`).  ``perfscope.profile``
takes the same fields as keyword arguments, so the three ways of recording stay in step.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TypedDict

from perfscope._steps import Schedule
from perfscope.collectors.base import CollectorOptions

# Set by `perfscope record` for the job; their presence is what turns the injector on.
ENV_RUN_DIR = "PERFSCOPE_RUN_DIR"
ENV_RUN_ID = "PERFSCOPE_RUN_ID"
# "<rank or ->:<pid>" of the process that records; helper processes it starts inherit it
# and so know they must not record (see perfscope.recorder.inject).
ENV_OWNER = "PERFSCOPE_OWNER"
ENV_CUPTI = "PERFSCOPE_CUPTI"
ENV_NCCL = "PERFSCOPE_NCCL"
ENV_NVML = "PERFSCOPE_NVML"
ENV_HOST_HOOKS = "PERFSCOPE_HOST_HOOKS"
ENV_FLUSH_INTERVAL = "PERFSCOPE_FLUSH_INTERVAL_S"
# Set to 1 to see why the injector did or did not record in a process (printed to stderr).
ENV_DEBUG = "PERFSCOPE_DEBUG"
# `record --schedule` / `--on-demand`: the Schedule's fields as JSON (Schedule.as_dict()).
ENV_SCHEDULE = "PERFSCOPE_SCHEDULE"

_BOOL_ENV = {"cupti": ENV_CUPTI, "nccl": ENV_NCCL, "nvml": ENV_NVML, "host_hooks": ENV_HOST_HOOKS}


@dataclass(frozen=True)
class RecordOptions:
    """What to record.

    Attributes:
        cupti: capture GPU activity (kernels, copies, memsets, syncs, NVTX) through CUPTI.
        nccl: load perfscope's NCCL profiler plugin (collectives table).
        nvml: sample GPU utilisation, clocks and power (metrics table).
        host_hooks: time DataLoader waits, torch.distributed calls, optimizer steps and
            torch.cuda.synchronize (host table, automatic steps).
        flush_interval_s: longest time recorded data stays in memory; a process killed with
            SIGKILL loses at most this much.
    """

    cupti: bool = True
    nccl: bool = True
    nvml: bool = True
    host_hooks: bool = True
    flush_interval_s: float = 2.0

    def __post_init__(self) -> None:
        from perfscope.errors import UsageError

        if not (self.flush_interval_s > 0):
            raise UsageError(f"flush interval must be a positive number of seconds, not {self.flush_interval_s!r}")

    def collector_names(self) -> list[str]:
        """Names of the collectors these options ask for (``host`` for the host hooks)."""
        return [("host" if f.name == "host_hooks" else f.name) for f in fields(self) if f.name in _BOOL_ENV and getattr(self, f.name)]

    def enabled(self, key: str) -> bool:
        """True when the boolean option ``key`` (a collector registry line's ``option``) is on.

        Raises:
            UsageError: ``key`` names no boolean option (a registry line with a wrong option).
        """
        from perfscope.errors import UsageError

        if key not in _BOOL_ENV:
            raise UsageError(f"no record option {key!r} turns a collector on; add it to RecordOptions first")
        return bool(getattr(self, key))

    def collector_options(self, env: Mapping[str, str] | None = None) -> CollectorOptions:
        """Return what the collectors read: these options plus the collector variables in ``env``
        (default ``os.environ``; see :func:`collector_settings`)."""
        return CollectorOptions(flush_interval_s=self.flush_interval_s, **collector_settings(env))

    def to_env(self) -> dict[str, str]:
        """Return the ``PERFSCOPE_*`` variables that carry these options to a child process."""
        env = {var: "1" if getattr(self, name) else "0" for name, var in _BOOL_ENV.items()}
        env[ENV_FLUSH_INTERVAL] = repr(float(self.flush_interval_s))
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RecordOptions:
        """Read options back from ``env`` (default ``os.environ``); absent ones keep defaults."""
        env = os.environ if env is None else env
        kw: dict[str, object] = {}
        for name, var in _BOOL_ENV.items():
            if var in env:
                kw[name] = env[var].strip().lower() not in ("0", "false", "no", "off", "")
        if ENV_FLUSH_INTERVAL in env:
            try:
                kw["flush_interval_s"] = float(env[ENV_FLUSH_INTERVAL])
            except ValueError:
                pass  # a mangled value falls back to the default rather than breaking the job
        return cls(**kw)  # type: ignore[arg-type]


def env_run_dir(env: Mapping[str, str] | None = None) -> str | None:
    """Return the run directory ``perfscope record`` gave this job (None: not recording)."""
    env = os.environ if env is None else env
    return env.get(ENV_RUN_DIR) or None


def env_run_id(env: Mapping[str, str] | None = None) -> str | None:
    """Return the run id ``perfscope record`` created the run with, or None."""
    env = os.environ if env is None else env
    return env.get(ENV_RUN_ID) or None


def schedule_env(schedule: Schedule | None) -> dict[str, str]:
    """Return the variable that carries ``schedule`` to the job's processes (none for None)."""
    return {} if schedule is None else {ENV_SCHEDULE: json.dumps(schedule.as_dict())}


def env_schedule(env: Mapping[str, str] | None = None) -> Schedule | None:
    """Return the schedule ``perfscope record`` gave this job, or None (record every step).

    Raises:
        UsageError: the variable holds no schedule (set by hand, wrongly).
    """
    from perfscope.errors import UsageError

    env = os.environ if env is None else env
    text = env.get(ENV_SCHEDULE)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = text  # the text form (wait=...,active=...) works too
    if not isinstance(value, (dict, str)):
        raise UsageError(f"{ENV_SCHEDULE}={text!r} is not a schedule; unset it or give wait=W,warmup=U,active=A,repeat=R")
    return Schedule.coerce(value)


def env_debug(env: Mapping[str, str] | None = None) -> bool:
    """True when ``PERFSCOPE_DEBUG`` asks each process to say why it records or not."""
    env = os.environ if env is None else env
    return bool(env.get(ENV_DEBUG))


# -- collector settings: expert variables a collector honours, read here and passed in
# through CollectorOptions (collectors never read PERFSCOPE_* themselves).
# Where CUPTI's API records come from: "callback" (default) or "activity".
ENV_CUPTI_API = "PERFSCOPE_CUPTI_API"
# A native CUPTI sink library to load instead of the built one (development).
ENV_CUPTI_SINK = "PERFSCOPE_CUPTI_SINK"
# Where CUPTI records are decoded: "process" (default: out of the training process) or
# "inprocess" (the training process decodes at each flush; the benchmark's A/B switch).
ENV_CUPTI_DECODE = "PERFSCOPE_CUPTI_DECODE"
# Finalize CUPTI between a schedule's windows and at stop (CUPTI disabled but attached still
# costs most of what it costs recording); on unless set to "0" (the escape hatch should a
# driver misbehave when CUPTI attaches again).
ENV_CUPTI_DETACH = "PERFSCOPE_CUPTI_DETACH"
# When to arm CUPTI's Unified Memory counters: "auto" (default: at the job's first managed
# allocation), "always" (at the first CUDA context: a managed allocation made before the
# recording or between a schedule's windows is then not missed), "off".
ENV_CUPTI_UVM = "PERFSCOPE_CUPTI_UVM"


class CollectorSettings(TypedDict):
    """The :class:`~perfscope.collectors.base.CollectorOptions` keywords read from variables."""

    cupti_api_source: str | None
    cupti_sink_library: str | None
    cupti_decode: str | None
    cupti_detach: bool
    cupti_uvm: str | None


def collector_settings(env: Mapping[str, str] | None = None) -> CollectorSettings:
    """Return the collector variables set in ``env`` (default ``os.environ``), as
    :class:`perfscope.collectors.base.CollectorOptions` keywords (None: not set)."""
    env = os.environ if env is None else env
    return {
        "cupti_api_source": env.get(ENV_CUPTI_API) or None,
        "cupti_sink_library": env.get(ENV_CUPTI_SINK) or None,
        "cupti_decode": env.get(ENV_CUPTI_DECODE) or None,
        "cupti_detach": env.get(ENV_CUPTI_DETACH, "1").strip().lower() not in ("0", "false", "no", "off"),
        "cupti_uvm": env.get(ENV_CUPTI_UVM, "").strip().lower() or None,
    }


# Where launchers put a process's rank, in order of preference: torchrun (and most Python
# launchers), Open MPI, MPICH/PMI, Slurm's srun.  Kept in step with
# perfscope/recorder/inject/_perfscope_decide.py, which cannot import this module.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def _first(env: Mapping[str, str] | None, names: tuple[str, ...]) -> int | None:
    env = os.environ if env is None else env
    for name in names:
        value = _int(env.get(name))
        if value is not None:
            return value
    return None


def env_rank(env: Mapping[str, str] | None = None) -> int | None:
    """Return the global rank a launcher gave this process (``RANK``, else MPI/Slurm's), or None."""
    return _first(env, RANK_VARS)


def env_local_rank(env: Mapping[str, str] | None = None) -> int | None:
    """Return the process's rank on its node (``LOCAL_RANK``, else MPI/Slurm's), or None."""
    return _first(env, LOCAL_RANK_VARS)


def env_world_size(env: Mapping[str, str] | None = None) -> int | None:
    """Return the job's process count (``WORLD_SIZE``, else MPI/Slurm's), or None."""
    return _first(env, WORLD_SIZE_VARS)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


__all__ = [
    "RecordOptions", "env_rank", "env_local_rank", "env_world_size", "RANK_VARS", "LOCAL_RANK_VARS", "WORLD_SIZE_VARS",
    "ENV_RUN_DIR", "ENV_RUN_ID", "ENV_OWNER", "ENV_CUPTI", "ENV_NCCL", "ENV_NVML",
    "ENV_HOST_HOOKS", "ENV_FLUSH_INTERVAL", "ENV_DEBUG", "ENV_CUPTI_API", "ENV_CUPTI_SINK", "ENV_CUPTI_DECODE",
    "collector_settings", "env_run_dir", "env_run_id", "env_debug", "ENV_SCHEDULE", "schedule_env", "env_schedule",
]


# -- The Kineto importer's switches (perfscope.store.kineto) -------------------------------
# Each is on unless set to "0": tests and benchmarks turn parts off to compare the routes.
ENV_KINETO_FILTER = "PERFSCOPE_KINETO_FILTER"
ENV_KINETO_STREAM = "PERFSCOPE_KINETO_STREAM"
ENV_KINETO_NATIVE = "PERFSCOPE_KINETO_NATIVE"
# The filter library to load instead of the one built beside the importer.
ENV_KINETO_FILTER_LIB = "PERFSCOPE_KINETO_FILTER_LIB"


def _switched_on(var: str) -> bool:
    return os.environ.get(var, "1") != "0"


def kineto_filter_enabled() -> bool:
    """False when ``PERFSCOPE_KINETO_FILTER=0``: the importer then decodes whole traces."""
    return _switched_on(ENV_KINETO_FILTER)


def kineto_stream_enabled() -> bool:
    """False when ``PERFSCOPE_KINETO_STREAM=0``: gzip traces are inflated whole before filtering."""
    return _switched_on(ENV_KINETO_STREAM)


def kineto_native_enabled() -> bool:
    """False when ``PERFSCOPE_KINETO_NATIVE=0``: filtered texts are decoded with msgspec."""
    return _switched_on(ENV_KINETO_NATIVE)


def kineto_filter_library() -> str | None:
    """The path in ``PERFSCOPE_KINETO_FILTER_LIB``, or None when it is unset or empty."""
    return os.environ.get(ENV_KINETO_FILTER_LIB) or None
