"""Environment wiring of the NCCL profiler plugin for a job, and conversion at its end.

:func:`configure_env` is what the recorder (``perfscope record``) and ``perfscope.profile``
call before the training processes start: NCCL reads ``NCCL_PROFILER_PLUGIN`` when its first
communicator is created, so the variables must be in the environment by then.
:func:`ingest_dir` turns what the plugin wrote into store tables once the job has stopped.
"""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, MutableMapping
from pathlib import Path
from typing import Any

from perfscope.errors import CollectorError, UsageError
from perfscope.store.writer import write_rank_tables

LEVEL_VAR = "PERFSCOPE_NCCL_LEVEL"
DIR_VAR = "PERFSCOPE_NCCL_DIR"
PLUGIN_VAR = "NCCL_PROFILER_PLUGIN"
#: set (to 1) in a training process between a schedule's windows: the plugin loads paused
PAUSED_VAR = "PERFSCOPE_NCCL_PAUSED"
DEFAULT_LEVEL = 1
RAW_DIR_NAME = "nccl_plugin"
LEVELS = {
    0: "off (the plugin loads but asks NCCL for nothing)",
    1: "API calls, Coll/P2p (algorithm, protocol, channels) and per-channel GPU kernel timing",
    2: "level 1 + proxy operations (per channel and peer)",
    3: "level 2 + proxy steps (every network transfer and its wait states)",
}


def default_dir(run_path: str | os.PathLike[str]) -> Path:
    """Return where the plugin's raw files go inside a run: ``RUN/nccl_plugin``."""
    return Path(run_path) / RAW_DIR_NAME


def _conf_file_setting() -> tuple[str, str] | None:
    """Return (file, value) when an NCCL config file sets NCCL_PROFILER_PLUGIN, else None.

    NCCL reads ``NCCL_CONF_FILE`` (or ``~/.nccl.conf``) and ``/etc/nccl.conf`` without
    overriding the environment, so a value set there is the user's choice too.
    """
    candidates = [os.environ.get("NCCL_CONF_FILE"), os.path.expanduser("~/.nccl.conf"), "/etc/nccl.conf"]
    for c in candidates:
        if not c:
            continue
        try:
            text = Path(c).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == PLUGIN_VAR and value.strip():
                return c, value.strip()
    return None


def configure_env(
    env: MutableMapping[str, str], out_dir: str | os.PathLike[str], level: int | None = None
) -> list[str]:
    """Set the variables that make NCCL load perfscope's profiler plugin in a job.

    Args:
        env: the environment the job will start with (e.g. a copy of ``os.environ``);
            changed in place.
        out_dir: folder the plugin writes its per-process files into (created by the
            plugin; use :func:`default_dir` for a run).
        level: 0 off, 1 (default) collectives + per-channel kernel timing, 2 + proxy
            operations, 3 + proxy steps.  None: ``PERFSCOPE_NCCL_LEVEL`` from ``env``, else 1.

    Returns:
        warnings for the user (empty when the plugin was set up).  The user's own
        ``NCCL_PROFILER_PLUGIN`` (environment or NCCL config file) is kept, never
        overridden: NCCL loads one profiler plugin per process, so perfscope then records
        no NCCL events and says so.  A missing plugin build is a warning too, so recording
        the rest goes on.

    Raises:
        UsageError: ``level`` is not 0-3.
    """
    if level is None:
        raw = env.get(LEVEL_VAR, str(DEFAULT_LEVEL))
        try:
            level = int(raw)
        except ValueError:
            raise UsageError(f"{LEVEL_VAR}={raw!r} is not a level; use 0 (off), 1, 2 or 3") from None
    if level not in LEVELS:
        raise UsageError(f"NCCL plugin level {level} is not one of 0-3: " + "; ".join(f"{k} = {v}" for k, v in LEVELS.items()))
    if level == 0:
        return []
    from perfscope.collectors.nccl import plugin_path

    try:
        path = str(plugin_path())
    except CollectorError as e:
        return [f"NCCL collectives are not recorded: {e}"]
    theirs = env.get(PLUGIN_VAR)
    if theirs and theirs != path:
        return [
            f"{PLUGIN_VAR} is already set to {theirs!r}; keeping it (NCCL loads one profiler plugin per process), "
            f"so perfscope records no NCCL events. Unset {PLUGIN_VAR} to let perfscope record collectives."
        ]
    conf = _conf_file_setting()
    if conf and not theirs:
        return [
            f"{conf[0]} sets {PLUGIN_VAR}={conf[1]}; keeping it, so perfscope records no NCCL events. "
            f"Remove that line to let perfscope record collectives."
        ]
    out = Path(out_dir).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)  # the plugin creates one level only
    except OSError as e:
        return [f"NCCL collectives are not recorded: cannot create {out} ({e.strerror})"]
    env[PLUGIN_VAR] = path
    env[DIR_VAR] = str(out)
    env[LEVEL_VAR] = str(level)
    return []


