"""``import_kineto``: Kineto trace files (one per rank) -> a new run.

Each file is read (:mod:`.read`), its events are built into one rank's tables (by
:class:`~perfscope.store.kineto.builder.EventRankBuilder` from msgspec events, or
:class:`~perfscope.store.kineto.native_tables.ColumnRankBuilder` from the native
extractor's columns), and the rank is written into a hidden sibling folder that is moved
into place only when every file has imported: an existing run is replaced only with
``force`` and is left untouched when anything fails.
"""
from __future__ import annotations

import errno
import gc
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from perfscope.errors import InputError, PerfscopeError, UsageError
from perfscope.store.arrays import column, to_int
from perfscope.store.kineto import formats
from perfscope.store.kineto.builder import EventRankBuilder
from perfscope.store.kineto.checks import (
    VALUE_ERRORS,
    TraceValueError,
    check_base,
    drop_negative_durations,
    import_error,
)
from perfscope.store.kineto.classify import CAT_KIND
from perfscope.store.kineto.decode import iter_event_chunks
from perfscope.store.kineto.events import Event, Trace
from perfscope.store.kineto.exports import pid_owner, split_perfscope_export
from perfscope.store.kineto.native import Rows
from perfscope.store.kineto.native_tables import ColumnRankBuilder
from perfscope.store.kineto.read import ReadTrace, read_trace, read_trace_bytes
from perfscope.store.meta import source_identity
from perfscope.store.kineto.tables import RankTables
from perfscope.store.meta import (
    as_read_back,
    check_output,
    create_run,
    merge_meta,
    rank_meta_record,
    replace_run,
    staging_dir,
    update_run,
    write_rank_meta,
)
from perfscope.store.reader import MemoryRun
from perfscope.store.schema import table as table_decl
from perfscope.store.writer import BackgroundWrite, stored_tables, write_rank_tables

#: ``progress(message, done, total)``: done/total count input bytes.
ProgressFn = Callable[[str, int, int], None]

PathLike = str | os.PathLike[str]

#: One rank of a trace: (rank, exported host pid -> original host pid, deviceProperties,
#: distributedInfo, exported GPU pid -> device); see :func:`.exports.split_perfscope_export`.
RankGroup = tuple[int, Any, Any, Any, Any]


