"""Reading a run: :func:`open_run` returns a :class:`Run`.

Only the ranks and columns asked for are read.  Integer columns come back as numpy
``int64`` when they hold no nulls and as pandas nullable ``Int64`` when they do (so epoch
nanoseconds are never rounded through float64); dictionary-encoded string columns come
back as pandas categoricals; the partition key comes back as an ``int64`` column ``rank``.

``table`` returns a DataFrame; ``arrays`` returns the same columns as a dict of arrays,
without the DataFrame (what an analysis that works on numpy arrays reads); ``window``
returns the rows of one rank that overlap a time window (what a zoomed timeline reads).
"""
from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from perfscope.errors import CorruptRunError, UsageError
from perfscope.store import integrity
from perfscope.store.columns import Coded, column_array, from_codes, ints_and_nulls
from perfscope.store.meta import RANK_FOLDER, RAW_DIR, load_meta, undecoded_raw_files
from perfscope.store.schema import TABLES, Table, table as table_decl

if TYPE_CHECKING:
    import pandas as pd



class _RunView:
    """What :class:`Run` and :class:`MemoryRun` share: metadata, status and ranks."""

    meta: dict[str, Any]
    #: integrity problems found that do not stop reading (a :class:`Run`'s: see :func:`open_run`)
    integrity_warnings: Sequence[str] = ()

    @property
    def status(self) -> str:
        """``complete``, ``recording`` or ``incomplete``."""
        return str(self.meta.get("status"))

    @property
    def ranks(self) -> list[int]:
        """Every rank that has metadata or data in this run, sorted."""
        ranks = {int(r["rank"]) for r in self.meta.get("ranks", []) if "rank" in r}
        ranks.update(self._data_ranks())
        return sorted(ranks)

    def _data_ranks(self) -> set[int]:
        raise NotImplementedError

    def rank_meta(self, rank: int) -> dict[str, Any]:
        """Return rank ``rank``'s metadata dict (empty when the rank wrote none)."""
        for r in self.meta.get("ranks", []):
            if int(r.get("rank", -1)) == rank:
                return r
        return {}


