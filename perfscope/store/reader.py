"""Reading a run: :func:`open_run` returns a :class:`Run`.

Only the ranks and columns asked for are read.  Integer columns come back as numpy
``int64`` when they hold no nulls and as pandas nullable ``Int64`` when they do (so epoch
nanoseconds are never rounded through float64); dictionary-encoded string columns come
back as pandas categoricals; the partition key comes back as an ``int64`` column ``rank``.
"""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from perfscope.errors import CorruptRunError, UsageError
from perfscope.store.meta import load_meta
from perfscope.store.schema import TABLES, Table, table as table_decl

if TYPE_CHECKING:
    import pandas as pd

_RANK_DIR = re.compile(r"^rank=(-?\d+)$")


class _RunView:
    """What :class:`Run` and :class:`MemoryRun` share: metadata, status and ranks."""

    meta: dict[str, Any]

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

    def _data_ranks(self) -> set[int]:
        return {r for by_rank in self._parts.values() for r in by_rank}

    def part_files(self, name: str, ranks: Iterable[int] | None = None) -> list[tuple[int, Path]]:
        """Return (rank, path) of every part file of table ``name`` for ``ranks`` (all if None)."""
        table_decl(name)
        by_rank = self._parts.get(name, {})
        wanted = sorted(by_rank) if ranks is None else [int(r) for r in ranks]
        return [(r, p) for r in wanted for p in by_rank.get(r, [])]

    def row_counts(self) -> dict[str, int]:
        """Rows per table, from the Parquet footers (no data is read)."""
        counts: dict[str, int] = {}
        for name in TABLES:
            n = 0
            for _, p in self.part_files(name):
                n += _parquet_file(p).metadata.num_rows
            counts[name] = n
        return counts

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
        pieces = [(rank, _read_part(decl, path, data_cols)) for rank, path in self.part_files(name, ranks)]
        return _frame(decl, cols, pieces)


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
        by_rank = self.tables.get(name, {})
        wanted = sorted(by_rank) if ranks is None else [int(r) for r in ranks]
        return _frame(decl, cols, [(r, by_rank[r].select(data_cols)) for r in wanted if r in by_rank])


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
    tables = [t for _, t in pieces]
    tbl = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
    # The partition key straight from numpy: a Python list of n ints costs ~80 ms per 4M rows.
    ranks_of = [np.full(t.num_rows, r, dtype=np.int64) for r, t in pieces]
    rank_col = ranks_of[0] if len(ranks_of) == 1 else np.concatenate(ranks_of)
    return _to_pandas(tbl, decl, cols, rank_col)


def _parquet_file(path: Path, read_dictionary: list[str] | None = None) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path, read_dictionary=read_dictionary)
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptRunError(f"cannot read part file {path}: {e}. Move it aside to read the rest of the run") from None


# Below this many rows a part is decoded on the calling thread: handing a small file to
# Arrow's thread pool costs more than it saves.
_THREADED_ROWS = 1 << 16


def _read_part(decl: Table, path: Path, columns: list[str]) -> pa.Table:
    """Read ``columns`` of one part file; dictionary columns come back dictionary-typed
    (Parquet's dictionary pages are kept: no string is materialised per row)."""
    wanted = [c for c in decl.dictionary_columns if c in columns]
    try:
        f = _parquet_file(path, read_dictionary=wanted)
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
    import pandas as pd

    if not pa.types.is_dictionary(col.type) or not (pa.types.is_string(col.type.value_type)
                                                      or pa.types.is_large_string(col.type.value_type)):
        return _encoded(col)
    if col.num_chunks > 1:
        col = col.unify_dictionaries()
    if col.num_chunks == 0:
        return _encoded(col)
    dictionary = col.chunk(0).dictionary
    idx = [c.indices for c in col.chunks]
    if any(i.null_count for i in idx):
        idx = [pc.fill_null(i, -1) for i in idx]
    codes = np.concatenate([i.to_numpy() for i in idx]) if len(idx) > 1 else idx[0].to_numpy()
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
    if len(set(names)) != len(names):  # a repeated value: decode and re-encode
        return _encoded(col.cast(col.type.value_type))
    return _from_codes(codes, names)


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


def _column(col: pa.ChunkedArray, dictionary: bool) -> Any:
    """One Arrow column as the array the reader returns (see the module docstring)."""
    import pandas as pd

    if dictionary:
        return _categorical(col)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_integer(col.type):
        if col.null_count:
            return col.to_pandas(types_mapper={col.type: pd.Int64Dtype()}.get)
        return col.to_numpy().astype("int64", copy=False)
    if not col.null_count and (pa.types.is_boolean(col.type) or pa.types.is_floating(col.type)):
        return col.to_numpy()  # what to_pandas gives, without its per-call overhead
    return col.to_pandas()


def _to_pandas(tbl: pa.Table, decl: Table, cols: list[str], rank: np.ndarray) -> pd.DataFrame:
    import pandas as pd  # here, not at the top: writing a run (an import) never needs it

    dict_cols = set(decl.dictionary_columns)
    arrays: dict[str, Any] = {}
    for name in cols:
        arrays[name] = rank if name == "rank" else _column(tbl.column(name), name in dict_cols)
    return pd.DataFrame(arrays, copy=False)


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


def _scan_parts(root: Path) -> dict[str, dict[int, list[Path]]]:
    parts: dict[str, dict[int, list[Path]]] = {}
    for name in TABLES:
        tdir = root / name
        if not tdir.is_dir():
            continue
        for rdir in tdir.iterdir():
            m = _RANK_DIR.match(rdir.name)
            if not m or not rdir.is_dir():
                continue
            files = sorted(p for p in rdir.glob("part-*.parquet"))
            if files:
                parts.setdefault(name, {})[int(m.group(1))] = files
    return parts


def open_run(path: str | os.PathLike[str]) -> Run:
    """Open a run directory for reading.

    Raises:
        InputError: the path does not exist.
        NotARunError: it has no run.json.
        SchemaVersionError: it was written by a newer schema.
        CorruptRunError: its metadata cannot be parsed.
    """
    root = Path(path)
    meta = load_meta(root)
    return Run(path=root, meta=meta, _parts=_scan_parts(root))
