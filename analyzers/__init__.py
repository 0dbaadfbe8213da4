"""Analyzers: pure functions from store tables (DataFrames) to result tables.

Entry point: ``analyze_run(run, config=None) -> Analysis`` (see :mod:`perfscope.analyzers.result`);
:func:`perfscope.analyze` opens or imports a run and calls it.  No plotting, printing, file
writing or JSON here (the JSON document is :func:`perfscope.reports.jsondoc.analysis_to_json`).
"""
from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS, Analysis, Recommendation
from perfscope.analyzers.config import AnalysisConfig
from perfscope.analyzers.analysis import analyze_run, step_summary

__all__ = [
    "Analysis", "AnalysisConfig", "Recommendation", "BUCKETS", "BUCKET_COLUMNS",
    "analyze_run", "step_summary",
]
