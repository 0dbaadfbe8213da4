"""The result types every analyzer consumer (CLI, reports, dashboard, compare) reads.

This is the contract between ``analyzers/`` and everything above it.  Add fields freely;
do not rename or remove the ones listed here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# The six buckets, in priority order (ARCHITECTURE.md "Analysis: the step-time breakdown").
BUCKETS: tuple[str, ...] = ("compute", "network", "sync", "pcie", "data_loading", "host")
BUCKET_COLUMNS: tuple[str, ...] = tuple(f"{b}_ns" for b in BUCKETS)


@dataclass(frozen=True)
class Recommendation:
    """One piece of advice, fired by a rule on evidence from this run.

    Attributes:
        id: stable rule id, e.g. ``dataloader.num_workers``.
        bucket: the bucket it targets (one of BUCKETS, or ``environment``).
        title: one line.
        message: what was seen and what to change, in a sentence or two.
        evidence: numbers from this run that triggered the rule (name -> value).
        saving_ns: expected saving per step, nanoseconds (median step).
        saving_share: saving_ns / median step wall time (0..1).
        change: the exact change to try (code, env var, command line).
        ranks: ranks it applies to (empty: all).
    """

    id: str
    bucket: str
    title: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    saving_ns: int = 0
    saving_share: float = 0.0
    change: str = ""
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Analysis:
    """Everything ``analyze_run`` computes for one run.

    Attributes:
        steps: one row per (rank, step): ``rank``, ``step``, ``start_ns``, ``end_ns``,
            ``wall_ns`` and the six bucket columns ``compute_ns`` ... ``host_ns`` (which sum
            exactly to ``wall_ns``), plus ``hidden_network_ns`` and ``hidden_pcie_ns``
            (communication / copy time overlapped by higher-priority work). Nanoseconds.
        gpu_summary: one row per rank: ``rank``, ``span_ns``, ``idle_ns``, ``compute_ns``,
            ``non_compute_ns`` (HTA's temporal breakdown over first-to-last GPU event).
        kernels: one row per (rank, kernel name): ``rank``, ``name``, ``kind``
            (compute/communication/memory), ``count``, ``total_ns``, ``mean_ns``,
            ``median_ns``, ``max_ns``, ``share`` (of the rank's kernel time).
        collectives: one row per collective on a rank: ``rank``, ``comm_id``, ``seq``,
            ``func``, ``bytes``, ``start_ns``, ``dur_ns``, ``algbw_gbps``, ``busbw_gbps``,
            ``arrival_skew_ns``, ``wait_ns`` (exposed wait for the last rank).
        stragglers: one row per rank: ``rank``, ``last_count`` (times it arrived last),
            ``last_share``, ``mean_lateness_ns``, ``cost_to_others_ns``.
        recommendations: sorted by saving_ns, largest first (a fix another one needs, e.g.
            removing host syncs before CUDA-graph capture, is moved just before it; see
            analyzers/rules.py PREREQUISITES); environment findings last.
        warnings: things the user should know about the analysis itself (no steps found...).
        meta: the run's metadata (run.json merged with rank files).
    """

    steps: pd.DataFrame
    gpu_summary: pd.DataFrame
    kernels: pd.DataFrame
    collectives: pd.DataFrame
    stragglers: pd.DataFrame
    recommendations: list[Recommendation]
    warnings: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    # Added by the analyzers (defaults keep older constructors working):
    # launch: one row per rank of launch statistics (analyzers/kernels.py LAUNCH_COLUMNS).
    launch: pd.DataFrame = field(default_factory=pd.DataFrame)
    # copies: one row per (rank, copy_kind, pageable, large): count, bytes, total_ns.
    copies: pd.DataFrame = field(default_factory=pd.DataFrame)
    # The operator view of host time (imported traces with an operators table; empty
    # otherwise; analyzers/operators.py): operators, per rank, the top operators and Python
    # frames by self time in the steps (rank, name, kind, calls, self_ns, total_ns,
    # self_share); operators_overall, the same summed over ranks (name, kind, ranks, calls,
    # self_ns, total_ns, self_share); operator_sites, per rank, the user call sites behind
    # operator time (rank, call_site, calls, self_ns, top_operator); launch_operators, per
    # rank, the operators whose time contains launch calls (rank, name, call_site,
    # launches, launch_ns).
    operators: pd.DataFrame = field(default_factory=pd.DataFrame)
    operators_overall: pd.DataFrame = field(default_factory=pd.DataFrame)
    operator_sites: pd.DataFrame = field(default_factory=pd.DataFrame)
    launch_operators: pd.DataFrame = field(default_factory=pd.DataFrame)
