"""Analyzers: pure functions from store tables (DataFrames) to result tables.

Entry point: ``analyze_run(run, config=None) -> Analysis`` (see :mod:`perfscope.analyzers.result`),
and ``analysis_to_json(analysis)`` for the JSON document.
No plotting, printing or file writing here.
"""
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS, Analysis, Recommendation
from perfscope.analyzers.config import AnalysisConfig
from perfscope.analyzers.analysis import analysis_to_json, analyze_run, step_summary

__all__ = [
    "Analysis", "AnalysisConfig", "Recommendation", "BUCKETS", "BUCKET_COLUMNS",
    "analyze_run", "analysis_to_json", "step_summary",
]
