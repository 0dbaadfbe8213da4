"""The Kineto format layer (:mod:`perfscope.store.kineto.formats`): one synthetic trace per
spelling, written here, detected, rewritten and imported into the same tables."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from perfscope.errors import PerfscopeError, UnrecognisedTraceError
from perfscope.store import open_run
from perfscope.store.kineto import formats as kf
from perfscope.store.kineto import import_kineto

TABLES = ("kernels", "memcpy", "memset", "api", "steps", "markers")


def trace(old: bool, *, rocm: bool = False, extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A one-step trace (an op, a runtime call, a kernel, a copy, a memset, a flow) in
    PyTorch 1.8-1.9's spelling (``old``) or today's (``rocm``: HIP names, MI250)."""
    cat = (lambda o, n: o) if old else (lambda o, n: n)
    ext = "external id" if old else "External id"
    host_tid: Any = "4242" if old else 4242
    gpu_tid: Any = "stream 7" if old else 7
    launch = "hipLaunchKernel" if rocm else "cudaLaunchKernel"
    gpu = {"device": 0, "stream": 7, "correlation": 11, ext: 3}
    events = [
        {"ph": "X", "cat": cat("Operator", "cpu_op"), "name": "ProfilerStep#5", "pid": 4242, "tid": host_tid,
         "ts": 1623142623460100, "dur": 200, "args": {"External id": 2}},
        {"ph": "X", "cat": cat("Operator", "cpu_op"), "name": "aten::relu", "pid": 4242, "tid": host_tid,
         "ts": 1623142623460110, "dur": 50, "args": {"External id": 3}},
        {"ph": "X", "cat": cat("Runtime", "cuda_runtime"), "name": launch, "pid": 4242, "tid": host_tid,
         "ts": 1623142623460120, "dur": 10, "args": {"cbid": 211, "correlation": 11, ext: 3}},
        {"ph": "X", "cat": cat("Kernel", "kernel"), "name": "relu_kernel", "pid": 0, "tid": gpu_tid,
         "ts": 1623142623460140, "dur": 30, "args": {**gpu, "grid": [4, 1, 1], "block": [128, 1, 1],
                                                      "registers per thread": 32, "shared memory": 0}},
        {"ph": "X", "cat": cat("Memcpy", "gpu_memcpy"), "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
         "tid": gpu_tid, "ts": 1623142623460180, "dur": 20, "args": {**gpu, "correlation": 12, "bytes": 4096}},
        {"ph": "X", "cat": cat("Memset", "gpu_memset"), "name": "Memset (Device)", "pid": 0, "tid": gpu_tid,
         "ts": 1623142623460210, "dur": 5, "args": {**gpu, "correlation": 13, "bytes": 128}},
        {"ph": "s", "cat": cat("async", "ac2g"), "id": 11, "pid": 4242, "tid": 4242, "ts": 1623142623460120, "name": "launch"},
        {"ph": "f", "cat": cat("async", "ac2g"), "id": 11, "pid": 0, "tid": gpu_tid, "ts": 1623142623460140,
         "name": "launch", "bp": "e"},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Traces", "tid": "PyTorch Profiler",
         "ts": 1623142623460000, "dur": 400, "args": {"Op count": 0}},
        {"name": "process_name", "ph": "M", "ts": 1623142623460000, "pid": 4242, "tid": 0, "args": {"name": "python"}},
        *(extra or []),
    ]
    name = "AMD Instinct MI250X" if rocm else "Tesla V100-DGXS-32GB"
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": name, "computeMajor": 9 if rocm else 7,
                                                      "computeMinor": 0}], "traceEvents": events}


def write(tmp_path: Path, name: str, doc: dict[str, Any], gz: bool = False) -> Path:
    path = tmp_path / (name + (".json.gz" if gz else ".json"))
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def tables(run: Path) -> dict[str, pd.DataFrame]:
    r = open_run(run)
    return {t: r.table(t) for t in TABLES}


# --- detection --------------------------------------------------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_old_spelling_is_detected_from_the_start_of_text_or_gzip(gz: bool) -> None:
    old = json.dumps(trace(True)).encode()
    new = json.dumps(trace(False)).encode()
    pack = gzip.compress if gz else bytes
    assert kf.prefix_spelling(pack(old)) == kf.OLD
    assert kf.prefix_spelling(pack(new)) == kf.TODAY
    # Metadata, flows and annotations (both spellings write them) decide nothing.
    assert kf.prefix_spelling(pack(b'{"traceEvents": [{"ph": "X", "cat": "user_annotation"}, {"cat": "async"}]}')) is None


