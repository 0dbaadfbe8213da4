"""Which trace files a path names, where their run goes, and whether an earlier import of
them can be reused: what :func:`perfscope.analyze` decides before it imports anything.

A source is a run directory (nothing to import), one Kineto trace file, several of them
(one per rank), or a folder of traces as ``torch.profiler.tensorboard_trace_handler``
writes it (``*.pt.trace.json`` or ``.json.gz``, directly inside or one run's folder below,
e.g. ``plugins/profile/<run>/``).  The run goes beside the traces unless told where
(:func:`default_run_dir`).  A run imported earlier is reused when ``run.json`` lists the
same files (absolute path), unchanged (same size and modification time, as the importer
recorded them in ``sources``); ``force`` imports again.
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfscope.errors import (
    InputError,
    NotARunError,
    PerfscopeError,
    RunExistsError,
    UsageError,
)

PathLike = str | os.PathLike[str]
TRACE_SUFFIXES = (".json", ".json.gz")
# What tensorboard_trace_handler names its files: {worker}.{time_ms}.pt.trace.json[.gz].
FOLDER_PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz")
_NAME_SUFFIXES = (".gz", ".json", ".pt.trace")
# A trailing rank number (and the word before it) is not part of a run's name.
_RANK_TAIL = re.compile(r"[-_. ]*(rank)?[-_. ]*\d*$", re.IGNORECASE)


@dataclass(frozen=True)
class TraceImport:
    """The traces of a source, the run they go to, and whether that run is reused.

    Attributes:
        files: the trace files, in the order given (a folder's sorted by name).
        out: the run directory.
        reuse: ``out`` holds a complete run imported from exactly these unchanged files.
    """

    files: tuple[Path, ...]
    out: Path
    reuse: bool

    def describe(self) -> str:
        """The traces in a few words: the file, or ``N traces in FOLDER``."""
        if len(self.files) == 1:
            return str(self.files[0])
        folders = {f.parent for f in self.files}
        where = f" in {folders.pop()}" if len(folders) == 1 else ""
        return f"{len(self.files)} traces{where}"


def plan_trace_import(source: PathLike | Sequence[PathLike], run_out: PathLike | None = None, *,
                      force: bool = False) -> TraceImport | None:
    """What ``source`` holds to import, or None when it is a run (or nothing this module
    recognises, which opening it as a run then reports).

    Raises:
        InputError: a trace file that does not exist.
        NotARunError: a folder with neither ``run.json`` nor traces.
        UsageError: a folder with the traces of several runs; a folder among several paths.
        RunExistsError: ``out`` holds a run of other or changed files and ``force`` is false.
    """
    files = _trace_files(source)
    if files is None:
        return None
    folder = source if isinstance(source, (str, os.PathLike)) and os.path.isdir(source) else None
    if run_out is not None:
        out = Path(run_out)
    else:
        out = default_run_dir(files[0] if len(files) == 1 and folder is None else files, folder=folder)
    return TraceImport(tuple(files), out, reuse=not force and _reusable(out, files))


def default_run_dir(trace: PathLike | Sequence[PathLike], *, folder: PathLike | None = None) -> Path:
    """The run directory traces are imported into without ``run_out``: beside them, named
    after them.  One file: ``t.json.gz`` -> ``t.perfscope``; a folder of traces:
    ``logs/`` -> ``logs.perfscope`` (pass it as ``folder``); several files: their common
    name without a rank number, in the first one's folder (``ddp_rank0.json.gz``,
    ``ddp_rank1.json.gz`` -> ``ddp.perfscope``; ``traces.perfscope`` when they share no
    name)."""
    if folder is not None:
        p = Path(folder)
        p = p.resolve() if p.name in ("", ".", "..") else p
        return p.with_name(p.name + ".perfscope")
    if isinstance(trace, (str, os.PathLike)):
        p = Path(trace)
        return p.with_name(_stem(p.name) + ".perfscope")
    paths = [Path(t) for t in trace]
    common = _RANK_TAIL.sub("", os.path.commonprefix([_stem(p.name) for p in paths]))
    return paths[0].with_name((common or "traces") + ".perfscope")


def _stem(name: str) -> str:
    for suffix in _NAME_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def _trace_files(source: PathLike | Sequence[PathLike]) -> list[Path] | None:
    """The trace files ``source`` names (see :func:`plan_trace_import`), None for a run."""
    if not isinstance(source, (str, os.PathLike)):
        paths = [Path(s) for s in source]
        if len(paths) == 1:
            return _trace_files(paths[0])
        for p in paths:
            if p.is_dir():
                raise UsageError(f"{p} is a folder: give one run or folder of traces, or several trace files (one "
                                 "per rank); to compare two runs use `perfscope compare`")
            if not p.is_file():
                raise InputError(f"no such trace file: {p}")
        return paths
    p = Path(source)
    if p.is_file():  # a run is a directory: a file is a trace to import
        return [p]
    if p.is_dir():
        return None if (p / "run.json").exists() else _traces_in(p)
    if str(p).lower().endswith(TRACE_SUFFIXES):
        raise InputError(f"no such trace file: {p}")
    return None


def _traces_in(folder: Path) -> list[Path]:
    """The PyTorch profiler traces of one run in ``folder``: those directly inside, else
    those of the one subfolder (at any depth) that holds some.

    Raises:
        NotARunError: no traces.
        UsageError: traces in several subfolders (several runs).
    """
    found = sorted(f for pattern in FOLDER_PATTERNS for f in folder.glob(pattern) if f.is_file())
    if found:
        return found
    deeper = sorted(f for pattern in FOLDER_PATTERNS for f in folder.rglob(pattern) if f.is_file())
    runs = sorted({f.parent for f in deeper})
    if not runs:
        raise NotARunError(f"{folder} is not a perfscope run (no run.json) and holds no PyTorch profiler traces "
                           f"({' or '.join(FOLDER_PATTERNS)}); give a run, trace files, or the folder that "
                           "torch.profiler.tensorboard_trace_handler wrote")
    if len(runs) > 1:
        shown = ", ".join(str(r.relative_to(folder)) for r in runs[:5]) + (", ..." if len(runs) > 5 else "")
        raise UsageError(f"{folder} holds the traces of {len(runs)} runs ({shown}); analyse one of them, "
                         f"e.g. perfscope analyze {runs[0]}")
    return [f for f in deeper if f.parent == runs[0]]


def _reusable(out: Path, files: list[Path]) -> bool:
    """True when ``out`` holds a complete run imported from ``files`` as they are now;
    False when there is nothing at ``out`` (or an empty folder) to reuse or replace.

    Raises:
        RunExistsError: ``out`` holds anything else (a run of other or changed files, a run
            that recorded no sources, an incomplete run, other files).
    """
    if not out.is_dir() or not any(out.iterdir()):
        return False
    from perfscope.store import open_run
    from perfscope.store.meta import source_identity

    why = "files that are not a run"
    if (out / "run.json").exists():
        try:
            run = open_run(out)
        except PerfscopeError:
            run, why = None, "a run that cannot be read"
        if run is not None:
            recorded: Any = run.meta.get("sources")
            if run.status != "complete":
                why = f"an {run.status} run"
            elif not isinstance(recorded, list):
                why = "a run that does not list the files it was imported from"
            elif _same_files(recorded, [source_identity(f) for f in files]):
                return True
            else:
                why = "a run imported from other or changed files (path, size or modification time differ)"
    raise RunExistsError(f"{out} already holds {why}; pass --force (force=True) to import the traces again "
                         "and replace it, or choose another --run-out DIR (run_out)")


def _same_files(recorded: list[Any], now: list[dict[str, Any]]) -> bool:
    def key(d: Any) -> tuple[Any, ...]:
        return (d.get("path"), d.get("size"), d.get("mtime_ns")) if isinstance(d, dict) else (None,)

    return sorted(map(key, recorded), key=str) == sorted(map(key, now), key=str)


__all__ = ["FOLDER_PATTERNS", "TRACE_SUFFIXES", "TraceImport", "default_run_dir", "plan_trace_import"]
