"""Run metadata: ``run.json`` (the run) and ``ranks/rank-N.json`` (one file per rank).

Several ranks write into one run at once, so no two processes ever write the same file:
the launcher (or the first writer) creates ``run.json``; each rank owns its own
``ranks/rank-N.json``.  Every write goes to a temporary name and is renamed into place,
so a reader never sees half a file.

``run.json`` keys: ``schema_version``, ``perfscope_version``, ``run_id``, ``created_ns``,
``command`` (list of str), ``source`` (``record``, ``profile``, ``import:kineto``),
``status`` (``recording``, ``complete``, ``incomplete``), ``world_size``,
``environment`` (snapshot dict), ``collectors`` (list of names), ``notes`` and
``manifest`` (the version of the part-file manifest: runs written before it have none).

``ranks/parts-rank-N-WRITER.jsonl``: the manifest, one file per writer of rank N, one JSON
line per part file it wrote (see :mod:`perfscope.store.integrity`).

``raw/rankN/``: files a recording process wrote for a decoder in another process to turn
into tables (the CUPTI sink's segments, see :mod:`perfscope.collectors.cupti.segments`);
those not decoded yet are what ``perfscope recover`` decodes after a job was killed.

``ranks/rank-N.json`` keys: ``rank``, ``local_rank``, ``host``, ``pid``, ``status``,
``started_ns``, ``stopped_ns``, ``gpu`` (name, uuid, ...), ``versions`` (driver, cuda,
cupti, nccl, torch, python), ``clock_offset_ns`` (add to CUPTI timestamps to get Unix
epoch ns; 0 when they already are), ``collectors``, ``dropped_events`` ({source: count}),
``warnings`` (list of str) and any collector-specific extras.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from perfscope.errors import CorruptRunError, InputError, NotARunError, RunExistsError, SchemaVersionError
from perfscope.store.schema import MANIFEST_VERSION, SCHEMA_VERSION

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
    tmp = _json_tmp(path, obj, durable, f".{path.name}.{os.getpid()}.tmp")
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _json_tmp(path: Path, obj: Any, durable: bool, name: str) -> Path:
    """Write ``obj`` as JSON to the file ``name`` beside ``path`` and return its path (see
    :func:`atomic_write_json` for ``durable``); nothing is left behind when it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(name)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=False, default=str)
            if durable:
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        _unlink_quietly(tmp)  # a full disk must not leave half a file behind
        raise
    return tmp


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


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

    Creation is exclusive: ``run.json`` is published with a hard link, which fails when the
    file exists, so of several processes creating a run in one folder at once exactly one
    wins; the others join it when they name its ``run_id`` and get RunExistsError when not.
    ``overwrite`` removes only what a run owns (see :func:`check_output`).

    Raises:
        RunExistsError: the directory already holds a different run and ``overwrite`` is
            false, another process has just created a run there, or it holds files that
            perfscope did not write (see :func:`check_output`).
    """
    root = Path(path)
    existing = root / RUN_JSON
    joined = _joined(existing, run_id)
    if joined is not None:
        return joined
    try:
        check_output(root, overwrite)
    except RunExistsError:
        joined = _joined(existing, run_id)  # another rank of the job created it meanwhile
        if joined is None:
            raise
        return joined
    if overwrite:
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
        "manifest": MANIFEST_VERSION,
    }
    if _publish_new(existing, meta, durable):
        return meta
    joined = _joined(existing, run_id)
    if joined is not None:
        return joined
    raise RunExistsError(f"{root} was created by another process at the same time; choose another output")


def _joined(run_json: Path, run_id: str | None) -> dict[str, Any] | None:
    """The metadata in ``run_json`` when it exists and names ``run_id`` (a run to join),
    else None.  It is whole when it exists: it was linked into place after it was written."""
    if run_id is None or not run_json.exists():
        return None
    meta = read_json(run_json)
    return meta if meta.get("run_id") == run_id else None


def _publish_new(path: Path, obj: Any, durable: bool) -> bool:
    """Write ``obj`` as JSON to ``path`` unless ``path`` exists; return whether it was written.

    Exclusive and whole: the JSON is written to a temporary file and hard-linked to
    ``path`` (a link, unlike a rename, fails when ``path`` exists).  On a file system
    without hard links ``path`` is created with ``O_EXCL`` and written in place."""
    tmp = _json_tmp(path, obj, durable, f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:
            pass
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(tmp.read_bytes())
            if durable:
                f.flush()
                os.fsync(f.fileno())
        return True
    finally:
        _unlink_quietly(tmp)


# What perfscope writes in a run, by folder: whatever else a folder holds is the user's,
# and perfscope never removes it (see check_output).  NCCL_DIR is the NCCL plugin's folder
# (perfscope.profiler.NCCL_RAW_DIR); temporary names are those of atomic_write_json,
# _publish_new and the writer.
NCCL_DIR = "nccl_plugin"
RAW_DIR = "raw"
_RAW_RANK = re.compile(r"^rank\d+$")
# raw/rank<R>/ also holds the CUPTI decoder's journal and its stages (collectors/cupti/publish.py)
_RAW_FILE = re.compile(r"^(\.?\d+-\d+\.cupti(\.tmp|\.decoded|\.damaged)?|\.lock|batches\.jsonl)$")
_RAW_STAGE = ".stage"
_RAW_UNDECODED = re.compile(r"^(\d+-\d+\.cupti|\.\d+-\d+\.cupti\.tmp)$")
_CREATING = re.compile(r"^\.run\.json\.[0-9a-f.]+\.tmp$")
_RANKS_FILE = re.compile(r"^(rank-\d+\.json|parts-rank-\d+-[0-9a-f]+-\d+\.jsonl|\.rank-\d+\.json\.\d+\.tmp)$")
_NCCL_FILE = re.compile(r"^nccl-rank-?\d+-.+\.psnccl$")
RANK_FOLDER = re.compile(r"^rank=(-?\d+)$")  # a table's partition folder; the group is the rank
_PART_FILE = re.compile(r"^(part-\d+\.parquet|\.part-\d+\.\d+\.tmp)$")


def perfscope_entries(root: Path) -> list[Path]:
    """Return the files and folders of a run in ``root`` (``run.json``, ``ranks``, the NCCL
    plugin's folder, one folder per table) that exist: what replacing a run removes, and
    nothing else of the folder.

    Raises:
        RunExistsError: one of them holds a file perfscope did not write (it is named), so
            removing it would lose the user's data.
    """
    entries = _entries(root)
    for p in entries:
        foreign = _foreign_file(p)
        if foreign is not None:
            raise RunExistsError(f"{foreign} was not written by perfscope; move it out of {root} "
                                 "before replacing the run there, or choose another output")
    return entries


def _entries(root: Path) -> list[Path]:
    """The entries of ``root`` named like a run's own (see :func:`perfscope_entries`)."""
    from perfscope.store.schema import TABLES

    return [p for p in (root / name for name in [RUN_JSON, RANKS_DIR, NCCL_DIR, RAW_DIR, *TABLES])
            if p.exists() or p.is_symlink()]


def _foreign_file(entry: Path) -> Path | None:
    """The first path under ``entry`` (a top-level entry of a run) that perfscope did not
    write, or None when it wrote all of it."""
    if entry.name == RUN_JSON:
        return None if _plain_file(entry) else entry
    if not _plain_dir(entry):
        return entry
    if entry.name == RAW_DIR:
        for rank_dir in entry.iterdir():
            if not (_RAW_RANK.match(rank_dir.name) and _plain_dir(rank_dir)):
                return rank_dir
            bad = next((f for f in rank_dir.iterdir() if not (_RAW_FILE.match(f.name) and _plain_file(f))
                        and not (f.name == _RAW_STAGE and _plain_dir(f))), None)
            if bad is not None:
                return bad
        return None
    if entry.name in (RANKS_DIR, NCCL_DIR):
        pattern = _RANKS_FILE if entry.name == RANKS_DIR else _NCCL_FILE
        return next((c for c in entry.iterdir() if not (pattern.match(c.name) and _plain_file(c))), None)
    for rank_dir in entry.iterdir():  # a table's folder: rank=N folders of part files
        if not (RANK_FOLDER.match(rank_dir.name) and _plain_dir(rank_dir)):
            return rank_dir
        bad = next((f for f in rank_dir.iterdir() if not (_PART_FILE.match(f.name) and _plain_file(f))), None)
        if bad is not None:
            return bad
    return None


def _plain_file(p: Path) -> bool:
    return p.is_file() and not p.is_symlink()


def _plain_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def undecoded_raw_files(root: Path) -> list[Path]:
    """The files under ``raw/`` that no decoder has turned into tables yet (whole segments,
    and unfinished ones a killed process left), sorted."""
    raw = Path(root) / RAW_DIR
    if not raw.is_dir():
        return []
    return sorted(f for d in raw.iterdir() if _RAW_RANK.match(d.name) and d.is_dir()
                  for f in d.iterdir() if _RAW_UNDECODED.match(f.name))


def check_output(out: Path, force: bool) -> None:
    """Refuse ``out`` as the place of a new run unless it is new, empty or (with ``force``)
    a perfscope run whose files may be replaced.

    ``force`` replaces a run, never other files: a folder that is not a run (no
    ``run.json``) is refused when it holds anything but the files perfscope writes (what a
    run left after its ``run.json`` was removed), and a run is refused when one of its
    folders holds a file perfscope did not write.  Files beside a run's own (a report
    saved into it) are kept.

    Raises:
        RunExistsError: what is refused, with the file that is in the way.
    """
    if out.exists() and not out.is_dir():
        raise RunExistsError(f"{out} exists and is a file; choose another output directory")
    if not out.is_dir():
        return
    present = [p for p in out.iterdir() if not _CREATING.match(p.name)]  # another creator's: the link decides
    if not present:
        return
    is_run = (out / RUN_JSON).exists()
    if is_run and not force:
        raise RunExistsError(f"{out} already holds a run; choose another output or pass --force to replace it")
    if not is_run:
        named = _entries(out)
        others = sorted(p.name for p in present if p not in named)
        if others:
            raise RunExistsError(f"{out} is not a perfscope run and is not empty (it holds {others[0]!r}); "
                                 "choose a new or empty folder (--force replaces only a perfscope run)")
        if not force:
            raise RunExistsError(f"{out} holds the files of an incomplete run (no {RUN_JSON}); "
                                 "choose another output or pass --force to replace them")
    perfscope_entries(out)  # refuses a file of the user's inside a run's folders


def _clear_run(root: Path) -> None:
    """Remove what a previous run left in ``root`` (only perfscope's own files and folders)."""
    for p in perfscope_entries(root):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def staging_dir(out: Path, purpose: str = "importing") -> Path:
    """Create and return a new hidden folder beside ``out`` (``.NAME.PURPOSE-XXXXXXXX``)
    in which a run is built before :func:`replace_run` moves it to ``out``.

    Its mode is what ``mkdir`` gives (0777 less the umask, usually 0755), not
    ``tempfile.mkdtemp``'s 0700, which the rename would hand on to the run."""
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:
        p = out.parent / f".{out.name}.{purpose}-{secrets.token_hex(4)}"
        try:
            os.mkdir(p, 0o777)
            return p
        except FileExistsError:
            continue


def replace_run(staged: Path, out: Path, *, force: bool) -> None:
    """Move the run built in ``staged`` (see :func:`staging_dir`) to ``out``.

    A new ``out`` is a rename.  An existing run is replaced (with ``force``) by moving its
    own entries (:func:`perfscope_entries`) aside, ``staged``'s in and then removing the old
    ones; if a move fails the old run is put back as it was.  ``staged`` is removed once
    empty; on failure it is left for the caller to remove.

    Raises:
        RunExistsError: ``out`` is refused (see :func:`check_output`).
        OSError: a move failed (``out`` is as it was).
    """
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staged, out)
            return
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not out.exists():
                raise  # else another process has just put a run there: check it as one
    check_output(out, force)
    old = perfscope_entries(out)
    backup = staging_dir(out, "replaced")
    moved_in: list[str] = []
    try:
        for p in old:
            os.replace(p, backup / p.name)
        for child in list(staged.iterdir()):
            os.replace(child, out / child.name)
            moved_in.append(child.name)
    except OSError:
        for name in moved_in:
            with contextlib.suppress(OSError):
                os.replace(out / name, staged / name)
        for p in backup.iterdir():
            with contextlib.suppress(OSError):
                os.replace(p, out / p.name)
        with contextlib.suppress(OSError):
            backup.rmdir()
        raise
    shutil.rmtree(backup, ignore_errors=True)
    staged.rmdir()


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


def source_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What identifies an imported file in ``run.json``'s ``sources``: its absolute
    ``path``, ``size`` (bytes) and ``mtime_ns``; a file that still matches all three is
    taken as unchanged (``perfscope analyze TRACE`` then reuses the run, without loading
    the importer)."""
    p = Path(path).resolve()
    st = p.stat()
    return {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
