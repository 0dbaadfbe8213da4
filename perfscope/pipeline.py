"""The one analysis entry, :func:`analyze`, and :func:`import_and_analyze` behind it for traces.

Here rather than in the analyzers, which are pure (no file writing), or in the store, which
never imports the analyzers: this module only strings the two together.  A Kineto trace is
imported while it is analysed: the import keeps its tables in memory and writes the run on
a background thread (Parquet encoding releases the GIL) while the analysis reads those
tables, so the write costs next to no wall time; the result equals
``analyze_run(open_run(out))`` after ``import_kineto(files, out)``.  Which files a source
names, where their run goes and when an earlier import is reused is decided in
:mod:`perfscope.trace_sources`.

What an import had to guess (a rank, skipped events) is reported as a
:class:`TraceImportWarning` through :mod:`warnings` (library code never prints); the CLI
shows them on stderr.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from perfscope.analyzers import AnalysisConfig, analyze_run
from perfscope.analyzers.analysis import Progress
from perfscope.analyzers.result import Analysis
from perfscope.analyzers.sources import RunLike
from perfscope.errors import UsageError
from perfscope.store import open_run
from perfscope.trace_sources import TRACE_SUFFIXES, default_run_dir, plan_trace_import

if TYPE_CHECKING:
    from perfscope.store.kineto import ImportResult

PathLike = str | os.PathLike[str]


class TraceImportWarning(UserWarning):
    """Something the import of a trace had to guess or skip (the run was still written)."""


def analyze(source: PathLike | Sequence[PathLike] | RunLike, config: AnalysisConfig | None = None, *,
            progress: Progress | None = None, run_out: PathLike | None = None, force: bool = False,
            workers: int | None = None, scheduler: str | None = None, max_inflate: int | None = None) -> Analysis:
    """Analyse a run: open it if it is a path, import it first if it is made of Kineto traces.

    Args:
        source: a run directory, an open run (:func:`perfscope.open_run`), or Kineto traces
            (``.json``/``.json.gz``): one file, several (one per rank), or a folder of them
            as ``torch.profiler.tensorboard_trace_handler`` writes it (see
            :mod:`perfscope.trace_sources`).  Traces are imported into a run at ``run_out``
            and analysed in one go (:func:`import_and_analyze`); when that run was imported
            earlier from the same unchanged files it is reused instead.
        config: the analysis options (defaults: :class:`~perfscope.analyzers.AnalysisConfig`).
        progress: called with a short message before each stage.
        run_out: for traces, the run directory (default
            :func:`~perfscope.trace_sources.default_run_dir`).
        force: for traces, import again and replace the run at ``run_out``.
        workers: run the per-rank passes on a local Dask cluster of this many worker
            processes (:mod:`perfscope.distributed`); a run directory (or a reused import) only.
        scheduler: run them on the Dask cluster whose scheduler is at this address
            (``tcp://HOST:8786``); the workers must see the run at the same path.
        max_inflate: for gzip traces, the most bytes one may inflate to (see
            :func:`~perfscope.store.kineto.import_kineto`).

    Returns:
        the :class:`~perfscope.analyzers.result.Analysis` (see its docstring for every table).

    Raises:
        UsageError: ``run_out``/``force`` given for a run, no ``run_out`` and the traces'
            folder is not writable, ``workers``/``scheduler`` for traces still to import
            or with Dask not installed, an invalid option, or a rank the run does not have.
        InputError: a trace file that does not exist.
        RunExistsError: ``run_out`` holds a run of other or changed files (and no ``force``).
        PerfscopeError: whatever opening, importing (:func:`import_kineto`) or analysing
            (:func:`~perfscope.analyzers.analyze_run`) raises.
    """
    distributed = workers is not None or scheduler is not None
    if not isinstance(source, (str, os.PathLike, list, tuple)):  # an open run (a RunLike)
        _refuse_run_options(source, run_out, force)
        run = cast("RunLike", source)
        return _analyze_on_dask(run, config, progress, workers, scheduler) if distributed else \
            analyze_run(run, config, progress=progress)
    plan = plan_trace_import(source, run_out, force=force)
    if plan is None or plan.reuse:
        if plan is None:
            _refuse_run_options(source, run_out, force)
        path = os.fspath(source) if plan is None else plan.out  # type: ignore[arg-type]
        return _analyze_on_dask(path, config, progress, workers, scheduler) if distributed else \
            analyze_run(open_run(path), config, progress=progress)
    if distributed:  # the workers open the run by its path, and these traces have none yet
        raise UsageError("--workers/--scheduler analyse a run directory, and these traces are still to import: "
                         "import traces first (`perfscope import kineto FILES -o DIR`, or `perfscope analyze` them "
                         "once without --workers/--scheduler), then analyse the run")
    if run_out is None and not os.access(plan.out.parent, os.W_OK):
        raise UsageError(f"cannot write the run beside the traces ({plan.out.parent} is not writable); "
                         "choose where with run_out (--run-out DIR)")
    result, analysis = import_and_analyze(list(plan.files), plan.out, config, force=force, progress=progress,
                                          max_inflate=max_inflate)
    for w in result.warnings:
        warnings.warn(w, TraceImportWarning, stacklevel=2)
    return analysis


def _analyze_on_dask(source: PathLike | RunLike, config: AnalysisConfig | None, progress: Progress | None,
                     workers: int | None, scheduler: str | None) -> Analysis:
    """:func:`perfscope.distributed.analyze_on_dask` on a cluster made or reached for it."""
    from perfscope.distributed import analyze_on_dask, dask_client

    (config or AnalysisConfig()).check()  # a bad option must not cost starting a cluster
    with dask_client(workers, scheduler) as client:
        return analyze_on_dask(source, config, client=client, progress=progress)


def _refuse_run_options(source: object, run_out: PathLike | None, force: bool) -> None:
    if run_out is not None or force:
        raise UsageError(f"run_out and force (--run-out, --force) apply to trace files, and {source} is a run; "
                         "to import traces use `perfscope import kineto`")


def import_and_analyze(
    files: PathLike | Sequence[PathLike],
    out: PathLike,
    config: AnalysisConfig | None = None,
    *,
    rank: int | None = None,
    force: bool = False,
    progress: Progress | None = None,
    max_inflate: int | None = None,
) -> tuple[ImportResult, Analysis]:
    """Import Kineto trace ``files`` into a new run at ``out`` and analyse it.

    Args:
        files, out, rank, force, max_inflate: as :func:`perfscope.store.kineto.import_kineto`
            takes them.
        config: the analysis options (defaults: :class:`AnalysisConfig`).
        progress: called with a short message before each stage.

    Returns:
        (the import's result, whose ``run`` still holds the tables in memory; the analysis,
        the same as ``analyze_run(open_run(out), config)`` gives).  The run is complete at
        ``out`` when this returns.

    Raises:
        whatever :func:`~perfscope.store.kineto.import_kineto` and
        :func:`~perfscope.analyzers.analyze_run` raise.  It returns or raises only once the
        run's write has ended: an import that fails writes nothing; a write that fails
        leaves nothing behind (and an existing run at ``out`` as it was) and its error wins
        over the analysis's (which is chained to it); an analysis that fails leaves the
        written run in place.
    """
    from perfscope.store.kineto import (
        import_kineto,  # the importer's import cost only for traces
    )

    say = progress or (lambda _m: None)
    (config or AnalysisConfig()).check()  # a bad option must not cost an import and leave a run behind
    result = import_kineto(files, out, rank=rank, force=force, background=True, max_inflate=max_inflate,
                           progress=(lambda message, _done, _total: say(f"importing: {message}")) if progress else None)
    assert result.run is not None  # background=True always sets it
    try:
        analysis = analyze_run(result.run, config, progress=progress)
    finally:
        # Never leave the write running behind the caller, whatever the analysis did.
        say("writing the run")
        result.wait()
    return result, analysis


__all__ = ["TRACE_SUFFIXES", "TraceImportWarning", "analyze", "default_run_dir", "import_and_analyze"]
