"""Diagnosis on messy runs (issue 15), on synthetic data: hardware context, implicit syncs,
explicit trace findings, savings estimated from the trace and capped to the step."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfscope.analyzers.api_calls import blocking_calls, startup_calls
from perfscope.analyzers.context import hardware_context
from perfscope.analyzers.intervals import covered_ns
from perfscope.analyzers.result import BUCKET_COLUMNS, WHAT_IF_COLUMNS, Recommendation
from perfscope.analyzers.rules import RuleContext, _cap_to_step, evaluate_rules

V100 = {"ranks": [{"rank": 0, "gpu": {"name": "Tesla V100-SXM2-32GB", "compute_capability": "7.0", "memory_bytes": 34079637504}}]}


def steps(gpu_idle: int | None = None, **ns: int) -> pd.DataFrame:
    """Two identical steps with the given buckets (ms-free: ns); GPU idle is the non-compute
    time unless given."""
    row = {c: 0 for c in BUCKET_COLUMNS}
    row.update({f"{k}_ns": v for k, v in ns.items() if f"{k}_ns" in row})
    wall = sum(row[c] for c in BUCKET_COLUMNS)
    idle = wall - row["compute_ns"] - row["network_ns"] - row["pcie_ns"] if gpu_idle is None else gpu_idle
    row.update(rank=0, step=0, wall_ns=wall, hidden_network_ns=0, hidden_pcie_ns=0, collective_wait_ns=0,
               gpu_idle_ns=idle, sync_calls=0, post_sync_idle_ns=0, startup_api_ns=ns.get("startup", 0))
    return pd.DataFrame([row, {**row, "step": 1}])


def ctx(s: pd.DataFrame, **kw) -> RuleContext:
    empty = pd.DataFrame()
    base: dict = dict(gpu_summary=empty, kernels=pd.DataFrame(columns=["rank", "name", "kind", "total_ns"]),  # noqa: C408
                launch=pd.DataFrame(columns=["rank", "launch_bound"]), collectives=empty, stragglers=empty,
                copies=pd.DataFrame(columns=["rank", "copy_kind", "pageable", "count", "bytes", "total_ns"]),
                what_if=what_if(s))
    base.update(kw)
    return RuleContext(steps=s, **base)


def what_if(s: pd.DataFrame, **ns: int) -> pd.DataFrame:
    """``Analysis.what_if`` rows for the steps ``s``: the given columns (``sync_removed_ns``...), else 0."""
    return pd.DataFrame({c: [ns.get(c, 0)] * len(s) for c in WHAT_IF_COLUMNS} | {"rank": s["rank"], "step": s["step"]})


def fp32_kernels() -> pd.DataFrame:
    return pd.DataFrame({"rank": [0, 0], "name": ["volta_sgemm_128x64_nn", "elementwise_kernel"],
                         "kind": ["compute", "compute"], "total_ns": [6_000_000, 4_000_000]})


# ----------------------------------------------------------------------------- hardware context
def test_context_from_recorded_and_imported_metadata() -> None:
    recorded = {"environment": {"facts": {"cpu": {"count": 2}, "env": {"nccl": {"NCCL_VERSION": "2.28.3-1"}}}},
                "ranks": [{"rank": 0, "host": "a", "gpu": {"name": "NVIDIA H200", "capability": "9.0", "total_memory_bytes": 150},
                           "versions": {"torch": "2.11.0", "cuda": "13.0", "nccl": "2.28.9"}},
                          {"rank": 1, "host": "a", "gpu": {"name": "NVIDIA H200", "capability": "9.0"}}]}
    hw = hardware_context(recorded)
    assert hw.compute_capability == (9, 0) and hw.gpu_memory_bytes == 150 and hw.cpu_count == 2
    assert hw.ranks_per_host == 2 and hw.cpus_per_rank() == 1 and hw.nccl_version == "2.28.9" and hw.torch_version == "2.11.0"
    imported = hardware_context({**V100, "ranks": [{**V100["ranks"][0], "distributed_info": {"backend": "nccl", "nccl_version": "2.18.3"}}]})
    assert imported.compute_capability == (7, 0) and imported.cc_at_least(8) is False and imported.nccl_version == "2.18.3"
    assert imported.backend == "nccl" and imported.gpu_present is True
    unknown = hardware_context({})
    assert unknown.compute_capability is None and unknown.cc_at_least(8) is None and unknown.cpus_per_rank() is None
    assert hardware_context({"environment": {"facts": {"gpus": {"available": False}}}}).gpu_present is False
    # An imported trace without GPU events: the importer keeps deviceProperties as "devices" only.
    devices = [{"id": i, "name": "Tesla V100-SXM2-32GB", "computeMajor": 7, "computeMinor": 0, "totalGlobalMem": 5} for i in range(2)]
    hw = hardware_context({"ranks": [{"rank": 0, "gpu": {}, "devices": devices}]})
    assert hw.compute_capability == (7, 0) and hw.gpu_present is True and hw.gpu_memory_bytes == 5
    mixed = [devices[0], {**devices[1], "name": "A100", "computeMajor": 8}]
    assert hardware_context({"ranks": [{"rank": 0, "gpu": {}, "devices": mixed}]}).gpu_present is None


def test_compute_advice_fits_the_compute_capability() -> None:
    s = steps(compute=9_000_000, host=500_000)
    (volta,) = evaluate_rules(ctx(s, kernels=fp32_kernels(), meta=V100))
    text = (volta.message + volta.change).lower()
    assert volta.id == "compute.bound" and "tf32" not in text and "bfloat16" not in text
    assert "float16" in text and "gradscaler" in text and volta.evidence["compute_capability"] == "7.0"
    pascal = {"ranks": [{"gpu": {"name": "Tesla P100", "compute_capability": "6.0"}}]}
    (old,) = evaluate_rules(ctx(s, kernels=fp32_kernels(), meta=pascal))
    assert "tensor cores" not in old.message and "float16" not in old.change and "torch.compile" in old.change
    ampere = {"ranks": [{"gpu": {"name": "A100", "compute_capability": "8.0"}}]}
    (new,) = evaluate_rules(ctx(s, kernels=fp32_kernels(), meta=ampere))
    assert "allow_tf32" in new.change and "bfloat16" in new.change


def test_num_workers_never_above_the_cpus() -> None:
    s = steps(compute=6_000_000, data_loading=4_000_000)
    two_cpus = {"environment": {"facts": {"cpu": {"count": 2}}}}
    (r,) = evaluate_rules(ctx(s, meta=two_cpus))
    assert "num_workers=1," in r.change and r.evidence["cpus_per_rank"] == 2
    (r,) = evaluate_rules(ctx(s))
    assert "num_workers=8," in r.change


# ----------------------------------------------------------------------------- implicit syncs
def test_blocking_calls_include_sync_copies_and_pageable_d2h() -> None:
    api = {"name": np.array(["cudaLaunchKernel", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                             "cudaMemcpyAsync", "cudaMemcpyAsync", "cudaMemcpyAsync", "cudaStreamWaitEvent",
                             "cuMemcpyDtoH_v2", "cudaEventQuery"], dtype=object),
           "correlation": np.arange(10, dtype=np.int64)}
    memcpy = {"correlation": np.array([3, 4, 5, 6]), "copy_kind": np.array(["D2H", "D2H", "D2H", "H2D"], dtype=object),
              "pageable": np.array([False, True, False, True])}
    got = blocking_calls(api, memcpy)
    # pageable D2H async copy (4) blocks; pinned D2H (5) and pageable H2D (6) do not.
    assert got.tolist() == [False, True, True, True, True, False, False, False, True, False]
    assert startup_calls({"name": np.array(["cudaFree", "cudaDeviceGetStreamPriorityRange", "cudaLaunchKernel",
                                            "cuDevicePrimaryCtxRetain"], dtype=object)}).tolist() == [True, True, False, True]


def test_covered_ns_per_window() -> None:
    got = covered_ns(np.array([0, 10, 20]), np.array([10, 20, 40]), np.array([5, 8, 25, 100]), np.array([12, 9, 30, 110]))
    assert got.tolist() == [5, 2, 5]


# ----------------------------------------------------------------------------- trace findings
def test_no_gpu_records_is_a_finding_without_saving() -> None:
    s = steps(host=4_700_000_000, gpu_idle=4_700_000_000)
    recs = evaluate_rules(ctx(s, meta=V100))
    assert [r.id for r in recs] == ["trace.no_gpu_records"]
    assert recs[0].saving_ns == 0 and "V100" in recs[0].message


def test_cpu_only_run_has_no_gpu_wording() -> None:
    s = steps(host=50_000_000, data_loading=10_000_000, gpu_idle=60_000_000)
    recs = evaluate_rules(ctx(s, meta={"environment": {"facts": {"gpus": {"available": False}}}}))
    assert [r.id for r in recs] == ["trace.cpu_only"] and recs[0].saving_ns == 0
    assert "GPU waits" not in recs[0].message and "GPU is idle" not in recs[0].message


def test_startup_window_is_not_training() -> None:
    s = steps(compute=10_000_000, host=40_000_000_000, startup=39_000_000_000)
    recs = evaluate_rules(ctx(s))
    assert [r.id for r in recs] == ["trace.startup"] and recs[0].saving_ns == 0
    assert not evaluate_rules(ctx(steps(compute=10_000_000, host=40_000_000, startup=1_000_000)))[0].id.startswith("trace.")


# ----------------------------------------------------------------------------- savings
def test_host_saving_is_the_idle_time_down_to_the_launch_floor() -> None:
    s = steps(compute=4_000_000, host=6_000_000)
    launch = pd.DataFrame({"rank": [0], "launch_bound": [False], "kernels": [1000], "median_launch_cpu_ns": [10_000]})
    (r,) = evaluate_rules(ctx(s, launch=launch))
    # 500 kernels per step x 10 us = 5 ms the host needs anyway (more than the 4 ms of GPU work):
    # the step can shrink to 5 ms, a 5 ms saving (not half the host time, 3 ms).
    assert r.id == "host.overhead" and r.evidence["launch_floor_ns"] == 5_000_000
    assert r.saving_ns == 5_000_000
    (r,) = evaluate_rules(ctx(s))  # no launch table: down to the GPU work
    assert r.saving_ns == 6_000_000


def test_findings_never_promise_more_than_the_step() -> None:
    c = ctx(steps(compute=5_000_000, host=5_000_000))
    recs = [Recommendation(id=f"r{i}", bucket="host", title="t", message="m", saving_ns=v) for i, v in enumerate((7_000_000, 6_000_000, 1))]
    capped = _cap_to_step(c, recs)
    assert [r.saving_ns for r in capped] == [7_000_000, 3_000_000, 0]
    assert "capped" in capped[1].message and capped[1].evidence["uncapped_saving_ns"] == 6_000_000
    assert sum(r.saving_ns for r in capped) <= c.median_step_ns


def test_median_step_is_one_step_with_its_own_breakdown() -> None:
    from perfscope.analyzers.breakdown import median_steps

    rows = [(0, 10, 6, 4, 0), (1, 12, 2, 10, 0), (2, 11, 9, 0, 2)]  # step, wall, compute, network, host
    df = pd.DataFrame([{"rank": 0, "step": st, "wall_ns": w, **{c: 0 for c in BUCKET_COLUMNS},
                        "compute_ns": c, "network_ns": n, "host_ns": h} for st, w, c, n, h in rows])
    (m,) = median_steps(df).to_dict("records")
    # Each column's own median would be compute 6, network 4, host 0: 10, not the 11 of the median step.
    assert m["step"] == 2 and m["wall_ns"] == 11 and m["compute_ns"] == 9 and m["host_ns"] == 2 and m["steps"] == 3


def test_gpu_summary_counts_syncs_on_a_stream_as_hta_does() -> None:
    from perfscope.analyzers.gpu_summary import summary_row

    gpu = {"rank": np.array([0]), "start_ns": np.array([0]), "end_ns": np.array([10_000]), "hta_compute": np.array([True])}
    syncs = {"start_ns": np.array([20_000, 40_000, 60_000]), "dur_ns": np.array([5_000, 5_000, 5_000]),
             "stream": pd.array([7, 7, None], dtype="Int64"), "correlation": np.array([1, 2, 3]),
             "sync_kind": np.array(["stream", "stream_wait_event", "context"], dtype=object)}
    row = summary_row(0, gpu, None, None, False, False, 0, syncs)
    # The sync without a stream is left out; the stream sync is non-compute, the wait event compute.
    assert (row["span_ns"], row["compute_ns"], row["non_compute_ns"], row["idle_ns"]) == (45_000, 15_000, 5_000, 25_000)


# ----------------------------------------------------------------------------- communication
def comm_kernels(*names_ns: tuple[str, int]) -> pd.DataFrame:
    return pd.DataFrame({"rank": 0, "name": [n for n, _ in names_ns], "kind": "communication",
                         "total_ns": [v for _, v in names_ns]})


def test_comm_advice_follows_the_collective_type() -> None:
    s = steps(compute=5_000_000, network=5_000_000)
    fsdp = comm_kernels(("ncclDevKernel_AllGather_RING_LL(x)", 6), ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(x)", 4))
    (r,) = evaluate_rules(ctx(s, kernels=fsdp))
    assert "backward_prefetch" in r.change and "bucket_cap_mb" not in r.change
    (r,) = evaluate_rules(ctx(s, kernels=comm_kernels(("ncclKernel_Broadcast_RING_LL_Sum_int8_t", 9))))
    assert "broadcast_buffers=False" in r.change
    mixed = comm_kernels(("ncclKernel_AllReduce_RING_LL_Sum_float", 4), ("ncclKernel_SendRecv_RING_SIMPLE", 6))
    (r,) = evaluate_rules(ctx(s, kernels=mixed))
    assert "bucket_cap_mb" not in r.change  # all-reduce is 40 %: no DDP bucket advice
    coll = pd.DataFrame({"rank": [0, 0], "func": ["AllReduce", "AllToAll"], "dur_ns": [8, 2], "bytes": [1, 1], "busbw_gbps": [None, None]})
    (r,) = evaluate_rules(ctx(s, collectives=coll, kernels=mixed))
    assert "bucket_cap_mb" in r.change and r.evidence["comm_share_all_reduce"] == 0.8


def test_point_to_point_counts_only_where_sequence_and_peer_line_up() -> None:
    from perfscope.analyzers.stragglers import rank_stragglers, reliable_matches

    base = {"rank": [0, 1, 0, 1], "func": ["SendRecv"] * 2 + ["AllReduce"] * 2, "match_key": [0, 0, 1, 1],
            "matched_ranks": [2] * 4, "arrival_skew_ns": [0, 50, 0, 50], "wait_ns": [50, 0, 50, 0], "last_rank": [1] * 4}
    by_order = pd.DataFrame({**base, "seq": [None, None, 3, 3]})
    assert reliable_matches(by_order).tolist() == [False, False, True, True]
    lined_up = pd.DataFrame({**base, "seq": [0, 0, 3, 3], "peer": [1, 0, None, None]})
    assert reliable_matches(lined_up).tolist() == [True, True, True, True]
    other_peer = pd.DataFrame({**base, "seq": [0, 0, 3, 3], "peer": [2, 3, None, None]})
    assert reliable_matches(other_peer).tolist() == [False, False, True, True]
    st = rank_stragglers(by_order).set_index("rank")
    assert st.loc[1, "ops"] == 1 and st.loc[1, "last_count"] == 1  # only the all-reduce votes


def test_sync_rule_names_the_blocking_calls_and_their_site() -> None:
    s = steps(compute=8_000_000, sync=2_000_000)
    s["sync_calls"] = 3
    sites = pd.DataFrame({"rank": [0, 0], "call": ["cudaMemcpyAsync", "cudaStreamSynchronize"],
                          "site": ["## loss logging ##", ""], "calls": [6, 2], "total_ns": [3_000_000, 1_000_000]})
    (r,) = evaluate_rules(ctx(s, sync_sites=sites, what_if=what_if(s, sync_removed_ns=2_000_000)))
    assert r.id == "sync.host" and r.saving_ns == 2_000_000 and "cudaMemcpyAsync in '## loss logging ##'" in r.message
    assert r.evidence["blocking_calls"][0] == {"call": "cudaMemcpyAsync", "site": "## loss logging ##", "calls_per_step": 3.0,
                                               "ns_per_step": 1_500_000}


class _FakeRun:
    """A one-rank run from hand-made tables (``table`` only, as analyze_run reads a run without ``arrays``)."""

    def __init__(self, tables: dict[str, dict]) -> None:
        self.tables, self.ranks, self.meta = tables, [0], {"world_size": 1, "status": "complete"}

    def table(self, name: str, ranks=None, columns=None) -> pd.DataFrame:  # noqa: ANN001
        from perfscope.analyzers.analysis import COLUMNS

        cols = list(columns or COLUMNS[name])
        t = self.tables.get(name, {})
        n = len(next(iter(t.values()))) if t else 0
        return pd.DataFrame({c: t.get(c, [0] * n if c == "rank" else [None] * n) for c in cols})


def test_pageable_device_to_host_copy_blocking_the_host_is_sync_not_host() -> None:
    from perfscope.analyzers import analyze_run

    ms = 1_000_000
    run = _FakeRun({
        "steps": {"rank": [0], "step": [1], "start_ns": [0], "dur_ns": [200 * ms], "name": ["ProfilerStep#1"], "source": ["profiler_step"]},
        "kernels": {"rank": [0, 0], "start_ns": [0, 170 * ms], "dur_ns": [20 * ms, 30 * ms], "correlation": [1, 2], "name": ["gemm", "gemm"]},
        "api": {"rank": [0, 0, 0], "start_ns": [0, 20 * ms, 168 * ms], "dur_ns": [10_000, 147 * ms, 10_000], "correlation": [1, 5, 2],
                "name": ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaLaunchKernel"]},
        "memcpy": {"rank": [0], "start_ns": [166 * ms], "dur_ns": [1 * ms], "correlation": [5], "copy_kind": ["D2H"], "bytes": [4], "pageable": [True]},
    })
    a = analyze_run(run)
    (step,) = a.steps.to_dict("records")
    # The host blocks in the copy call from 20 ms to 167 ms; the GPU idles from 20 to 166 ms waiting on it.
    assert step["sync_ns"] == 146 * ms and step["pcie_ns"] == 1 * ms and step["host_ns"] == 3 * ms
    assert [r.id for r in a.recommendations][0] == "sync.host"
    assert not any(r.id == "host.overhead" for r in a.recommendations)


def test_docs_list_every_rule_and_finding() -> None:
    from pathlib import Path

    from perfscope.analyzers.rules import RULES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "analysis.md").read_text()
    for rid in [r.id for r in RULES] + ["trace.cpu_only", "trace.no_gpu_records", "trace.startup"]:
        assert f"| `{rid}` |" in doc, rid
    from perfscope.analyzers.savings import MODELS, NO_ESTIMATE

    for model in (*MODELS, NO_ESTIMATE):  # each rule's saving model is stated
        assert f"`{model}`" in doc, model
