"""What the dashboard shows, loaded once per run: the opened run and its analysis.

:class:`DashboardData` holds the runs named on the command line (never a path from the
browser: the browser only ever sends an index into this list).  Each run is opened and
analysed on first use and cached; the timeline reads only the table columns, the rank and
the time window it draws, straight from the run's Parquet part files.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from perfscope.analyzers.result import Analysis
from perfscope.errors import PerfscopeError, UsageError
from perfscope.store import Run, open_run

Analyze = Callable[[Run], Analysis]


def default_analyze() -> Analyze:
    """Return ``perfscope.analyzers.analyze_run``.

    Raises:
        PerfscopeError: the analyzers are not installed in this build.
    """
    try:
        from perfscope.analyzers import analyze_run  # type: ignore[attr-defined]
    except ImportError:
        try:
            from perfscope.analyzers.analysis import analyze_run  # type: ignore[no-redef]
        except ImportError:
            analyze_run = None  # type: ignore[assignment]
    if analyze_run is None:
        raise PerfscopeError(
            "the analyzers (perfscope.analyzers.analyze_run) are not available in this build; "
            "reinstall perfscope with `pip install -e .`"
        ) from None
    return analyze_run  # type: ignore[no-any-return]


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
    run: Run
    analysis: Analysis
    row_counts: dict[str, int] = field(default_factory=dict)

    @property
    def steps(self) -> pd.DataFrame:
        """``Analysis.steps`` (one row per rank and step)."""
        return self.analysis.steps

    def step_window(self, rank: int, step: int) -> tuple[int, int]:
        """Return (start_ns, end_ns) of ``step`` on ``rank`` from the analysis.

        Raises:
            UsageError: the rank has no such step.
        """
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
        self._runs = [open_run(p) for p in run_paths]
        taken: set[str] = set()
        self.labels = [_label(Path(r.path), taken) for r in self._runs]
        self._loaded: dict[int, RunData] = {}
        self._locks = [threading.Lock() for _ in self._runs]
        self._comparisons: dict[tuple[int, int], Any] = {}
        self._compare_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._runs)

    def index(self, value: Any) -> int:
        """Validate a run index sent by the browser; returns it as int.

        Raises:
            UsageError: not an index of a served run.
        """
        try:
            i = int(value)
        except (TypeError, ValueError):
            raise UsageError(f"no run {value!r}") from None
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


    def comparison(self, base: Any, new: Any) -> Any | None:
        """``perfscope.analyzers.compare.compare_runs`` of two served runs (cached).

        Returns:
            the ``Comparison``, or None when this build has no compare analyzer.
        """
        a, b = self.index(base), self.index(new)
        key = (a, b)
        if key not in self._comparisons:
            try:
                from perfscope.analyzers.compare import compare_runs
            except ImportError:
                return None
            ra, rb = self.get(a), self.get(b)
            with self._compare_lock:
                if key not in self._comparisons:
                    self._comparisons[key] = compare_runs(ra.analysis, rb.analysis, base_label=ra.label,
                                                          new_label=rb.label, top=20)
        return self._comparisons[key]


# -- timeline events -----------------------------------------------------------------------

# (table, columns to read) for each kind of lane; names stay untrusted until drawn.
_LANE_SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("host", ("start_ns", "dur_ns", "kind", "name")),
    ("markers", ("start_ns", "dur_ns", "name")),
    ("kernels", ("start_ns", "dur_ns", "stream", "name")),
    ("memcpy", ("start_ns", "dur_ns", "copy_kind", "bytes")),
    ("memset", ("start_ns", "dur_ns", "bytes")),
    ("collectives", ("start_ns", "dur_ns", "func", "bytes", "comm_id")),
    ("sync", ("start_ns", "dur_ns", "sync_kind")),
)


def read_window(run: Run, table: str, rank: int, columns: Sequence[str], t0_ns: int, t1_ns: int) -> pa.Table:
    """Read ``columns`` of ``table`` for one rank, rows that overlap ``[t0_ns, t1_ns)``.

    Only rows with ``start_ns`` in ``[t0 - (t1 - t0), t1)`` are read (Parquet row groups
    outside it are skipped through their ``start_ns`` statistics), then rows ending before
    ``t0`` are dropped.  Columns a part file lacks (older writers) come back as nulls.

    Returns:
        an Arrow table with exactly ``columns`` (dictionary columns decoded to strings).
    """
    from perfscope.store.schema import table as table_decl

    decl = table_decl(table)
    lo = int(t0_ns) - (int(t1_ns) - int(t0_ns))
    pieces: list[pa.Table] = []
    for _, path in run.part_files(table, [rank]):
        present = set(pq.read_schema(path).names)
        cols = [c for c in columns if c in present]
        if "start_ns" not in present:
            continue
        tbl = pq.read_table(path, columns=cols, filters=[("start_ns", ">=", lo), ("start_ns", "<", int(t1_ns))])
        for c in columns:
            if c not in present:
                tbl = tbl.append_column(c, pa.nulls(tbl.num_rows, decl.column(c).type))
        pieces.append(tbl.select(list(columns)))
    if not pieces:
        return pa.table({c: pa.array([], decl.column(c).type) for c in columns})
    tbl = pa.concat_tables([_decode(p) for p in pieces], promote_options="default")
    if "dur_ns" in tbl.column_names and tbl.num_rows:
        end = pc.add(tbl["start_ns"], pc.fill_null(tbl["dur_ns"], 0))
        tbl = tbl.filter(pc.greater(end, int(t0_ns)))
    return tbl


def _decode(tbl: pa.Table) -> pa.Table:
    cols = []
    for c in tbl.columns:
        cols.append(c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c)
    return pa.Table.from_arrays(cols, names=tbl.column_names)


def _strings(col: pa.ChunkedArray, default: str = "") -> np.ndarray:
    return np.asarray(pc.fill_null(col.cast(pa.string()), default).to_numpy(zero_copy_only=False), dtype=object)


def timeline_events(run: Run, rank: int, t0_ns: int, t1_ns: int) -> pd.DataFrame:
    """The events of one rank that overlap ``[t0_ns, t1_ns)``, one row per event, by lane.

    Lanes: ``host: KIND`` (host spans), ``markers`` (then ``markers 2``, ``markers 3``
    for ranges nested inside others), ``stream N`` (kernels per CUDA
    stream, NCCL kernels included), ``copies`` (memcpy and memset), ``collectives``,
    ``sync`` (host-side synchronisation).

    Returns:
        DataFrame with ``lane`` (str), ``start_ns``, ``dur_ns`` (int64 ns) and ``name``
        (untrusted text, for hover), ordered host lanes, markers, streams, copies,
        collectives, sync; within a lane by ``start_ns``.
    """
    frames: list[pd.DataFrame] = []
    for table, cols in _LANE_SOURCES:
        tbl = read_window(run, table, rank, cols, t0_ns, t1_ns)
        if tbl.num_rows == 0:
            continue
        start = tbl["start_ns"].to_numpy(zero_copy_only=False).astype("int64")
        dur = pc.fill_null(tbl["dur_ns"], 0).to_numpy(zero_copy_only=False).astype("int64")
        if table == "host":
            lane = np.char.add("host: ", _strings(tbl["kind"], "other").astype(str)).astype(object)
            name = _strings(tbl["name"])
        elif table == "markers":
            name = _strings(tbl["name"])
            depth = nesting_depth(start, dur)
            lane = np.where(depth == 0, "markers", np.char.add("markers ", (depth + 1).astype(str))).astype(object)
        elif table == "kernels":
            streams = pc.fill_null(tbl["stream"], -1).to_numpy(zero_copy_only=False)
            uniq, inverse = np.unique(streams, return_inverse=True)
            lane = np.array([f"stream {s}" if s >= 0 else "stream ?" for s in uniq], dtype=object)[inverse]
            name = _strings(tbl["name"])
        elif table in ("memcpy", "memset"):
            kind = _strings(tbl["copy_kind"], "copy") if table == "memcpy" else np.full(len(start), "memset", object)
            nbytes = pc.fill_null(tbl["bytes"], 0).to_numpy(zero_copy_only=False)
            lane = np.full(len(start), "copies", object)
            name = np.array([f"{k} {b / 1e6:.2f} MB" for k, b in zip(kind, nbytes)], dtype=object)
        elif table == "collectives":
            lane = np.full(len(start), "collectives", object)
            func, comm = _strings(tbl["func"], "collective"), _strings(tbl["comm_id"])
            nbytes = pc.fill_null(tbl["bytes"], 0).to_numpy(zero_copy_only=False)
            name = np.array([f"{f} {b / 1e6:.2f} MB on {c}" for f, b, c in zip(func, nbytes, comm)], dtype=object)
        else:  # sync
            lane = np.full(len(start), "sync", object)
            name = np.char.add("synchronize ", _strings(tbl["sync_kind"], "unknown").astype(str)).astype(object)
        frames.append(pd.DataFrame({"lane": lane, "start_ns": start, "dur_ns": dur, "name": name}))
    if not frames:
        return pd.DataFrame({"lane": pd.Series([], dtype=object), "start_ns": pd.Series([], dtype="int64"),
                             "dur_ns": pd.Series([], dtype="int64"), "name": pd.Series([], dtype=object)})
    events = pd.concat(frames, ignore_index=True)
    order = {lane: _lane_rank(lane) for lane in events["lane"].unique()}
    events["_o"] = events["lane"].map(order)
    return events.sort_values(["_o", "lane", "start_ns"], kind="stable").drop(columns="_o").reset_index(drop=True)


MAX_NESTED_MARKERS = 50_000


def nesting_depth(start_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """Nesting level of each range (0: not inside another), so nested markers get own lanes.

    A range is inside another when it starts at or after it and ends at or before its end.
    Partially overlapping ranges (not nested) go one level deeper than the one they overlap.
    Beyond :data:`MAX_NESTED_MARKERS` ranges everything is level 0 (one lane).

    Returns:
        int64 array, one level per range, in the input order.
    """
    n = len(start_ns)
    depth = np.zeros(n, "int64")
    if n == 0 or n > MAX_NESTED_MARKERS:
        return depth
    end = np.asarray(start_ns, "int64") + np.asarray(dur_ns, "int64")
    order = np.lexsort((-end, np.asarray(start_ns, "int64")))  # by start, longest first
    stack: list[int] = []  # ends of the open ranges
    for i in order:
        s = start_ns[i]
        while stack and stack[-1] <= s:
            stack.pop()
        depth[i] = len(stack)
        stack.append(int(end[i]))
    return depth


def _lane_rank(lane: str) -> tuple[int, int]:
    """Sort key of a lane: host, markers (by depth), streams (by number), copies, collectives, sync."""
    if lane.startswith("host"):
        return (0, 0)
    if lane.startswith("markers"):
        tail = lane[len("markers"):].strip()
        return (1, int(tail) if tail.isdigit() else 0)
    if lane.startswith("stream"):
        tail = lane.split(" ", 1)[1]
        return (2, int(tail) if tail.lstrip("-").isdigit() else 1 << 62)
    return ({"copies": 3, "collectives": 4, "sync": 5}.get(lane, 6), 0)


__all__ = ["DashboardData", "RunData", "default_analyze", "read_window", "timeline_events", "nesting_depth"]
