"""Streaming, crash-safe writer of one rank's tables.

Collectors hand batches to a :class:`RankWriter`; it buffers them per table and writes a
Parquet part file (``TABLE/rank=R/part-NNNNN.parquet``) when a table's buffer passes
``flush_bytes`` or ``flush_rows``, or when ``flush_interval_s`` has passed since the last
flush.  Each part is written under a hidden temporary name and renamed into place, so a
killed process leaves only whole part files behind: the run stays readable up to its last
flush.  Memory is bounded by ``flush_bytes`` per table whatever the run's length.  Each
part is listed, once in place, in the writer's manifest (table, rank, rows, size, CRC-32;
see :mod:`perfscope.store.integrity`), against which readers check what they read.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import pyarrow as pa
import pyarrow.parquet as pq

from perfscope.errors import UsageError
from perfscope.store import integrity, meta as run_meta
from perfscope.store.arrays import column as arrow_column
from perfscope.store.schema import Table, table as table_decl

if TYPE_CHECKING:
    import pandas as pd

# pandas is not imported here (45 MB and ~0.2 s): a batch can only be a DataFrame if the
# caller imported pandas, so the DataFrame checks look it up in sys.modules.
Batch = Union[pa.Table, pa.RecordBatch, "pd.DataFrame", Mapping[str, Sequence[Any]]]


def to_arrow(decl: Table, data: Batch) -> pa.Table:
    """Coerce ``data`` to the declared schema of ``decl``.

    Columns the declaration has but ``data`` lacks become nulls; a column ``data`` has that
    the table does not declare raises UsageError (so typos never vanish silently).
    Dictionary columns are dictionary-encoded.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(data, pd.DataFrame):
        names = list(data.columns)
        n = len(data)
        get = lambda c: data[c]  # noqa: E731
    elif isinstance(data, pa.Table):
        names = data.column_names
        n = data.num_rows
        get = data.column
    else:
        names = list(data)
        n = len(next(iter(data.values()))) if data else 0
        get = data.__getitem__
    declared = decl.column_names  # a property that builds the list: once, not once per column
    extra = [c for c in names if c not in declared and c != "rank"]
    if extra:
        raise UsageError(f"table {decl.name!r} has no column(s) {extra}; declared: {declared}")
    arrays = []
    for col in decl.columns:
        if col.name in names:
            values = get(col.name)
            if pd is not None and isinstance(values, pd.Series):
                arr = pa.Array.from_pandas(values, type=col.type)
            elif isinstance(values, (pa.Array, pa.ChunkedArray)):
                arr = values if values.type == col.type else values.cast(col.type)
            else:
                # Not pa.array: on a list it imports pandas, which a recorder flushing at
                # interpreter exit cannot do (and an import never needs).
                arr = arrow_column(values, col.type)
        else:
            arr = pa.nulls(n, type=col.type)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=decl.arrow_schema)


