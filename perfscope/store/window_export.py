"""A time window of some ranks of a run as Chrome trace JSON (the dashboard's "Open in
Perfetto"): the events that overlap the window, written by :mod:`perfscope.store.chrome`.

:class:`RunWindow` is a read-only view of a run whose ``table`` returns only the rows that
overlap the window (``Run.window``, so an event that spans the whole window is kept), so
the exporter writes a window exactly as it writes a whole run.
"""
from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfscope.errors import UsageError
from perfscope.store.chrome import trace_base_ns, write_trace

if TYPE_CHECKING:
    import pandas as pd

    from perfscope.store.reader import Run


class RunWindow:
    """``run`` seen through the window ``[t0_ns, t1_ns)``: metadata as the run's, tables
    holding only the rows that overlap the window (samples: those inside it)."""

    def __init__(self, run: Run, t0_ns: int, t1_ns: int) -> None:
        if int(t1_ns) <= int(t0_ns):
            raise UsageError(f"an empty window ({t0_ns}..{t1_ns} ns): pass t0_ns < t1_ns")
        self.run, self.t0_ns, self.t1_ns = run, int(t0_ns), int(t1_ns)
        self.meta, self.path = run.meta, run.path

    @property
    def ranks(self) -> list[int]:
        """The run's ranks."""
        return self.run.ranks

    def rank_meta(self, rank: int) -> dict[str, Any]:
        """Rank ``rank``'s metadata (the run's)."""
        return self.run.rank_meta(rank)

    def table(self, name: str, ranks: Iterable[int] | None = None, columns: Sequence[str] | None = None
              ) -> pd.DataFrame:
        """The rows of table ``name`` of ``ranks`` (all when None) that overlap the window,
        rank by rank; columns as ``Run.table`` gives them."""
        import pandas as pd

        wanted = self.run.ranks if ranks is None else [int(r) for r in ranks]
        frames = [self.run.window(name, r, columns, self.t0_ns, self.t1_ns) for r in wanted]
        frames = [f for f in frames if len(f)] or frames[:1]
        if not frames:
            return self.run.window(name, -1, columns, self.t0_ns, self.t1_ns)
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def chrome_window_trace(run: Run, ranks: Sequence[int], t0_ns: int, t1_ns: int) -> bytes:
    """Chrome trace JSON (what ``perfscope export chrome`` writes) of the events of ``ranks``
    that overlap ``[t0_ns, t1_ns)``.

    Returns:
        the JSON document as UTF-8 bytes.

    Raises:
        UsageError: no rank, a rank the run lacks, or an empty window.
    """
    wanted = sorted({int(r) for r in ranks})
    missing = [r for r in wanted if r not in run.ranks]
    if not wanted or missing:
        raise UsageError(f"rank(s) {missing or 'none'} not in {run.path}; it has ranks {run.ranks}")
    view = RunWindow(run, t0_ns, t1_ns)
    with tempfile.TemporaryDirectory(prefix="perfscope-window-") as tmp:
        out = Path(tmp) / "trace.json"
        write_trace(view, wanted, out, base=trace_base_ns(view, wanted))  # type: ignore[arg-type]
        return out.read_bytes()


__all__ = ["RunWindow", "chrome_window_trace"]
