"""What the dashboard shows, loaded once per run: the opened run and its analysis.

:class:`DashboardData` holds the runs named on the command line (never a path from the
browser: the browser only ever sends an index into this list).  Each run is opened and
analysed on first use and cached; the timeline reads its lanes through
:func:`perfscope.analyzers.timeline.timeline_events` (this layer reads no table itself).
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pandas as pd

from perfscope import open_run
from perfscope.analyzers.compare import Comparison, compare_runs
from perfscope.analyzers.counters import counter_summary
from perfscope.analyzers.distributed import warmup_steps, without_steps
from perfscope.analyzers.result import Analysis
from perfscope.analyzers.sources import RunLike, WindowSource
from perfscope.errors import UsageError


class ServedRun(RunLike, WindowSource, Protocol):
    """What the dashboard uses of an opened run (``perfscope.open_run``'s result)."""

    path: Path
    meta: dict[str, Any]

    @property
    def status(self) -> str: ...

    @property
    def ranks(self) -> list[int]: ...

    def row_counts(self) -> dict[str, int]: ...


Analyze = Callable[[ServedRun], Analysis]
T = TypeVar("T")

_CANONICAL_INT = re.compile(r"-?(0|[1-9][0-9]{0,17})")


def strict_int(value: Any, what: str) -> int:
    """Return ``value`` as an int when the browser sent an integer: a JSON integer or its
    canonical decimal text (``"3"``, ``"-1"``).

    Forged callbacks are the threat: ``int()`` would take ``true``, ``1.9`` and ``" 2 "``
    and answer for another run, rank or step than the one sent, so anything else is refused.

    Raises:
        UsageError: ``value`` is not such an integer (the message names ``what``).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _CANONICAL_INT.fullmatch(value):
        return int(value)
    raise UsageError(f"no {what} {value!r}: expected an integer")


def default_analyze() -> Analyze:
    """Return the analysis the dashboard runs on each served run: :func:`perfscope.analyze`
    with the default options (the CLI passes its own, with ``--step-pattern``/``--ranks``)."""
    from perfscope.pipeline import analyze

    return analyze


@dataclass
class RunData:
    """One loaded run.

    Attributes:
        index: its position on the command line (the only id the browser sees).
        label: short name shown in the page (the directory name).
        run: the opened run.
        analysis: ``analyze_run(run)``.
        row_counts: rows per store table.
    """

    index: int
    label: str
    run: ServedRun
    analysis: Analysis
    row_counts: dict[str, int] = field(default_factory=dict)

    @property
    def steps(self) -> pd.DataFrame:
        """``Analysis.steps`` (one row per rank and step), warm-up steps included."""
        return self.analysis.steps

    @cached_property
    def warmup(self) -> tuple[int, ...]:
        """The run's warm-up steps (:func:`perfscope.analyzers.distributed.warmup_steps`)."""
        return tuple(warmup_steps(self.steps))

    @cached_property
    def gpu_counters(self) -> pd.DataFrame:
        """The run's GPU counter samples summarised per rank and counter
        (:func:`perfscope.analyzers.counters.counter_summary`; read once, for the Overview
        and the Timeline's counter tracks)."""
        return counter_summary(self.run)

    def summary_steps(self, include_warmup: bool = False) -> pd.DataFrame:
        """The steps that summaries use: without the warm-up steps unless ``include_warmup``."""
        return self.steps if include_warmup else without_steps(self.steps, self.warmup)

    def summary_analysis(self, include_warmup: bool = False) -> Analysis:
        """``analysis`` with :meth:`summary_steps` as its steps (for comparisons)."""
        return self.analysis if include_warmup or not self.warmup else replace(
            self.analysis, steps=self.summary_steps(False))

    def rank(self, value: Any) -> int:
        """Validate a rank sent by the browser (see :func:`strict_int`); returns it as int.

        Raises:
            UsageError: not a rank of this run.
        """
        rank = strict_int(value, "rank")
        if rank not in self.run.ranks and not (self.steps["rank"] == rank).any():
            raise UsageError(f"run {self.label} has no rank {value!r}")
        return rank

    def step_window(self, rank: Any, step: Any) -> tuple[int, int]:
        """Return (start_ns, end_ns) of ``step`` on ``rank`` from the analysis (both
        integers as :func:`strict_int` takes them).

        Raises:
            UsageError: not integers, or the rank has no such step.
        """
        rank, step = strict_int(rank, "rank"), strict_int(step, "step")
        s = self.steps
        row = s[(s["rank"] == rank) & (s["step"] == step)]
        if row.empty:
            raise UsageError(f"rank {rank} has no step {step} in run {self.label}")
        return int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0])


