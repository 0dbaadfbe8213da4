"""Run integrity: the manifest of part files a run's writers keep, and the checks a reader
makes of what it finds against it.

Every :class:`~perfscope.store.writer.RankWriter` appends one JSON line per part file it
publishes to a manifest file of its own, ``ranks/parts-rank-R-WRITER.jsonl`` (one writer
per file, so two processes writing one rank never share a file): the part's path in the
run, table, rank, rows, size in bytes and CRC-32.  The part's Parquet footer names its
table and rank too (key-value metadata ``perfscope.table`` and ``perfscope.rank``).

Reading checks, at no cost beyond the footers it reads anyway and one ``stat`` per part:

* at open: every part the manifest lists exists (a deleted part or table folder is an
  error, never "no rows"); a part it does not list is a warning (a writer killed between
  publishing a part and listing it, or a file copied in) and is read;
* before a part is read: its footer's table and rank are those of its folder, its columns
  are columns of that table with the declared types, and its size and row count are the
  manifest's (a part replaced by another is an error).

:func:`verify` also hashes every listed part.  A run whose ``run.json`` has no
``manifest`` key and that has no manifest file was written before manifests existed: only
its footers' tables, ranks and columns are checked.
"""
from __future__ import annotations

import json
import os
import threading
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from perfscope.errors import RunIntegrityError
from perfscope.store.meta import RANKS_DIR
from perfscope.store.schema import Table

TABLE_KEY = b"perfscope.table"
RANK_KEY = b"perfscope.rank"
_MANIFEST_GLOB = "parts-rank-*.jsonl"
_WRITERS_MADE: dict[tuple[str, int], int] = {}  # (run folder, rank) -> writers this process made
_NAMES_LOCK = threading.Lock()
_SHOWN = 3  # problems of one kind named in a message; the rest are counted


@dataclass(frozen=True)
class PartEntry:
    """One line of a manifest: a part file as its writer wrote it.

    Attributes:
        file: its path in the run, ``TABLE/rank=R/part-NNNNN.parquet`` (``/``-separated).
        table, rank: what it holds.
        rows: rows in it.
        bytes: its size in bytes.
        crc32: the CRC-32 (zlib's) of its bytes.
    """

    file: str
    table: str
    rank: int
    rows: int
    bytes: int
    crc32: int


def part_key(table: str, rank: int, name: str) -> str:
    """The manifest's ``file`` of part ``name`` of ``table`` on ``rank``."""
    return f"{table}/rank={int(rank)}/{name}"


def part_metadata(table: str, rank: int) -> dict[bytes, bytes]:
    """The key-value metadata the writer puts in a part's footer: its table and rank."""
    return {TABLE_KEY: table.encode(), RANK_KEY: str(int(rank)).encode()}


def file_digest(path: Path) -> tuple[int, int]:
    """Return (size in bytes, CRC-32) of the file at ``path``."""
    crc, size = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return size, crc


