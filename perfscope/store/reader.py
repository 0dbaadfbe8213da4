"""Reading a run: :func:`open_run` returns a :class:`Run`.

Only the ranks and columns asked for are read.  Integer columns come back as numpy
``int64`` when they hold no nulls and as pandas nullable ``Int64`` when they do (so epoch
nanoseconds are never rounded through float64); dictionary-encoded string columns come
back as pandas categoricals; the partition key comes back as an ``int64`` column ``rank``.

``table`` returns a DataFrame; ``arrays`` returns the same columns as a dict of arrays,
without the DataFrame (what an analysis that works on numpy arrays reads).
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
from perfscope.store.meta import RANK_FOLDER, load_meta
from perfscope.store.schema import TABLES, Table, table as table_decl

if TYPE_CHECKING:
    import pandas as pd

@dataclass(frozen=True)
class Coded:
    """A dictionary-encoded string column without pandas objects: what ``arrays(...,
    coded=True)`` gives instead of a categorical.

    Attributes:
        codes: integers (int32 or int64), one per row: the position of the row's value in
            ``names``, -1 for null; read-only where they are Arrow's own buffer (no copy).
        names: object array of the distinct non-null values (``str``), in order of first
            appearance: the categories of the categorical ``table`` gives.
    """

    codes: np.ndarray
    names: np.ndarray

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows: Any) -> Coded:
        """The rows ``rows`` (a boolean mask, positions or a slice), over the same names."""
        return Coded(self.codes[rows], self.names)


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
    _footers: dict[Path, pq.FileMetaData] = field(default_factory=dict, repr=False)
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
        table_decl(name)
        by_rank = self._parts.get(name, {})
        wanted = sorted(by_rank) if ranks is None else [int(r) for r in ranks]
        parts = [(r, p) for r in wanted for p in by_rank.get(r, [])]
        if self._check:
            for r, p in parts:
                self._footer(name, r, p)
        return parts

    def _footer(self, name: str, rank: int, path: Path) -> pq.FileMetaData:
        """The footer of a part file, read once per run opened, and checked when read."""
        footer = self._footers.get(path)
        if footer is None:
            footer = _parquet_file(path).metadata
            if self._check:
                entry = self._manifest.get(integrity.part_key(name, rank, path.name)) if self._manifest is not None else None
                integrity.check_part(table_decl(name), rank, path, footer, entry)
            self._footers[path] = footer
        return footer

    def row_counts(self) -> dict[str, int]:
        """Rows per table, from the Parquet footers (no data is read).

        Raises:
            RunIntegrityError, CorruptRunError: as :meth:`part_files`.
        """
        return {name: sum(self._footer(name, r, p).num_rows for r, p in self.part_files(name)) for name in TABLES}

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

    def _pieces(self, name: str, ranks: Iterable[int] | None, decl: Table, data_cols: list[str]) -> list[tuple[int, pa.Table]]:
        """(rank, the stored columns ``data_cols`` of one part file) of every part file read."""
        return [(rank, _read_part(decl, path, data_cols, self._footers.get(path))) for rank, path in self.part_files(name, ranks)]


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
    return {name: rank_col if name == "rank" else _column(tbl.column(name), name in dict_cols, coded) for name in cols}


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


def _read_part(decl: Table, path: Path, columns: list[str], footer: pq.FileMetaData | None = None) -> pa.Table:
    """Read ``columns`` of one part file (whose ``footer`` may have been read already);
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
        tbl = f.read(columns=[c for c in columns if c in present], use_threads=f.metadata.num_rows >= _THREADED_ROWS)
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


def _categorical(col: pa.ChunkedArray) -> Any:
    """A dictionary-encoded column as a pandas categorical whose categories are its distinct
    non-null values in order of first appearance (what ``dictionary_encode`` gives), built
    from the dictionary and its indices without decoding a string per row."""
    coded = _codes(col)
    return _encoded(col) if coded is None else _from_codes(coded.codes, coded.names)


def _coded(col: pa.ChunkedArray) -> Coded:
    """A dictionary-encoded column as a :class:`Coded`: the codes and categories of
    :func:`_categorical`'s result, without the pandas objects."""
    coded = _codes(col)
    if coded is None:  # the rare columns _categorical converts through Arrow's to_pandas
        cat = _encoded(col).array
        return Coded(np.asarray(cat.codes), np.asarray(cat.categories, dtype=object))
    return coded


