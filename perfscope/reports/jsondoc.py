"""JSON documents of an analysis (``perfscope analyze|report --format json``) and of a
comparison (``perfscope compare --format json``).

Both are strict JSON: numpy and pandas scalars become Python values, NaN, NA and infinities
become null, and anything else that JSON cannot hold becomes its text.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from perfscope.analyzers import BUCKETS, step_summary
from perfscope.analyzers.result import Analysis, Recommendation
from perfscope.reports import indented_json

if TYPE_CHECKING:
    from perfscope.analyzers.compare import Comparison

ANALYSIS_SCHEMA = 1
COMPARISON_SCHEMA = 1


def plain(v: Any) -> Any:
    """``v`` as a JSON value: dicts, lists and tuples recursively, numpy/pandas scalars as
    Python ones, NaN/NA/inf as None, other objects as their text."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            v = v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (str, int, float, bool)):
        return v
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return str(v)


def _column(s: pd.Series) -> list[Any]:
    """A column's values as JSON values (typed columns without a per-value type check)."""
    values = s.to_numpy(object)
    if pd.api.types.is_bool_dtype(s.dtype):
        return [None if pd.isna(v) else bool(v) for v in values]
    if pd.api.types.is_integer_dtype(s.dtype):
        return [None if pd.isna(v) else int(v) for v in values]
    if pd.api.types.is_float_dtype(s.dtype):
        return [None if v is None or v is pd.NA or not math.isfinite(v) else float(v) for v in values]
    return [plain(v) for v in values]


def records(df: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The rows of ``df`` as JSON objects (column name -> value; ints stay ints)."""
    if df is None or len(df) == 0:
        return []
    cols = [str(c) for c in df.columns]
    arrays = [_column(df[c]) for c in df.columns]
    return [dict(zip(cols, row)) for row in zip(*arrays)]


def recommendation_to_json(r: Recommendation) -> dict[str, Any]:
    """One recommendation as a JSON object (every dataclass field)."""
    return plain(dataclasses.asdict(r))


def analysis_to_json(a: Analysis) -> dict[str, Any]:
    """The JSON document of an analysis.

    Returns:
        a dict with ``schema`` (1), ``run`` (id, source, world_size, status), ``buckets``,
        ``steps`` (rows: rank, step, start_ns, end_ns, wall_ns, the six ``*_ns`` buckets,
        hidden_network_ns, hidden_pcie_ns, ...), ``summary`` (per rank medians),
        ``gpu_summary`` (rank, span_ns, idle_ns, compute_ns, non_compute_ns, ...),
        ``recommendations`` (id, bucket, title, message, evidence, saving_ns, saving_share,
        change, ranks), ``kernels``, ``launch``, ``collectives``, ``stragglers``, ``copies``,
        ``operators`` (the operator view, present when the run has operators: ``by_rank``,
        ``overall``, ``call_sites``, ``launch``; see :class:`~perfscope.analyzers.result.Analysis`)
        and ``warnings``. Times in ns, bandwidths in GB/s.
    """
    meta = a.meta or {}
    return {
        "schema": ANALYSIS_SCHEMA,
        "run": {k: plain(meta.get(k)) for k in ("run_id", "source", "world_size", "status")},
        "buckets": list(BUCKETS),
        "steps": records(a.steps),
        "summary": records(step_summary(a.steps)),
        "gpu_summary": records(a.gpu_summary),
        "recommendations": [recommendation_to_json(r) for r in a.recommendations],
        "kernels": records(a.kernels),
        "launch": records(a.launch),
        "collectives": records(a.collectives),
        "stragglers": records(a.stragglers),
        "copies": records(a.copies),
        **({"operators": {"by_rank": records(a.operators), "overall": records(a.operators_overall),
                          "call_sites": records(a.operator_sites), "launch": records(a.launch_operators)}}
           if len(a.operators) else {}),
        "warnings": list(a.warnings),
    }


def render_analysis_json(a: Analysis) -> str:
    """:func:`analysis_to_json` as JSON text (indent 1, no NaN literals, no final newline)."""
    return indented_json.dumps(analysis_to_json(a), indent=1)


def comparison_to_json(c: Comparison) -> dict[str, Any]:
    """The comparison as a JSON-able dict (the ``perfscope compare --format json`` document).

    Keys: ``schema``, ``verdict``, ``passed``, ``headline``, ``metric``, ``max_regression``,
    ``confidence``, ``per_rank``, ``min_steps``, ``n_boot``, ``seed``, ``base`` and ``new``
    (``label`` plus run facts), ``rows``, ``kernels``, ``collectives`` (lists of records with
    the columns documented on :class:`~perfscope.analyzers.compare.Comparison`; NaN becomes
    null), ``new_recommendations`` (full records), ``resolved_recommendations`` (ids),
    ``warnings``.
    """
    from perfscope.reports.comparison import headline

    return {
        "schema": COMPARISON_SCHEMA,
        "verdict": c.verdict,
        "passed": c.passed,
        "headline": headline(c),
        "metric": c.metric,
        "max_regression": c.max_regression,
        "confidence": c.confidence,
        "per_rank": c.per_rank,
        "min_steps": c.min_steps,
        "n_boot": c.n_boot,
        "seed": c.seed,
        "base": {"label": c.base_label, **plain(c.base_info)},
        "new": {"label": c.new_label, **plain(c.new_info)},
        "rows": records(c.rows),
        "kernels": records(c.kernels),
        "collectives": records(c.collectives),
        "new_recommendations": [recommendation_to_json(r) for r in c.new_recommendations],
        "resolved_recommendations": list(c.resolved_recommendations),
        "warnings": list(c.warnings),
    }


def render_comparison_json(c: Comparison) -> str:
    """:func:`comparison_to_json` as indented JSON text (strict: no NaN literals), newline-ended."""
    return indented_json.dumps(comparison_to_json(c), indent=2, ensure_ascii=False) + "\n"


__all__ = [
    "analysis_to_json",
    "comparison_to_json",
    "plain",
    "recommendation_to_json",
    "records",
    "render_analysis_json",
    "render_comparison_json",
]
