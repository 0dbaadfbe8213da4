"""Diagnosis on real traces recorded by others (issue 15): the shared Kineto traces, and the
traces in the folder PERFSCOPE_EXTRA_TRACES names (ones we may not commit; skipped without it)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfscope.analyzers import analyze_run
from perfscope.analyzers.context import hardware_context

from perfscope.store import open_run
from perfscope.store.kineto import import_kineto

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kineto"
EXTRA = Path(os.environ.get("PERFSCOPE_EXTRA_TRACES", "")) if os.environ.get("PERFSCOPE_EXTRA_TRACES") else None
EXTRA_TRACES = sorted(p for p in EXTRA.glob("*.json*")) if EXTRA is not None and EXTRA.is_dir() else []


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory):
    if not SHARED.is_dir():
        pytest.skip(f"shared traces not present at {SHARED}")
    root = tmp_path_factory.mktemp("diagnosis")
    cache = {}

    def analysed(name: str):
        if name not in cache:
            src = SHARED / f"{name}.json.gz"
            if not src.exists():
                pytest.skip(f"{src.name} not in the shared traces")
            import_kineto(src, root / name)
            cache[name] = analyze_run(open_run(root / name))
        return cache[name]

    return analysed


def _check_invariants(a) -> None:
    """What holds on any trace: advice fits the hardware, savings add up to at most the step
    and each names its model (none where it claims nothing), no saving without GPU records."""
    from perfscope.analyzers import savings

    hw = hardware_context(a.meta)
    wall = int(a.steps["wall_ns"].median()) if len(a.steps) else 0
    assert sum(r.saving_ns for r in a.recommendations) <= wall
    for r in a.recommendations:
        model = r.evidence["saving_model"]
        assert model == savings.NO_ESTIMATE or model in savings.MODELS, model
        assert r.saving_ns == 0 or model != savings.NO_ESTIMATE
    if hw.cc_at_least(8) is False:
        for r in a.recommendations:
            assert "tf32" not in (r.message + r.change).lower() and "bfloat16" not in (r.message + r.change).lower()
    if len(a.steps) and (a.steps["gpu_idle_ns"] >= a.steps["wall_ns"]).all():
        assert all(r.saving_ns == 0 for r in a.recommendations)
        assert any(r.id in ("trace.no_gpu_records", "trace.cpu_only") for r in a.recommendations)


def test_v100_gets_no_tf32_or_bfloat16_advice(shared) -> None:
    a = shared("ns_resolution_trace_rank-0")
    assert hardware_context(a.meta).compute_capability == (7, 0)
    rec = next(r for r in a.recommendations if r.id == "compute.bound")
    text = (rec.message + rec.change).lower()
    assert "tf32" not in text and "bfloat16" not in text and "float16" in text
    _check_invariants(a)


def test_startup_window_is_a_finding_not_host_overhead(shared) -> None:
    a = shared("critical_path_alexnet_bench")
    assert [r.id for r in a.recommendations] == ["trace.startup"]
    assert a.recommendations[0].saving_ns == 0
    assert a.recommendations[0].evidence["startup_share"] > 0.9  # cudaDeviceGetStreamPriorityRange, cudaFree, ...
    _check_invariants(a)


def test_pageable_device_to_host_copies_are_syncs(shared) -> None:
    a = shared("trace_filter_sampled_rank-0")
    # Four cudaMemcpyAsync into pageable host memory per step; no API name says "synchronize".
    assert a.steps["sync_calls"].tolist() == [4, 4]
    assert (a.steps["sync_ns"] > 0).all()


@pytest.mark.parametrize("name", ["nccl_parser_config_nccl_data", "trace_compare_base_base", "trace_compare_test_test",
                                  "trace_filter_sampled_rank-1"])
def test_invariants_on_the_other_shared_traces(shared, name: str) -> None:
    _check_invariants(shared(name))


@pytest.mark.skipif(not EXTRA_TRACES, reason="PERFSCOPE_EXTRA_TRACES names no folder of Kineto traces")
@pytest.mark.parametrize("path", EXTRA_TRACES, ids=[p.name for p in EXTRA_TRACES])
def test_invariants_on_extra_traces(tmp_path: Path, path: Path) -> None:
    import_kineto(path, tmp_path / "run")
    a = analyze_run(open_run(tmp_path / "run"))
    _check_invariants(a)
    startup = a.steps["startup_api_ns"] >= 0.5 * a.steps["wall_ns"]
    if len(a.steps) and startup.all():
        assert [r.id for r in a.recommendations if r.bucket != "environment"] == ["trace.startup"]


def test_nested_pattern_ranges_make_no_zero_length_steps(tmp_path: Path) -> None:
    src = SHARED / "critical_path_alexnet_bench.json.gz"
    if not src.exists():
        pytest.skip(f"{src.name} not in the shared traces")
    from perfscope.analyzers.config import AnalysisConfig

    import_kineto(src, tmp_path / "run")
    a = analyze_run(open_run(tmp_path / "run"), AnalysisConfig(step_pattern="measure|forward"))
    # warmup|forward and measure|forward each hold a nested range of the same name.
    assert len(a.steps) == 2 and (a.steps["wall_ns"] > 0).all()
    assert any("inside another matching range" in w for w in a.warnings)


@pytest.mark.parametrize("fixture", ["straggler", "comm_heavy", "host_sync", "record"])
def test_median_step_rows_add_up(fixture: str) -> None:
    from perfscope.analyzers import step_summary
    from perfscope.analyzers.result import BUCKET_COLUMNS

    run = Path(__file__).resolve().parents[1] / "data" / "h200" / f"{fixture}.perfscope"
    s = step_summary(analyze_run(open_run(run)).steps)
    assert (s[list(BUCKET_COLUMNS)].sum(axis=1) == s["wall_ns"]).all()
    assert (s[[c.replace("_ns", "_share") for c in BUCKET_COLUMNS]].sum(axis=1).round(9) == 1.0).all()


def test_sendrecv_exposed_comm_gets_no_ddp_bucket_advice(shared) -> None:
    a = shared("trace_filter_sampled_rank-0")
    rec = next(r for r in a.recommendations if r.id == "comm.exposed")
    assert "bucket_cap_mb" not in rec.change and "all-to-all" in rec.message
    assert rec.evidence["comm_share_all_to_all"] == 1.0


def test_sendrecv_matched_by_order_makes_no_straggler_claim(tmp_path: Path) -> None:
    files = [SHARED / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
    if not all(f.exists() for f in files):
        pytest.skip("trace_filter_sampled traces absent")
    import_kineto(files, tmp_path / "run")
    a = analyze_run(open_run(tmp_path / "run"))
    # Rank 1 was called a straggler from SendRecv kernels matched by order, their waits put in sync.
    assert len(a.stragglers) == 0 and not any(r.id == "comm.straggler" for r in a.recommendations)
    assert (a.steps["collective_wait_ns"] == 0).all()
    assert any("point-to-point" in w and "unknown" in w for w in a.warnings)


def test_blocking_copies_are_reported_with_their_call_site(tmp_path: Path) -> None:
    src = SHARED / "trace_filter_sampled_rank-0.json.gz"
    if not src.exists():
        pytest.skip(f"{src.name} not in the shared traces")
    from perfscope.analyzers.api_calls import blocking_calls, blocking_sites
    from perfscope.analyzers.columns import columns

    import_kineto(src, tmp_path / "run")
    run = open_run(tmp_path / "run")
    api, memcpy, markers = (columns(run.table(t)) for t in ("api", "memcpy", "markers"))
    sites = blocking_sites(0, api, blocking_calls(api, memcpy), markers).set_index("site")
    # The pageable device-to-host copies sit in TorchRec's all-to-all wait and split preprocessing.
    assert sites.loc["## KJTAllToAllTensorsAwaitable wait() ##", "calls"] == 1
    assert sites.loc["## sdd_preprocess_splits ##", "calls"] == 7
    assert set(sites["call"]) == {"cudaMemcpyAsync"}


def test_recorded_point_to_point_with_sequence_and_peer_still_counts() -> None:
    run = Path(__file__).resolve().parents[1] / "data" / "h200" / "nccl_record_2rank.perfscope"
    a = analyze_run(open_run(run))
    p2p = a.collectives[a.collectives["func"].isin(["Send", "Recv"])]
    assert len(p2p) and p2p["peer"].notna().all()
    # The NCCL plugin numbers Send/Recv per peer: their matches are kept (25 ops = 19 collectives + 6 exchanges).
    assert int(a.stragglers.set_index("rank").loc[1, "ops"]) == 25
    assert not any("point-to-point" in w for w in a.warnings)


def _stripped(tmp_path: Path, drop_device: bool) -> Path:
    """ns_resolution_trace_rank-0 without its GPU activity records (as CUPTI range-profiler
    mode leaves a trace), and for a CPU-only run also without its devices and CUDA calls."""
    import gzip
    import json

    src = SHARED / "ns_resolution_trace_rank-0.json.gz"
    if not src.exists():
        pytest.skip(f"{src.name} not in the shared traces")
    doc = json.loads(gzip.open(src).read())
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"}
    if drop_device:
        gpu_cats |= {"cuda_runtime", "cuda_driver", "ac2g"}
        doc.pop("deviceProperties", None)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in gpu_cats]
    out = tmp_path / "stripped.json"
    out.write_text(json.dumps(doc))
    import_kineto(out, tmp_path / "run")
    return tmp_path / "run"


def test_no_gpu_activity_records_is_not_gpu_idle(tmp_path: Path) -> None:
    a = analyze_run(open_run(_stripped(tmp_path, drop_device=False)))
    assert [r.id for r in a.recommendations] == ["trace.no_gpu_records"]
    assert a.recommendations[0].saving_ns == 0 and "V100" in a.recommendations[0].message
    _check_invariants(a)


def test_cpu_only_run_gets_no_gpu_advice(tmp_path: Path) -> None:
    a = analyze_run(open_run(_stripped(tmp_path, drop_device=True)))
    assert [r.id for r in a.recommendations] == ["trace.cpu_only"]
    assert "GPU is idle" not in a.recommendations[0].message and a.recommendations[0].saving_ns == 0


def test_num_workers_fit_the_cpus_of_a_recorded_run(tmp_path: Path) -> None:
    """The H200 run's snapshot says 16 CPUs; the same run said to come from a 2-CPU machine
    gets one worker (the training process needs the other CPU), never 8."""
    import json
    import shutil

    src = Path(__file__).resolve().parents[1] / "data" / "h200" / "mixed" / "mixed_loader_matmul.perfscope"
    run = tmp_path / "run"
    shutil.copytree(src, run)

    def change() -> str:
        return next(r.change for r in analyze_run(open_run(run)).recommendations if r.id == "dataloader.workers")

    assert "num_workers=8," in change()
    meta = json.loads((run / "run.json").read_text())
    meta["environment"]["facts"]["cpu"]["count"] = 2
    (run / "run.json").write_text(json.dumps(meta))
    assert "num_workers=1," in change()
