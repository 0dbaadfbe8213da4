"""Run metadata: ``run.json`` (the run) and ``ranks/rank-N.json`` (one file per rank).

Several ranks write into one run at once, so no two processes ever write the same file:
the launcher (or the first writer) creates ``run.json``; each rank owns its own
``ranks/rank-N.json``.  Every write goes to a temporary name and is renamed into place,
so a reader never sees half a file.

``run.json`` keys: ``schema_version``, ``perfscope_version``, ``run_id``, ``created_ns``,
``command`` (list of str), ``source`` (``record``, ``profile``, ``import:kineto``),
``status`` (``recording``, ``complete``, ``incomplete``), ``world_size``,
``environment`` (snapshot dict), ``collectors`` (list of names) and ``notes``.

``ranks/rank-N.json`` keys: ``rank``, ``local_rank``, ``host``, ``pid``, ``status``,
``started_ns``, ``stopped_ns``, ``gpu`` (name, uuid, ...), ``versions`` (driver, cuda,
cupti, nccl, torch, python), ``clock_offset_ns`` (add to CUPTI timestamps to get Unix
epoch ns; 0 when they already are), ``collectors``, ``dropped_events`` ({source: count}),
``warnings`` (list of str) and any collector-specific extras.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from perfscope.errors import CorruptRunError, InputError, NotARunError, RunExistsError, SchemaVersionError
from perfscope.store.schema import SCHEMA_VERSION

RUN_JSON = "run.json"
RANKS_DIR = "ranks"


def perfscope_version() -> str:
    """Return perfscope's version (``perfscope.__version__``, what ``perfscope --version``
    prints).  Not ``importlib.metadata``: importing it costs about 10 ms per process."""
    from perfscope import __version__

    return __version__


def atomic_write_json(path: Path, obj: Any, *, durable: bool = True) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename (fsynced
    before the rename unless ``durable`` is false: for files in a folder that is itself
    renamed into place later, like an import's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=False, default=str)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)  # a full disk must not leave half a file behind
        except OSError:
            pass
        raise


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object from ``path``.

    Raises:
        CorruptRunError: the file is not valid JSON or not an object.
    """
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except json.JSONDecodeError as e:
        raise CorruptRunError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}); the run's metadata is damaged") from None
    if not isinstance(obj, dict):
        raise CorruptRunError(f"{path} does not hold a JSON object")
    return obj