class ManifestWriter:
    """Appends the entries of one writer's parts to its own manifest file.

    Each entry is one ``write`` of one line to a file opened for appending, after the part
    is in place: a killed writer leaves at worst a part without its line (a warning when
    read), never a line without its part.
    """

    def __init__(self, run_path: Path, rank: int) -> None:
        # Named by process and by how many writers of this rank of this run it made before:
        # a name a restarted process reuses only gets lines appended (each writer's own
        # file matters only while two write at once), and two imports name theirs alike.
        key = (str(run_path.resolve()), int(rank))
        with _NAMES_LOCK:
            n = _WRITERS_MADE[key] = _WRITERS_MADE.get(key, -1) + 1
        self.path = run_path / RANKS_DIR / f"parts-rank-{int(rank)}-{os.getpid():x}-{n}.jsonl"

    def add(self, entry: PartEntry) -> None:
        """Append ``entry``."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(asdict(entry), separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def load_manifest(root: Path, meta: Mapping[str, Any]) -> dict[str, PartEntry] | None:
    """Return the run's manifest: ``file`` -> entry of every part its writers listed, or
    None for a run written before manifests (no ``manifest`` key and no manifest file).

    Raises:
        RunIntegrityError: a manifest line other than a last, half-written one is damaged.
    """
    files = sorted((root / RANKS_DIR).glob(_MANIFEST_GLOB))
    if not files and "manifest" not in meta:
        return None
    entries: dict[str, PartEntry] = {}
    for f in files:
        lines = f.read_bytes().split(b"\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                entry = PartEntry(**json.loads(line))
            except (ValueError, TypeError):
                if i == len(lines) - 1:
                    continue  # a writer killed while appending: its part reads as unlisted
                raise RunIntegrityError(f"{f} line {i + 1} is damaged; the run's manifest cannot be trusted: "
                                        "re-record or re-import the run") from None
            entries[entry.file] = entry
    return entries


@dataclass
class Findings:
    """Problems found in a run: ``errors`` (reading on would give wrong results) and
    ``warnings`` (what is read is sound), each a message naming the file."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: int = 0  # part files checked by verify_parts
    hashed_bytes: int = 0  # bytes verify_parts hashed

    @property
    def ok(self) -> bool:
        """True when no error was found."""
        return not self.errors

    def raise_errors(self, root: Path) -> None:
        """Raise the errors found as one RunIntegrityError (none: return)."""
        if self.errors:
            shown = "; ".join(self.errors[:_SHOWN]) + (f"; and {len(self.errors) - _SHOWN} more" if len(self.errors) > _SHOWN else "")
            raise RunIntegrityError(f"the run at {root} is damaged: {shown}. Restore the files from a copy or "
                                    "re-record (re-import) the run")


def compare_listing(root: Path, manifest: Mapping[str, PartEntry], found: Mapping[str, Mapping[int, list[Path]]],
                    *, recording: bool) -> Findings:
    """Compare the part files ``found`` (table -> rank -> paths) with ``manifest``.

    Returns:
        errors for listed parts that are missing (a whole missing table folder is named
        once), warnings for parts that are not listed (none while the run is
        ``recording``: a writer lists a part just after publishing it).
    """
    present = {part_key(t, r, p.name): p for t, by_rank in found.items() for r, paths in by_rank.items() for p in paths}
    out = Findings()
    missing = sorted(set(manifest) - set(present))
    by_table: dict[str, list[str]] = {}
    for key in missing:
        by_table.setdefault(manifest[key].table, []).append(key)
    for table, keys in by_table.items():
        rows = sum(manifest[k].rows for k in keys)
        if not (root / table).exists():
            out.errors.append(f"table folder {table}/ is missing (the manifest lists {len(keys)} part file(s), {rows:,} rows)")
        else:
            names = ", ".join(keys[:_SHOWN]) + (f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else "")
            out.errors.append(f"{names} listed in the manifest ({rows:,} rows) {'is' if len(keys) == 1 else 'are'} missing")
    if not recording:
        unlisted = sorted(set(present) - set(manifest))
        out.warnings.extend(f"{present[k]} is not in the run's manifest (left by a writer killed while flushing, "
                            "or copied in); it is read" for k in unlisted)
    return out


def check_part(decl: Table, rank: int, path: Path, footer: pq.FileMetaData, entry: PartEntry | None) -> None:
    """Check a part file's footer (and size, with ``entry``) against its folder's table
    ``decl`` and rank and its manifest entry.

    Raises:
        RunIntegrityError: it names another table or rank, has a column the table does not
            declare or one of another type, or its rows or size differ from ``entry``.
    """
    problem = _footer_problem(decl, rank, footer)
    if problem is None and entry is not None:
        size = path.stat().st_size
        if footer.num_rows != entry.rows or size != entry.bytes:
            problem = (f"it holds {footer.num_rows:,} rows in {size:,} bytes, but the manifest says {entry.rows:,} rows "
                       f"in {entry.bytes:,} bytes (replaced or changed since it was written)")
    if problem is not None:
        raise RunIntegrityError(f"part file {path} does not belong to table {decl.name!r} of rank {rank}: {problem}. "
                                "Restore it from a copy, or move it aside to read the rest of the run")


