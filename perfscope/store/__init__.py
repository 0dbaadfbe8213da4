"""The trace store: schema, run metadata, streaming writer and reader.

Everything else in perfscope reads and writes runs through this package.
"""
from perfscope.store.meta import create_run, load_meta, update_run, write_rank_meta
from perfscope.store.reader import MemoryRun, Run, open_run
from perfscope.store.schema import SCHEMA_VERSION, TABLE_NAMES, TABLES, Column, Table
from perfscope.store.writer import RankWriter, write_rank_tables

__all__ = [
    "SCHEMA_VERSION", "TABLE_NAMES", "TABLES", "Column", "Table",
    "Run", "MemoryRun", "open_run", "RankWriter", "write_rank_tables",
    "create_run", "load_meta", "update_run", "write_rank_meta",
]
