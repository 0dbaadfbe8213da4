"""Shared by the Kineto importer's route tests (pre-filter, native columns, streaming):
the traces every route must import identically, and the check that two runs are equal."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

DATA = Path(__file__).resolve().parent / "data"
#: Every Kineto trace under tests/data (the fixtures and the analyzer scenarios).
KINETO_FIXTURES = sorted(p for p in DATA.rglob("*.json*") if p.parent.name == "kineto")
#: The traces in ../shared/data/kineto (the ``shared_kineto`` fixture's folder).
SHARED_NAMES = [
    "critical_path_alexnet_bench", "nccl_parser_config_nccl_data", "ns_resolution_trace_rank-0",
    "trace_compare_base_base", "trace_compare_test_test", "trace_filter_sampled_rank-0",
    "trace_filter_sampled_rank-1",
]


def assert_identical_runs(a: Path, b: Path, ra: Any, rb: Any, *, table_order: bool = False) -> None:
    """Runs ``a`` and ``b`` (imported with results ``ra``, ``rb``) are the same: rows per
    rank and table (with ``table_order``, tables listed in the same order too: routes that
    build them in the same sequence), warnings, every Parquet part (schema, then each
    column's values and order), the rank metadata and ``run.json`` but for its id and
    creation time."""
    assert ra.rows == rb.rows and ra.warnings == rb.warnings
    if table_order:
        assert [list(r) for r in ra.rows.values()] == [list(r) for r in rb.rows.values()]
    parts = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    assert parts == sorted(p.relative_to(b) for p in b.rglob("*.parquet"))
    assert parts or not any(any(r.values()) for r in ra.rows.values())
    for part in parts:
        ta, tb = pq.read_table(a / part), pq.read_table(b / part)
        assert ta.schema == tb.schema, part
        for name in ta.column_names:
            assert ta.column(name).equals(tb.column(name)), f"{part}: {name} differs"
    for meta in sorted(p.relative_to(a) for p in (a / "ranks").glob("*.json")):
        assert json.loads((a / meta).read_text()) == json.loads((b / meta).read_text()), meta
    run_a, run_b = json.loads((a / "run.json").read_text()), json.loads((b / "run.json").read_text())
    for doc in (run_a, run_b):
        del doc["run_id"], doc["created_ns"]
    assert run_a == run_b