def _group_by_rank(files: Iterable[Any]) -> dict[int, list[Any]]:
    by_rank: dict[int, list[Any]] = defaultdict(list)
    for f in files:
        by_rank[f.rank].append(f)
    return dict(by_rank)


def summarize_dir(nccl_dir: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """Return, per rank, what the recorder should put into that rank's metadata.

    Returns:
        ``{rank: {"dropped_events": {"nccl_plugin": n}, "nccl_plugin": {...}}}`` where the
        inner dict lists the files, pids, communicators (id, name, rank, nranks), the
        plugin's counters and the GPU-to-host clock offset used.
    """
    from perfscope.collectors.nccl.reader import build_rank_tables, read_dir

    out: dict[int, dict[str, Any]] = {}
    for rank, files in _group_by_rank(read_dir(nccl_dir)).items():
        built = build_rank_tables(files)
        out[rank] = {"dropped_events": {"nccl_plugin": built.dropped_events}, "nccl_plugin": built.info}
    return out


def ingest_dir(
    nccl_dir: str | os.PathLike[str], run_path: str | os.PathLike[str], ranks: Iterable[int] | None = None
) -> dict[int, int]:
    """Convert the plugin's files in ``nccl_dir`` into the run's tables.

    Writes ``collectives``, ``nccl_channels`` and ``proxy`` (those that have rows) for every
    rank found (or only ``ranks``), through the store's writer.  Call it once per run, after
    the job stopped (files of processes still running are read up to their last flush).
    Operations of a schedule's warm-ups (the rank file's ``windows``) are left out, as the
    other collectors' warm-up records are (:func:`drop_warmup_operations`).

    Returns:
        rows written per rank, all tables together (ranks without events are left out).
    """
    from perfscope.collectors.nccl.reader import build_rank_tables, read_dir

    wanted = None if ranks is None else {int(r) for r in ranks}
    written: dict[int, int] = {}
    for rank, files in sorted(_group_by_rank(read_dir(nccl_dir)).items()):
        if rank < 0 or (wanted is not None and rank not in wanted):
            continue
        built = build_rank_tables(files)
        tables = drop_warmup_operations(built.tables, _settled_warmups(run_path, rank))
        if not tables:
            continue
        rows = write_rank_tables(run_path, rank, tables)
        written[rank] = sum(rows.values())
    return written


def _settled_warmups(run_path: str | os.PathLike[str], rank: int) -> list[tuple[int, int | None]]:
    """The warm-ups of ``rank`` whose end its rank file gives (none: no file, no schedule)."""
    from perfscope._steps import settled_warmups
    from perfscope.store.meta import rank_meta_path, read_json

    try:
        return settled_warmups(read_json(rank_meta_path(Path(run_path), rank)).get("windows") or [])
    except Exception:  # noqa: BLE001 - no or a half-written rank file: keep every row
        return []


def drop_warmup_operations(tables: dict[str, Any], intervals: list[tuple[int, int | None]]) -> dict[str, Any]:
    """``tables`` (``build_rank_tables``'s DataFrames) without the operations the host
    enqueued in one of ``intervals`` (``enqueue_ns``, else ``start_ns``: GPU times of an
    operation launched in a warm-up may fall after it), nor their channel and proxy rows
    (joined on ``comm_id``, ``func``, ``seq``).  Tables left empty are left out."""
    coll = tables.get("collectives")
    if not intervals or coll is None or not len(coll):
        return tables
    import numpy as np

    from perfscope._steps import dropped_mask

    def host_time(df: Any, col: str) -> Any:
        return df[col].fillna(df["start_ns"]).fillna(-1).to_numpy(np.int64)

    drop = dropped_mask(host_time(coll, "enqueue_ns"), intervals)
    if not drop.any():
        return tables
    gone = set(zip(coll["comm_id"][drop], coll["func"][drop], coll["seq"][drop]))
    out = {"collectives": coll[~drop].reset_index(drop=True)}
    for name, col in (("nccl_channels", "host_start_ns"), ("proxy", "start_ns")):
        df = tables.get(name)
        if df is not None:
            mine = np.fromiter((k in gone for k in zip(df["comm_id"], df["func"], df["seq"])), bool, len(df))
            # rows tied to no operation (a proxy op of another process, PXN): their host time decides
            loose = df["seq"].isna().to_numpy() & dropped_mask(host_time(df, col), intervals)
            out[name] = df[~(mine | loose)].reset_index(drop=True)
    return {k: v for k, v in out.items() if len(v)}


__all__ = ["configure_env", "drop_warmup_operations", "ingest_dir", "summarize_dir", "default_dir", "LEVELS", "DEFAULT_LEVEL"]