def _codes(col: pa.ChunkedArray) -> Coded | None:
    """The codes (any integer dtype) and names of :func:`_categorical`; None where it falls
    back to Arrow's conversion (values that are not strings, a dictionary repeating a value)."""
    import pandas as pd

    fresh = False  # a dictionary Arrow has just built: first appearance, each value once
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        # What _encoded() converts, taken apart here instead (to_pandas costs more than
        # building the categorical, or than the codes alone): a MemoryRun's strings are plain.
        col, fresh = col.dictionary_encode(), True
    elif not pa.types.is_dictionary(col.type) or not (pa.types.is_string(col.type.value_type)
                                                        or pa.types.is_large_string(col.type.value_type)):
        return None
    if col.num_chunks > 1:
        col = col.unify_dictionaries()
    if col.num_chunks == 0:
        return None
    dictionary = col.chunk(0).dictionary
    idx = [c.indices for c in col.chunks]
    if any(i.null_count for i in idx):
        codes, null = _ints_and_nulls(pa.chunked_array(idx))
        codes[null] = -1
    else:
        codes = np.concatenate([i.to_numpy() for i in idx]) if len(idx) > 1 else idx[0].to_numpy()
    if not fresh or col.num_chunks > 1:  # unify_dictionaries() keeps the order; checked all the same
        valid = codes >= 0
        all_valid = bool(valid.all())
        # The dictionary in the file may hold values in another order, unused values or (a
        # writer given a dictionary array) repeated values: re-code to first appearance.
        used = pd.unique(codes if all_valid else codes[valid])
        if used.size != len(dictionary) or (used != np.arange(used.size)).any():
            mapping = np.full(len(dictionary), -1, dtype=np.int64)
            mapping[used] = np.arange(used.size)
            codes = mapping[codes] if all_valid else np.where(valid, mapping[np.where(valid, codes, 0)], -1)
            dictionary = dictionary.take(pa.array(used))
    names = dictionary.to_numpy(zero_copy_only=False)
    if not fresh and len(set(names)) != len(names):  # a repeated value: decode and re-encode
        return None
    return Coded(codes, names)


def _encoded(col: pa.ChunkedArray) -> Any:
    """``col`` (strings) dictionary-encoded by Arrow and converted by it: the reference the
    fast path in :func:`_categorical` reproduces."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col.dictionary_encode().to_pandas()


def _from_codes(codes: np.ndarray, names: np.ndarray) -> Any:
    """A pandas Categorical of ``names[codes]`` (-1 is null), with the categories dtype
    Arrow's ``to_pandas`` gives: ``str`` (object when there is no category)."""
    import pandas as pd

    if len(names):
        dtype = pd.CategoricalDtype(pd.Index(names, dtype=_category_values_dtype()), ordered=False)
    else:
        dtype = _no_categories()
    return pd.Categorical.from_codes(codes, dtype=dtype, validate=False)


@functools.cache
def _category_values_dtype() -> Any:
    """The dtype Arrow's ``to_pandas`` gives the categories of a string dictionary column:
    ``str`` on pandas 3, ``object`` on pandas 2 (asked of Arrow once, not assumed)."""
    one = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array(["a"]))
    return one.to_pandas().cat.categories.dtype


@functools.cache
def _no_categories() -> Any:
    """The dtype of a categorical without categories (dtypes are immutable: one serves all)."""
    import pandas as pd

    return pd.CategoricalDtype(pd.Index([], dtype=object), ordered=False)


def _column(col: pa.ChunkedArray, dictionary: bool, coded: bool = False) -> Any:
    """One Arrow column as the array the reader returns (see the module docstring); with
    ``coded``, a dictionary column as a :class:`Coded`."""
    import pandas as pd

    if dictionary:
        return _coded(col) if coded else _categorical(col)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_integer(col.type):
        if col.null_count:
            return pd.arrays.IntegerArray(*_ints_and_nulls(col))
        return col.to_numpy().astype("int64", copy=False)
    if not col.null_count and (pa.types.is_boolean(col.type) or pa.types.is_floating(col.type)):
        return col.to_numpy()  # what to_pandas gives, without its per-call overhead
    return col.to_pandas()


def _ints_and_nulls(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64, 0 under a null; null mask) of an integer column: the parts of the
    ``IntegerArray`` that ``to_pandas(types_mapper=Int64Dtype)`` gives, read from the Arrow
    buffers as pandas reads them (no compute function: the first call of one costs more
    than the whole read of a small table)."""
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    values, nulls = [], []
    for ch in col.chunks:
        n, off = len(ch), ch.offset
        validity, data = ch.buffers()[:2]
        values.append(np.frombuffer(data, dtype=ch.type.to_pandas_dtype(), count=off + n)[off:])
        nulls.append(np.zeros(n, dtype=bool) if validity is None else
                     ~np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=off + n, bitorder="little")[off:].astype(bool))
    null = np.concatenate(nulls) if len(nulls) != 1 else nulls[0]
    v = np.concatenate(values).astype(np.int64) if len(values) != 1 else values[0].astype(np.int64)  # a writable copy
    v[null] = 0  # what sits under a null in the buffer is undefined
    return v, null


def _empty_column(decl: Table, name: str) -> Any:
    """The column of a table with no rows, with the dtype a read gives."""
    if name == "rank":
        return np.zeros(0, dtype=np.int64)
    col = decl.column(name)
    t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if col.dictionary:
        return _from_codes(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
    if pa.types.is_integer(t):
        return np.zeros(0, dtype=np.int64)
    if pa.types.is_boolean(t) or t == pa.float64():
        return np.zeros(0, dtype=t.to_pandas_dtype())
    return _column(pa.chunked_array([], t), False)


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
    return Run(path=root, meta=meta, _parts=parts, _manifest=manifest, _check=check, integrity_warnings=warnings)
