"""The writer the collectors get under a schedule with warm-ups: :class:`WarmupFilter`.

A warm-up collects (so that the collectors' start-up cost lands there) and its records are
then dropped, as torch.profiler discards its warm-up steps.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfscope._steps import dropped_mask
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
            data = self._drop(data, intervals)
        self._writer.append(table_name, data)

    def _drop(self, data: Any, intervals: list[tuple[int, int | None]]) -> Any:
        names = list(data.column_names) if hasattr(data, "column_names") else list(data)
        col = next((c for c in ("start_ns", "ts_ns") if c in names), None)
        if col is None:
            return data
        import numpy as np

        starts = np.asarray(data.column(col) if hasattr(data, "column_names") else data[col], dtype=np.int64)
        drop = dropped_mask(starts, intervals)
        n = int(drop.sum())
        if not n:
            return data
        self.dropped_rows += n
        if hasattr(data, "column_names"):
            import pyarrow as pa

            return data.filter(pa.array(~drop))
        keep = np.flatnonzero(~drop)
        return {k: [v[i] for i in keep] for k, v in data.items()}


__all__ = ["WarmupFilter"]
