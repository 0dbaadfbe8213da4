"""The writer the collectors get under a schedule with warm-ups: :class:`WarmupFilter`.

A warm-up collects (so that the collectors' start-up cost lands there) and its records are
then dropped, as torch.profiler discards its warm-up steps.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfscope._steps import drop_rows
from perfscope.collectors.base import Writer


class WarmupFilter:
    """A writer that drops rows whose ``start_ns`` (or ``ts_ns``) lies in a warm-up.

    Args:
        writer: the rank's writer.
        intervals: returns the current warm-up intervals (``StepTracker.dropped_intervals``).
    """

    def __init__(self, writer: Writer, intervals: Callable[[], list[tuple[int, int | None]]]) -> None:
        self._writer = writer
        self._intervals = intervals
        self.dropped_rows = 0

    def append(self, table_name: str, data: Any) -> None:
        """Hand ``data`` (a pyarrow Table or a dict of columns) on without its warm-up rows."""
        intervals = self._intervals()
        if intervals:
            data, n = drop_rows(data, intervals)
            self.dropped_rows += n
        self._writer.append(table_name, data)


__all__ = ["WarmupFilter"]