def test_census_counts_categories_of_the_whole_text() -> None:
    counts = kf.census(json.dumps(trace(True)).encode())
    assert counts == {"Operator": 2, "Runtime": 1, "Kernel": 1, "Memcpy": 1, "Memset": 1, "async": 2, "Trace": 1}
    assert kf.spelling(counts) == "pytorch-1.8/1.9"
    assert kf.spelling(kf.census(json.dumps(trace(False)).encode())) == kf.TODAY


# --- rewriting: one test per spelling -------------------------------------------------------
def rewritten_events() -> list[dict[str, Any]]:
    return json.loads(kf.rewrite(json.dumps(trace(True)).encode()))["traceEvents"]


@pytest.mark.parametrize("old,new", sorted(kf.CATEGORY_SPELLINGS.items()))
def test_each_old_category_becomes_todays(old: str, new: str) -> None:
    cats = {e.get("cat") for e in rewritten_events()}
    assert new in cats and old not in cats


def test_external_id_key_is_renamed_and_other_args_kept() -> None:
    kernel = next(e for e in rewritten_events() if e.get("cat") == "kernel")
    assert kernel["args"]["External id"] == 3 and "external id" not in kernel["args"]
    assert kernel["args"]["correlation"] == 11 and kernel["args"]["grid"] == [4, 1, 1]


def test_todays_key_wins_when_both_spellings_are_there() -> None:
    doc = {"traceEvents": [{"ph": "X", "cat": "Kernel", "name": "k", "args": {"external id": 1, "External id": 2}}]}
    (e,) = json.loads(kf.rewrite(json.dumps(doc).encode()))["traceEvents"]
    assert e["args"] == {"External id": 2}


