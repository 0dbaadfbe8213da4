"""The operator view (``analyzers/operators.py``) and syncs attributed through operators
(``analyzers/api_calls.py``), on small synthetic tables and one synthetic trace."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.analysis import analyze_run
from perfscope.analyzers.api_calls import blocking_sites, sync_operator_sites
from perfscope.analyzers.columns import columns
from perfscope.analyzers.operators import (
    enclosing_operators,
    launch_operators,
    overall_operators,
    rank_call_sites,
    rank_operators,
    self_times,
    top_call_sites,
)
from perfscope.reports.markdown import render_markdown
from perfscope.reports.text import render_analysis_text
from perfscope.store import open_run
from perfscope.store.kineto import import_kineto


def ops_table(rows: list[tuple[str, str, int, int, int | None, str | None]], tid: int = 1) -> dict[str, Any]:
    """An operators table as the reader gives it: (name, kind, start, dur, parent, call site) rows."""
    df = pd.DataFrame(rows, columns=["name", "kind", "start_ns", "dur_ns", "parent", "call_site"])
    df["parent"] = df["parent"].astype("Int64")
    for c in ("name", "kind", "call_site"):
        df[c] = df[c].astype("category")
    df["tid"], df["rank"] = tid, 0
    return dict(columns(df))


# Two steps [0, 100) and [200, 300); an op outside them; a step marker of the 1.9 profiler.
OPS = ops_table([
    ("ProfilerStep#1", "cpu_op", 0, 100, None, None),        # 0
    ("train.py(9): step", "python_function", 1, 90, 0, None),  # 1
    ("aten::linear", "cpu_op", 2, 50, 1, "train.py(9): step"),  # 2
    ("aten::addmm", "cpu_op", 10, 30, 2, "train.py(9): step"),  # 3
    ("aten::item", "cpu_op", 60, 20, 1, "train.py(9): step"),   # 4
    ("aten::_local_scalar_dense", "cpu_op", 61, 18, 4, "train.py(9): step"),  # 5
    ("aten::linear", "cpu_op", 210, 40, None, None),          # 6
    ("aten::addmm", "cpu_op", 500, 40, None, None),           # 7: outside the steps
])
WINDOWS = (np.array([0, 200]), np.array([100, 300]))


def test_self_time_is_duration_less_children() -> None:
    dur = np.array([100, 90, 50, 30, 20, 18, 40, 40])
    parent = np.array([-1, 0, 1, 2, 1, 4, -1, -1])
    assert self_times(dur, parent).tolist() == [10, 20, 20, 30, 2, 18, 40, 40]


def test_operators_are_ranked_by_self_time_in_the_steps() -> None:
    t = rank_operators(3, OPS, WINDOWS)
    ops = t[t["kind"] == "cpu_op"].set_index("name")
    assert "ProfilerStep#1" not in ops.index  # the step itself
    assert ops.loc["aten::linear", ["calls", "self_ns", "total_ns"]].tolist() == [2, 20 + 40, 90]
    assert ops.loc["aten::addmm", ["calls", "self_ns"]].tolist() == [1, 30]  # the one outside the steps left out
    assert t["rank"].eq(3).all() and t["self_ns"].is_monotonic_decreasing
    assert abs(ops["self_share"].sum() - 1) < 1e-9
    frames = t[t["kind"] == "python_function"]
    assert frames["name"].tolist() == ["train.py(9): step"] and frames["self_ns"].tolist() == [90 - 50 - 20]


def test_overall_sums_ranks_and_call_sites_name_the_top_operator() -> None:
    both = pd.concat([rank_operators(0, OPS, WINDOWS), rank_operators(1, OPS, WINDOWS)], ignore_index=True)
    overall = overall_operators(both).set_index("name")
    assert overall.loc["aten::linear", ["ranks", "calls", "self_ns"]].tolist() == [2, 4, 120]
    sites = rank_call_sites(0, OPS, WINDOWS)
    assert sites.to_dict("records") == [{"rank": 0, "call_site": "train.py(9): step", "calls": 4,
                                         "self_ns": 20 + 30 + 2 + 18, "top_operator": "aten::addmm"}]
    assert top_call_sites(pd.concat([sites, sites.assign(rank=1)]), 5)["self_ns"].tolist() == [140]


def test_calls_are_attributed_to_the_innermost_enclosing_operator() -> None:
    # A launch inside addmm, one inside linear only, one on another thread, one in no operator,
    # one inside the Python frame but no operator below it.
    tid = np.array([1, 1, 2, 1, 1])
    start = np.array([12, 45, 12, 150, 85])
    end = start + 2
    assert enclosing_operators(OPS, tid, start, end).tolist() == [3, 2, -1, -1, 0]
    api = {"start_ns": start, "dur_ns": end - start, "tid": tid, "name": np.array(["cudaLaunchKernel"] * 5, object)}
    t = launch_operators(0, OPS, api, np.array([True, True, True, True, False]), WINDOWS)
    assert t[["name", "call_site", "launches", "launch_ns"]].values.tolist() == [
        ["aten::addmm", "train.py(9): step", 1, 2], ["aten::linear", "train.py(9): step", 1, 2]]


def test_a_sync_inside_item_names_item_and_its_call_site() -> None:
    tid, start = np.array([1, 1, 1]), np.array([62, 12, 150])
    assert sync_operator_sites(OPS, tid, start, start + 1).tolist() == ["`.item()` at train.py(9): step", "", ""]
    api = {"start_ns": start, "dur_ns": np.array([1, 1, 1]), "tid": tid,
           "name": np.array(["cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaStreamSynchronize"], object)}
    markers = {"start_ns": np.array([0]), "dur_ns": np.array([400]), "name": np.array(["fwd"], object),
               "device": np.array([np.nan])}
    sites = blocking_sites(0, api, np.array([True, True, True]), markers, OPS)
    # Outside a sync operator the marker stays the site (as before operators existed).
    assert sorted(zip(sites["call"], sites["site"])) == [("cudaDeviceSynchronize", "fwd"), ("cudaStreamSynchronize", "`.item()` at train.py(9): step"),
                                                         ("cudaStreamSynchronize", "fwd")]


# -- through the import and the analysis ---------------------------------------------------
T0 = 1_700_000_000_000_000  # µs


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 10, **args: Any) -> dict[str, Any]:
    pid = 0 if cat in ("kernel", "gpu_memcpy") else 10
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 7 if pid == 0 else tid, "ts": T0 + ts, "dur": dur,
            "args": args}


def item_trace(tmp_path: Path) -> Path:
    """Three 10 ms steps, each blocking ~5 ms in ``loss.item()`` (a pageable device-to-host
    copy inside aten::item, called from train.py(42): step) and launching one kernel from
    aten::mm."""
    ev: list[dict[str, Any]] = []
    for i in range(3):
        s, c = i * 10_000, 100 * i
        ev += [
            _x("user_annotation", f"ProfilerStep#{i + 1}", s, 10_000),
            _x("python_function", "train.py(42): step", s + 10, 9_000),
            _x("python_function", "torch/_tensor.py(1): item", s + 90, 5_200),
            _x("cpu_op", "aten::item", s + 100, 5_000, **{"External id": c + 1}),
            _x("cpu_op", "aten::_local_scalar_dense", s + 110, 4_900, **{"External id": c + 2}),
            _x("cuda_runtime", "cudaMemcpyAsync", s + 120, 4_800, correlation=c + 1, cbid=41),
            _x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", s + 4_800, 10, correlation=c + 1, bytes=4,
               device=0, stream=7),
            _x("cpu_op", "aten::mm", s + 6_000, 1_000, **{"External id": c + 3}),
            _x("cuda_runtime", "cudaLaunchKernel", s + 6_100, 50, correlation=c + 2, cbid=211),
            _x("kernel", "gemm", s + 6_200, 2_000, correlation=c + 2, device=0, stream=7),
        ]
    path = tmp_path / "item.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def test_item_sync_is_reported_with_its_call_site_and_operators_ranked(tmp_path: Path) -> None:
    import_kineto(item_trace(tmp_path), tmp_path / "run")
    a = analyze_run(open_run(tmp_path / "run"))
    sync = next(r for r in a.recommendations if r.id == "sync.host")
    assert [s["site"] for s in sync.evidence["blocking_calls"]] == ["`.item()` at train.py(42): step"]
    assert "`.item()` at train.py(42): step" in sync.message
    top = a.operators_overall[a.operators_overall["kind"] == "cpu_op"].iloc[0]
    assert (top["name"], top["calls"]) == ("aten::_local_scalar_dense", 3)
    # (the blocking copy is sync time, not launch time)
    assert a.launch_operators[["name", "call_site", "launches"]].values.tolist() == [["aten::mm", "train.py(42): step", 3]]
    assert a.operator_sites["call_site"].tolist() == ["train.py(42): step"]
    text = render_analysis_text(a, width=200)
    assert "Top host operators" in text and "Top call sites" in text and "aten::_local_scalar_dense" in text
    assert "## Top host operators" in render_markdown(a)


def test_runs_without_operators_have_no_operator_view(tmp_path: Path) -> None:
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
          _x("kernel", "gemm", 20, 100, correlation=1, device=0, stream=7)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    import_kineto(path, tmp_path / "run")
    a = analyze_run(open_run(tmp_path / "run"))
    assert a.operators.empty and a.operators_overall.empty
    assert "Top host operators" not in render_analysis_text(a) and "Top host operators" not in render_markdown(a)
