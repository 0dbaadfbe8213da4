"""What every advice rule works with: :class:`RuleContext` (one run's analysis as the rules
see it), the thresholds, the rule registry (:func:`rule`, :data:`RULES`) and the helpers that
word a :class:`~perfscope.analyzers.result.Recommendation`.  The rules themselves are in
:mod:`perfscope.analyzers.rules`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.context import HardwareContext, hardware_context
from perfscope.analyzers.result import Recommendation
from perfscope.analyzers.savings import NO_ESTIMATE

DEFAULT_THRESHOLDS: dict[str, float] = {
    "data_loading_share": 0.05,   # tb_plugin: DataLoader / step > 5 %
    "pcie_share": 0.05,
    "pageable_share": 0.01,       # pageable copy time per step / step
    "sync_share": 0.05,
    "network_share": 0.10,        # tb_plugin: communication / step > 10 %
    "host_share": 0.15,           # XProf: "All others" >= 15 % is high
    "compute_share": 0.85,        # traceml COMPUTE_BOUND
    "straggler_last_share": 0.5,
    "straggler_cost_share": 0.02,
    "busbw_fraction": 0.25,       # measured busbw below this fraction of the link's expectation
    "busbw_min_bytes": 1 << 20,   # only judge bandwidth on messages of at least 1 MiB
    "startup_share": 0.5,         # start-up API calls cover half the median window: not a training step
    "uvm_share": 0.02,            # Unified Memory migrations / fault service per step / step
    "uvm_prefetch_gbps": 25.0,    # what a bulk prefetch moves per second (a PCIe 4 x16 link's copy rate)
}

# Rough bus bandwidth a healthy link reaches on large messages, GB/s (nccl-tests busbw).
EXPECTED_BUSBW_GBPS = {"intra_node": 100.0, "inter_node": 10.0}

@dataclass
class RuleContext:
    """What rules read: the analysis tables plus the run's metadata.

    Attributes:
        steps: the breakdown (``Analysis.steps``).
        gpu_summary, kernels, launch, collectives, stragglers, copies: the other tables.
        sync_sites: the blocking API calls per (rank, call, site) (:func:`~.api_calls.blocking_sites`), or None.
        uvm: Unified Memory activity per rank (:func:`~.uvm.uvm_frame`), or None.
        meta: run metadata (``environment``, ``ranks``...).
        world_size: ranks in the job.
        thresholds: overrides of :data:`DEFAULT_THRESHOLDS`.
    """

    steps: pd.DataFrame
    gpu_summary: pd.DataFrame
    kernels: pd.DataFrame
    launch: pd.DataFrame
    collectives: pd.DataFrame
    stragglers: pd.DataFrame
    copies: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    world_size: int = 1
    thresholds: dict[str, float] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)  # values several rules share
    sync_sites: pd.DataFrame | None = None  # blocking calls by (call, site): api_calls.blocking_sites
    what_if: pd.DataFrame | None = None  # per row of steps: Analysis.what_if (savings.py's inputs)
    uvm: pd.DataFrame | None = None  # Unified Memory per rank: analyzers/uvm.py UVM_COLUMNS

    @property
    def hw(self) -> HardwareContext:
        """The run's hardware and software (:func:`~.context.hardware_context` of ``meta``)."""
        if "_hw" not in self.cache:
            self.cache["_hw"] = hardware_context(self.meta)
        return self.cache["_hw"]

    def th(self, name: str) -> float:
        """The threshold ``name`` (override or default)."""
        return float(self.thresholds.get(name, DEFAULT_THRESHOLDS[name]))

    @property
    def median_step_ns(self) -> int:
        """Median wall time of a step over all ranks and steps (0 without steps)."""
        return self.median("wall_ns")

    def median(self, col: str, ranks: list[int] | None = None) -> int:
        """Median of a steps column over all (or the given) ranks' steps, ns."""
        key = ("_median", col, None if ranks is None else tuple(ranks))
        if key not in self.cache:  # rules ask for the same medians over and over
            s = self.steps
            if not len(s) or col not in s.columns:
                self.cache[key] = 0
            else:
                v = self.column("steps", col)
                if ranks is not None:
                    v = v[np.isin(self.column("steps", "rank"), ranks)]
                self.cache[key] = int(np.median(v)) if v.size else 0
        return self.cache[key]

    def column(self, table: str, col: str) -> np.ndarray:
        """Column ``col`` of the table ``table`` (``steps``, ``copies``, ...) as its numpy
        array (``to_numpy()``), taken from the frame once: rules read the same columns over
        and over, and each read of a frame's column costs more than what a rule does with it."""
        key = ("_column", table, col)
        if key not in self.cache:
            self.cache[key] = getattr(self, table)[col].to_numpy()
        return self.cache[key]

    def share(self, ns: float) -> float:
        """``ns`` as a share of the median step."""
        m = self.median_step_ns
        return float(ns) / m if m > 0 else 0.0

    def median_saving(self, per_step: np.ndarray, ranks: list[int] | None = None) -> int:
        """Median over all (or the given) ranks' steps of a saving model's ns per step
        (aligned with ``steps``), ns; 0 without steps."""
        v = np.asarray(per_step)
        if ranks is not None and v.size:
            v = v[np.isin(self.column("steps", "rank"), ranks)]
        return int(np.median(v)) if v.size else 0

    def steps_per_rank(self) -> pd.Series:
        """Number of steps per rank."""
        return self.steps.groupby("rank").size() if len(self.steps) else pd.Series(dtype="int64")


RuleFn = Callable[[RuleContext], "Recommendation | None"]


@dataclass(frozen=True)
class Rule:
    """A registered rule: ``id``, target ``bucket`` and the function that evaluates it."""

    id: str
    bucket: str
    fn: RuleFn


RULES: list[Rule] = []


def rule(id: str, bucket: str) -> Callable[[RuleFn], RuleFn]:
    """Register a rule function under ``id``/``bucket``."""

    def deco(fn: RuleFn) -> RuleFn:
        RULES.append(Rule(id, bucket, fn))
        return fn

    return deco


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _rec(ctx: RuleContext, id: str, bucket: str, title: str, message: str, evidence: dict[str, Any],
         saving_ns: float, change: str, ranks: tuple[int, ...] = (), *, model: str, no_estimate: str = "") -> Recommendation:
    """A :class:`Recommendation` whose evidence names its saving model (``saving_model``, one
    of :mod:`.savings`'s).  With ``no_estimate`` (why the trace cannot tell) it claims no
    saving, says so in its message, and its model is :data:`~.savings.NO_ESTIMATE`."""
    if no_estimate:
        return Recommendation(id=id, bucket=bucket, title=title, message=f"{message} No saving is claimed: {no_estimate}.",
                              evidence={**evidence, "saving_model": NO_ESTIMATE}, change=change, ranks=ranks)
    saving = max(int(round(saving_ns)), 0)
    return Recommendation(id=id, bucket=bucket, title=title, message=message, evidence={**evidence, "saving_model": model},
                          saving_ns=saving, saving_share=round(ctx.share(saving), 4), change=change, ranks=ranks)
