"""The msgspec route's rank builder: chunks of events -> one rank's tables."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from perfscope.store.kineto.classify import Classified
from perfscope.store.kineto.decode import decode_args_batch
from perfscope.store.kineto.events import (
    CompleteRawTimes,
    CompleteRawTimesArgs,
    CounterRawTimes,
    CounterRawTimesArgs,
    Event,
)
from perfscope.store.kineto.exports import collectives_from_export
from perfscope.store.kineto.links import (
    LaunchIndex,
    collectives_from_kernels,
    sync_table,
)
from perfscope.store.kineto.operators import sorted_operators_table
from perfscope.store.kineto.tables import (
    RankTables,
    basic_tables,
    concat_columns,
    operator_columns,
    rank_tables,
)


def _detach(*groups: list[Any]) -> None:
    """Give the raw timestamps of these (few) events their own copy of the bytes."""
    for events in groups:
        for e in events:
            if e.__class__ in (CompleteRawTimes, CounterRawTimes, CompleteRawTimesArgs, CounterRawTimesArgs):
                e.ts_raw, e.dur_raw = e.ts_raw.copy(), e.dur_raw.copy()


class EventRankBuilder:
    """Builds one rank's tables from chunks of events, holding columns, not events.

    Per chunk, the events a table needs become column pieces at once; only what links
    across chunks is kept: API launches by correlation id (for the thread a sync waited on
    and the launch of an NCCL kernel), the sync events, NCCL kernels, record_param_comms ops
    and perfscope collective rows (all few).
    """

    def __init__(self, base_ns: int, pid_map: dict[Any, Any] | None = None,
                 device_map: dict[Any, Any] | None = None) -> None:
        self.base_ns = base_ns
        self.pid_map = pid_map
        self.device_map = device_map
        self.parts: dict[str, list[dict[str, Any]]] = {}
        # Per chunk, the api calls' (args, pids, tids, starts in ns without base): the launch
        # index is built from them only when a sync event or an NCCL kernel needs it.
        self.api_parts: list[tuple[list[Any], list[Any], list[Any], np.ndarray]] = []
        self.sync: list[Event] = []
        self.nccl: list[Event] = []
        self.rpc: list[Event] = []
        self.colls: list[Event] = []
        self.operators: list[dict[str, Any]] = []  # per chunk, operator_columns

    def add(self, events: Iterable[Event] | Classified) -> None:
        """Add a chunk of events (or an already classified set)."""
        if isinstance(events, Classified):
            c = events
        else:
            c = Classified()
            c.add(events)
        n_nccl = len(self.nccl)
        self.sync.extend(c.sync)
        self.rpc.extend(c.rpc)
        self.colls.extend(c.colls)
        try:  # most traces have no NCCL kernel: one search of all the names says so
            joined = "\n".join([e.name for e in c.kernels])
            maybe_nccl = "nccl" in joined or "nccl" in joined.lower()  # (NCCL's own names need no lower())
        except TypeError:
            maybe_nccl = True
        if maybe_nccl:
            # is_nccl_kernel, inline: a call per kernel costs more than the test.
            self.nccl += [e for e in c.kernels if isinstance(e.name, str) and e.name and "nccl" in e.name.lower()]
        # Events kept past this chunk must not pin its text through their raw timestamps.
        _detach(c.sync, c.rpc, c.colls, self.nccl[n_nccl:])
        # The api calls' args, pids, tids and starts (ns) come back in api_parts; nothing
        # there points into the chunk's text (decoded args, pids and tids are objects of
        # their own).
        tables = basic_tables(c, self.base_ns, self.pid_map, self.device_map, api_parts=self.api_parts)
        for name, cols in tables.items():
            self.parts.setdefault(name, []).append(cols)
        if c.operators:
            self.operators.append(operator_columns(c.operators, self.base_ns, self.pid_map))

    def finish(self) -> RankTables:
        """Join the pieces and build the tables that link across chunks."""
        out = {name: concat_columns(pieces) for name, pieces in self.parts.items()}
        self.parts.clear()
        warnings: list[str] = []
        launches = LaunchIndex(self.api_parts if self.sync or (self.nccl and not self.colls) else (), self.base_ns)
        if self.sync:
            out["sync"] = sync_table(self.sync, launches, self.base_ns)
        if self.colls:
            decode_args_batch(self.colls)
            out["collectives"] = collectives_from_export(self.colls, self.base_ns)
        elif self.nccl:
            out["collectives"] = collectives_from_kernels(self.nccl, self.rpc, launches, self.base_ns, warnings)
        if self.operators:
            ops = {k: pa.concat_arrays([p[k] for p in self.operators]) if isinstance(self.operators[0][k], pa.Array)
                   else np.concatenate([p[k] for p in self.operators]) for k in self.operators[0]}
            self.operators.clear()
            out["operators"] = sorted_operators_table(**ops)
        return rank_tables(out, warnings)


def build_rank_tables(events: Iterable[Event] | Classified, base_ns: int, *, pid_map: dict[Any, Any] | None = None) -> RankTables:
    """Turn one rank's events into column batches for the store.

    Args:
        events: the rank's decoded events (any order), or a :class:`Classified` set.
        base_ns: ``baseTimeNanoseconds`` (0 when the trace has absolute timestamps).
        pid_map: exported-pid -> original host pid (perfscope's own multi-rank exports).

    Returns:
        a :class:`RankTables` whose ``tables`` map table names to {column: values}.
    """
    builder = EventRankBuilder(base_ns, pid_map)
    builder.add(events)
    return builder.finish()

