"""Export a run for TensorBoard's PyTorch profiler plugin (``torch-tb-profiler``).

The plugin (plugin name ``pytorch_profiler``) lists every folder under
``LOGDIR/plugins/profile/`` as a run, and every ``<worker>.pt.trace.json(.gz)`` in it as
one worker's Kineto trace (its ``RunLoader``, loader.py).  So the export writes, per rank,
one gzipped Kineto trace through the Chrome exporter (:func:`perfscope.store.chrome.write_trace`)
in its :data:`~perfscope.store.chrome.TENSORBOARD` dialect:

* workers are named ``<host>_<pid>`` as ``torch.profiler.tensorboard_trace_handler`` names
  them (the plugin reads the node and process from that pattern in its distributed view);
  when some rank has no host or pid, or two share one, every rank becomes
  ``rank<R>_<pid>`` (``rank<R>_<R>`` without a pid);
* all files count ``ts`` from one base, so the ranks line up;
* ``deviceProperties`` lists the GPUs of the rank's host at their device index (the plugin
  looks a GPU up by index), from the metadata of the run's ranks on that host;
* the plugin sees steps (``ProfilerStep#N``), kernels, copies, memsets and runtime calls
  (overview, kernel view, trace), host spans as operators (data-loader waits count as
  DataLoader time), and NCCL collectives as ``nccl:<func>`` operations with their size
  (distributed view, when every rank has the same operations).  perfscope's CUPTI capture
  has no PyTorch operators, so the operator view lists host spans only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfscope.errors import RunExistsError, UsageError
from perfscope.store.chrome import (
    TENSORBOARD,
    props_from_gpu,
    trace_base_ns,
    write_trace,
)
from perfscope.store.reader import Run, open_run

PLUGIN_NAME = "pytorch_profiler"
_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")


@dataclass
class TensorBoardResult:
    """What :func:`export_tensorboard` wrote: the run folder, one trace per worker
    (worker name -> file), the ranks and the number of trace events."""

    run_dir: Path
    files: dict[str, Path]
    ranks: list[int]
    events: int


def export_tensorboard(
    run: str | os.PathLike[str] | Run,
    logdir: str | os.PathLike[str],
    *,
    run_name: str | None = None,
    ranks: list[int] | None = None,
    force: bool = False,
) -> TensorBoardResult:
    """Write ``run`` (all ranks, or ``ranks``) under ``logdir/plugins/profile/<run_name>/``.

    ``run_name`` defaults to the run folder's name without ``.perfscope``.

    Returns:
        a :class:`TensorBoardResult`.

    Raises:
        RunExistsError: the run folder already holds traces and ``force`` is false.
        UsageError: a requested rank is not in the run, or ``logdir`` is a file.
        NotARunError / InputError / SchemaVersionError / CorruptRunError: from opening the run.
    """
    r = run if isinstance(run, Run) else open_run(run)
    logdir = Path(logdir)
    if logdir.exists() and not logdir.is_dir():
        raise UsageError(f"{logdir} is a file; give TensorBoard's log directory (a folder)")
    wanted = r.ranks if ranks is None else sorted({int(x) for x in ranks})
    missing = [x for x in wanted if x not in r.ranks]
    if missing:
        raise UsageError(f"rank(s) {missing} not in {r.path}; it has ranks {r.ranks}")
    name = run_name or r.path.name.removesuffix(".perfscope") or "perfscope"
    dest = logdir / "plugins" / "profile" / name
    old = sorted(p for p in dest.glob("*") if p.name.endswith(_SUFFIXES)) if dest.is_dir() else []
    if old and not force:
        raise RunExistsError(f"{dest} already holds traces; pass --force to replace them or choose another --name")
    for p in old:  # stale workers of an earlier export would show up as extra ranks
        p.unlink()

    base = trace_base_ns(r, wanted)
    workers = worker_names(r, wanted)
    files: dict[str, Path] = {}
    events = 0
    for rank in wanted:
        path = dest / f"{workers[rank]}.pt.trace.json.gz"
        events += write_trace(r, [rank], path, base=base, dialect=TENSORBOARD, device_props=host_devices(r, rank))
        files[workers[rank]] = path
    return TensorBoardResult(dest, files, wanted, events)


def worker_names(run: Run, ranks: list[int]) -> dict[int, str]:
    """Rank -> worker name: ``<host>_<pid>`` as torch's trace handler writes it, or
    ``rank<R>_<pid>`` (``rank<R>_<R>`` without a pid) for every rank when some rank lacks a
    host or pid or two share one."""
    names: dict[int, str] = {}
    pids: dict[int, int] = {}
    for rank in ranks:
        meta = run.rank_meta(rank)
        host, pid = meta.get("host"), meta.get("pid")
        pids[rank] = pid if isinstance(pid, int) else rank
        names[rank] = f"{host}_{pid}" if isinstance(host, str) and host and isinstance(pid, int) else ""
    if "" in names.values() or len(set(names.values())) < len(names):
        return {rank: f"rank{rank}_{pids[rank]}" for rank in ranks}
    return names


def host_devices(run: Run, rank: int) -> list[dict[str, Any]]:
    """Kineto ``deviceProperties`` for ``rank``'s file: the GPUs of the run's ranks on the
    same host, each at its device index (``{"id": i}`` where no rank tells)."""
    host = run.rank_meta(rank).get("host")
    by_index: dict[int, dict[str, Any]] = {}
    for other in run.ranks:
        meta = run.rank_meta(other)
        if meta.get("host") != host and other != rank:
            continue
        for prop in meta.get("devices") or props_from_gpu(meta.get("gpu")):
            if isinstance(prop.get("id"), int) and prop["id"] >= 0:
                by_index.setdefault(prop["id"], prop)
    if not by_index:
        return []
    return [by_index.get(i, {"id": i}) for i in range(max(by_index) + 1)]


__all__ = ["PLUGIN_NAME", "TensorBoardResult", "export_tensorboard", "host_devices", "worker_names"]