def verify_parts(root: Path, manifest: Mapping[str, PartEntry] | None, found: Mapping[str, Mapping[int, list[Path]]],
                 *, recording: bool) -> Findings:
    """Check every part file ``found`` (table -> rank -> paths) in full: the listing
    (:func:`compare_listing`), each footer (:func:`check_part`) and, for listed parts,
    the CRC-32 of the whole file against the manifest.

    Returns:
        every problem found (nothing raised for a damaged run), with the number of files
        checked and of bytes hashed.
    """
    from perfscope.store.schema import table as table_decl

    out = compare_listing(root, manifest, found, recording=recording) if manifest is not None else Findings()
    for table, by_rank in found.items():
        decl = table_decl(table)
        for rank, paths in by_rank.items():
            for p in paths:
                out.files += 1
                entry = manifest.get(part_key(table, rank, p.name)) if manifest is not None else None
                try:
                    check_part(decl, rank, p, pq.read_metadata(p), entry)
                    if entry is None:
                        continue
                    size, crc = file_digest(p)
                except RunIntegrityError as e:
                    out.errors.append(str(e))
                    continue
                except (pa.ArrowInvalid, OSError) as e:
                    out.errors.append(f"cannot read part file {p}: {e}")
                    continue
                out.hashed_bytes += size
                if crc != entry.crc32:
                    out.errors.append(f"part file {p} changed since it was written: its CRC-32 is {crc:08x}, "
                                      f"the manifest's {entry.crc32:08x}")
    return out


def _footer_problem(decl: Table, rank: int, footer: pq.FileMetaData) -> str | None:
    """What is wrong with a part's footer for ``decl`` and ``rank``, or None."""
    kv = footer.metadata or {}
    table = kv.get(TABLE_KEY, decl.name.encode()).decode(errors="replace")
    if table != decl.name:
        return f"its footer says it is a part of table {table!r}"
    owner = kv.get(RANK_KEY)
    if owner is not None and owner != str(int(rank)).encode():
        return f"its footer says it belongs to rank {owner.decode(errors='replace')}"
    # Parts written by one writer share their Arrow schema (stored in the footer): its
    # verdict is worked out once (a run has thousands of parts and few schemas).
    stored = kv.get(b"ARROW:schema")
    if stored is None:
        return _columns_problem(decl, footer.schema.to_arrow_schema())
    key = (decl.name, stored)
    if key not in _VERDICTS:
        _VERDICTS[key] = _columns_problem(decl, footer.schema.to_arrow_schema())
    return _VERDICTS[key]


_VERDICTS: dict[tuple[str, bytes], str | None] = {}  # (table, stored Arrow schema) -> _columns_problem


def _columns_problem(decl: Table, schema: pa.Schema) -> str | None:
    """What is wrong with a part's columns ``schema`` for table ``decl``, or None."""
    declared = {c.name: c.type for c in decl.columns}
    extra = [n for n in schema.names if n not in declared]
    if extra:
        return f"it has column(s) {extra} that the table does not declare"
    wrong = [f"{f.name} is {f.type}, not {declared[f.name]}" for f in schema if _base(f.type) != _base(declared[f.name])]
    return "its column " + "; ".join(wrong) if wrong else None


def _base(t: pa.DataType) -> pa.DataType:
    """The type a column's values have, however stored (dictionary, large string)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.string() if pa.types.is_large_string(t) else t


__all__ = ["PartEntry", "ManifestWriter", "Findings", "load_manifest", "compare_listing", "check_part",
           "verify_parts",            "part_key", "part_metadata", "file_digest", "TABLE_KEY", "RANK_KEY"]
