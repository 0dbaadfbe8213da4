"""Options of an analysis (:class:`AnalysisConfig`)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field



@dataclass(frozen=True)
class LaunchThresholds:
    """HTA's defaults (``cuda_kernel_analysis.py``, ``idle_time_breakdown``), in ns.

    Here, not in :mod:`.kernels` which uses them: the CLI builds a config before it checks
    its arguments, and this module imports neither NumPy nor pandas.
    """

    runtime_cutoff_ns: int = 50_000
    launch_delay_cutoff_ns: int = 100_000
    consecutive_kernel_delay_ns: int = 30_000
    min_kernels: int = 100
    short_share: float = 0.5
    idle_share: float = 0.2
    launch_gap_ns: int = 100_000


@dataclass(frozen=True)
class AnalysisConfig:
    """What ``analyze_run`` should do.

    Attributes:
        step_pattern: regex over marker (NVTX / annotation) names that marks steps; None uses
            the recorded step marks (ProfilerStep#N, perfscope.step(), optimizer steps).
        ranks: analyse only these ranks (None: all).
        extend_steps_to_gpu: a step ends when the GPU work it launched ends.
        hta_compat: the GPU summary emulates HTA 0.5.0 (last ProfilerStep excluded, us rounding).
        top_kernels: kernel names kept per rank in ``Analysis.kernels``.
        top_operators: rows kept per rank (and overall) in the operator view
            (``Analysis.operators``, ``operators_overall``, ``operator_sites``,
            ``launch_operators``).
        launch: launch-bound thresholds (HTA's defaults).
        min_skew_ns: collectives whose arrivals spread by no more than this have no last rank.
        collective_clock: how cross-rank skew is measured: ``shared`` (GPU start times; all
            ranks on one clock), ``end_aligned`` (from durations; immune to clock offsets
            between hosts) or ``auto`` (``end_aligned`` when the ranks ran on several hosts).
        rule_thresholds: overrides of rule thresholds by name (see :mod:`.rules`).
    """

    step_pattern: str | None = None
    ranks: tuple[int, ...] | None = None
    extend_steps_to_gpu: bool = True
    hta_compat: bool = True
    top_kernels: int = 50
    top_operators: int = 20
    launch: LaunchThresholds = field(default_factory=LaunchThresholds)
    min_skew_ns: int = 0
    collective_clock: str = "auto"
    rule_thresholds: dict[str, float] = field(default_factory=dict)

    def check(self) -> None:
        """Refuse options no analysis can use (so that callers can check before costly work).

        Raises:
            UsageError: an invalid step pattern.
        """
        from perfscope.errors import UsageError

        if self.step_pattern:
            try:
                re.compile(self.step_pattern)
            except re.error as e:
                raise UsageError(f"--step-pattern {self.step_pattern!r} is not a valid regular expression ({e})") from None


__all__ = ["AnalysisConfig"]
