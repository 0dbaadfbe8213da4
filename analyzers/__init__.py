"""Analyzers: pure functions from store tables (DataFrames) to result tables.

Entry point: ``analyze_run(run) -> Analysis`` (see :mod:`perfscope.analyzers.result`).
No plotting, printing or file writing here.
"""
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS, Analysis, Recommendation

__all__ = ["Analysis", "Recommendation", "BUCKETS", "BUCKET_COLUMNS"]