@dataclass
class Run(_RunView):
    """A run directory opened for reading.

    Attributes:
        path: the run directory.
        meta: run.json merged with the rank files (see :mod:`perfscope.store.meta`).
    """

    path: Path
    meta: dict[str, Any]
    _parts: dict[str, dict[int, list[Path]]] = field(default_factory=dict, repr=False)
    _manifest: dict[str, integrity.PartEntry] | None = field(default=None, repr=False)
    _check: bool = field(default=True, repr=False)
    # Footers read (and checked) but not yet handed to a read of their part: a read takes its
    # part's footer out, so an analysis does not keep every part's parsed footer (~30 KiB each,
    # a quarter of a MiB per rank) to the end.  ``_checked``: parts checked already.
    _footers: dict[Path, pq.FileMetaData] = field(default_factory=dict, repr=False)
    _checked: set[Path] = field(default_factory=set, repr=False)
    integrity_warnings: list[str] = field(default_factory=list)

    def _data_ranks(self) -> set[int]:
        return {r for by_rank in self._parts.values() for r in by_rank}

    def part_files(self, name: str, ranks: Iterable[int] | None = None) -> list[tuple[int, Path]]:
        """Return (rank, path) of every part file of table ``name`` for ``ranks`` (all if None).

        Raises:
            RunIntegrityError: (unless opened with ``check=False``) one of them belongs to
                another table or rank, or differs from the run's manifest (see
                :mod:`perfscope.store.integrity`).
            CorruptRunError: a footer cannot be read.
        """
        parts = self._part_list(name, ranks)
        if self._check:
            for r, p in parts:
                if p not in self._checked:
                    self._footer(name, r, p)
        return parts

    def _part_list(self, name: str, ranks: Iterable[int] | None) -> list[tuple[int, Path]]:
        """(rank, path) of the part files of table ``name`` for ``ranks`` (all if None), unchecked."""
        table_decl(name)
        by_rank = self._parts.get(name, {})
        wanted = sorted(by_rank) if ranks is None else [int(r) for r in ranks]
        return [(r, p) for r in wanted for p in by_rank.get(r, [])]

    def _footer(self, name: str, rank: int, path: Path, keep: bool = True) -> pq.FileMetaData:
        """The footer of a part file, checked the first time it is read for this opened run;
        with ``keep``, kept until a read of the part takes it."""
        footer = self._footers.get(path)
        if footer is None:
            footer = _parquet_file(path).metadata
            if self._check and path not in self._checked:
                entry = self._manifest.get(integrity.part_key(name, rank, path.name)) if self._manifest is not None else None
                integrity.check_part(table_decl(name), rank, path, footer, entry)
                self._checked.add(path)
            if keep:
                self._footers[path] = footer
        return footer

    def row_counts(self) -> dict[str, int]:
        """Rows per table, from the Parquet footers (no data is read).

        Raises:
            RunIntegrityError, CorruptRunError: as :meth:`part_files`.
        """
        # Footers read here are not kept (a thousand ranks' would take hundreds of MiB).
        return {name: sum(self._footer(name, r, p, keep=False).num_rows for r, p in self._part_list(name, None)) for name in TABLES}

    def verify(self) -> integrity.Findings:
        """Check every part file in full: its footer, and the CRC-32 of the whole file
        against the manifest (reading checks only sizes and footers).

        Returns:
            every problem found (errors and warnings, each naming its file) and the number
            of files checked and bytes hashed; nothing is raised for a damaged run.
        """
        return integrity.verify_parts(self.path, self._manifest, self._parts, recording=self.meta.get("status") == "recording")

    def table(self, name: str, ranks: Iterable[int] | None = None, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Read table ``name`` as a DataFrame.

        Args:
            name: a table declared in :mod:`perfscope.store.schema`.
            ranks: the ranks to read (all when None).
            columns: the columns to read (all declared columns plus ``rank`` when None);
                ``rank`` may be named like any column.

        Returns:
            one row per stored row, ordered by rank then part file; columns as asked, with
            the units the schema declares (``*_ns`` nanoseconds, ``bytes`` bytes).

        Raises:
            UsageError: unknown table or column.
            CorruptRunError: a part file cannot be read.
        """
        decl, cols, data_cols = _asked(name, columns)
        return _frame(decl, cols, self._pieces(name, ranks, decl, data_cols))

    def arrays(self, name: str, ranks: Iterable[int] | None = None, columns: Sequence[str] | None = None,
               *, coded: bool = False) -> dict[str, Any]:
        """Read table ``name`` as arrays: the columns :meth:`table` gives, without the frame.

        Args:
            name, ranks, columns: as :meth:`table` takes them.
            coded: dictionary-encoded string columns as :class:`Coded` (codes and names,
                the categorical's parts) instead of pandas categoricals, which cost more to
                build than code that only needs the codes spends on them.

        Returns:
            column name -> array, in the order asked: numpy ``int64`` (``rank`` and integer
            columns without nulls), pandas ``IntegerArray`` (``Int64``; integer columns with
            nulls), ``pandas.Categorical`` or :class:`Coded` (dictionary-encoded strings),
            numpy bool or float64 (without nulls), else what ``to_pandas`` gives; every
            array as long as the table, in :meth:`table`'s row order, with its units.

        Raises:
            UsageError: unknown table or column.
            CorruptRunError: a part file cannot be read.
        """
        decl, cols, data_cols = _asked(name, columns)
        return _arrays(decl, cols, self._pieces(name, ranks, decl, data_cols), coded)

    def window(self, table: str, rank: int, columns: Sequence[str] | None, t0_ns: int, t1_ns: int) -> pd.DataFrame:
        """The rows of ``table`` on ``rank`` that overlap the time window ``[t0_ns, t1_ns)``.

        A row of a span table (one with ``start_ns`` and ``dur_ns``) overlaps when it starts
        in the window, or starts before it and ends after ``t0_ns`` (``start_ns + dur_ns >
        t0_ns``; a null ``dur_ns`` counts as 0): an event that spans the whole window is
        returned, one that ends exactly at ``t0_ns`` is not.  A row of a point table (one
        time column, ``ts_ns`` of ``metrics``) overlaps when its time is in the window.

        Only what is needed is read: row groups whose statistics rule the window out are
        skipped (all rows start at or after ``t1_ns``; or all start before ``t0_ns`` and,
        where ``dur_ns`` has statistics, the latest start plus the longest duration does
        not reach it), the time columns of the others are read to find the rows, and the
        columns asked only of the row groups holding some.  No order of rows is assumed
        (the writer does not sort them).

        Args:
            table: a table declared in :mod:`perfscope.store.schema`.
            rank: the rank to read.
            columns: the columns to read (all declared columns plus ``rank`` when None).
            t0_ns, t1_ns: the window, Unix-epoch nanoseconds; ``t1_ns == t0_ns`` is an
                empty window (no rows).

        Returns:
            the overlapping rows, in :meth:`table`'s row order, with the columns asked and
            :meth:`table`'s dtypes and units (``*_ns`` int64 nanoseconds, ``bytes`` bytes,
            dictionary strings as categoricals); no rows (the same columns) when the run
            has no such table or the rank has no rows in the window.

        Raises:
            UsageError: unknown table or column, ``t1_ns < t0_ns``, or a table without a
                time column.
            CorruptRunError: a part file cannot be read.
        """
        decl, cols, data_cols = _asked(table, columns)
        t0, t1 = _window_bounds(decl, t0_ns, t1_ns)
        parts = self.part_files(table, [rank]) if t1 > t0 else []
        pieces = [(r, tbl) for r, path in parts if (tbl := _read_window(decl, path, data_cols, t0, t1)) is not None]
        return _frame(decl, cols, pieces)

    def _pieces(self, name: str, ranks: Iterable[int] | None, decl: Table, data_cols: list[str]) -> list[tuple[int, pa.Table]]:
        """(rank, the stored columns ``data_cols`` of one part file) of every part file read."""
        return [(rank, _read_part(decl, path, data_cols, footer=self._footers.pop(path, None))) for rank, path in self.part_files(name, ranks)]


@dataclass
class MemoryRun(_RunView):
    """A run held in memory, read like a :class:`Run`: what an import has just built, so
    that it can be analysed while (or without) being written.

    Each table is kept per rank as the Arrow table the writer stores (the declared schema,
    see :func:`perfscope.store.writer.stored_tables`), and :meth:`table` converts it with
    the reader's own code: the frames equal those of ``open_run`` on the written run.

    Attributes:
        path: where the run is (being) written.
        meta: what :func:`perfscope.store.meta.load_meta` gives for the written run.
        tables: table name -> rank -> Arrow table (tables without rows left out, as the
            writer writes no part file for them).
    """

    path: Path
    meta: dict[str, Any]
    tables: dict[str, dict[int, pa.Table]] = field(default_factory=dict, repr=False)

    def _data_ranks(self) -> set[int]:
        return {r for by_rank in self.tables.values() for r in by_rank}

    def row_counts(self) -> dict[str, int]:
        """Rows per table."""
        return {name: sum(t.num_rows for t in self.tables.get(name, {}).values()) for name in TABLES}

    def table(self, name: str, ranks: Iterable[int] | None = None, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Table ``name`` as a DataFrame: see :meth:`Run.table` (same arguments, same result).

        Raises:
            UsageError: unknown table or column.
        """
        decl, cols, data_cols = _asked(name, columns)
        return _frame(decl, cols, self._pieces(name, ranks, data_cols))

    def arrays(self, name: str, ranks: Iterable[int] | None = None, columns: Sequence[str] | None = None,
               *, coded: bool = False) -> dict[str, Any]:
        """Table ``name`` as arrays: see :meth:`Run.arrays` (same arguments, same result).

        Raises:
            UsageError: unknown table or column.
        """
        decl, cols, data_cols = _asked(name, columns)
        return _arrays(decl, cols, self._pieces(name, ranks, data_cols), coded)

    def window(self, table: str, rank: int, columns: Sequence[str] | None, t0_ns: int, t1_ns: int) -> pd.DataFrame:
        """The rows of ``table`` on ``rank`` that overlap ``[t0_ns, t1_ns)``: see
        :meth:`Run.window` (same arguments, same result).

        Raises:
            UsageError: unknown table or column, ``t1_ns < t0_ns``, or a table without a
                time column.
        """
        decl, cols, data_cols = _asked(table, columns)
        t0, t1 = _window_bounds(decl, t0_ns, t1_ns)
        tbl = self.tables.get(table, {}).get(int(rank))
        pieces = []
        if tbl is not None and t1 > t0:
            mask = _overlaps(decl, tbl.select(_time_columns(decl)), t0, t1)
            if mask.any():
                pieces.append((int(rank), tbl.select(data_cols).filter(pa.array(mask))))
        return _frame(decl, cols, pieces)

    def _pieces(self, name: str, ranks: Iterable[int] | None, data_cols: list[str]) -> list[tuple[int, pa.Table]]:
        """(rank, its Arrow table's columns ``data_cols``) of every rank read that has rows."""
        by_rank = self.tables.get(name, {})
        wanted = sorted(by_rank) if ranks is None else [int(r) for r in ranks]
        return [(r, by_rank[r].select(data_cols)) for r in wanted if r in by_rank]


def _asked(name: str, columns: Sequence[str] | None) -> tuple[Table, list[str], list[str]]:
    """(declaration, columns asked, the stored ones among them) of a read of ``name``.

    Raises:
        UsageError: unknown table or column.
    """
    decl = table_decl(name)
    names = decl.column_names  # a property that builds the list: once, not once per column
    cols = list(columns) if columns is not None else [*names, "rank"]
    unknown = [c for c in cols if c != "rank" and c not in names]
    if unknown:
        raise UsageError(f"table {name!r} has no column(s) {unknown}; it has {names + ['rank']}")
    return decl, cols, [c for c in cols if c != "rank"]


def _frame(decl: Table, cols: list[str], pieces: list[tuple[int, pa.Table]]) -> pd.DataFrame:
    """The DataFrame of ``pieces`` ((rank, Arrow table of the stored columns asked), in
    order) with columns ``cols``: see :meth:`Run.table`."""
    if not pieces:
        return _empty_frame(decl, cols)
    import pandas as pd  # here, not at the top: writing a run (an import) never needs it

    return pd.DataFrame(_arrays(decl, cols, pieces), copy=False)  # the arrays are new: no copy needed


def _arrays(decl: Table, cols: list[str], pieces: list[tuple[int, pa.Table]], coded: bool = False) -> dict[str, Any]:
    """The columns ``cols`` of ``pieces`` as arrays: see :meth:`Run.arrays`."""
    if not pieces:
        # Zero-length arrays built once: an analysis reads several empty tables (no syncs,
        # no host spans, no collectives).  Copies, so no caller shares a mutable object.
        return {c: v if isinstance(v, Coded) else v.copy() for c, v in _empty_arrays(decl, tuple(cols), coded).items()}
    tables = [t for _, t in pieces]
    tbl = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
    # The partition key straight from numpy: a Python list of n ints costs ~80 ms per 4M rows.
    ranks_of = [np.full(t.num_rows, r, dtype=np.int64) for r, t in pieces]
    rank_col = ranks_of[0] if len(ranks_of) == 1 else np.concatenate(ranks_of)
    dict_cols = set(decl.dictionary_columns)
    return {name: rank_col if name == "rank" else column_array(tbl.column(name), name in dict_cols, coded) for name in cols}


def _parquet_file(path: Path, read_dictionary: list[str] | None = None,
                  footer: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """``path`` opened; ``footer``, its footer read before (by the checks), is not parsed again."""
    try:
        return pq.ParquetFile(path, read_dictionary=read_dictionary, metadata=footer)
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptRunError(f"cannot read part file {path}: {e}. Move it aside to read the rest of the run") from None


# Below this many rows a part is decoded on the calling thread: handing a small file to
# Arrow's thread pool costs more than it saves.
_THREADED_ROWS = 1 << 16


def _read_part(decl: Table, path: Path, columns: list[str], row_groups: list[int] | None = None,
               footer: pq.FileMetaData | None = None) -> pa.Table:
    """Read ``columns`` of one part file (of its ``row_groups`` only, when given; its
    ``footer`` may have been read already);
    dictionary columns come back dictionary-typed (Parquet's dictionary pages are kept: no
    string is materialised per row)."""
    wanted = [c for c in decl.dictionary_columns if c in columns]
    try:
        f = _parquet_file(path, read_dictionary=wanted, footer=footer)
    except KeyError:  # a part written before one of these columns existed
        names = set(_parquet_file(path).schema_arrow.names)
        f = _parquet_file(path, read_dictionary=[c for c in wanted if c in names])
    present = set(f.schema_arrow.names)
    try:
        read = [c for c in columns if c in present]
        threads = f.metadata.num_rows >= _THREADED_ROWS
        tbl = (f.read(columns=read, use_threads=threads) if row_groups is None
               else f.read_row_groups(row_groups, columns=read, use_threads=threads))
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptRunError(f"cannot read part file {path}: {e}. Move it aside to read the rest of the run") from None
    # Columns added to the schema after this part was written come back as nulls.
    for c in columns:
        if c not in present:
            tbl = tbl.append_column(c, pa.nulls(tbl.num_rows, _read_type(decl, c)))
    return tbl.select(columns)


def _read_type(decl: Table, name: str) -> pa.DataType:
    """The Arrow type column ``name`` is read as: dictionary columns as dictionaries."""
    col = decl.column(name)
    return pa.dictionary(pa.int32(), col.type) if col.dictionary and not pa.types.is_dictionary(col.type) else col.type


def _time_columns(decl: Table) -> list[str]:
    """The columns that place a row of ``decl`` in time: ``[start_ns, dur_ns]`` (a span
    table), ``[start_ns]`` or ``[ts_ns]`` (a point table); empty when it has none."""
    names = decl.column_names
    if "start_ns" in names:
        return ["start_ns", "dur_ns"] if "dur_ns" in names else ["start_ns"]
    return ["ts_ns"] if "ts_ns" in names else []


def _window_bounds(decl: Table, t0_ns: int, t1_ns: int) -> tuple[int, int]:
    """``(t0_ns, t1_ns)`` as ints, checked for a window read of ``decl``.

    Raises:
        UsageError: ``t1_ns < t0_ns``, or ``decl`` has no time column.
    """
    t0, t1 = int(t0_ns), int(t1_ns)
    if t1 < t0:
        raise UsageError(f"the window ends before it starts ({t1} < {t0} ns); pass t0_ns <= t1_ns")
    if not _time_columns(decl):
        raise UsageError(f"table {decl.name!r} has no time column; read it whole with Run.table")
    return t0, t1


def _overlaps(decl: Table, times: pa.Table, t0: int, t1: int) -> np.ndarray:
    """Boolean mask of the rows of ``times`` (the :func:`_time_columns` of ``decl``) that
    overlap ``[t0, t1)`` as :meth:`Run.window` defines it; a null start never does."""
    cols = _time_columns(decl)
    start, null = ints_and_nulls(times.column(cols[0]))
    mask = ~null & (start >= t0) & (start < t1)
    if len(cols) == 2:
        dur, _ = ints_and_nulls(times.column(cols[1]))  # null durations read as 0
        mask |= ~null & (start < t0) & (start + dur > t0)
    return mask


def _read_window(decl: Table, path: Path, columns: list[str], t0: int, t1: int) -> pa.Table | None:
    """The rows of one part file that overlap ``[t0, t1)``, its columns ``columns`` (what
    :func:`_read_part` gives, for fewer rows); None when no row does."""
    f = _parquet_file(path)
    time_cols = _time_columns(decl)
    if time_cols[0] not in f.schema_arrow.names:
        return None
    md = f.metadata
    # Column positions in the file (Arrow and Parquet agree: the columns are flat).
    at = [f.schema_arrow.get_field_index(c) for c in time_cols]
    candidates = [i for i in range(md.num_row_groups) if _may_overlap(md.row_group(i), at, t0, t1)]
    if not candidates:
        return None
    try:
        times = f.read_row_groups(candidates, columns=[c for c in time_cols if c in f.schema_arrow.names])
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptRunError(f"cannot read part file {path}: {e}. Move it aside to read the rest of the run") from None
    for c in time_cols:
        if c not in times.column_names:  # a part written before the column existed
            times = times.append_column(c, pa.nulls(times.num_rows, pa.int64()))
    mask = _overlaps(decl, times, t0, t1)
    # Read the asked columns only of the row groups that hold a row of the window.
    per_group = np.split(mask, np.cumsum([md.row_group(i).num_rows for i in candidates])[:-1])
    hits = [(g, m) for g, m in zip(candidates, per_group) if m.any()]
    if not hits:
        return None
    keep = np.concatenate([m for _, m in hits])
    return _read_part(decl, path, columns, [g for g, _ in hits]).filter(pa.array(keep))


def _may_overlap(group: pq.RowGroupMetaData, at: list[int], t0: int, t1: int) -> bool:
    """False when a row group's statistics rule out every row of the window ``[t0, t1)``.

    ``at`` holds the positions of the time columns (start, and duration for spans).  No
    row overlaps when all start at or after ``t1``; for points, also when all start before
    ``t0``; for spans, when all start before ``t0`` and the latest start plus the longest
    duration does not pass it (the writer keeps statistics of ``start_ns`` only, so
    without ``dur_ns`` statistics a span table's earlier row groups are always read).
    """
    start = _min_max(group, at[0])
    if start is None:
        return True
    if start[0] >= t1:
        return False
    if start[1] >= t0:
        return True
    dur = _min_max(group, at[1]) if len(at) == 2 and at[1] >= 0 else None
    return len(at) == 2 and (dur is None or start[1] + max(dur[1], 0) > t0)


def _min_max(group: pq.RowGroupMetaData, column: int) -> tuple[int, int] | None:
    """(min, max) of column ``column`` in one row group, None without statistics."""
    stats = group.column(column).statistics
    return (int(stats.min), int(stats.max)) if stats is not None and stats.has_min_max else None


def _empty_column(decl: Table, name: str) -> Any:
    """The column of a table with no rows, with the dtype a read gives."""
    if name == "rank":
        return np.zeros(0, dtype=np.int64)
    col = decl.column(name)
    t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if col.dictionary:
        return from_codes(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
    if pa.types.is_integer(t):
        return np.zeros(0, dtype=np.int64)
    if pa.types.is_boolean(t) or t == pa.float64():
        return np.zeros(0, dtype=t.to_pandas_dtype())
    return column_array(pa.chunked_array([], t), False)


def _empty_frame(decl: Table, cols: list[str]) -> pd.DataFrame:
    """The frame of a table with no part file: no rows, the dtypes a read gives."""
    # A copy of one built once: an analysis reads several empty tables (no syncs, no host
    # spans, no collectives), and building one costs ~10x copying it.
    return _empty_template(decl, tuple(cols)).copy()


@functools.lru_cache(maxsize=256)
def _empty_template(decl: Table, cols: tuple[str, ...]) -> pd.DataFrame:
    """The frame :func:`_empty_frame` copies (never handed out itself)."""
    import pandas as pd

    return pd.DataFrame({c: _empty_column(decl, c) for c in cols})


@functools.lru_cache(maxsize=256)
def _empty_arrays(decl: Table, cols: tuple[str, ...], coded: bool) -> dict[str, Any]:
    """The arrays :func:`_arrays` copies for a table without rows (never handed out itself)."""
    return {c: _EMPTY_CODED if coded and c != "rank" and decl.column(c).dictionary else _empty_column(decl, c) for c in cols}


_EMPTY_CODED = Coded(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))


def _scan_parts(root: Path) -> dict[str, dict[int, list[Path]]]:
    parts: dict[str, dict[int, list[Path]]] = {}
    for name in TABLES:
        tdir = root / name
        if not tdir.is_dir():
            continue
        for rdir in tdir.iterdir():
            m = RANK_FOLDER.match(rdir.name)
            if not m or not rdir.is_dir():
                continue
            files = sorted(p for p in rdir.glob("part-*.parquet"))
            if files:
                parts.setdefault(name, {})[int(m.group(1))] = files
    return parts


def open_run(path: str | os.PathLike[str], *, check: bool = True) -> Run:
    """Open a run directory for reading.

    The part files found are compared with the run's manifest (see
    :mod:`perfscope.store.integrity`): a listed part that is missing is an error; a part
    that is not listed is read, with a warning in ``Run.integrity_warnings``.  Each part's
    footer is checked when the part is first read.  ``check=False`` reads what is there:
    the errors become warnings and footers are not checked (to salvage a damaged run).

    Raises:
        InputError: the path does not exist.
        NotARunError: it has no run.json.
        SchemaVersionError: it was written by a newer schema.
        CorruptRunError: its metadata cannot be parsed.
        RunIntegrityError: a part file or table folder its manifest lists is missing.
    """
    root = Path(path)
    meta = load_meta(root)
    parts = _scan_parts(root)
    manifest = integrity.load_manifest(root, meta)
    warnings: list[str] = []
    if manifest is not None:
        found = integrity.compare_listing(root, manifest, parts, recording=meta.get("status") == "recording")
        if check:
            found.raise_errors(root)
        warnings = found.errors + found.warnings
    raw = undecoded_raw_files(root)
    if raw and meta.get("status") != "recording":
        warnings.append(f"{len(raw)} raw file(s) under {root / RAW_DIR} were never decoded (the job was killed with "
                        f"them): run `perfscope recover {root}` to add their rows")
    return Run(path=root, meta=meta, _parts=parts, _manifest=manifest, _check=check, integrity_warnings=warnings)
