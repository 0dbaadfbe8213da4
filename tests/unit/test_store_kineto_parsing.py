"""Unit tests of the Kineto importer's pieces: names, timestamps, decoding, linking."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfscope.errors import InputError
from perfscope.store.kineto import (
    dtype_size,
    is_nccl_kernel,
    normalize_collective,
    parse_memcpy_name,
    parse_memset_kind,
    parse_nccl_kernel,
    parse_sync_kind,
)
from perfscope.store.kineto.builder import build_rank_tables
from perfscope.store.kineto.decode import decode_trace, iter_event_chunks, needs_text_times
from perfscope.store.kineto.events import TRACE_DECODER
from perfscope.store.kineto.read import read_trace_bytes
from perfscope.store.kineto.timestamps import us_to_ns


# -- names ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Memcpy HtoD (Pageable -> Device)", ("H2D", "pageable", "device", True)),
        ("Memcpy HtoD (Pinned -> Device)", ("H2D", "pinned", "device", False)),
        ("Memcpy DtoH (Device -> Pageable)", ("D2H", "device", "pageable", True)),
        ("Memcpy DtoH (Device -> Pinned)", ("D2H", "device", "pinned", False)),
        ("Memcpy DtoD (Device -> Device)", ("D2D", "device", "device", False)),
        ("Memcpy PtoP (Device -> Device)", ("P2P", "device", "device", False)),
        ("Memcpy HtoH (Pinned -> Pageable)", ("H2H", "pinned", "pageable", True)),
        ("Memcpy HtoD (Managed -> Device Static)", ("H2D", "managed", "device", False)),
        ("Memcpy DtoH", ("D2H", "device", "unknown", False)),
        ("Memcpy AtoD (Array -> Device)", ("D2D", "array", "device", False)),
        ("cudaMemcpy", ("other", "unknown", "unknown", False)),
    ],
)
def test_parse_memcpy_name(name: str, expected: tuple[str, str, str, bool]) -> None:
    assert parse_memcpy_name(name) == expected


def test_parse_memset_and_sync_kinds() -> None:
    assert parse_memset_kind("Memset (Device)") == "device"
    assert parse_memset_kind("Memset (Managed)") == "managed"
    assert parse_memset_kind("Memset") == "unknown"
    assert parse_sync_kind("Stream Sync", "x") == "stream"
    assert parse_sync_kind(None, "Event Sync") == "event"
    assert parse_sync_kind("Context Sync", None) == "context"
    assert parse_sync_kind("Stream Wait Event", None) == "stream_wait_event"
    assert parse_sync_kind(None, "something else") == "unknown"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ("AllReduce", "RING", "LL")),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", ("AllReduce", "RING", "LL")),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", ("SendRecv", "RING", "SIMPLE")),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL128(ncclDevKernelArgsStorage<4096ul>)", ("ReduceScatter", "RING", "LL128")),
        ("ncclDevKernel_AllGather_COLLNET_DIRECT_SIMPLE(x)", ("AllGather", "COLLNET_DIRECT", "SIMPLE")),
        ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", (None, None, None)),
    ],
)
def test_parse_nccl_kernel(name: str, expected: tuple[Any, Any, Any]) -> None:
    assert is_nccl_kernel(name)
    assert parse_nccl_kernel(name) == expected


def test_collective_names_and_dtypes() -> None:
    assert normalize_collective("allreduce") == "AllReduce"
    assert normalize_collective("all_reduce") == "AllReduce"
    assert normalize_collective("_allgather_base") == "AllGather"
    assert normalize_collective("reduce_scatter_tensor") == "ReduceScatter"
    assert normalize_collective("all_to_all") == "AllToAll"
    assert normalize_collective("weird_op") == "weird_op"
    assert normalize_collective(None) is None
    assert dtype_size("Float") == 4
    assert dtype_size("c10::BFloat16") == 2
    assert dtype_size("ncclFloat32") == 4
    assert dtype_size("Long") == 8
    assert dtype_size("unsigned char") == 1
    assert dtype_size("NoSuchType") is None
    assert not is_nccl_kernel("void at::native::vectorized_elementwise_kernel<4>")


# -- timestamps -------------------------------------------------------------------------
def test_us_to_ns_is_exact_for_epoch_microseconds_with_ns_decimals() -> None:
    # A float64 holds 1712195495519689.047 only to 0.25 us; the text path must not lose a ns.
    values = ["1712195495519689.047", "1712195495519695.812", "4458676522690.655", "0.001", "-2.5", "7.0"]
    assert us_to_ns(values).tolist() == [1712195495519689047, 1712195495519695812, 4458676522690655, 1, -2500, 7000]


def test_us_to_ns_handles_ints_mixed_and_odd_text() -> None:
    assert us_to_ns([1695835542514261, 5]).tolist() == [1695835542514261000, 5000]
    assert us_to_ns([3, "1.5"]).tolist() == [3000, 1500]
    assert us_to_ns(["1e-3", "2.0004", "12"]).tolist() == [1, 2000, 12000]
    assert us_to_ns([]).dtype == np.int64


def test_decoder_gives_float_literals_as_text() -> None:
    data = b'{"traceEvents":[{"ph":"X","cat":"kernel","ts":1712195495519689.047,"dur":5}]}'
    assert needs_text_times(data)
    (events,) = iter_event_chunks(TRACE_DECODER.decode(data).traceEvents, text_times=True)
    assert events[0].ts == "1712195495519689.047"
    assert events[0].dur == 5


# -- decoding errors --------------------------------------------------------------------
def test_malformed_json_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not valid JSON"):
        decode_trace(b'{"traceEvents": [{"ph": "X", ', tmp_path / "t.json")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b"[1, 2]", "not a Kineto trace"),
        (b'{"foo": 1}', "no traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "cat": "my_app", "name": "x", "ts": 1, "dur": 1}]}', "not a PyTorch profiler"),
    ],
)
def test_non_kineto_json_is_an_input_error(tmp_path: Path, text: bytes, match: str) -> None:
    with pytest.raises(InputError, match=match):
        decode_trace(text, tmp_path / "t.json")


def test_truncated_gzip_is_an_input_error(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode() * 50)[:40])
    with pytest.raises(InputError, match="not a complete gzip"):
        read_trace_bytes(p)


def test_gzip_detected_by_content_not_name(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert read_trace_bytes(p) == b'{"traceEvents": []}'


# -- building tables --------------------------------------------------------------------
def _events(doc: dict[str, Any]) -> list[Any]:
    data = json.dumps(doc).encode()
    raws = TRACE_DECODER.decode(data).traceEvents
    return [e for chunk in iter_event_chunks(raws, text_times=needs_text_times(data), chunk=3) for e in chunk]


def _x(cat: str, name: str, ts: float, dur: float, pid: Any = 10, tid: Any = 11, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_nccl_kernel_links_to_enclosing_record_param_comms_through_its_launch() -> None:
    """GIVEN a kernel without collective args whose External id points at the nccl:*
    annotation, WHEN building, THEN its args come from the record_param_comms around the launch."""
    rpc = {"External id": 1, "Collective name": "_allgather_base", "dtype": "BFloat16", "In msg nelems": 100,
           "Out msg nelems": 800, "Group size": 8, "Process Group Name": "3", "seq": 42}
    events = _events({"traceEvents": [
        _x("cpu_op", "record_param_comms", 100.0, 50.0, **rpc),
        _x("user_annotation", "nccl:_all_gather_base", 101.0, 40.0, **{"External id": 2}),
        _x("cuda_runtime", "cudaLaunchKernel", 110.5, 5.25, **{"External id": 2, "correlation": 77, "cbid": 211}),
        _x("kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 120.0, 30.0, pid=0, tid=20,
           **{"External id": 2, "device": 0, "stream": 20, "correlation": 77, "grid": [2, 1, 1], "block": [512, 1, 1]}),
        _x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 300.0, 30.0, pid=0, tid=20,
           **{"device": 0, "stream": 20, "correlation": 99}),
    ]})
    rt = build_rank_tables(events, 1_000_000_000)
    c = rt.tables["collectives"]
    assert c["func"] == ["AllGather", "AllReduce"]
    assert c["count"].to_pylist() == [100, None]  # NCCL's AllGather count is the per-rank input
    assert c["bytes"].to_pylist() == [200, None]
    assert c["nranks"].to_pylist() == [8, None]
    assert c["comm_id"] == ["3", None]
    assert c["seq"].to_pylist() == [42, None]
    assert c["enqueue_ns"].to_pylist() == [1_000_110_500, None]
    assert c["start_ns"].tolist() == [1_000_120_000, 1_000_300_000]
    assert rt.warnings and "1 of 2 NCCL kernels" in rt.warnings[0]
    assert len(rt.tables["kernels"]["start_ns"]) == 2  # every kernel is a kernel row too


def test_steps_markers_sync_and_api_rows() -> None:
    events = _events({"traceEvents": [
        _x("user_annotation", "ProfilerStep#7", 0.0, 100.0),
        _x("user_annotation", "## forward ##", 1.0, 10.0),
        _x("gpu_user_annotation", "## forward ##", 2.0, 10.0, pid=1, tid=7),
        _x("cuda_runtime", "cudaStreamSynchronize", 50.0, 20.0, tid=12, **{"correlation": 5, "cbid": 131}),
        _x("cuda_driver", "cuLaunchKernel", 60.0, 1.0, **{"correlation": 6, "cbid": 307}),
        _x("cuda_sync", "Stream Sync", 51.0, 18.0, pid=1, tid=7,
           **{"cuda_sync_kind": "Stream Sync", "stream": 7, "correlation": 5, "device": 1}),
        {"ph": "f", "id": 6, "pid": 1, "tid": 7, "ts": 61.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"name": "process_name", "ph": "M", "pid": 10, "tid": 0, "args": {"name": "python"}},
    ]})
    t = build_rank_tables(events, 0).tables
    assert t["steps"]["step"].tolist() == [7] and t["steps"]["source"] == ["profiler_step"]
    assert t["markers"]["source"] == ["user_annotation", "gpu_user_annotation"]
    assert t["markers"]["device"].to_pylist() == [None, 1]
    assert t["markers"]["stream"].to_pylist() == [None, 7]
    assert t["sync"]["sync_kind"] == ["stream"] and t["sync"]["tid"].to_pylist() == [12]
    assert t["api"]["kind"] == ["runtime", "driver"]
    assert t["api"]["cbid"].to_pylist() == [131, 307]
    assert "kernels" not in t


def test_float_timestamps_are_used_only_when_exact(tmp_path: Path) -> None:
    """Relative µs decode as floats; epoch µs keep their text (a float cannot hold their
    nanoseconds), even when the quick look at the text missed them."""
    base = 1_711_964_646_000_000_000
    events = _events({"baseTimeNanoseconds": base, "traceEvents": [_x("kernel", "k", 4458676522690.655, 2.5, pid=0, tid=7)]})
    assert isinstance(events[0].ts, float)
    assert build_rank_tables(events, base).tables["kernels"]["start_ns"].tolist() == [base + 4_458_676_522_690_655]

    whole = [f'{{"ph": "X", "cat": "cpu_op", "name": "op", "ts": {1712195495519000 + i}, "dur": 1}}' for i in range(300)]
    late = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1712195495519689.047, "dur": 1.5}'
    data = ('{"schemaVersion": 1, "traceEvents": [' + ", ".join([*whole, late]) + "]}").encode()
    assert needs_text_times(data)
    # Even when told floats would do, a chunk of epoch values is decoded again as text.
    chunks = list(iter_event_chunks(decode_trace(data, tmp_path / "t.json").traceEvents, text_times=False, chunk=100))
    assert isinstance(chunks[0][0].ts, int) and isinstance(chunks[-1][-1].ts, str)
    assert build_rank_tables(chunks[-1], 0).tables["kernels"]["start_ns"].tolist() == [1712195495519689047]
