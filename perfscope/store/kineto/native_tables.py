"""The native route's rank builder: extracted columns -> one rank's tables."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfscope.store.arrays import from_numpy, int_values, str_array
from perfscope.store.kineto.classify import CPU_OP_PREFIXES
from perfscope.store.kineto.decode import decode_args_batch
from perfscope.store.kineto.events import CompleteRawTimesArgs
from perfscope.store.kineto.links import Launch, collectives_from_kernels, sync_table
from perfscope.store.kineto.native import CODE, FIELD, Rows
from perfscope.store.kineto.operators import NULL_KEY, operators_table, preorder
from perfscope.store.kineto.checks import step_number
from perfscope.store.kineto.parse import STEP_RE, parse_memcpy_name, parse_memset_kind
from perfscope.store.kineto.tables import RankTables, rank_tables

_SPAN_EVENTS = msgspec.json.Decoder(list[CompleteRawTimesArgs], float_hook=str)
#: The order of :func:`~perfscope.store.kineto.tables.basic_tables`'s tables within a chunk.
_BASIC_ORDER = ("api", "kernels", "memcpy", "memset", "markers", "steps")


def _per_name(names: pa.Array, fn: Callable[[str], Any]) -> tuple[list[Any], np.ndarray]:
    """``fn`` of each distinct name of ``names``: (the values, each row's index into them)."""
    encoded = pc.dictionary_encode(names)
    return [fn(s) for s in encoded.dictionary.to_pylist()], int_values(encoded.indices)


def _labels(values: Sequence[str], index: np.ndarray) -> pa.Array:
    """A string column: ``values[index[i]]`` for each row."""
    return str_array(list(values)).take(from_numpy(index.astype(np.int64, copy=False)))


def _annotation_kind(name: str) -> tuple[str, int | None]:
    """What ``Classified.add`` makes of a user annotation: (step, its number), (rpc,
    None) for record_param_comms, else (marker, None)."""
    if name.startswith("ProfilerStep#") and STEP_RE.match(name):
        return "step", step_number(name[13:])
    return ("rpc", None) if name == "record_param_comms" else ("marker", None)


def _cpu_op_kind(name: str) -> tuple[str, int | None]:
    """What ``Classified.add`` makes of a cpu_op: a step, an rpc, or nothing."""
    if not name.startswith(CPU_OP_PREFIXES):
        return "", None
    if name == "record_param_comms":
        return "rpc", None
    return ("step", step_number(name[13:])) if STEP_RE.match(name) else ("", None)


def _is_nccl(name: str) -> bool:
    """:func:`perfscope.store.kineto.parse.is_nccl_kernel`, as ``EventRankBuilder.add`` inlines it."""
    return bool(name) and "nccl" in name.lower()


class _ColumnLaunches:
    """The launch index of :class:`perfscope.store.kineto.links.LaunchIndex` over the api
    table's columns: ``get(correlation)`` -> :class:`~perfscope.store.kineto.links.Launch`
    of the last api row (in table order) with that correlation id, or None."""

    def __init__(self, rows: Rows, api: np.ndarray) -> None:
        has = (rows.col("present")[api] & (1 << FIELD["correlation"])) != 0
        self.rows = api[has]
        keys = rows.col("correlation")[self.rows]
        # Stable: among equal ids, the last one in table order comes last.
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]
        self.source = rows

    def get(self, correlation: Any) -> Launch | None:
        """The launch with this correlation id (an int), or None."""
        if not isinstance(correlation, int) or not -(1 << 63) <= correlation < (1 << 63):
            return None
        i = int(np.searchsorted(self.keys, correlation, side="right")) - 1
        if i < 0 or self.keys[i] != correlation:
            return None
        row = int(self.rows[self.order[i]])
        rows = self.source
        present = int(rows.col("present")[row])
        pid = int(rows.col("pid")[row]) if present >> FIELD["pid"] & 1 else None
        tid = int(rows.col("tid")[row]) if present >> FIELD["tid"] & 1 else None
        return Launch(pid, tid, int(rows.col("ts")[row]), None)


