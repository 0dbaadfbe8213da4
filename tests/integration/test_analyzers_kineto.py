"""analyze on every shared real trace: the JSON contract, and agreement with HTA 0.5.0."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfscope.analyzers import analyze_run
from perfscope.analyzers.result import BUCKET_COLUMNS
from perfscope.reports.jsondoc import analysis_to_json
from perfscope.store import open_run

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kineto"
TRACES = sorted(p.name for p in SHARED.glob("*.json.gz")) if SHARED.is_dir() else []

# HTA 0.5.0 get_temporal_breakdown on these files (us): idle, compute, non-compute; every
# shared trace (critical_path_alexnet_bench has cuda_sync rows on real streams, which HTA counts).
HTA_050 = {
    ("critical_path_alexnet_bench.json.gz", 0): (12929684, 10637, 55690),
    ("nccl_parser_config_nccl_data.json.gz", 0): (338781, 75169, 21636),
    ("ns_resolution_trace_rank-0.json.gz", 0): (10113, 372150, 2371),
    ("trace_compare_base_base.json.gz", 1): (0, 4, 0),
    ("trace_compare_test_test.json.gz", 1): (0, 4, 0),
    ("trace_filter_sampled_rank-0.json.gz", 0): (321378, 106252, 172428),
    ("trace_filter_sampled_rank-1.json.gz", 1): (328671, 135548, 136455),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not TRACES:
        pytest.skip(f"shared traces not present at {SHARED}")
    from perfscope.store.kineto import import_kineto

    out = {}
    root = tmp_path_factory.mktemp("kineto-runs")
    for name in TRACES:
        run = root / name.replace(".json.gz", "")
        import_kineto(SHARED / name, run)
        out[name] = run
    return out


def test_shared_traces_present(shared_kineto: Path) -> None:
    assert any(shared_kineto.glob("*.json.gz"))


@pytest.mark.parametrize("name", TRACES)
def test_json_contract_on_every_shared_trace(runs: dict[str, Path], name: str) -> None:
    doc = analysis_to_json(analyze_run(open_run(runs[name])))
    json.dumps(doc, allow_nan=False)
    for key in ("steps", "gpu_summary", "recommendations", "kernels", "collectives", "stragglers", "warnings"):
        assert key in doc
    assert doc["steps"], "every shared trace has GPU work, so at least one window"
    for row in doc["steps"]:
        for k in ("rank", "step", "start_ns", "wall_ns", *BUCKET_COLUMNS):
            assert isinstance(row[k], int)
        assert sum(row[c] for c in BUCKET_COLUMNS) == row["wall_ns"]
    for row in doc["gpu_summary"]:
        assert {"rank", "span_ns", "idle_ns", "compute_ns", "non_compute_ns"} <= set(row)
        assert row["idle_ns"] + row["compute_ns"] + row["non_compute_ns"] == row["span_ns"]
    for rec in doc["recommendations"]:
        assert {"id", "bucket", "saving_ns", "message"} <= set(rec)


@pytest.mark.parametrize(("name", "rank"), sorted(HTA_050))
def test_gpu_summary_agrees_with_hta(runs: dict[str, Path], name: str, rank: int) -> None:
    if name not in runs:
        pytest.skip(f"{name} not in the shared traces")
    g = analyze_run(open_run(runs[name])).gpu_summary.set_index("rank").loc[rank]
    idle, compute, non_compute = HTA_050[(name, rank)]
    # The issue asks for 1 %; we reproduce HTA's rounding, so hold it to the microsecond.
    assert g["idle_ns"] / 1e3 == pytest.approx(idle, abs=1)
    assert g["compute_ns"] / 1e3 == pytest.approx(compute, abs=1)
    assert g["non_compute_ns"] / 1e3 == pytest.approx(non_compute, abs=1)


def test_nccl_kernels_become_network_time(runs: dict[str, Path]) -> None:
    name = "trace_filter_sampled_rank-0.json.gz"
    if name not in runs:
        pytest.skip("trace absent")
    a = analyze_run(open_run(runs[name]))
    assert (a.steps["network_ns"] > 0).all()
    assert (a.kernels["kind"] == "communication").any()
