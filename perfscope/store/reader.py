"""Reading a run: :func:`open_run` returns a :class:`Run`.

Only the ranks and columns asked for are read.  Integer columns come back as numpy
``int64`` when they hold no nulls and as pandas nullable ``Int64`` when they do (so epoch
nanoseconds are never rounded through float64); dictionary-encoded string columns come
back as pandas categoricals; the partition key comes back as an ``int64`` column ``rank``.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from perfscope.errors import CorruptRunError, UsageError
from perfscope.store.meta import load_meta
from perfscope.store.schema import TABLES, Table, table as table_decl

if TYPE_CHECKING:
    import pandas as pd

_RANK_DIR = re.compile(r"^rank=(-?\d+)$")


@dataclass
class Run:
    """A run directory opened for reading.

    Attributes:
        path: the run directory.
        meta: run.json merged with the rank files (see :mod:`perfscope.store.meta`).
    """

    path: Path
    meta: dict[str, Any]
    _parts: dict[str, dict[int, list[Path]]] = field(default_factory=dict, repr=False)

    @property
    def status(self) -> str:
        """``complete``, ``recording`` or ``incomplete``."""
        return str(self.meta.get("status"))

    @property
    def ranks(self) -> list[int]:
        """Every rank that has metadata or data in this run, sorted."""
        ranks = {int(r["rank"]) for r in self.meta.get("ranks", []) if "rank" in r}
        for by_rank in self._parts.values():
            ranks.update(by_rank)
        return sorted(ranks)

    def rank_meta(self, rank: int) -> dict[str, Any]:
        """Return rank ``rank``'s metadata dict (empty when the rank wrote none)."""
        for r in self.meta.get("ranks", []):
            if int(r.get("rank", -1)) == rank:
                return r
        return {}

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
        decl = table_decl(name)
        cols = list(columns) if columns is not None else [*decl.column_names, "rank"]
        unknown = [c for c in cols if c != "rank" and c not in decl.column_names]
        if unknown:
            raise UsageError(f"table {name!r} has no column(s) {unknown}; it has {decl.column_names + ['rank']}")
        data_cols = [c for c in cols if c != "rank"]
        pieces: list[pa.Table] = []
        for rank, path in self.part_files(name, ranks):
            pieces.append(_with_rank(_read_part(decl, path, data_cols), rank))
        if pieces:
            tbl = pa.concat_tables(pieces, promote_options="default")
        else:
            tbl = pa.Table.from_arrays(
                [pa.array([], decl.column(c).type) for c in data_cols] + [pa.array([], pa.int64())],
                names=[*data_cols, "rank"],
            )
        return _to_pandas(tbl.select(cols), decl)


def _with_rank(tbl: pa.Table, rank: int) -> pa.Table:
    # From a numpy buffer: a Python list of n ints costs ~80 ms per 4M rows.
    return tbl.append_column("rank", pa.array(np.full(tbl.num_rows, rank, dtype=np.int64)))


def _parquet_file(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptRunError(f"cannot read part file {path}: {e}. Move it aside to read the rest of the run") from None


def _read_part(decl: Table, path: Path, columns: list[str]) -> pa.Table:
    f = _parquet_file(path)
    present = set(f.schema_arrow.names)
    try:
        tbl = f.read(columns=[c for c in columns if c in present], use_threads=True)
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptRunError(f"cannot read part file {path}: {e}. Move it aside to read the rest of the run") from None
    # Columns added to the schema after this part was written come back as nulls.
    for c in columns:
        if c not in present:
            tbl = tbl.append_column(c, pa.nulls(tbl.num_rows, decl.column(c).type))
    return tbl.select(columns)


def _to_pandas(tbl: pa.Table, decl: Table) -> pd.DataFrame:
    import pandas as pd  # here, not at the top: writing a run (an import) never needs it

    dict_cols = set(decl.dictionary_columns)
    arrays: dict[str, Any] = {}
    for name in tbl.column_names:
        col = tbl.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        if pa.types.is_integer(col.type):
            if col.null_count:
                arrays[name] = col.to_pandas(types_mapper={col.type: pd.Int64Dtype()}.get)
            else:
                arrays[name] = col.to_numpy().astype("int64", copy=False)
        elif name in dict_cols:
            arrays[name] = col.dictionary_encode().to_pandas()
        else:
            arrays[name] = col.to_pandas()
    return pd.DataFrame(arrays, copy=False)


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
