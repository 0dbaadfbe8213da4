"""Real Kineto traces of several PyTorch generations import into full runs whose GPU
summary equals Holistic Trace Analysis's temporal breakdown (HTA 0.5.0, run on the same
files; its numbers are written below).

The old traces are public but not committed (megabytes each): the test reads them from
the folder named by ``PERFSCOPE_EXTRA_TRACES`` and skips a trace that is not there.  The
shared 2.x traces (``../shared/data/kineto``) are checked for their spelling and provenance
when present.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from perfscope.analyzers.analysis import analyze_run

from perfscope.cli.main import main
from perfscope.store import open_run
from perfscope.store.kineto import import_kineto

EXTRA = Path(os.environ.get("PERFSCOPE_EXTRA_TRACES", "/nonexistent"))
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kineto"

# file name prefix -> (spelling, rows per table, HTA idle/compute/non-compute in us or None)
CASES = {
    # PyTorch 1.9, Tesla V100, ResNet-50 (pytorch/kineto tb_plugin samples, be239c04)
    "be239c04_": ("pytorch-1.8/1.9", {"kernels": 8772, "api": 11923, "memcpy": 12, "memset": 312, "steps": 6,
                                      "operators": 23646},
                  (327463, 492891, 10140)),
    # PyTorch 1.8, no deviceProperties (tb_plugin samples, 34d6ad53)
    "34d6ad53_": ("pytorch-1.8/1.9", {"kernels": 9564, "api": 10920, "memcpy": 12, "memset": 439, "steps": 6,
                                      "operators": 33384},
                  (208143, 504477, 10990)),
    # ROCm 6.2, MI250 (HTA's test data)
    "amd_trace_mi250": ("pytorch-1.10+", {"kernels": 14, "api": 21, "memcpy": 2, "markers": 3, "steps": 2,
                                          "operators": 70},
                        (8780, 96, 35)),
    # PyTorch 1.8, the autograd profiler API: no ProfilerStep, so no steps (tb_plugin
    # samples, 229f2b87; not checked against HTA, whose breakdown needs steps)
    "229f2b87": ("pytorch-1.8/1.9", {"kernels": 9329, "api": 15754, "memcpy": 338, "memset": 466, "steps": 0,
                                     "operators": 33535}, None),
}
BUCKETS = ["compute_ns", "network_ns", "sync_ns", "pcie_ns", "data_loading_ns", "host_ns"]


def _find(prefix: str) -> Path:
    found = sorted(EXTRA.glob(prefix + "*.json.gz")) if EXTRA.is_dir() else []
    if not found:
        pytest.skip(f"no {prefix}* trace in PERFSCOPE_EXTRA_TRACES ({EXTRA})")
    return found[0]


@pytest.mark.parametrize("prefix", sorted(CASES))
def test_generation_imports_fully_and_matches_hta(tmp_path: Path, prefix: str) -> None:
    spelling, rows, hta = CASES[prefix]
    result = import_kineto(_find(prefix), tmp_path / "run")
    for table, n in rows.items():
        assert result.total(table) == n, table
    assert not any("dropped" in w for w in result.warnings)
    run = open_run(tmp_path / "run")
    assert run.meta["ranks"][0]["trace_source"]["spelling"] == spelling
    if hta is None:
        return
    idle_us, compute_us, non_compute_us = hta
    a = analyze_run(run)
    g = a.gpu_summary.iloc[0]
    assert (g["idle_ns"], g["compute_ns"], g["non_compute_ns"]) == (idle_us * 1000, compute_us * 1000, non_compute_us * 1000)
    buckets = a.steps[BUCKETS].sum()
    assert len(a.steps) == rows["steps"] and buckets.sum() > 0


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """stdout of ``perfscope ARGV`` (through the real entry point), which must exit 0."""
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def test_the_19_trace_is_compute_bound_with_host_gaps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    _cli(capsys, "import", "kineto", str(_find("be239c04_")), "-o", str(run))
    steps = analyze_run(open_run(run)).steps
    buckets = steps[BUCKETS].sum()
    assert list(buckets.sort_values(ascending=False).index[:2]) == ["compute_ns", "host_ns"]
    # The analysis names it: compute is the biggest share of the median step, and the top
    # finding is the host gap.
    doc = json.loads(_cli(capsys, "analyze", str(run), "--format", "json"))
    (summary,) = doc["summary"]
    shares = {b: summary[b.replace("_ns", "_share")] for b in BUCKETS}
    assert max(shares, key=shares.__getitem__) == "compute_ns" and round(shares["compute_ns"], 2) == 0.56
    assert doc["recommendations"][0]["id"] == "host.overhead"
    info = _cli(capsys, "info", str(run))
    assert "rank 0 trace: Kineto schema 1, pytorch-1.8/1.9 spelling, Tesla V100-DGXS-32GB (compute 7.0)" in " ".join(info.split())
    # The run holds the trace's operators, and the analysis ranks them by host time.
    assert "operators 23,646" in " ".join(info.replace("│", " ").split())
    top = doc["operators"]["overall"][0]
    assert top["name"] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" and top["calls"] == 6
    assert "Top host operators" in _cli(capsys, "report", str(run), "--format", "md", "-o", "-")


@pytest.mark.parametrize("name", sorted(p.name for p in SHARED.glob("*.json.gz")) if SHARED.is_dir() else ["(none)"])
def test_shared_2x_traces_are_todays_spelling(tmp_path: Path, name: str) -> None:
    if not (SHARED / name).is_file():
        pytest.skip(f"shared traces not present at {SHARED}")
    result = import_kineto(SHARED / name, tmp_path / "run")
    assert sum(sum(r.values()) for r in result.rows.values()) > 0
    for rank in open_run(tmp_path / "run").meta["ranks"]:
        assert rank["trace_source"]["spelling"] == "pytorch-1.10+"