class _Selection:
    """Some rows of :class:`Rows` (by index, in table order) and their column values."""

    def __init__(self, rows: Rows, idx: np.ndarray, base_ns: int) -> None:
        self.rows = rows
        self.idx = idx
        self.present = rows.col("present")[idx]
        self.base_ns = base_ns

    def has(self, field: str) -> np.ndarray:
        """Bool mask: the rows where ``field`` is present."""
        return (self.present & (1 << FIELD[field])) != 0

    def values(self, field: str) -> np.ndarray:
        """The rows' values of ``field`` (a copy; meaningless where it is absent)."""
        return self.rows.col(field)[self.idx]

    def ints(self, field: str, type_: pa.DataType = pa.int64(), *, fallback: str | None = None,
             present: str | None = None, only: np.ndarray | None = None) -> pa.Array:
        """An integer column of ``field``: null where it is absent, or ``fallback``'s value
        there when given (device from pid, stream from tid); ``present`` names the field
        whose presence counts (grid_y: grid_x's); ``only`` nulls the rows outside a mask."""
        values = self.values(field)
        valid = self.has(present or field)
        if fallback is not None:
            values = np.where(valid, values, self.values(fallback))
            valid = valid | self.has(fallback)
        if only is not None:
            valid = valid & only
        if not valid.all():
            values = np.where(valid, values, 0)
        else:
            valid = None
        if type_ == pa.int32():
            # Narrowed in numpy when every value fits (an Arrow cast costs ~3x more); else
            # the cast raises for the value that does not, as the msgspec route's does.
            narrow = values.astype(np.int32)
            if np.array_equal(narrow, values):
                values, type_ = narrow, None
        return from_numpy(values, type_, valid)

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """(start with the trace's base, duration), int64 ns."""
        return self.values("ts") + self.base_ns, self.values("dur")

    def names(self) -> pa.Array:
        """The rows' names (a new string array)."""
        return self.rows.names.take(from_numpy(self.idx))

    def on_device(self) -> dict[str, Any]:
        """The columns every GPU activity table starts with: ``start_ns``, ``dur_ns`` (int64
        ns), ``device`` (args.device, else an int pid), ``stream`` (args.stream, else an int
        tid) and ``correlation``."""
        start, dur = self.times()
        return {"start_ns": start, "dur_ns": dur, "device": self.ints("device", pa.int32(), fallback="pid"),
                "stream": self.ints("stream", fallback="tid"), "correlation": self.ints("correlation")}


class _ByName(NamedTuple):
    """Rows of one category told apart by their names (:func:`_annotation_kind`,
    :func:`_cpu_op_kind`): each row's kind, and the step number of step rows."""

    idx: np.ndarray
    what: np.ndarray
    kinds: list[tuple[str, int | None]]
    name_of_row: np.ndarray  # each row's index into kinds

    def rows(self, kind: str) -> np.ndarray:
        """The rows of ``kind``, in table order."""
        return self.idx[self.what == kind] if len(self.idx) else self.idx

    def step_numbers(self) -> list[int | None]:
        """The number of each ``step`` row, in the order of ``rows("step")``."""
        return [self.kinds[i][1] for i in self.name_of_row[self.what == "step"].tolist()] if len(self.idx) else []


def _by_name(rows: Rows, idx: np.ndarray, kind_of: Callable[[str], tuple[str, int | None]]) -> _ByName:
    """``idx``'s rows of ``rows`` told apart by ``kind_of`` of their names (once per name)."""
    if not len(idx):
        return _ByName(idx, idx, [], idx)
    kinds, index = _per_name(rows.names.take(from_numpy(idx)), kind_of)
    return _ByName(idx, np.array([k for k, _ in kinds])[index], kinds, index)


