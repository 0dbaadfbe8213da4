"""The one error hierarchy of perfscope.

Library code raises these; only the CLI (``perfscope.cli.main``) turns them into a one-line
message and an exit code.  Every message should say what to do next.
"""
from __future__ import annotations


class PerfscopeError(Exception):
    """Base class of every error perfscope raises on purpose.

    Attributes:
        exit_code: the process exit status the CLI uses for this error.
    """

    exit_code: int = 2


class UsageError(PerfscopeError):
    """The caller asked for something that cannot be done (bad option, bad argument)."""


class InputError(PerfscopeError):
    """An input file is missing, unreadable or malformed (JSON, Parquet, ...)."""


class UnrecognisedTraceError(InputError):
    """A trace that holds events of which the importer recognised none (the message names
    the categories it saw)."""


class NotARunError(InputError):
    """A path is not a perfscope run directory (no ``run.json``)."""


class CorruptRunError(InputError):
    """A run directory exists but part of it cannot be read (truncated part file, bad JSON)."""


class RunIntegrityError(CorruptRunError):
    """A run's part files do not match its manifest or their table: a listed part is
    missing, a part belongs to another table or rank, or it changed since it was written."""


class SchemaVersionError(InputError):
    """A run was written by a newer perfscope whose schema this version cannot read."""


class RunExistsError(PerfscopeError):
    """An output already exists and ``--force``/``overwrite`` was not given."""


class CollectorError(PerfscopeError):
    """A collector could not start or stop (CUPTI, NCCL plugin, NVML, host hooks)."""

    exit_code = 3


class CuptiUnavailableError(CollectorError):
    """CUPTI cannot be used in this process (no GPU, no libcupti, or another subscriber)."""


class AlreadyProfilingError(CollectorError):
    """``perfscope.profile`` was started twice in one process."""


__all__ = [
    "PerfscopeError",
    "UsageError",
    "InputError",
    "UnrecognisedTraceError",
    "NotARunError",
    "CorruptRunError",
    "RunIntegrityError",
    "SchemaVersionError",
    "RunExistsError",
    "CollectorError",
    "CuptiUnavailableError",
    "AlreadyProfilingError",
]
