"""The trace store: schema, run metadata, streaming writer and reader.

Everything else in perfscope reads and writes runs through this package.  Its names are
imported on first use: reading a run (``perfscope info``, ``analyze``) never pays for the
writer's imports (``pyarrow.compute``), and ``import perfscope.store.meta`` stays light.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfscope.store.meta import create_run, load_meta, update_run, write_rank_meta
    from perfscope.store.reader import MemoryRun, Run, open_run
    from perfscope.store.schema import SCHEMA_VERSION, TABLE_NAMES, TABLES, Column, Table
    from perfscope.store.writer import RankWriter, write_rank_tables

_LAZY = {
    **dict.fromkeys(("create_run", "load_meta", "update_run", "write_rank_meta"), "perfscope.store.meta"),
    **dict.fromkeys(("MemoryRun", "Run", "open_run"), "perfscope.store.reader"),
    **dict.fromkeys(("SCHEMA_VERSION", "TABLE_NAMES", "TABLES", "Column", "Table"), "perfscope.store.schema"),
    **dict.fromkeys(("RankWriter", "write_rank_tables"), "perfscope.store.writer"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'perfscope.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "SCHEMA_VERSION", "TABLE_NAMES", "TABLES", "Column", "Table",
    "Run", "MemoryRun", "open_run", "RankWriter", "write_rank_tables",
    "create_run", "load_meta", "update_run", "write_rank_meta",
]