class RankWriter:
    """Writes one rank's tables of a run, in part files, crash-safely.

    Args:
        run_path: the run directory (created with :func:`perfscope.store.meta.create_run`).
        rank: this writer's rank (the partition key).
        flush_interval_s: longest time a batch may sit in memory before it is written.
        flush_bytes: a table's buffer is written once it holds this many bytes.
        flush_rows: ... or this many rows.

    The writer is thread-safe: collectors on several threads may call :meth:`append`.
    Call :meth:`maybe_flush` periodically (or start :meth:`start_background_flush`) so that
    quiet tables still reach disk within the interval.
    """

    def __init__(
        self,
        run_path: str | os.PathLike[str],
        rank: int = 0,
        *,
        flush_interval_s: float = 2.0,
        flush_bytes: int = 16 << 20,
        flush_rows: int = 1_000_000,
        compression: str = "zstd",
    ) -> None:
        self.path = Path(run_path)
        self.rank = int(rank)
        self.flush_interval_s = flush_interval_s
        self.flush_bytes = flush_bytes
        self.flush_rows = flush_rows
        self.compression = compression
        self._buffers: dict[str, list[pa.Table]] = {}
        self._sizes: dict[str, tuple[int, int]] = {}
        self._next_part: dict[str, int] = {}
        self._last_flush = time.monotonic()
        self._lock = threading.RLock()
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._manifest: integrity.ManifestWriter | None = None  # made at the first part
        self.rows_written: dict[str, int] = {}

    # -- writing -------------------------------------------------------------------------
    def append(self, table_name: str, data: Batch) -> None:
        """Buffer a batch for ``table_name``; writes a part file when a threshold is passed."""
        decl = table_decl(table_name)
        tbl = to_arrow(decl, data)
        if tbl.num_rows == 0:
            return
        with self._lock:
            if self._closed:
                raise UsageError("this RankWriter is closed")
            self._buffers.setdefault(table_name, []).append(tbl)
            rows, nbytes = self._sizes.get(table_name, (0, 0))
            rows, nbytes = rows + tbl.num_rows, nbytes + tbl.nbytes
            self._sizes[table_name] = (rows, nbytes)
            if rows >= self.flush_rows or nbytes >= self.flush_bytes:
                self._flush_table(table_name)
        self.maybe_flush()

    def maybe_flush(self) -> None:
        """Flush every table if ``flush_interval_s`` has passed since the last flush."""
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        """Write every buffered table to a new part file now."""
        with self._lock:
            for name in list(self._buffers):
                self._flush_table(name)
            self._last_flush = time.monotonic()

    def _flush_table(self, name: str) -> None:
        chunks = self._buffers.pop(name, [])
        self._sizes.pop(name, None)
        if not chunks:
            return
        # The footer names the part's table and rank: a part moved to another folder is
        # recognised by its reader (see perfscope.store.integrity).
        tbl = pa.concat_tables(chunks).replace_schema_metadata(integrity.part_metadata(name, self.rank))
        decl = table_decl(name)
        folder = self.path / name / f"rank={self.rank}"
        folder.mkdir(parents=True, exist_ok=True)
        part = self._next_part.get(name)
        if part is None:
            part = _next_part_number(folder)
        tmp = folder / f".part-{part:05d}.{os.getpid()}.tmp"
        try:
            pq.write_table(
                tbl,
                tmp,
                compression=self.compression,
                use_dictionary=decl.dictionary_columns or False,
                write_statistics=["start_ns"] if "start_ns" in decl.column_names else False,
            )
            size, crc = integrity.file_digest(tmp)  # read back from the page cache: ~1 ms per MB
            part = _publish(tmp, folder, part)
        except BaseException:
            try:
                os.unlink(tmp)  # never leave a half-written temporary behind
            except OSError:
                pass
            raise
        self._next_part[name] = part + 1
        if self._manifest is None:
            self._manifest = integrity.ManifestWriter(self.path, self.rank)
        key = integrity.part_key(name, self.rank, f"part-{part:05d}.parquet")
        self._manifest.add(integrity.PartEntry(key, name, self.rank, tbl.num_rows, size, crc))
        self.rows_written[name] = self.rows_written.get(name, 0) + tbl.num_rows

    # -- background flushing -------------------------------------------------------------
    def start_background_flush(self) -> None:
        """Start a daemon thread that flushes every ``flush_interval_s``."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(self.flush_interval_s):
                try:
                    self.flush()
                except Exception:  # noqa: BLE001 - a failed flush must not kill the job
                    pass

        self._thread = threading.Thread(target=loop, name="perfscope-flush", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Flush what is buffered and stop the background thread (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            if not self._closed:
                self.flush()
                self._closed = True

    def __enter__(self) -> RankWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _publish(tmp: Path, folder: Path, part: int) -> int:
    """Move ``tmp`` to the first free ``part-N.parquet`` from ``part`` on and return N.

    Never replaces an existing part: two processes that record as one rank (a helper
    given the same rank, a restarted rank still running) would otherwise overwrite each
    other's parts and lose data."""
    while True:
        final = folder / f"part-{part:05d}.parquet"
        try:
            os.link(tmp, final)  # fails when ``final`` exists, unlike a rename
        except FileExistsError:
            part += 1
            continue
        except OSError:  # a file system without hard links
            os.replace(tmp, final)
            return part
        os.unlink(tmp)
        return part


def _next_part_number(folder: Path) -> int:
    nums = [int(p.stem.split("-")[1]) for p in folder.glob("part-*.parquet") if p.stem.split("-")[1].isdigit()]
    return max(nums) + 1 if nums else 0


def stored_tables(tables: Mapping[str, Batch]) -> dict[str, pa.Table]:
    """Return each of ``tables`` as the Arrow table :func:`write_rank_tables` stores: coerced
    to its declared schema by :func:`to_arrow`; tables without rows are left out (no part
    file is written for them).

    Raises:
        UsageError: an unknown table or column.
    """
    out: dict[str, pa.Table] = {}
    for name, data in tables.items():
        tbl = to_arrow(table_decl(name), data)
        if tbl.num_rows:
            out[name] = tbl
    return out


class BackgroundWrite:
    """``write()`` run on a thread of its own, started at once; :meth:`wait` joins it.

    The thread is not a daemon: an interpreter that exits meanwhile finishes the write
    rather than leaving it half done (a write must clean up after itself on failure).
    """

    def __init__(self, write: Callable[[], None], name: str = "perfscope-write") -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(write,), name=name)
        self._thread.start()

    def _run(self, write: Callable[[], None]) -> None:
        try:
            write()
        except BaseException as e:  # noqa: BLE001 - handed to the thread that waits
            self._error = e

    @property
    def done(self) -> bool:
        """True once the write has ended (done or failed)."""
        return not self._thread.is_alive()

    def wait(self) -> None:
        """Return once the write has ended; raise what it raised (every time)."""
        self._thread.join()
        if self._error is not None:
            raise self._error


def write_rank_tables(run_path: str | os.PathLike[str], rank: int, tables: Mapping[str, Batch]) -> dict[str, int]:
    """Write whole tables for one rank at once (importers use this).

    Returns:
        rows written per table name.
    """
    with RankWriter(run_path, rank, flush_interval_s=float("inf"), flush_bytes=1 << 40, flush_rows=1 << 40) as w:
        for name, data in tables.items():
            w.append(name, data)
        w.flush()
        return dict(w.rows_written)


__all__ = ["RankWriter", "BackgroundWrite", "write_rank_tables", "stored_tables", "to_arrow", "run_meta"]