class ColumnRankBuilder:
    """Builds one rank's tables from :class:`~perfscope.store.kineto.native.Rows`
    (``finish()``, as :class:`~perfscope.store.kineto.builder.EventRankBuilder` does
    from events).

    Args:
        rows: the events.
        base_ns: ``baseTimeNanoseconds`` (0 when the trace has none).
        sizes: the chunks the msgspec route would hand the events out in (see
            :class:`~perfscope.store.kineto.read.ReadTrace`).
    """

    def __init__(self, rows: Rows, base_ns: int, sizes: Sequence[int]) -> None:
        self.rows = rows
        self.base_ns = base_ns
        # Row i is in chunk searchsorted(bounds, i, "right").
        self.bounds = np.cumsum(np.asarray(sizes, dtype=np.int64))
        self.chunked = len(self.bounds) > 1
        # (a Sink's columns are strided; this one is read often)
        self.cat = np.ascontiguousarray(rows.col("cat"))

    def _chunk_of(self, idx: np.ndarray) -> np.ndarray:
        """The chunk of each of rows ``idx``."""
        if not self.chunked:
            return np.zeros(len(idx), np.int64)
        return np.searchsorted(self.bounds, idx, side="right")

    def _joined(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """Rows of two categories in the chunked route's order: per chunk, the first's
        rows, then the second's (see :data:`~perfscope.store.kineto.read.JOINED_PER_CHUNK`)."""
        idx = np.concatenate([first, second])
        if not self.chunked or not len(first) or not len(second):
            return idx
        key = self._chunk_of(idx) * 2
        key[len(first):] += 1
        return idx[np.argsort(key, kind="stable")]

    def _first_chunk(self, idx: np.ndarray) -> int:
        """The chunk of the first of rows ``idx`` (not empty)."""
        return int(self._chunk_of(idx.min(keepdims=True))[0])

    def _events(self, idx: np.ndarray) -> list[Any]:
        """The events at rows ``idx``, decoded by the importer's decoder from their spans,
        each with its :class:`~perfscope.store.kineto.events.EventArgs` (empty when it has none)."""
        if not len(idx):
            return []
        text = self.rows.text
        starts, ends = self.rows.col("start")[idx].tolist(), self.rows.col("end")[idx].tolist()
        events = _SPAN_EVENTS.decode(b"[" + b",".join([text[s:e] for s, e in zip(starts, ends)]) + b"]")
        decode_args_batch(events)
        return events

    def finish(self) -> RankTables:
        """The rank's tables (see :func:`perfscope.store.kineto.builder.build_rank_tables`)."""
        rows, cat = self.rows, self.cat
        at = {name: np.flatnonzero(cat == code) for name, code in CODE.items() if not name.startswith("perfscope_")}
        annotations = _by_name(rows, at["user_annotation"], _annotation_kind)
        cpu_ops = _by_name(rows, at["cpu_op"], _cpu_op_kind)
        api = self._joined(at["cuda_runtime"], at["cuda_driver"])
        kernels = at["kernel"]
        nccl = self._nccl(kernels)
        tables = {
            "api": (api, self._api),
            "kernels": (kernels, self._kernels),
            "memcpy": (at["gpu_memcpy"], self._memcpy),
            "memset": (at["gpu_memset"], self._memset),
            # per chunk, host annotations then GPU annotations
            "markers": (self._joined(annotations.rows("marker"), at["gpu_user_annotation"]), self._markers),
            "steps": (self._joined(annotations.rows("step"), cpu_ops.rows("step")),
                      lambda idx: self._steps(idx, annotations, cpu_ops)),
        }
        # Tables in the order the chunked route first makes them.
        built = sorted((self._first_chunk(idx), _BASIC_ORDER.index(name), name, make)
                       for name, (idx, make) in tables.items() if len(idx))
        out = {name: make(tables[name][0]) for _, _, name, make in built}
        # -- tables that link events: sync, collectives -------------------------------------
        warnings: list[str] = []
        sync = at["cuda_sync"]
        if len(sync) or len(nccl):
            launches = _ColumnLaunches(rows, api)
            if len(sync):
                out["sync"] = sync_table(self._events(sync), launches, self.base_ns)  # type: ignore[arg-type]
            if len(nccl):
                rpc = self._events(self._joined(annotations.rows("rpc"), cpu_ops.rows("rpc")))
                out["collectives"] = collectives_from_kernels(self._events(nccl), rpc, launches,  # type: ignore[arg-type]
                                                              self.base_ns, warnings)
        ops = self._joined(at["cpu_op"], at["python_function"])
        if len(ops):
            out["operators"] = self._operators(ops)
        return rank_tables(out, warnings)

    def _operators(self, ops: np.ndarray) -> dict[str, Any]:
        """The ``operators`` table (:func:`~.operators.operators_table`) of rows ``ops``
        (per chunk, cpu_ops then Python frames), put in :func:`~.operators.preorder`."""
        s = _Selection(self.rows, ops, self.base_ns)
        start, dur = s.times()
        keys = [np.where(s.has(f), s.values(f), NULL_KEY) for f in ("pid", "tid")]
        ops = ops[preorder(start, dur, *keys)]
        s = _Selection(self.rows, ops, self.base_ns)  # (the columns taken once, in their order)
        start, dur = s.times()
        return operators_table(start, dur, s.ints("pid"), s.ints("tid"), s.names(),
                               self.cat[ops] == CODE["python_function"], s.ints("external_id"))

    def _nccl(self, kernels: np.ndarray) -> np.ndarray:
        """The rows of ``kernels`` that are NCCL's."""
        if not len(kernels):
            return kernels
        flags, index = _per_name(self.rows.names.take(from_numpy(kernels)), _is_nccl)
        return kernels[np.asarray(flags, dtype=bool)[index]] if any(flags) else kernels[:0]

    def _api(self, api: np.ndarray) -> dict[str, Any]:
        """The ``api`` table: per chunk, runtime calls then driver calls."""
        s = _Selection(self.rows, api, self.base_ns)
        start, dur = s.times()
        is_driver = self.cat[api] == CODE["cuda_driver"]
        return {
            "start_ns": start, "dur_ns": dur,
            "pid": s.ints("pid"), "tid": s.ints("tid"), "correlation": s.ints("correlation"),
            "name": s.names(),
            "kind": _labels(("runtime", "driver"), is_driver.astype(np.int64)),
            "cbid": s.ints("cbid", pa.int32()),
        }

    def _kernels(self, kernels: np.ndarray) -> dict[str, Any]:
        """The ``kernels`` table."""
        s = _Selection(self.rows, kernels, self.base_ns)
        return {
            **s.on_device(),
            "name": s.names(),
            "grid_x": s.ints("grid_x", pa.int32()), "grid_y": s.ints("grid_y", pa.int32(), present="grid_x"),
            "grid_z": s.ints("grid_z", pa.int32(), present="grid_x"),
            "block_x": s.ints("block_x", pa.int32()),
            "block_y": s.ints("block_y", pa.int32(), present="block_x"),
            "block_z": s.ints("block_z", pa.int32(), present="block_x"),
            "registers_per_thread": s.ints("registers", pa.int32()),
            "shared_mem_bytes": s.ints("shared_memory"),
            "graph_id": s.ints("graph_id"),
        }

    def _memcpy(self, memcpy: np.ndarray) -> dict[str, Any]:
        """The ``memcpy`` table (copy and memory kinds parsed once per distinct name)."""
        s = _Selection(self.rows, memcpy, self.base_ns)
        parsed, index = _per_name(s.names(), parse_memcpy_name)
        return {
            **s.on_device(),
            "copy_kind": _labels([p[0] for p in parsed], index),
            "bytes": s.ints("bytes"),
            "src_kind": _labels([p[1] for p in parsed], index),
            "dst_kind": _labels([p[2] for p in parsed], index),
            "pageable": from_numpy(np.array([p[3] for p in parsed], dtype=bool)[index]),
        }

    def _memset(self, memset: np.ndarray) -> dict[str, Any]:
        """The ``memset`` table."""
        s = _Selection(self.rows, memset, self.base_ns)
        kinds, index = _per_name(s.names(), parse_memset_kind)
        return {
            **s.on_device(),
            "bytes": s.ints("bytes"),
            "value": pa.nulls(len(memset), pa.int64()),
            "mem_kind": _labels(kinds, index),
        }

    def _markers(self, markers: np.ndarray) -> dict[str, Any]:
        """The ``markers`` table: host annotations (pid, tid) and GPU ones (device, stream)."""
        s = _Selection(self.rows, markers, self.base_ns)
        start, dur = s.times()
        is_gpu = self.cat[markers] == CODE["gpu_user_annotation"]
        source = _labels(("user_annotation", "gpu_user_annotation"), is_gpu.astype(np.int64))
        return {
            "start_ns": start, "dur_ns": dur,
            "pid": s.ints("pid", only=~is_gpu), "tid": s.ints("tid", only=~is_gpu),
            "name": s.names(),
            "domain": source, "source": source,
            "device": s.ints("device", pa.int32(), fallback="pid", only=is_gpu),
            "stream": s.ints("stream", fallback="tid", only=is_gpu),
        }

    def _steps(self, steps: np.ndarray, annotations: _ByName, cpu_ops: _ByName) -> dict[str, Any]:
        """The ``steps`` table: per chunk, annotation steps then cpu_op steps."""
        number = dict(zip(annotations.rows("step").tolist() + cpu_ops.rows("step").tolist(),
                          annotations.step_numbers() + cpu_ops.step_numbers()))
        s = _Selection(self.rows, steps, self.base_ns)
        start, dur = s.times()
        return {
            "step": np.array([number[i] for i in steps.tolist()], np.int64),
            "start_ns": start, "dur_ns": dur,
            "name": s.names(),
            "source": _labels(("profiler_step",), np.zeros(len(steps), np.int64)),
        }


__all__ = ["ColumnRankBuilder"]