def test_text_tids_become_integers() -> None:
    events = rewritten_events()
    assert {e["tid"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")} == {7}
    assert {e["tid"] for e in events if e.get("cat") in ("cuda_runtime", "cpu_op")} == {4242}
    # Untouched categories keep their tids, text or not.
    assert next(e for e in events if e.get("cat") == "Trace")["tid"] == "PyTorch Profiler"


def test_rewrite_keeps_every_value_text_and_root_member() -> None:
    doc = trace(True)
    doc["baseTimeNanoseconds"] = 1623142623000000000
    # Decimals that a float would not keep, on the kernel (the first event at this time).
    text = json.dumps(doc).replace('"ts": 1623142623460140,', '"ts": 1623142623460140.123,', 1).encode()
    out = kf.rewrite(text)
    assert b"1623142623460140.123" in out
    back = json.loads(out)
    assert back["baseTimeNanoseconds"] == doc["baseTimeNanoseconds"]
    assert back["deviceProperties"] == doc["deviceProperties"]
    assert len(back["traceEvents"]) == len(doc["traceEvents"])


def test_prepare_leaves_todays_traces_alone_and_rewrites_old_ones() -> None:
    new = gzip.compress(json.dumps(trace(False)).encode())
    data, counts = kf.prepare(new, gzip.decompress)
    assert data is new and counts is None
    data, counts = kf.prepare(gzip.compress(json.dumps(trace(True)).encode()), gzip.decompress)
    assert counts is not None and counts["Kernel"] == 1
    assert kf.census(data)["kernel"] == 1 and "Kernel" not in kf.census(data)


def test_prepare_counts_a_trace_whose_start_holds_an_unknown_category() -> None:
    doc = trace(False, extra=[{"ph": "X", "cat": "cuda_profiler_range", "name": "r", "pid": 0, "tid": 0, "ts": 1, "dur": 1}])
    doc["traceEvents"].insert(0, doc["traceEvents"].pop())
    _, counts = kf.prepare(json.dumps(doc).encode(), gzip.decompress)
    assert counts is not None and counts["cuda_profiler_range"] == 1 and counts["kernel"] == 1


# --- accounting -------------------------------------------------------------------------
def test_account_sorts_categories_and_counts_old_spellings_as_todays() -> None:
    a = kf.account({"Kernel": 5, "kernel": 2, "async": 4, "Trace": 1, "cuda_profiler_range": 77})
    assert a.recognised == {"kernel": 7}
    assert a.ignored == {"ac2g": 4, "Trace": 1}
    assert a.dropped == {"cuda_profiler_range": 77}
    assert a.events == 89


def test_warning_names_dropped_categories_and_counts() -> None:
    a = kf.account({"kernel": 10, "mystery": 1234, "other": 1})
    text = a.warning()
    assert text is not None and "1,235 events" in text and "'mystery' 1,234" in text and "'other' 1" in text
    assert kf.account({"kernel": 10, "ac2g": 3}).warning() is None


def test_error_names_unknown_categories_and_exits_2() -> None:
    err = kf.account({"mystery": 3, "ac2g": 2}).error("t.json")
    assert isinstance(err, PerfscopeError) and err.exit_code == 2
    assert "t.json" in str(err) and "'mystery' 3" in str(err) and "nothing in this trace becomes a table row" in str(err)


def test_check_import_passes_warns_and_refuses() -> None:
    full = [{"kernels": {"start_ns": [1, 2]}}]
    empty = [{"kernels": {"start_ns": []}, "api": {}}]
    assert kf.check_import("t", full, None, lambda: pytest.fail("no read needed")) is None
    assert "'mystery' 3" in (kf.check_import("t", full, {"kernel": 2, "mystery": 3}, bytes) or "")
    with pytest.raises(UnrecognisedTraceError, match="'mystery' 3"):
        kf.check_import("t", empty, None, lambda: b'{"traceEvents": [{"ph": "X", "cat": "mystery"}' + b', {"cat": "mystery"}' * 2 + b"]}")
    with pytest.raises(UnrecognisedTraceError, match="no event a table keeps.*'cpu_op' 1"):
        kf.check_import("t", empty, None, lambda: b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add"}]}')
    assert "only 'ac2g' 1" in (kf.check_import("t", empty, None, lambda: b'{"traceEvents": [{"ph": "f", "cat": "ac2g"}]}') or "")
    assert "only metadata" in (kf.check_import("t", empty, None, lambda: b'{"traceEvents": [{"ph": "M", "name": "x"}]}') or "")
    assert kf.check_import("t", empty, None, lambda: b'{"traceEvents": []}') is None


# --- provenance -------------------------------------------------------------------------
def test_provenance_reads_versions_and_the_gpu() -> None:
    root = {"schemaVersion": 1, "cupti_version": 18, "cuda_runtime_version": 12000, "displayTimeUnit": "ms",
            "traceName": "t.json", "baseTimeNanoseconds": 5, "distributedInfo": {"nccl_version": "2.21.5"},
            "deviceProperties": [{"name": "NVIDIA A100", "computeMajor": 8, "computeMinor": 0}] * 2,
            "hip_runtime_version": None}
    p = kf.provenance(root, {"kernel": 1})
    assert p["versions"] == {"schema": 1, "cupti": 18, "cuda_runtime": 12000, "nccl": "2.21.5"}
    assert p["gpu"] == {"name": "NVIDIA A100", "compute_capability": "8.0", "count": 2}
    assert p["vendor"] == "nvidia" and p["spelling"] == kf.TODAY and p["trace_name"] == "t.json"
    assert kf.provenance({"deviceProperties": [{"name": "AMD Radeon Graphics", "computeMajor": 9}]})["vendor"] == "amd"
    assert kf.provenance({}, {"Kernel": 1})["spelling"] == "pytorch-1.8/1.9"
    line = kf.describe(p)
    assert line is not None and line.startswith("Kineto schema 1, pytorch-1.10+ spelling, cupti 18")
    assert "NVIDIA A100 (compute 8.0)" in line
    assert kf.describe(None) is None


# --- through the importer -----------------------------------------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_old_spelling_imports_the_same_tables_as_todays(tmp_path: Path, gz: bool) -> None:
    import_kineto(write(tmp_path, "new", trace(False), gz), tmp_path / "new")
    result = import_kineto(write(tmp_path, "old", trace(True), gz), tmp_path / "old")
    new, old = tables(tmp_path / "new"), tables(tmp_path / "old")
    for name in TABLES:
        assert old[name].equals(new[name]), name
    assert {n: len(old[n]) for n in ("kernels", "memcpy", "memset", "api", "steps")} == \
        {"kernels": 1, "memcpy": 1, "memset": 1, "api": 1, "steps": 1}
    assert not any("dropped" in w for w in result.warnings)
    source = open_run(tmp_path / "old").meta["ranks"][0]["trace_source"]
    assert source["spelling"] == "pytorch-1.8/1.9" and source["gpu"]["compute_capability"] == "7.0"


def test_rocm_spelling_imports_without_rewrite(tmp_path: Path) -> None:
    import_kineto(write(tmp_path, "rocm", trace(False, rocm=True)), tmp_path / "r")
    t = tables(tmp_path / "r")
    assert len(t["kernels"]) == 1 and t["api"]["name"].tolist() == ["hipLaunchKernel"]
    source = open_run(tmp_path / "r").meta["ranks"][0]["trace_source"]
    assert source["vendor"] == "amd" and source["spelling"] == kf.TODAY


def test_import_warns_about_and_stores_dropped_categories(tmp_path: Path) -> None:
    extra = [{"ph": "X", "cat": "cuda_profiler_range", "name": "r", "pid": 0, "tid": 0, "ts": 1623142623460000, "dur": 1}]
    doc = trace(False, extra=extra)
    doc["traceEvents"].insert(0, doc["traceEvents"].pop())
    result = import_kineto(write(tmp_path, "t", doc), tmp_path / "r")
    assert any("'cuda_profiler_range' 1" in w for w in result.warnings)
    assert any("'cuda_profiler_range' 1" in w for w in open_run(tmp_path / "r").meta["ranks"][0]["warnings"])


def test_trace_of_unknown_categories_is_refused_and_no_run_is_left(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "GpuThing", "name": "k", "pid": 0, "tid": 0, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "HostThing", "name": "h", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}
    with pytest.raises(UnrecognisedTraceError, match="'GpuThing' 1, 'HostThing' 1"):
        import_kineto(write(tmp_path, "t", doc), tmp_path / "r")
    assert not (tmp_path / "r").exists()


def _after_padding(doc: dict[str, Any], padding: list[dict[str, Any]]) -> dict[str, Any]:
    """``doc`` with ``padding`` events first, more than the prefix the detection reads."""
    n = kf.PREFIX_BYTES // len(json.dumps(padding[0])) + 1
    return {**doc, "traceEvents": padding * n + doc["traceEvents"]}


@pytest.mark.parametrize("gz", [False, True])
def test_old_spelling_after_a_prefix_of_flows_and_annotations_is_still_rewritten(tmp_path: Path, gz: bool) -> None:
    padding = [{"ph": "X", "cat": "user_annotation", "name": "fwd", "pid": 4242, "tid": "4242",
                "ts": 1623142623460000, "dur": 1}, {"ph": "s", "cat": "async", "id": 1, "pid": 4242, "tid": 4242,
                                                   "ts": 1623142623460000, "name": "launch"}]
    doc = _after_padding(trace(True), padding)
    assert kf.prefix_spelling(json.dumps(doc).encode()) is None
    result = import_kineto(write(tmp_path, "old", doc, gz), tmp_path / "old")
    assert {n: result.total(n) for n in ("kernels", "memcpy", "memset", "api", "steps")} == \
        {"kernels": 1, "memcpy": 1, "memset": 1, "api": 1, "steps": 1}
    assert open_run(tmp_path / "old").meta["ranks"][0]["trace_source"]["spelling"] == kf.OLD


def test_trace_mixing_spellings_after_the_prefix_is_refused(tmp_path: Path) -> None:
    today = {"ph": "i", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1}  # (no table keeps it)
    old = [e for e in trace(True)["traceEvents"] if e.get("cat") in ("Kernel", "Runtime")]
    doc = {"schemaVersion": 1, "traceEvents": [today] * (kf.PREFIX_BYTES // len(json.dumps(today)) + 1) + old}
    with pytest.raises(UnrecognisedTraceError, match="PyTorch 1.8-1.9 way and today's.*'Kernel' 1"):
        import_kineto(write(tmp_path, "t", doc), tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_info_shows_the_source_trace_per_rank(tmp_path: Path) -> None:
    from perfscope.cli.info import run_info
    from perfscope.reports.text import render_info_text

    import_kineto(write(tmp_path, "old", trace(True)), tmp_path / "r")
    doc = run_info(str(tmp_path / "r"))
    (rank,) = doc["ranks"]
    assert rank["trace"] == "Kineto schema 1, pytorch-1.8/1.9 spelling, Tesla V100-DGXS-32GB (compute 7.0)"
    assert rank["trace_source"]["spelling"] == kf.OLD and json.loads(json.dumps(doc))["ranks"][0]["trace"] == rank["trace"]
    text = " ".join(render_info_text(doc, width=200).split())
    assert f"rank 0 trace: {rank['trace']}" in text
