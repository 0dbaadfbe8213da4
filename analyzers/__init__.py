"""Analyzers: pure functions from store tables (DataFrames) to result tables.

Entry point: ``analyze_run(run, config=None) -> Analysis`` (see :mod:`perfscope.analyzers.result`);
:func:`perfscope.analyze` opens or imports a run and calls it.  No plotting, printing, file
writing or JSON here (the JSON document is :func:`perfscope.reports.jsondoc.analysis_to_json`).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfscope.analyzers.analysis import analyze_run, step_summary
    from perfscope.analyzers.config import AnalysisConfig
    from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS, Analysis, Recommendation

# Exported names -> their module, imported on first use: the reports' style reads BUCKETS
# from :mod:`.result`, and `perfscope info` must not load every analyzer (and pandas) for it.
_LAZY = {
    "Analysis": "result", "Recommendation": "result", "BUCKETS": "result", "BUCKET_COLUMNS": "result",
    "AnalysisConfig": "config", "analyze_run": "analysis", "step_summary": "analysis",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Analysis", "AnalysisConfig", "Recommendation", "BUCKETS", "BUCKET_COLUMNS",
    "analyze_run", "step_summary",
]
