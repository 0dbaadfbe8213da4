"""Every table of the trace store: its columns, Arrow types, units and meaning.

This module is the single source of truth for the on-disk format.  A run directory holds
one Parquet dataset per table, partitioned by rank (``kernels/rank=3/part-00000.parquet``);
the rank is the partition key and is not stored inside the files.  The reader adds it back
as an ``int64`` column named ``rank``.

Conventions:
    * times are ``int64`` nanoseconds on one clock (Unix epoch, CLOCK_REALTIME), named
      ``*_ns``; durations are ``dur_ns`` (end = start_ns + dur_ns);
    * sizes are ``int64`` bytes, named ``bytes`` or ``*_bytes``;
    * repeated strings (kernel names, kinds) are dictionary-encoded in Parquet;
    * a missing value is null (never a sentinel such as -1), except where a column's doc
      says otherwise.

Bump ``SCHEMA_VERSION`` when a column changes meaning or is removed; adding a column or a
table is backwards compatible (readers fill missing columns with nulls).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

SCHEMA_VERSION = 1
# The version of the part-file manifest (see perfscope.store.integrity) a run's run.json
# names under "manifest"; runs without the key were written before manifests existed.
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class Column:
    """One column: name, Arrow type, unit (``ns``, ``bytes``, ... or ``""``) and meaning."""

    name: str
    type: pa.DataType
    unit: str = ""
    doc: str = ""
    dictionary: bool = False


@dataclass(frozen=True)
class Table:
    """One table of the store: its name, columns and what one row is."""

    name: str
    doc: str
    columns: tuple[Column, ...] = field(default_factory=tuple)

    @property
    def column_names(self) -> list[str]:
        """Names of the stored columns, in order (without the ``rank`` partition key)."""
        return [c.name for c in self.columns]

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of a part file of this table."""
        return pa.schema([pa.field(c.name, c.type) for c in self.columns])

    @property
    def dictionary_columns(self) -> list[str]:
        """Columns stored dictionary-encoded (read back as pandas categoricals)."""
        return [c.name for c in self.columns if c.dictionary]

    def column(self, name: str) -> Column:
        """Return the column called ``name``; raises KeyError if there is none."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


I64, I32, F64, STR, BOOL = pa.int64(), pa.int32(), pa.float64(), pa.string(), pa.bool_()


def _c(name: str, type_: pa.DataType, unit: str = "", doc: str = "", dictionary: bool = False) -> Column:
    return Column(name, type_, unit, doc, dictionary)


def _time_cols(what: str) -> tuple[Column, ...]:
    return (
        _c("start_ns", I64, "ns", f"when the {what} began (Unix epoch)"),
        _c("dur_ns", I64, "ns", f"how long the {what} lasted"),
    )


def _gpu_cols() -> tuple[Column, ...]:
    return (
        _c("device", I32, "", "CUDA device ordinal on the host"),
        _c("stream", I64, "", "CUDA stream id"),
        _c("correlation", I64, "", "CUPTI/Kineto correlation id linking the launching API call"),
    )


TABLES: dict[str, Table] = {}


def _register(table: Table) -> Table:
    TABLES[table.name] = table
    return table


KERNELS = _register(Table("kernels", "One row per GPU kernel execution.", (
    *_time_cols("kernel"), *_gpu_cols(),
    _c("name", STR, "", "kernel name (demangled where the source gives it)", True),
    _c("grid_x", I32), _c("grid_y", I32), _c("grid_z", I32),
    _c("block_x", I32), _c("block_y", I32), _c("block_z", I32),
    _c("registers_per_thread", I32),
    _c("shared_mem_bytes", I64, "bytes", "static + dynamic shared memory per block"),
    _c("graph_id", I64, "", "CUDA graph id when launched from a graph, else null"),
)))

MEMCPY = _register(Table("memcpy", "One row per memory copy executed by a copy engine or SM.", (
    *_time_cols("copy"), *_gpu_cols(),
    _c("copy_kind", STR, "", "H2D, D2H, D2D, P2P, H2H or other", True),
    _c("bytes", I64, "bytes", "bytes copied"),
    _c("src_kind", STR, "", "memory kind of the source: pageable, pinned, device, managed, array, unknown", True),
    _c("dst_kind", STR, "", "memory kind of the destination (same vocabulary as src_kind)", True),
    _c("pageable", BOOL, "", "true when the host side is pageable memory (staged copy, blocks the host)"),
)))

MEMSET = _register(Table("memset", "One row per device memset.", (
    *_time_cols("memset"), *_gpu_cols(),
    _c("bytes", I64, "bytes", "bytes set"),
    _c("value", I64, "", "the byte value written"),
    _c("mem_kind", STR, "", "memory kind set (device, managed, pinned, ...)", True),
)))

SYNC = _register(Table("sync", "One row per host-side CUDA synchronisation (time the host waited).", (
    *_time_cols("synchronisation"), *_gpu_cols(),
    _c("sync_kind", STR, "", "stream, event, context, stream_wait_event or unknown", True),
    _c("tid", I64, "", "host thread id that waited, when known"),
)))

API = _register(Table("api", "One row per CUDA runtime or driver call that launches, copies or synchronises.", (
    *_time_cols("API call"),
    _c("pid", I64), _c("tid", I64, "", "host thread id"),
    _c("correlation", I64, "", "links the call to the GPU activity it caused"),
    _c("name", STR, "", "function name, e.g. cudaLaunchKernel", True),
    _c("kind", STR, "", "runtime or driver", True),
    _c("cbid", I32, "", "CUPTI callback id, when known"),
)))

MARKERS = _register(Table("markers", "One row per annotated range (NVTX, record_function, GPU annotation).", (
    *_time_cols("range"),
    _c("pid", I64), _c("tid", I64),
    _c("name", STR, "", "the range's text (untrusted)", True),
    _c("domain", STR, "", "NVTX domain, or the source category for imported traces", True),
    _c("source", STR, "", "nvtx, user_annotation, gpu_user_annotation or perfscope", True),
    _c("device", I32, "", "device for GPU-side annotations, else null"),
    _c("stream", I64, "", "stream for GPU-side annotations, else null"),
)))

STEPS = _register(Table("steps", "One row per training step as the host marked it.", (
    _c("step", I64, "", "step number as marked (ProfilerStep#N, prof.step() count, optimizer step count)"),
    *_time_cols("step's host range"),
    _c("name", STR, "", "marker name, e.g. ProfilerStep#12", True),
    _c("source", STR, "", "profiler_step, explicit, optimizer, nvtx or annotation", True),
)))

HOST = _register(Table("host", "One row per host span that matters to the breakdown.", (
    *_time_cols("host span"),
    _c("tid", I64, "", "host thread id"),
    _c("kind", STR, "", "dataloader_wait, barrier, collective_wait, optimizer_step, sync_wait, other", True),
    _c("name", STR, "", "what was waited on or run (untrusted)", True),
)))

OPERATORS = _register(Table("operators", "One row per host operator (cpu_op, PyTorch 1.8-1.9 Operator) or Python function frame (python_function) of an imported profiler trace.", (
    *_time_cols("operator or frame"),
    _c("pid", I64), _c("tid", I64, "", "host thread id"),
    _c("name", STR, "", "operator name (aten::mm, autograd::engine::evaluate_function: ...) or frame (train.py(42): step); untrusted", True),
    _c("kind", STR, "", "cpu_op (an operator) or python_function (a Python frame)", True),
    _c("external_id", I64, "", "Kineto External id, linking an operator to the runtime calls it made (null for frames)"),
    _c("depth", I32, "", "nesting depth among the rank's operators and frames on the same thread (0: outermost)"),
    _c("parent", I64, "", "row (0-based, within this rank's table) of the innermost row on the same thread that encloses this one, null at the top; rows are in preorder, so a parent's row comes before its children's"),
    _c("call_site", STR, "", "the innermost enclosing user Python frame (not torch, not site-packages), e.g. train.py(42): step; null when the trace has no Python frames there", True),
)))

COLLECTIVES = _register(Table("collectives", "One row per NCCL collective or point-to-point operation on this rank.", (
    *_time_cols("operation's GPU execution"),
    _c("enqueue_ns", I64, "ns", "when the host enqueued the operation (NCCL API call), if known"),
    _c("comm_id", STR, "", "communicator id (hash) or process-group name", True),
    _c("seq", I64, "", "operation sequence number within the communicator; NCCL counts each function separately (AllReduce 0, 1, ...; AllGather 0, 1, ...), so (comm_id, func, seq) names one operation across ranks; for Send/Recv (no NCCL number) the nccl_plugin source gives the index among this rank's operations with the same comm_id, func and peer"),
    _c("func", STR, "", "AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Send, Recv, Barrier, ...", True),
    _c("count", I64, "", "element count"),
    _c("datatype", STR, "", "element type, e.g. ncclFloat32 or Float", True),
    _c("bytes", I64, "bytes", "message size per rank (count x element size; for AllGather the per-rank input)"),
    _c("root", I32, "", "root rank for rooted collectives"),
    _c("peer", I32, "", "peer rank for Send/Recv"),
    _c("nranks", I32, "", "communicator size"),
    _c("algorithm", STR, "", "RING, TREE, NVLS, COLLNET_DIRECT, ...", True),
    _c("protocol", STR, "", "SIMPLE, LL, LL128", True),
    _c("nchannels", I32, "", "channels used"),
    _c("nwarps", I32, "", "warps per block"),
    _c("device", I32), _c("stream", I64), _c("correlation", I64),
    _c("kernel_name", STR, "", "the NCCL kernel that ran it, when known", True),
    _c("source", STR, "", "nccl_plugin, kineto or torch_hook", True),
)))

METRICS = _register(Table("metrics", "One row per sampled device metric (long format).", (
    _c("ts_ns", I64, "ns", "sample time (Unix epoch)"),
    _c("device", I32, "", "GPU index"),
    _c("metric", STR, "", "sm_util_pct, mem_util_pct, mem_used_bytes, power_w, sm_clock_mhz, mem_clock_mhz, temp_c, throttle_reasons, pcie_tx_bytes_s, pcie_rx_bytes_s", True),
    _c("value", F64, "", "the sampled value in the unit the metric name gives"),
)))

NCCL_CHANNELS = _register(Table("nccl_channels", "One row per channel of an NCCL operation's kernel (NCCL profiler plugin, KernelCh events).", (
    *_time_cols("channel's work on the GPU (GPU timer put on the host clock; the host callback times when gpu_timed is false)"),
    _c("comm_id", STR, "", "communicator id (commHash), joins collectives.comm_id", True),
    _c("seq", I64, "", "the operation's seq in the collectives table (join on comm_id, func, seq)"),
    _c("func", STR, "", "the operation's function, e.g. AllReduce", True),
    _c("channel", I32, "", "NCCL channel id"),
    _c("gpu_start_raw_ns", I64, "ns", "raw GPU %globaltimer at the channel's start (GPU clock)"),
    _c("gpu_stop_raw_ns", I64, "ns", "raw GPU %globaltimer at the channel's stop (GPU clock)"),
    _c("host_start_ns", I64, "ns", "when the proxy thread reported the start (Unix epoch; lags the GPU)"),
    _c("host_stop_ns", I64, "ns", "when the proxy thread reported the stop (Unix epoch; lags the GPU)"),
    _c("gpu_timed", BOOL, "", "true when start_ns/dur_ns come from the GPU timer"),
)))

PROXY = _register(Table("proxy", "One row per NCCL proxy operation or network step (NCCL profiler plugin levels 2 and 3).", (
    *_time_cols("proxy operation or step (host)"),
    _c("comm_id", STR, "", "communicator id (commHash), joins collectives.comm_id", True),
    _c("seq", I64, "", "the operation's seq in the collectives table"),
    _c("func", STR, "", "the operation's function", True),
    _c("kind", STR, "", "op (a ProxyOp: one channel's sends or receives to one peer) or step (one network transfer)", True),
    _c("channel", I32, "", "NCCL channel id"),
    _c("peer", I32, "", "remote rank of the send or receive"),
    _c("is_send", BOOL, "", "true for sends, false for receives"),
    _c("step", I32, "", "step number within the operation (kind=step)"),
    _c("nsteps", I32, "", "steps in the operation"),
    _c("chunk_bytes", I64, "bytes", "bytes per step the operation was planned with"),
    _c("trans_bytes", I64, "bytes", "bytes the step moved (kind=step)"),
    _c("send_gpu_wait_ns", I64, "ns", "step waited for the GPU to fill the send buffer"),
    _c("send_peer_wait_ns", I64, "ns", "step waited for the receiver's clear-to-send"),
    _c("send_wait_ns", I64, "ns", "step's network send in flight"),
    _c("recv_wait_ns", I64, "ns", "step's network receive in flight (includes waiting for the sender)"),
    _c("recv_flush_wait_ns", I64, "ns", "step's flush of received data to the GPU"),
    _c("recv_gpu_wait_ns", I64, "ns", "step waited for the GPU to consume the received data"),
)))

TABLE_NAMES: tuple[str, ...] = tuple(TABLES)


def table(name: str) -> Table:
    """Return the declared table ``name``.

    Raises:
        UsageError: no such table (the message lists the known ones).
    """
    from perfscope.errors import UsageError

    try:
        return TABLES[name]
    except KeyError:
        raise UsageError(f"unknown table {name!r}; tables are: {', '.join(TABLES)}") from None