@dataclass
class ImportResult:
    """What :func:`import_kineto` wrote.

    Attributes:
        path: the run directory.
        rows: rows written per rank, then per table name.
        warnings: things the user should know (guessed ranks, skipped events, ...).
        run: with ``background=True``, the imported run in memory (a
            :class:`~perfscope.store.reader.MemoryRun`, read like ``open_run(path)`` and
            giving the same frames), readable before the run is on disk; else None.
    """

    path: Path
    rows: dict[int, dict[str, int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    run: MemoryRun | None = None
    # With ``background``: each rank's (rank, stored tables, metadata) until the write ends,
    # and the write itself.
    _staged: list[tuple[int, dict[str, pa.Table], dict[str, Any]]] = field(default_factory=list, repr=False)
    _writing: BackgroundWrite | None = field(default=None, repr=False)

    @property
    def ranks(self) -> list[int]:
        """The ranks imported, sorted."""
        return sorted(self.rows)

    def total(self, table: str) -> int:
        """Rows of ``table`` over all ranks."""
        return sum(r.get(table, 0) for r in self.rows.values())

    @property
    def writing(self) -> bool:
        """True while the background write of a ``background=True`` import still runs."""
        return self._writing is not None and not self._writing.done

    def wait(self) -> None:
        """Return once the run is complete at :attr:`path` (at once unless imported with
        ``background=True``).

        Raises:
            PerfscopeError: the background write failed (the hidden folder it wrote is
                removed, and an existing run at ``path`` is left as it was).
            RunExistsError: ``path`` was taken meanwhile.
        """
        if self._writing is not None:
            self._writing.wait()


# A value of the trace that could not be converted: one InputError naming the event and field.
_CONVERSION_ERRORS: tuple[type[BaseException], ...] = (TraceValueError, *VALUE_ERRORS)


def import_kineto(
    files: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    rank: int | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
    background: bool = False,
    max_inflate: int | None = None,
) -> ImportResult:
    """Import Kineto trace files (one per rank) into a new run at ``out``.

    Args:
        files: ``.json`` or ``.json.gz`` traces (gzip detected by content).
        out: the run directory to create.
        rank: the rank of a single file without ``distributedInfo.rank``.
        force: replace an existing run (or the perfscope files in a non-empty folder).
        progress: called as ``progress(message, bytes_done, bytes_total)``.
        background: return once every file is decoded, with the run being written on a
            background thread (Parquet encoding releases the GIL: the caller can analyse
            ``result.run``, the tables in memory, meanwhile); ``result.wait()`` returns
            when the run is in place and raises what the write raised.  Every rank's
            tables are then held in memory until the write ends, not one rank's.
        max_inflate: the most bytes a gzip file may inflate to (None:
            :data:`.read.MAX_INFLATE_DEFAULT`, 0: no limit).

    Returns:
        an :class:`ImportResult` with the run path, rows per rank and table, and warnings
        (and with ``background``, the run in memory).

    Raises:
        InputError: a file is missing, unreadable, not JSON or not a Kineto trace, or holds
            a value perfscope cannot represent (named with its event and field: see
            :mod:`.checks`), or inflates to more than ``max_inflate``.
        UsageError: ``rank`` given with several files, or two files claim the same rank.
        RunExistsError: ``out`` exists and ``force`` is false.
    """
    paths = _trace_paths(files, rank)
    out = Path(out)
    check_output(out, force)
    for p in paths:
        if not p.exists():
            raise InputError(f"no such file: {p}")
    sizes = [p.stat().st_size if p.is_file() else 0 for p in paths]
    # Taken before reading: a file changed during the import then no longer matches.
    sources = [source_identity(p) for p in paths]
    total = sum(sizes) or 1
    done = 0
    result = ImportResult(path=out)
    tmp = _staging_folder(out)
    # The import makes ~10^5 objects, none of them in a reference cycle: the cyclic
    # collector would only walk them (and every module's objects) again and again.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # Ranks are known only after decoding, and decoding every file first would hold all
        # of them in memory: decode one at a time, write its rank, then drop it.
        # Nothing is fsynced (1-9 ms per file on a plain disk): everything here is in a
        # hidden folder that is renamed into place at the end or removed, and the trace
        # files are still there to import again after a crash.
        create_run(tmp, source="import:kineto", collectors=["kineto"], command=[], durable=False)
        claims = _RankClaims(rank)
        for path, size in zip(paths, sizes):
            if progress:
                progress(f"reading {path.name}", done, total)
            try:
                read = read_trace(path, max_inflate=max_inflate)
                if progress:
                    progress(f"converting {path.name}", done + size // 2, total)
                _import_trace(read, path, tmp, result, claims, background=background, max_inflate=max_inflate)
            except _CONVERSION_ERRORS as e:
                raise _value_error(path, e, max_inflate) from None
            except MemoryError:
                raise PerfscopeError(f"not enough memory to import {path}; free memory or import it on a "
                                     "bigger machine") from None
            del read
            done += size
        run_json = _complete_run(tmp, paths, result, claims, sources)
        if progress:
            progress("writing run", total, total)
        if background:
            _write_in_background(result, run_json, tmp, force)
        else:
            replace_run(tmp, out, force=force)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(out, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if gc_was_enabled:
            gc.enable()
    return result


def _trace_paths(files: PathLike | Sequence[PathLike], rank: int | None) -> list[Path]:
    """The trace files as paths.

    Raises:
        UsageError: no file, or ``rank`` given with several files or negative.
    """
    paths = [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]
    if not paths:
        raise UsageError("no trace files given; pass one .json or .json.gz file per rank")
    if rank is not None and len(paths) > 1:
        raise UsageError(f"--rank applies to a single file, but {len(paths)} were given; each file's rank comes from its distributedInfo")
    if rank is not None and rank < 0:
        raise UsageError(f"--rank must be 0 or more, not {rank}")
    return paths


def _value_error(path: Path, error: BaseException, max_inflate: int | None) -> InputError:
    """The InputError for a trace whose values failed to convert (see :func:`.checks.import_error`)."""
    try:
        text: bytes | None = read_trace_bytes(path, max_inflate=max_inflate)
    except (PerfscopeError, MemoryError):
        text = None
    return import_error(path, error, text, frozenset(CAT_KIND))


def _write_error(out: Path, e: OSError) -> PerfscopeError:
    if e.errno == errno.ENOMEM:
        return PerfscopeError(f"not enough memory to import into {out} ({e.strerror or e}); free memory or "
                              "import on a bigger machine")
    return PerfscopeError(f"cannot write the run at {out}: {e.strerror or e}; choose a writable output folder")


def _staging_folder(out: Path) -> Path:
    """A new hidden folder beside ``out`` to build the run in.

    A folder of this import's own: a background write may still be filling another
    import's folder for the same output (a fixed name would let the two mix).
    """
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return staging_dir(out)
    except OSError as e:
        raise _write_error(out, e) from None


@dataclass
class _RankClaims:
    """The rank of each file: its ``distributedInfo.rank``, ``--rank``, or else the next
    one free (in file order); two files may not claim the same rank."""

    rank: int | None  # --rank
    seen: dict[int, Path] = field(default_factory=dict)
    guessed: list[str] = field(default_factory=list)
    world_sizes: list[int] = field(default_factory=list)
    next_guess: int = 0

    def of(self, trace: Trace, path: Path, warnings: list[str]) -> int:
        """The rank of ``trace`` (an ordinary Kineto trace, read from ``path``)."""
        r = _dist_rank(trace)
        if r is None:
            if self.rank is not None:
                return self.rank
            while self.next_guess in self.seen:
                self.next_guess += 1
            self.guessed.append(f"{path.name} -> rank {self.next_guess}")
            return self.next_guess
        if self.rank is not None and r != self.rank:
            warnings.append(f"{path.name}: --rank {self.rank} overrides distributedInfo.rank {r}")
            return self.rank
        return r

    def claim(self, r: int, path: Path) -> None:
        """Note that ``path`` holds rank ``r``.

        Raises:
            UsageError: another file already holds it.
        """
        if r in self.seen:
            raise UsageError(f"{self.seen[r].name} and {path.name} are both rank {r}; import them into separate runs")
        self.seen[r] = path


def _import_trace(read: ReadTrace, path: Path, tmp: Path, result: ImportResult, claims: _RankClaims, *,
                  background: bool, max_inflate: int | None = None) -> None:
    """Build the tables of every rank in one file's trace and write them (or, with
    ``background``, stage them in ``result``), noting rows and warnings in ``result``."""
    trace = read.trace
    base = check_base(trace.baseTimeNanoseconds)
    ws = to_int(trace.distributedInfo.get("world_size")) if isinstance(trace.distributedInfo, dict) else None
    if ws:
        claims.world_sizes.append(ws)
    groups = split_perfscope_export(trace)
    if groups is None:
        groups = [(claims.of(trace, path, result.warnings), None, trace.deviceProperties, trace.distributedInfo, None)]
    for r, *_ in groups:
        claims.claim(r, path)
    builders = _builders(read, groups, base, path)
    trace.traceEvents = None
    built = {r: builders.pop(r).finish() for r, *_ in groups}
    # Refuses a trace of events none of which became a row (UnrecognisedTraceError).
    dropped = formats.check_import(path, [rt.tables for rt in built.values()], read.counts,
                                   lambda: read_trace_bytes(path, max_inflate=max_inflate))
    source = formats.provenance({f: getattr(trace, f) for f in trace.__struct_fields__ if f != "traceEvents"},
                                read.counts)
    for r, _, props, dist, _ in groups:
        rt = built.pop(r)
        if dropped:
            rt.warnings.append(dropped)
        # As the writer stores them (what a background import's analysis reads).
        tables, negative = drop_negative_durations(stored_tables(_arrow_tables(rt.tables)))
        if negative:
            rt.warnings.append(f"{sum(negative.values()):,} events with a negative dur dropped ("
                               + ", ".join(f"{name}: {n:,}" for name, n in negative.items()) + ")")
        result.rows[r] = {name: tables[name].num_rows if name in tables else 0 for name in rt.tables}
        result.warnings.extend(f"rank {r}: {w}" for w in rt.warnings)
        info = {**_rank_info(trace, path, rt, props, dist, base), "trace_source": source}
        if background:
            result._staged.append((r, tables, info))  # written after the last file
        else:
            write_rank_tables(tmp, r, tables)
            write_rank_meta(tmp, r, info, durable=False)
        del tables


def _rank_info(trace: Trace, path: Path, rt: RankTables, props: Any, dist: Any, base: int) -> dict[str, Any]:
    """The rank's metadata (``ranks/<rank>.json``) from its trace and tables."""
    gpu, all_props = _gpu_info(props, rt.devices)
    return {
        "host": trace.host_name if isinstance(trace.host_name, str) else None,
        "pid": rt.host_pid,
        "local_rank": None,
        "status": "complete",
        "started_ns": rt.started_ns,
        "stopped_ns": rt.stopped_ns,
        "gpu": gpu,
        "devices": all_props,
        "versions": {"nccl": dist.get("nccl_version")} if isinstance(dist, dict) and dist.get("nccl_version") else {},
        "clock_offset_ns": 0,
        "collectors": ["kineto"],
        "dropped_events": {},
        "warnings": list(rt.warnings),
        "source_file": str(path),
        "trace_name": trace.traceName if isinstance(trace.traceName, str) else None,
        "distributed_info": dist if isinstance(dist, dict) else None,
        "base_time_ns": base,
    }


def _complete_run(tmp: Path, paths: list[Path], result: ImportResult, claims: _RankClaims,
                  sources: list[dict[str, Any]]) -> dict[str, Any]:
    """Mark the run in ``tmp`` complete, with its world size, notes and ``sources`` (see
    :func:`source_identity`); return its run.json."""
    seen = claims.seen
    if claims.guessed:
        if len(paths) == 1:
            result.warnings.append(f"{paths[0].name} has no distributedInfo.rank; imported as rank {seen and min(seen)} (choose it with `perfscope import kineto --rank N`, or rank=N)")
        else:
            result.warnings.append("no distributedInfo.rank in " + ", ".join(claims.guessed) + " (ranks given in file order)")
    world = max(claims.world_sizes) if claims.world_sizes else None
    world = max(world or 0, len(seen), (max(seen) + 1) if seen else 0)
    return update_run(tmp, status="complete", world_size=world, sources=sources,
                      notes=[f"imported from {p}" for p in paths] + result.warnings, durable=False)


def _write_in_background(result: ImportResult, run_json: dict[str, Any], tmp: Path, force: bool) -> None:
    """Give ``result`` the staged run in memory and start writing it to ``result.path``."""
    out = result.path
    staged = result._staged
    by_table: dict[str, dict[int, pa.Table]] = {}
    for r, tables, _ in staged:
        for name, tbl in tables.items():
            by_table.setdefault(name, {})[r] = tbl
    # The metadata open_run(out) will read: the files' JSON, merged as load_meta merges it.
    ranks_meta = [as_read_back(rank_meta_record(r, info)) for r, _, info in staged]
    result.run = MemoryRun(out, merge_meta(as_read_back(run_json), ranks_meta), by_table)

    def write() -> None:
        # From here on the thread owns ``tmp``: it cleans up as import_kineto's handlers do.
        try:
            for r, tables, info in staged:
                write_rank_tables(tmp, r, tables)
                write_rank_meta(tmp, r, info, durable=False)
            replace_run(tmp, out, force=force)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError):
                raise _write_error(out, e) from None
            raise
        finally:
            staged.clear()  # the tables stay in memory only as long as result.run holds them

    result._writing = BackgroundWrite(write, name="perfscope-import-write")


def _builders(read: ReadTrace, groups: list[RankGroup], base: int, path: Path) -> dict[int, Any]:
    """Per rank of ``groups``, a builder holding the rank's tables (``finish()`` gives
    its :class:`~perfscope.store.kineto.tables.RankTables`), made from the trace's events.

    Events decoded by msgspec go through :class:`EventRankBuilder` a chunk at a time, and
    only what a table needs is kept; columns the native extractor read (an ordinary
    trace, one rank) go to :class:`ColumnRankBuilder`, which builds the same tables from
    them in bulk."""
    trace, sizes = read.trace, read.chunk_sizes
    events = trace.traceEvents
    only = groups[0][0]
    if isinstance(events, Rows):
        return {only: ColumnRankBuilder(events, base, sizes)}
    owner = pid_owner(trace)
    builders = {r: EventRankBuilder(base, pid_map, device_map) for r, pid_map, _, _, device_map in groups}
    for chunk in iter_event_chunks(events or [], text_times=read.text_times, path=path, sizes=sizes):
        if owner is None:
            builders[only].add(chunk)
        else:
            by_rank: dict[int, list[Event]] = {}
            for e in chunk:
                by_rank.setdefault(owner.get(e.pid, only), []).append(e)
            for r, evs in by_rank.items():
                builders[r].add(evs)
    return builders


def _dist_rank(trace: Trace) -> int | None:
    d = trace.distributedInfo
    if isinstance(d, dict):
        return to_int(d.get("rank"))
    return None


def _gpu_info(props: Any, devices: list[int]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(gpu dict of the rank's device, all device dicts) from Kineto deviceProperties."""
    if not isinstance(props, list):
        return {}, []
    all_props = [p for p in props if isinstance(p, dict)]
    chosen = None
    for p in all_props:
        if devices and to_int(p.get("id")) == devices[0]:
            chosen = p
            break
    if chosen is None and len(all_props) == 1:
        chosen = all_props[0]
    if chosen is None:
        return {}, all_props
    gpu = {
        "index": to_int(chosen.get("id")),
        "name": chosen.get("name"),
        "memory_bytes": to_int(chosen.get("totalGlobalMem")),
        "compute_capability": (f"{chosen.get('computeMajor')}.{chosen.get('computeMinor')}"
                               if chosen.get("computeMajor") is not None else None),
        "num_sms": to_int(chosen.get("numSms")),
        "uuid": chosen.get("uuid"),
    }
    return {k: v for k, v in gpu.items() if v is not None}, all_props




def _arrow_tables(tables: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The built tables with every list and numpy column made an Arrow array of its
    declared type here (see :mod:`perfscope.store.arrays`: the writer's ``pa.array``
    would import pandas)."""
    out: dict[str, dict[str, Any]] = {}
    for name, cols in tables.items():
        decl = table_decl(name)
        out[name] = {c: column(v, decl.column(c).type) if c in decl.column_names else v for c, v in cols.items()}
    return out