def create_run(
    path: str | os.PathLike[str],
    *,
    command: list[str] | None = None,
    source: str = "record",
    world_size: int | None = None,
    run_id: str | None = None,
    environment: dict[str, Any] | None = None,
    collectors: list[str] | None = None,
    overwrite: bool = False,
    durable: bool = True,
) -> dict[str, Any]:
    """Create a run directory with its ``run.json`` and return the metadata written.

    If ``run.json`` exists with the same ``run_id`` (another rank of the same job created it)
    the existing metadata is returned unchanged.  ``durable=False`` skips the fsync (see
    :func:`atomic_write_json`).

    Raises:
        RunExistsError: the directory already holds a different run or other files and
            ``overwrite`` is false.
    """
    root = Path(path)
    existing = root / RUN_JSON
    if existing.exists():
        meta = read_json(existing)
        if run_id is not None and meta.get("run_id") == run_id:
            return meta
        if not overwrite:
            raise RunExistsError(f"{root} already holds a run; choose another output or pass --force to replace it")
        _clear_run(root)
    elif root.exists() and any(root.iterdir()) and not overwrite:
        raise RunExistsError(f"{root} exists and is not empty; choose another output or pass --force")
    elif root.exists() and overwrite:
        _clear_run(root)
    root.mkdir(parents=True, exist_ok=True)
    meta = {
        "schema_version": SCHEMA_VERSION,
        "perfscope_version": perfscope_version(),
        "run_id": run_id or uuid.uuid4().hex,
        "created_ns": time.time_ns(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": list(command or []),
        "source": source,
        "status": "recording",
        "world_size": world_size,
        "environment": environment or {},
        "collectors": list(collectors or []),
        "notes": [],
    }
    atomic_write_json(existing, meta, durable=durable)
    return meta


def perfscope_entries(root: Path) -> list[Path]:
    """Return the files and folders of a run in ``root`` (``run.json``, ``ranks``, one folder
    per table) that exist: what replacing a run removes, and nothing else of the folder."""
    from perfscope.store.schema import TABLES

    return [p for p in (root / name for name in [RUN_JSON, RANKS_DIR, *TABLES]) if p.exists() or p.is_symlink()]


def _clear_run(root: Path) -> None:
    """Remove what a previous run left in ``root`` (only perfscope's own files and folders)."""
    import shutil

    for p in perfscope_entries(root):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def update_run(path: str | os.PathLike[str], *, durable: bool = True, **fields: Any) -> dict[str, Any]:
    """Update top-level fields of ``run.json`` (single writer: the launcher) and return it
    (see :func:`atomic_write_json` for ``durable``)."""
    p = Path(path) / RUN_JSON
    meta = read_json(p)
    meta.update(fields)
    atomic_write_json(p, meta, durable=durable)
    return meta


def rank_meta_path(path: str | os.PathLike[str], rank: int) -> Path:
    """Return the path of rank ``rank``'s metadata file."""
    return Path(path) / RANKS_DIR / f"rank-{int(rank)}.json"


def rank_meta_record(rank: int, info: dict[str, Any]) -> dict[str, Any]:
    """Return what :func:`write_rank_meta` writes for ``rank``: ``rank``, this process's
    ``host`` and ``pid``, then ``info`` (whose keys win)."""
    return {"rank": int(rank), "host": socket.gethostname(), "pid": os.getpid(), **info}


def write_rank_meta(path: str | os.PathLike[str], rank: int, info: dict[str, Any], *, durable: bool = True) -> None:
    """Write rank ``rank``'s metadata file (replacing it atomically; see
    :func:`atomic_write_json` for ``durable``)."""
    atomic_write_json(rank_meta_path(path, rank), rank_meta_record(rank, info), durable=durable)


def as_read_back(obj: Any) -> Any:
    """Return ``obj`` as reading it back from a file :func:`atomic_write_json` wrote gives
    it (tuples as lists, keys as text, other objects as ``str``): an in-memory run's
    metadata must equal the stored run's."""
    return json.loads(json.dumps(obj, default=str))


def load_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load ``run.json`` merged with every rank file.

    Returns:
        the run.json object with ``ranks`` (list of rank dicts sorted by rank) and ``status``
        recomputed: ``complete`` when the run and all ranks say so, ``recording`` while a
        rank's writer process is still alive on this host, else ``incomplete``.

    Raises:
        InputError: ``path`` does not exist.
        NotARunError: ``path`` has no run.json.
        SchemaVersionError: the run was written with a newer schema.
    """
    root = Path(path)
    if not root.exists():
        raise InputError(f"no such run: {root}")
    if not (root / RUN_JSON).is_file():
        raise NotARunError(f"{root} is not a perfscope run (no {RUN_JSON}); record one with `perfscope record` or import one with `perfscope import kineto`")
    meta = read_json(root / RUN_JSON)
    version = meta.get("schema_version")
    if not isinstance(version, int):
        raise CorruptRunError(f"{root / RUN_JSON} has no integer schema_version")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{root} uses trace-store schema {version}, newer than this perfscope's {SCHEMA_VERSION}; upgrade perfscope to read it"
        )
    ranks = []
    rdir = root / RANKS_DIR
    if rdir.is_dir():
        for f in sorted(rdir.glob("rank-*.json")):
            rank = read_json(f)
            # merge_meta and every reader take the rank as an int: refuse others here.
            if not isinstance(rank.get("rank", 0), int) or isinstance(rank.get("rank"), bool):
                raise CorruptRunError(f"{f} has rank {rank.get('rank')!r}, not an integer; "
                                      "restore that file or re-record the run")
            ranks.append(rank)
    return merge_meta(meta, ranks)


def merge_meta(run: dict[str, Any], ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge ``run`` (a run.json object, changed in place) with its rank files' objects.

    Returns:
        ``run`` with ``ranks`` (the rank dicts sorted by rank) and ``status`` recomputed
        (see :func:`load_meta`).
    """
    ranks = sorted(ranks, key=lambda r: int(r.get("rank", 0)))
    run["ranks"] = ranks
    run["status"] = _overall_status(run, ranks)
    return run


def _overall_status(meta: dict[str, Any], ranks: list[dict[str, Any]]) -> str:
    run_status = meta.get("status", "incomplete")
    statuses = [r.get("status", "incomplete") for r in ranks]
    if run_status == "complete" and all(s == "complete" for s in statuses):
        return "complete"
    if run_status == "incomplete" or "incomplete" in statuses:
        return "incomplete"
    # Something still says "recording": believe it only while its writer lives.
    writers = [r for r in ranks if r.get("status") == "recording"]
    if run_status == "recording":
        writers.append(meta)
    return "recording" if writers and all(_alive(w) for w in writers) else "incomplete"


def _alive(rank_info: dict[str, Any]) -> bool:
    """True when the rank's writer process is still running on this host."""
    if rank_info.get("host") != socket.gethostname():
        return True  # cannot tell from here; trust the file
    pid = rank_info.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
