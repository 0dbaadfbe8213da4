"""Import a Kineto trace and analyse it in one go: :func:`import_and_analyze`.

Here rather than in the analyzers, which are pure (no file writing), or in the store, which
never imports the analyzers: this module only strings the two together.  The import keeps
its tables in memory and writes the run on a background thread (Parquet encoding releases
the GIL) while the analysis reads those tables, so the write costs next to no wall time;
the result equals ``analyze_run(open_run(out))`` after ``import_kineto(files, out)``.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from perfscope.analyzers import AnalysisConfig, analyze_run
from perfscope.analyzers.result import Analysis
from perfscope.store.kineto import ImportResult, import_kineto

PathLike = str | os.PathLike[str]


def import_and_analyze(
    files: PathLike | Sequence[PathLike],
    out: PathLike,
    config: AnalysisConfig | None = None,
    *,
    rank: int | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> tuple[ImportResult, Analysis]:
    """Import Kineto trace ``files`` into a new run at ``out`` and analyse it.

    Args:
        files, out, rank, force: as :func:`perfscope.store.kineto.import_kineto` takes them.
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
    say = progress or (lambda _m: None)
    (config or AnalysisConfig()).check()  # a bad option must not cost an import and leave a run behind
    result = import_kineto(files, out, rank=rank, force=force, background=True,
                           progress=(lambda message, _done, _total: say(f"importing: {message}")) if progress else None)
    assert result.run is not None  # background=True always sets it
    try:
        analysis = analyze_run(result.run, config, progress=progress)
    finally:
        # Never leave the write running behind the caller, whatever the analysis did.
        say("writing the run")
        result.wait()
    return result, analysis


__all__ = ["import_and_analyze"]