def _label(path: Path, taken: set[str]) -> str:
    name = path.name or str(path)
    label, i = name, 2
    while label in taken:
        label, i = f"{name} ({i})", i + 1
    taken.add(label)
    return label


class DashboardData:
    """The runs a dashboard serves, opened eagerly (to fail early) and analysed lazily.

    Args:
        run_paths: run directories, in the order they were named.
        analyze: the analysis function (default ``perfscope.analyzers.analyze_run``).

    Raises:
        UsageError: no run was named.
        InputError / NotARunError / ...: a path is not a readable run (from ``open_run``).
    """

    def __init__(self, run_paths: Sequence[str | os.PathLike[str]], analyze: Analyze | None = None) -> None:
        if not run_paths:
            raise UsageError("name at least one run directory: perfscope dashboard RUN [RUN...]")
        self._analyze = analyze
        self._runs: list[ServedRun] = [open_run(p) for p in run_paths]
        taken: set[str] = set()
        self.labels = [_label(Path(r.path), taken) for r in self._runs]
        self._loaded: dict[int, RunData] = {}
        self._locks = [threading.Lock() for _ in self._runs]
        self._comparisons: dict[tuple[int, int, bool], Comparison] = {}
        self._compare_lock = threading.Lock()
        self._kept: dict[tuple[Any, ...], Any] = {}
        self._kept_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._runs)

    def index(self, value: Any) -> int:
        """Validate a run index sent by the browser (see :func:`strict_int`); returns it as int.

        Raises:
            UsageError: not an index of a served run.
        """
        i = strict_int(value, "run")
        if not 0 <= i < len(self._runs):
            raise UsageError(f"no run {value!r}")
        return i

    def get(self, index: Any) -> RunData:
        """Return run ``index`` analysed (computed once, then cached)."""
        i = self.index(index)
        loaded = self._loaded.get(i)
        if loaded is not None:
            return loaded
        with self._locks[i]:  # Dash serves callbacks on threads; analyse each run once
            loaded = self._loaded.get(i)
            if loaded is None:
                run = self._runs[i]
                analyze = self._analyze or default_analyze()
                loaded = RunData(i, self.labels[i], run, analyze(run), run.row_counts())
                self._loaded[i] = loaded
        return loaded

    def kept(self, key: tuple[Any, ...], build: Callable[[], T]) -> T:
        """``build()``, computed on the first call with ``key`` and returned again after: for
        what depends only on the served runs (a tab's content, keyed by tab, run and
        warm-up choice), so opening a tab again costs nothing.  A few entries per run."""
        with self._kept_lock:
            if key in self._kept:
                return self._kept[key]
        value = build()
        with self._kept_lock:
            return self._kept.setdefault(key, value)

    def comparison(self, base: Any, new: Any, include_warmup: bool = False) -> Comparison:
        """``perfscope.analyzers.compare.compare_runs`` of two served runs (cached), on
        their steady steps unless ``include_warmup``."""
        a, b = self.index(base), self.index(new)
        key = (a, b, bool(include_warmup))
        if key not in self._comparisons:
            ra, rb = self.get(a), self.get(b)
            with self._compare_lock:
                if key not in self._comparisons:
                    self._comparisons[key] = compare_runs(ra.summary_analysis(include_warmup),
                                                          rb.summary_analysis(include_warmup),
                                                          base_label=ra.label, new_label=rb.label, top=20)
        return self._comparisons[key]


__all__ = ["DashboardData", "RunData", "ServedRun", "default_analyze", "strict_int"]
