"""Distributed analysis on Dask: each rank's pass is a task over that rank's partitions.

:func:`~perfscope.analyzers.analyze_run` runs one pass per rank
(:func:`~perfscope.analyzers.rank_pass.rank_summary`) and works across ranks on what the
passes return, small :class:`~perfscope.analyzers.rank_pass.RankSummary` objects.  Here
the passes are ``dask.distributed`` tasks: each opens the run *by its path* on a worker,
reads only its rank's partitions (``kernels/rank=3/...``) and sends back the summary; the
client reads the collectives table, matches collectives, ranks stragglers and runs the
rules.  The result is the same, to the bit, as the analysis in one process.

The workers must see the run at the same path as the client: on a cluster, the run
directory lives on a shared file system (NFS, Lustre, GPFS), and the workers run the same
perfscope version (docs/scale.md shows a SLURM set-up with dask-jobqueue).

Dask is an optional dependency (``pip install 'perfscope[dask]'``), imported only here and
only when a cluster is asked for.
"""
from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from perfscope.analyzers import AnalysisConfig, analyze_run
from perfscope.analyzers.analysis import Progress, RankMap
from perfscope.analyzers.rank_pass import RankInputs, RankSummary, rank_summary
from perfscope.analyzers.result import Analysis
from perfscope.analyzers.sources import RunLike
from perfscope.errors import InputError, UsageError
from perfscope.store import Run, open_run
from perfscope.store.meta import RUN_JSON

CONNECT_TIMEOUT_S = 30


def _rank_task(path: str, rank: int, inputs: RankInputs) -> RankSummary:
    """On a worker: open the run at ``path`` and return the summary of rank ``rank``."""
    stamp = os.stat(os.path.join(path, RUN_JSON)).st_mtime_ns
    return rank_summary(_opened(path, stamp), rank, inputs)


@functools.lru_cache(maxsize=2)
def _opened(path: str, stamp: int) -> Run:
    """The run at ``path``, opened once per worker process and ``run.json`` version
    (``stamp``): opening lists every rank's part files, which would make N tasks cost N^2."""
    return open_run(path)


def dask_rank_map(client: Any, path: str | os.PathLike[str]) -> RankMap:
    """A :data:`~perfscope.analyzers.analysis.RankMap` that runs each rank's pass as a task
    on ``client``'s cluster, on the run at ``path`` (made absolute: the workers open it)."""
    where = os.path.abspath(os.fspath(path))

    def run(ranks: Sequence[int], inputs: Mapping[int, RankInputs], say: Progress) -> Iterable[RankSummary]:
        from distributed import as_completed

        batch = uuid.uuid4().hex[:8]  # one analysis's keys never collide with another's on a shared scheduler
        futures = [client.submit(_rank_task, where, r, inputs[r], key=f"perfscope-rank-{r}-{batch}", pure=False)
                   for r in ranks]
        try:
            for i, fut in enumerate(as_completed(futures)):
                summary = fut.result()  # a task's error (a PerfscopeError too) is raised here
                say(f"rank {summary.rank} done ({i + 1}/{len(futures)}) on the Dask cluster")
                fut.release()  # the worker may drop it: the summary is here now
                yield summary
        finally:
            client.cancel(futures)  # no-op for finished ones; stops the rest after an error

    return run


@contextlib.contextmanager
def dask_client(workers: int | None = None, scheduler: str | None = None, *, processes: bool = True) -> Iterator[Any]:
    """A ``distributed.Client``: connected to the scheduler at ``scheduler``, else on a new
    ``LocalCluster`` of ``workers`` single-threaded workers (processes unless ``processes``
    is False), closed (the cluster with it) when the block ends.

    Raises:
        UsageError: Dask is not installed, both or neither of ``workers``/``scheduler``
            given, or ``workers`` < 1.
        InputError: the scheduler cannot be reached.
    """
    if (workers is None) == (scheduler is None):
        raise UsageError("give either a number of local workers (--workers N) or a scheduler address (--scheduler ADDRESS)")
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("distributed analysis needs Dask: pip install 'perfscope[dask]'") from None
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise InputError(f"cannot reach the Dask scheduler at {scheduler} ({e}); check the address "
                             "(tcp://HOST:8786) and that the scheduler is running") from None
        with client:
            yield client
        return
    assert workers is not None
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    # One thread per worker: a pass is numpy and Arrow work on one rank, and a worker's
    # memory limit then holds one rank at a time.
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        yield client


def analyze_on_dask(source: str | os.PathLike[str] | RunLike, config: AnalysisConfig | None = None, *, client: Any,
                    progress: Progress | None = None) -> Analysis:
    """Analyse the run at ``source`` (a run directory or a :class:`~perfscope.store.Run`
    opened from one) with its per-rank passes as tasks on ``client``'s Dask cluster.

    Returns:
        the :class:`~perfscope.analyzers.result.Analysis`, equal to
        ``analyze_run(open_run(source), config)``.

    Raises:
        UsageError: ``source`` is a run held in memory (a trace being imported): the
            workers could not open it.
        PerfscopeError: whatever opening or analysing the run raises, on the client or
            on a worker.
    """
    if isinstance(source, (str, os.PathLike)):
        run = open_run(source)
    elif isinstance(source, Run):
        run = source
    else:
        raise UsageError("distributed analysis reads a run directory; import traces first (`perfscope import kineto FILES -o DIR`)")
    return analyze_run(run, config, progress, rank_map=dask_rank_map(client, run.path))


__all__ = ["analyze_on_dask", "dask_client", "dask_rank_map"]
